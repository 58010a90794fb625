"""The live service's routes: the learner's submit (collected by the service from their own folder,
rate-limited), their own attempts only, the workers' token-only API. The hub's token check is
stood in for (a token names its user); tests/live/test_live_e2e.py runs the real hub."""

import base64
import io
import json
import os
import tarfile
import urllib.request
from pathlib import Path

import pytest
from jupyterhub.services.auth import HubOAuth
from tornado.testing import AsyncHTTPTestCase

from rocmlab.hub.exchange_layout import ExchangeOwners, prepare_exchange
from rocmlab.hub.settings import LIVE_INSTRUCT_SCOPE
from rocmlab.live.attempts import CheckOutcome, GradeResult
from rocmlab.live.queue import LiveQueue
from rocmlab.live.service import LiveSettings, make_app

PREFIX = "/services/rocmlab-live/"
SCOPE = "access:services!service=rocmlab-live"
USERS = {
    "ana-token": {"kind": "user", "name": "ana", "groups": [], "scopes": [SCOPE]},
    "bo-token": {"kind": "user", "name": "bo", "groups": [], "scopes": [SCOPE]},
    "teacher-token": {
        "kind": "user",
        "name": "teacher",
        "groups": ["instructors"],
        "scopes": [SCOPE, LIVE_INSTRUCT_SCOPE],
    },
    "stranger-token": {"kind": "user", "name": "cy", "groups": [], "scopes": ["self"]},
}


def fake_get_user(self, handler, *, sync=True):
    token = handler.request.headers.get("Authorization", "").removeprefix("token ")
    if token in USERS:
        handler._token_authenticated = True
        return dict(USERS[token])
    return None


