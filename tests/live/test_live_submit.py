"""``rocmlab submit`` through a restart of the live service: the service is killed (SIGKILL) in the
middle of a burst of learners' submits and started again; every submit completes without the
learner doing anything, no attempt is graded twice and none is counted twice. A notebook
byte-identical to the last attempt is answered with that attempt. The hub's token check is stood
in for, as in test_live_service.py; test_live_e2e.py runs the real hub and terminal."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter

import pytest
from test_live_service import PREFIX, SCOPE, learner_submits

from rocmlab.hub import submit
from rocmlab.hub.exchange_layout import ExchangeOwners, prepare_exchange
from rocmlab.live.attempts import GradeResult
from rocmlab.live.queue import LeaseLost, LiveQueue

LAB = "01-pass"
LEARNERS = ("ana", "bo", "cy", "di", "ed")

SERVICE = """
import sys
from pathlib import Path
from jupyterhub.services.auth import HubOAuth
from tornado import ioloop
from rocmlab.live.service import LiveSettings, make_app

def get_user(self, handler, *, sync=True):  # a token "<name>-token" is <name>'s (the hub's check stood in for)
    token = handler.request.headers.get("Authorization", "").removeprefix("token ")
    if not token.endswith("-token"):
        return None
    handler._token_authenticated = True
    return {"kind": "user", "name": token[: -len("-token")], "groups": [], "scopes": [sys.argv[3]]}

HubOAuth.get_user = get_user
tmp, port = Path(sys.argv[1]), int(sys.argv[2])
settings = LiveSettings(queue_path=tmp / "live" / "queue.sqlite", exchange=tmp / "exchange",
                        spool=tmp / "live" / "spool", labs=("01-pass",), rate_limit=5)
make_app(settings, prefix=sys.argv[4]).listen(port, "127.0.0.1")
print("listening", flush=True)
ioloop.IOLoop.current().start()
"""


class Service:
    """The live service in a process of its own, killed and started again on the same port."""

    def __init__(self, tmp):
        self.tmp = tmp
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}{PREFIX}"
        self.process = None

    def start(self) -> None:
        env = {**os.environ, "JUPYTERHUB_OAUTH_ACCESS_SCOPES": json.dumps([SCOPE])}
        self.process = subprocess.Popen(
            [sys.executable, "-c", SERVICE, str(self.tmp), str(self.port), SCOPE, PREFIX],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.process.stdout.readline().strip() == "listening"

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)


class Worker(threading.Thread):
    """Grades straight from the queue file (it does not need the service), slowly, counting results."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.queue, self.stop, self.recorded = LiveQueue(path), threading.Event(), Counter()

    def run(self) -> None:
        while not self.stop.is_set():
            attempt = self.queue.claim("worker-1", 30)
            if attempt is None:
                self.stop.wait(0.1)
                continue
            time.sleep(0.3)
            try:
                self.queue.complete(attempt.id, "worker-1", GradeResult(2.0, 2.0))
            except LeaseLost:
                continue
            self.recorded[attempt.id] += 1


def submit_and_wait(url: str, learner: str, printed: dict) -> None:
    client = submit.LiveClient(url, f"{learner}-token", first_wait_s=0.2, max_wait_s=1.0)
    deadline = time.monotonic() + 90
    answer = submit.request_grading(client, LAB, deadline)
    printed[learner] = (answer, submit.wait_for_grade(client, answer["attempt"]["id"], deadline, poll_s=0.2))


@pytest.fixture
def room(tmp_path):
    owners = ExchangeOwners(os.geteuid(), os.getegid())
    exchange = prepare_exchange(tmp_path, "rocmlab", owners, dict.fromkeys(LEARNERS, os.geteuid()))
    assert exchange == tmp_path / "exchange"
    service = Service(tmp_path)
    service.start()
    worker = Worker(tmp_path / "live" / "queue.sqlite")
    worker.start()
    yield service, worker, exchange
    worker.stop.set()
    worker.join(timeout=30)
    service.kill()