def learner_submits(exchange, learner: str, lab: str, stamp: str, text: str = "x = 1") -> None:
    folder = exchange / "rocmlab" / "inbound" / learner / f"{learner}+{lab}+{stamp}"
    folder.mkdir(parents=True)
    notebook = {
        "cells": [{"cell_type": "code", "source": text, "metadata": {}, "outputs": [], "execution_count": None}]
    }
    (folder / f"{lab}.ipynb").write_text(json.dumps({**notebook, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))


class LiveServiceTest(AsyncHTTPTestCase):
    @pytest.fixture(autouse=True)
    def _setup(self, tmp_path, monkeypatch):
        monkeypatch.setattr(HubOAuth, "get_user", fake_get_user)
        monkeypatch.setenv("JUPYTERHUB_OAUTH_ACCESS_SCOPES", json.dumps([SCOPE]))
        self.tmp = tmp_path
        owners = ExchangeOwners(os.geteuid(), os.getegid())
        self.exchange = prepare_exchange(tmp_path, "rocmlab", owners, {"ana": os.geteuid(), "bo": os.geteuid()})
        self.settings = LiveSettings(
            queue_path=tmp_path / "live" / "queue.sqlite",
            exchange=self.exchange,
            spool=tmp_path / "live" / "spool",
            labs=("01-pass", "02-fail"),
            rate_limit=2,
            worker_token="w" * 32,
        )

    def get_app(self):
        return make_app(self.settings, prefix=PREFIX)

    def call(self, method: str, path: str, token: str | None = None, body=None, auth: str = "token"):
        headers = {"Authorization": f"{auth} {token}"} if token else {}
        data = None if body is None else json.dumps(body)
        response = self.fetch(PREFIX + path, method=method, headers=headers, body=data, raise_error=False)
        text = response.body.decode() if response.body else ""
        return response.code, (json.loads(text) if text.startswith("{") else text)

    def test_a_learner_submits_and_sees_only_their_own_attempts(self):
        learner_submits(self.exchange, "ana", "01-pass", "2026-12-02 03:00:00.000001 UTC")
        learner_submits(self.exchange, "bo", "01-pass", "2026-12-02 03:00:00.000001 UTC")
        code, answer = self.call("POST", "api/submit", "ana-token", {"lab": "01-pass"})
        assert code == 201 and answer["remaining"] == 1 and answer["attempt"]["learner"] == "ana"
        assert "source" not in answer["attempt"]
        queued = LiveQueue(self.settings.queue_path).get(answer["attempt"]["id"])
        assert str(self.settings.spool) in queued.source  # the service's copy, not the learner's folder
        code, again = self.call("POST", "api/submit", "ana-token", {"lab": "01-pass"})
        assert code == 200 and again["duplicate"] and again["attempt"]["id"] == answer["attempt"]["id"]
        self.call("POST", "api/submit", "bo-token", {"lab": "01-pass"})
        code, mine = self.call("GET", "api/attempts", "ana-token")
        assert code == 200 and [a["learner"] for a in mine["attempts"]] == ["ana"]
        bos = LiveQueue(self.settings.queue_path).latest("bo", "01-pass").id
        assert self.call("GET", f"api/attempts/{bos}", "ana-token")[0] == 404  # another's: not there
        assert self.call("GET", f"api/attempts/{answer['attempt']['id']}", "ana-token")[0] == 200

    def test_the_rate_limit_is_enforced_and_shown(self):
        for n in range(3):
            learner_submits(self.exchange, "ana", "01-pass", f"2026-12-02 03:00:0{n}.000001 UTC", text=f"x = {n}")
            os.utime(self.exchange, None)
            code, answer = self.call("POST", "api/submit", "ana-token", {"lab": "01-pass"})
            if n < 2:
                assert code == 201 and answer["remaining"] == 1 - n, answer
        assert code == 429 and answer["remaining"] == 0 and "at most 2" in answer["error"]
        assert len(LiveQueue(self.settings.queue_path).attempts(learner="ana")) == 2

    def test_nothing_submitted_no_lab_and_no_login_are_refused(self):
        assert self.call("POST", "api/submit", "ana-token", {"lab": "01-pass"})[0] == 404
        assert self.call("POST", "api/submit", "ana-token", {"lab": "99-nope"})[0] == 404
        assert self.call("POST", "api/submit", "ana-token", {"nolab": 1})[0] == 400
        assert self.call("POST", "api/submit", None, {"lab": "01-pass"})[0] == 403
        assert self.call("GET", "api/attempts", "stranger-token")[0] == 403  # no access to the service

    def test_a_submission_filed_under_another_learners_name_is_not_collected(self):
        learner_submits(self.exchange, "ana", "01-pass", "2026-12-02 03:00:00.000001 UTC")
        forged = self.exchange / "rocmlab" / "inbound" / "bo" / "ana+01-pass+2026-12-02 04:00:00.000001 UTC"
        (self.exchange / "rocmlab" / "inbound" / "ana" / "ana+01-pass+2026-12-02 03:00:00.000001 UTC").rename(forged)
        assert self.call("POST", "api/submit", "ana-token", {"lab": "01-pass"})[0] == 404
        assert self.call("POST", "api/submit", "bo-token", {"lab": "01-pass"})[0] == 404

    def test_workers_need_the_worker_token(self):
        learner_submits(self.exchange, "ana", "01-pass", "2026-12-02 03:00:00.000001 UTC")
        self.call("POST", "api/submit", "ana-token", {"lab": "01-pass"})
        assert self.call("POST", "api/worker/claim", "ana-token", {"worker": "w1"})[0] == 403
        assert self.call("POST", "api/worker/claim", "x" * 32, {"worker": "w1"}, auth="Bearer")[0] == 403
        code, claimed = self.call("POST", "api/worker/claim", "w" * 32, {"worker": "w1", "lease_s": 60}, auth="Bearer")
        assert code == 200 and claimed["attempt"]["state"] == "grading"
        files = tarfile.open(fileobj=io.BytesIO(base64.b64decode(claimed["files"])))
        assert "./01-pass.ipynb" in files.getnames()
        attempt_id = claimed["attempt"]["id"]
        result = {"worker": "w2", "score": 1, "max_score": 2, "checks": []}
        path = f"api/worker/attempts/{attempt_id}/complete"
        assert self.call("POST", path, "w" * 32, result, auth="Bearer")[0] == 409  # not w2's
        code, done = self.call("POST", path, "w" * 32, {**result, "worker": "w1"}, auth="Bearer")
        assert code == 200 and done["state"] == "graded" and done["score"] == 1
        assert self.call("POST", "api/worker/claim", "w" * 32, {"worker": "w1"}, auth="Bearer")[0] == 204

    def test_the_learner_page_grades_the_assignment_lists_submission_and_shows_what_is_left(self):
        learner_submits(self.exchange, "ana", "01-pass", "2026-12-02 03:00:00.000001 UTC")
        code, page = self.call("GET", "?lang=zh", "ana-token")
        assert code == 200 and "你的提交" in page and "本小时还可提交 2 / 2 次" in page and 'name="_xsrf"' in page
        response = self.fetch(
            PREFIX + "?lang=zh",
            method="POST",
            headers={"Authorization": "token ana-token"},
            body="lab=01-pass",
            follow_redirects=False,
        )
        assert (
            response.code == 303 and response.headers["Location"] == PREFIX + "?lang=zh"
        )  # not posted again on reload
        code, page = self.call("GET", "?lang=zh", "ana-token")
        assert code == 200 and "排队中" in page and "本小时还可提交 1 / 2 次" in page
        assert '<meta http-equiv="refresh"' in page  # it reloads itself until the attempt is graded
        queue = LiveQueue(self.settings.queue_path)
        claimed = queue.claim("w", 60)
        wrong = CheckOutcome("t", "scales", False, 0.0, 1.0, {"en": "f scales by SCALE", "zh": "f 乘以 SCALE"})
        queue.complete(claimed.id, "w", GradeResult(0.0, 1.0, [wrong], lang="en"))  # an English notebook
        code, page = self.call("GET", "?lang=zh", "ana-token")
        assert "f 乘以 SCALE" in page and "f scales by" not in page  # the rules in the page's language
        assert '<meta http-equiv="refresh"' not in page
        response = self.fetch(PREFIX, method="POST", headers={"Authorization": "token bo-token"}, body="lab=01-pass")
        assert response.code == 404 and "no submission of 01-pass by bo" in response.body.decode()

    def test_a_form_post_without_a_token_needs_the_xsrf_field(self):
        response = self.fetch(PREFIX, method="POST", body="lab=01-pass", follow_redirects=False)
        assert response.code == 403


def test_the_cookie_secret_survives_a_restart(tmp_path):
    """A page opened before a restart still posts (issue 49: its button answered 403)."""
    settings = LiveSettings(queue_path=tmp_path / "live" / "queue.sqlite", exchange=tmp_path, spool=tmp_path / "s")
    first = make_app(settings, prefix=PREFIX).settings["cookie_secret"]
    assert make_app(settings, prefix=PREFIX).settings["cookie_secret"] == first and len(first) == 32
    assert (tmp_path / "live" / "cookie_secret").stat().st_mode & 0o777 == 0o600


def test_settings_name_what_is_missing_or_wrong():
    with pytest.raises(ValueError, match="ROCMLAB_LIVE_DB"):
        LiveSettings.from_environment({"ROCMLAB_LIVE_EXCHANGE": "/x"})
    with pytest.raises(ValueError, match="ROCMLAB_LIVE_RATE_LIMIT"):
        LiveSettings.from_environment(
            {"ROCMLAB_LIVE_DB": "/q", "ROCMLAB_LIVE_EXCHANGE": "/x", "ROCMLAB_LIVE_RATE_LIMIT": "0"}
        )
    settings = LiveSettings.from_environment({"ROCMLAB_LIVE_DB": "/d/q.sqlite", "ROCMLAB_LIVE_EXCHANGE": "/x"})
    assert settings.spool.as_posix() == "/d/spool" and settings.rate_limit == 5


@pytest.fixture
def service_in_a_thread(tmp_path, monkeypatch):
    """The service on a free loopback port, its IOLoop in a thread; yields (base URL, settings)."""
    import asyncio
    import socket
    import threading

    monkeypatch.setattr(HubOAuth, "get_user", fake_get_user)
    owners = ExchangeOwners(os.geteuid(), os.getegid())
    exchange = prepare_exchange(tmp_path, "rocmlab", owners, {"ana": os.geteuid()})
    settings = LiveSettings(
        queue_path=tmp_path / "live" / "queue.sqlite",
        exchange=exchange,
        spool=tmp_path / "live" / "spool",
        worker_token="w" * 32,
        lease_s=60,
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started, loop = threading.Event(), asyncio.new_event_loop()

    def serve():
        asyncio.set_event_loop(loop)
        make_app(settings, prefix=PREFIX).listen(port, "127.0.0.1")
        loop.call_soon(started.set)
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(30)
    yield f"http://127.0.0.1:{port}{PREFIX}", settings, exchange
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=30)


def test_a_worker_over_http_gets_the_submission_and_records_one_result(service_in_a_thread, tmp_path):
    from rocmlab.live.attempts import GradeResult
    from rocmlab.live.queue import LeaseLost
    from rocmlab.live.worker import HttpQueue

    url, settings, exchange = service_in_a_thread
    learner_submits(exchange, "ana", "01-pass", "2026-12-02 03:00:00.000001 UTC", text="answer = 42")
    request = urllib.request.Request(
        url + "api/submit", data=b'{"lab": "01-pass"}', method="POST", headers={"Authorization": "token ana-token"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 201
    first = HttpQueue(url, "w" * 32, tmp_path / "scratch-1")
    attempt = first.claim("w1", 600)
    assert attempt.learner == "ana" and attempt.lease_until <= attempt.started_at + 60  # capped by the service
    assert "answer = 42" in Path(attempt.source).read_text() and str(tmp_path / "scratch-1") in attempt.source
    first.renew(attempt.id, "w1", 60)
    first.release(attempt.id, "w1")  # a stopping worker gives it back
    second = HttpQueue(url, "w" * 32, tmp_path / "scratch-2")
    again = second.claim("w2", 60)
    assert again.id == attempt.id
    with pytest.raises(LeaseLost):
        first.complete(attempt.id, "w1", GradeResult(0.0, 2.0))
    second.complete(again.id, "w2", GradeResult(2.0, 2.0, lang="zh"))
    assert LiveQueue(settings.queue_path).get(again.id).score == 2.0
    assert second.claim("w2", 60) is None
    with pytest.raises(Exception, match="403"):
        HttpQueue(url, "x" * 32, tmp_path / "scratch-3").claim("w3", 60)