def test_a_restart_mid_burst_loses_no_submit_and_grades_and_counts_each_once(room):
    service, worker, exchange = room
    printed, threads = {}, []
    for n, learner in enumerate(LEARNERS):
        learner_submits(exchange, learner, LAB, f"2026-12-02 03:00:0{n}.000001 UTC", text=f"x = {n}")
    for learner in LEARNERS[:2]:  # these two are answered before the restart
        threads.append(threading.Thread(target=submit_and_wait, args=(service.url, learner, printed)))
        threads[-1].start()
    while len(worker.queue.attempts()) < 2:
        time.sleep(0.05)
    service.kill()  # mid-burst: two attempts queued or grading, three learners about to submit
    for learner in LEARNERS[2:]:
        threads.append(threading.Thread(target=submit_and_wait, args=(service.url, learner, printed)))
        threads[-1].start()
    time.sleep(1.5)  # they meet a dead service and retry
    service.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(printed) == sorted(LEARNERS)
    for learner in LEARNERS:
        answer, finished = printed[learner]
        assert finished is not None and finished["state"] == "graded", (learner, finished)
        assert worker.queue.submissions_since(learner, LAB, 0) == 1
    assert len(worker.queue.attempts()) == len(LEARNERS)
    assert set(worker.recorded.values()) == {1} and len(worker.recorded) == len(LEARNERS)


def test_a_lost_answer_resumes_on_its_attempt_and_an_unchanged_notebook_is_not_graded_again(room):
    service, worker, exchange = room
    learner_submits(exchange, "ana", LAB, "2026-12-02 03:00:00.000001 UTC", text="x = 1")
    client = submit.LiveClient(service.url, "ana-token", first_wait_s=0.2, max_wait_s=1.0)
    status, lost = client.call_once("POST", "api/submit", {"lab": LAB})  # answered, but never read by the CLI
    assert status == 201
    resumed = submit.request_grading(client, LAB, time.monotonic() + 30)
    assert resumed["resumed"] and not resumed["same_notebook"] and resumed["attempt"]["id"] == lost["attempt"]["id"]
    graded = submit.wait_for_grade(client, lost["attempt"]["id"], time.monotonic() + 60, poll_s=0.2)
    assert graded["state"] == "graded"
    learner_submits(exchange, "ana", LAB, "2026-12-02 03:05:00.000001 UTC", text="x = 1")  # the same bytes again
    again = submit.request_grading(client, LAB, time.monotonic() + 30)
    assert again["same_notebook"] and again["attempt"]["id"] == graded["id"] and again["attempt"]["state"] == "graded"
    assert again["remaining"] == 4 and worker.queue.submissions_since("ana", LAB, 0) == 1
    assert sum(worker.recorded.values()) == 1


def test_a_service_that_stays_away_is_named_after_the_deadline(room):
    service, _, _ = room
    service.kill()
    client = submit.LiveClient(service.url, "ana-token", first_wait_s=0.1, max_wait_s=0.2)
    with pytest.raises(submit.ServiceDown, match="does not answer"):
        submit.request_grading(client, LAB, time.monotonic() + 1)
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(service.url, timeout=5)


def test_the_service_collects_again_at_start_what_was_submitted_while_it_was_away(tmp_path):
    from rocmlab.live.recollect import recollect
    from rocmlab.live.service import LiveSettings

    owners = ExchangeOwners(os.geteuid(), os.getegid())
    exchange = prepare_exchange(tmp_path, "rocmlab", owners, dict.fromkeys(LEARNERS, os.geteuid()))
    settings = LiveSettings(
        queue_path=tmp_path / "q.sqlite", exchange=exchange, spool=tmp_path / "spool", labs=(LAB,), rate_limit=5
    )
    queue = LiveQueue(settings.queue_path)
    learner_submits(exchange, "ana", LAB, "2026-12-02 03:00:00.000001 UTC", text="x = 1")  # its POST was lost
    learner_submits(exchange, "bo", LAB, "2026-12-02 03:00:00.000001 UTC", text="x = 2")
    learner_submits(exchange, "bo", "99-other", "2026-12-02 03:00:00.000001 UTC")  # not a lab of this workshop
    queued = recollect(settings, queue)
    assert sorted(a.learner for a in queued) == ["ana", "bo"] and {a.lab for a in queued} == {LAB}
    assert recollect(settings, queue) == []  # a second start queues nothing again
    assert len(queue.attempts()) == 2
    learner_submits(exchange, "cy", LAB, "2026-12-02 03:00:00.000001 UTC")
    assert recollect(settings, queue, now=lambda: time.time() + 3600) == []  # older than the window: the instructor's


def type_submit(notebook, url: str, learner: str, monkeypatch, capsys, exchange, stamp: str) -> list[str]:
    """``rocmlab submit NOTEBOOK`` as a learner types it in a terminal of their server (the hub's
    variables set), read line by line as the terminal shows it. nbgrader's submit is stood in for
    by what it leaves in the learner's inbound folder (test_live_e2e.py runs the real one)."""
    from rocmlab.cli import main

    source = json.loads(notebook.read_text(encoding="utf-8"))["cells"][0]["source"]
    monkeypatch.setenv("ROCMLAB_LIVE_URL", url)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", f"{learner}-token")
    monkeypatch.setattr(submit, "nbgrader_submit", lambda *_: learner_submits(exchange, learner, LAB, stamp, source))
    assert main(["submit", str(notebook), "--timeout", "60"]) == 0
    return capsys.readouterr().out.splitlines()


def test_submit_prints_at_once_the_result_of_an_attempt_already_graded(room, tmp_path, monkeypatch, capsys):
    """Issue 49's walk: `rocmlab submit` printed "grading..." for an attempt answered already graded
    (an unchanged notebook, a resumed submit). The CLI prints the result at once, and says "grading..."
    only while an attempt waits."""
    service, worker, exchange = room
    notebook = tmp_path / "home" / LAB / f"{LAB}.ipynb"
    notebook.parent.mkdir(parents=True)
    notebook.write_text(
        json.dumps({"cells": [{"source": "x = 1"}], "metadata": {"rocmlab": {"id": LAB, "lang": "en"}}}),
        encoding="utf-8",
    )
    first = type_submit(notebook, service.url, "ana", monkeypatch, capsys, exchange, "2026-12-02 03:00:00.000001 UTC")
    assert first[0].startswith(f"submitted {LAB} (attempt ") and first[1:3] == ["grading...", "score: 2 / 2"]
    again = type_submit(notebook, service.url, "ana", monkeypatch, capsys, exchange, "2026-12-02 03:05:00.000001 UTC")
    assert again[0].startswith(f"this submission of {LAB} was already sent") and "grading..." not in again
    assert again[1] == "score: 2 / 2"
    # a submit whose answer was lost: by the time the learner types it again, it was graded
    learner_submits(exchange, "bo", LAB, "2026-12-02 03:10:00.000001 UTC", text="x = 2")
    status, lost = submit.LiveClient(service.url, "bo-token").call_once("POST", "api/submit", {"lab": LAB})
    assert status == 201
    while worker.queue.latest("bo", LAB).state != "graded":
        time.sleep(0.1)
    monkeypatch.setattr(submit, "nbgrader_submit", lambda *_: None)  # the same submission, already in the folder
    from rocmlab.cli import main

    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "bo-token")
    assert main(["submit", str(notebook), "--timeout", "60"]) == 0
    resumed = capsys.readouterr().out.splitlines()
    assert resumed[0] == f"submitted {LAB} (attempt {lost['attempt']['id']}); 4 of 5 submissions left this hour"
    assert resumed[1:] == ["score: 2 / 2", "every rule met"]
    assert worker.queue.submissions_since("ana", LAB, 0) == 1 and worker.queue.submissions_since("bo", LAB, 0) == 1
