"""A live worker keeps one grader open per lab (issue 49: a whole one-learner `rocmlab grade` per
attempt cost 1.64x the CPU of batch): reused across attempts, the least recently used closed past
``keep``, closed and opened anew after a grading that raised or a zygote that ended, a submission
outside the hidden folders graded by a grader of its own, every grader closed when the worker
stops. The grader here is a stand-in that records what was asked of it; test_live_worker.py
grades with the real one."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from rocmlab.grading.submissions import StudentResult
from rocmlab.live import command as live_command
from rocmlab.live import graders as live_graders
from rocmlab.live.graders import OPEN_LABS, OpenGraders
from rocmlab.live.queue import LiveQueue
from rocmlab.live.worker import Worker
from rocmlab.root import find_root

ROOT = find_root(None)
LABS = ("01-rocm-setup", "09-profiling", "07-triton-kernels")


class StandIn:
    """What OpenGraders asks of a ClassGrader, recorded; ``fails`` raises from the next grade."""

    opened: list[StandIn] = []

    def __init__(self, root, lab, out, *, extra_hidden=(), ahead=False, **_options):
        self.lab, self.out, self.ahead = lab.id, Path(out), ahead
        self.hidden = [Path(p).resolve() for p in extra_hidden]
        self.closed, self.broken, self.fails, self.graded = False, False, None, []
        self.asked_ahead = []  # per grade call: whether a kernel was to be started for a next attempt
        StandIn.opened.append(self)

    def covers(self, path) -> bool:
        return any(h in Path(path).resolve().parents for h in self.hidden)

    def grade(self, submissions, seeds=None, progress=print, *, ahead=None):
        assert not self.closed
        self.asked_ahead.append(ahead)
        if self.fails:
            self.closed = True  # as ClassGrader.grade closes itself when it raises
            raise self.fails
        self.graded += [(s.student, (seeds or {}).get(s.student)) for s in submissions]
        return [StudentResult(s.student, str(s.path), score=1.0, max_score=1.0, lang="en") for s in submissions]

    def close(self):
        self.closed = True


@pytest.fixture
def stand_in(monkeypatch):
    StandIn.opened = []
    monkeypatch.setattr(live_graders, "ClassGrader", StandIn)
    return StandIn.opened


@pytest.fixture
def spool(tmp_path) -> Path:
    folder = tmp_path / "live"
    (folder / "spool").mkdir(parents=True)
    return folder


def notebook(spool: Path, learner: str, lab: str) -> Path:
    path = spool / "spool" / learner / lab / f"{lab}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}", encoding="utf-8")
    return path


def test_one_grader_per_lab_is_opened_once_and_reused_with_each_learners_seed(stand_in, spool):
    graders = OpenGraders(ROOT, hide=[spool])
    for learner, seed in (("ana", 7), ("bo", None), ("ana", 7)):
        graders.grade(LABS[0], learner, notebook(spool, learner, LABS[0]), seed)
    graders.grade(LABS[1], "ana", notebook(spool, "ana", LABS[1]), 3)
    assert [g.lab for g in stand_in] == [LABS[0], LABS[1]]
    assert stand_in[0].graded == [("ana", 7), ("bo", None), ("ana", 7)]
    assert all(g.ahead for g in stand_in)  # a kernel waits for the lab's next attempt
    assert all(spool.resolve() in g.hidden for g in stand_in)  # the queue's folder hidden in every kernel
    outs = [g.out for g in stand_in]
    graders.close()
    assert all(g.closed for g in stand_in) and not any(out.exists() for out in outs)
    assert graders.labs == []


def test_past_keep_the_least_recently_used_grader_is_closed(stand_in, spool):
    graders = OpenGraders(ROOT, hide=[spool], keep=2)
    for lab in (LABS[0], LABS[1], LABS[0], LABS[2]):
        graders.grade(lab, "ana", notebook(spool, "ana", lab), None)
    first, second, third = stand_in
    assert second.closed and not second.out.exists()  # 01 was used after it
    assert not first.closed and not third.closed
    assert graders.labs == [LABS[0], LABS[2]]
    graders.close()


def test_a_grading_that_raises_closes_the_grader_and_the_next_attempt_opens_a_new_one(stand_in, spool):
    graders = OpenGraders(ROOT, hide=[spool])
    path = notebook(spool, "ana", LABS[0])
    graders.grade(LABS[0], "ana", path, None)
    stand_in[0].fails = TimeoutError("past the budget")
    with pytest.raises(TimeoutError):
        graders.grade(LABS[0], "ana", path, None)
    assert graders.labs == [] and not stand_in[0].out.exists()
    graders.grade(LABS[0], "bo", notebook(spool, "bo", LABS[0]), None)
    assert len(stand_in) == 2 and stand_in[1].graded == [("bo", None)]
    graders.close()


def test_a_broken_grader_is_closed_after_its_attempt_and_opened_anew(stand_in, spool):
    graders = OpenGraders(ROOT, hide=[spool])
    path = notebook(spool, "ana", LABS[0])
    graders.grade(LABS[0], "ana", path, None)
    stand_in[0].broken = True  # its zygote ended
    graders.grade(LABS[0], "ana", path, None)
    assert stand_in[0].closed and graders.labs == []
    graders.grade(LABS[0], "ana", path, None)
    assert len(stand_in) == 2 and not stand_in[1].closed
    graders.close()


def test_a_submission_outside_the_hidden_folders_gets_a_grader_of_its_own_with_its_folder_hidden(
    stand_in, spool, tmp_path
):
    graders = OpenGraders(ROOT, hide=[spool])
    outside = tmp_path / "elsewhere" / "ana" / f"{LABS[0]}.ipynb"
    outside.parent.mkdir(parents=True)
    outside.write_text("{}", encoding="utf-8")
    graders.grade(LABS[0], "ana", outside, 5)
    kept, alone = stand_in
    assert kept.graded == [] and alone.graded == [("ana", 5)]
    assert outside.parent.resolve() in alone.hidden and not alone.ahead
    assert alone.closed and not alone.out.exists() and not kept.closed
    graders.close()


def test_an_unknown_lab_opens_nothing(stand_in, spool):
    from rocmlab.errors import LabError

    with pytest.raises(LabError):
        OpenGraders(ROOT, hide=[spool]).grade("99-nowhere", "ana", notebook(spool, "ana", "99-nowhere"), None)
    assert stand_in == []


def test_the_worker_closes_its_graders_when_it_stops_also_on_sigterm(stand_in, spool):
    queue = LiveQueue(spool / "queue.sqlite")
    queue.submit("ana", LABS[0], "t1", str(notebook(spool, "ana", LABS[0])))
    worker = Worker(queue, ROOT, worker_id="w", poll_s=0.05, log=lambda _m: None)
    assert worker.run(max_attempts=1) == 1
    assert len(stand_in) == 1 and stand_in[0].closed  # closed when run returned
    queue.submit("bo", LABS[0], "t2", str(notebook(spool, "bo", LABS[0])))
    worker = Worker(queue, ROOT, worker_id="w2", poll_s=0.05, log=lambda _m: None)
    real_grade = StandIn.grade

    def stopped(self, submissions, seeds=None, progress=print, **_options):
        raise SystemExit(143)  # processes.exit_on_sigterm, mid-grade

    StandIn.grade = stopped
    try:
        with pytest.raises(SystemExit):
            worker.run(max_attempts=1)
    finally:
        StandIn.grade = real_grade
    assert stand_in[1].closed and worker.graders.labs == []
    assert queue.get(2).state == "queued"  # given back at once


def test_a_worker_grades_its_open_labs_first_and_opens_no_second_grader_while_they_have_work(stand_in, spool):
    queue = LiveQueue(spool / "queue.sqlite")
    queue.submit("bo", LABS[2], "t1", str(notebook(spool, "bo", LABS[2])))  # first in turn
    queue.submit("cy", LABS[0], "t1", str(notebook(spool, "cy", LABS[0])))
    worker = Worker(queue, ROOT, worker_id="w", poll_s=0.05, log=lambda _m: None)
    worker.graders._grader(LABS[0])  # lab 01's grader is open already
    assert worker.run(max_attempts=1) == 1
    assert queue.latest("cy", LABS[0]).state == "graded" and queue.latest("bo", LABS[2]).state == "queued"
    assert [g.lab for g in stand_in] == [LABS[0]]  # it told the queue what it had open: no grader for 07


def test_a_kernel_is_started_ahead_only_while_another_attempt_of_the_lab_waits(stand_in, spool):
    """A kernel started ahead for nobody is CPU spent for nothing (issue 49: live cost more than
    batch, which starts none past its last learner): the worker asks for one only while the queue
    holds another attempt of the same lab."""
    queue = LiveQueue(spool / "queue.sqlite")
    for learner in ("ana", "bo"):
        queue.submit(learner, LABS[0], "t1", str(notebook(spool, learner, LABS[0])))
    queue.submit("cy", LABS[1], "t1", str(notebook(spool, "cy", LABS[1])))
    worker = Worker(queue, ROOT, worker_id="w", poll_s=0.05, log=lambda _m: None)
    assert worker.run(max_attempts=3) == 3
    by_lab = {g.lab: g.asked_ahead for g in stand_in}
    assert by_lab == {LABS[0]: [True, False], LABS[1]: [False]}  # bo's waited behind ana's; then none


def test_over_the_http_api_a_kernel_is_always_started_ahead(stand_in, spool):
    """The service's worker API does not say what waits: the worker keeps a kernel ready."""
    graders = OpenGraders(ROOT, hide=[spool])
    worker = Worker(object(), ROOT, worker_id="w", hide=[spool], log=lambda _m: None)
    assert worker.next_waits(LABS[0]) is True
    graders.grade(LABS[0], "ana", notebook(spool, "ana", LABS[0]), None)
    assert stand_in[0].asked_ahead == [True]  # OpenGraders' own default
    graders.close()


def test_the_cli_default_of_open_labs_is_the_graders_own():
    parser = argparse.ArgumentParser()
    live_command.add_arguments(parser)
    action = next(a for a in parser._actions if "--open-labs" in a.option_strings)
    assert f"(default {OPEN_LABS})" in action.help


def test_a_worker_imports_what_a_grader_needs_before_its_first_claim(tmp_path):
    """nbgrader is imported at start, so no learner's first attempt waits for it (a fresh process:
    this one has imported nbgrader already)."""
    queue = tmp_path / "q.sqlite"
    LiveQueue(queue)
    script = f"""
import sys
from pathlib import Path
from rocmlab.live import worker
assert "nbgrader.apps" not in sys.modules, "imported before the worker started"
def run(self, **_):
    print("at the first claim nbgrader is imported:", "nbgrader.apps" in sys.modules)
    return 0
worker.Worker.run = run
worker.worker_main(Path({str(ROOT)!r}), queue_path={str(queue)!r}, service=None, token="",
    lease_s=10, poll_s=0.1, profile="smoke", unsafe=True, max_attempts=0, idle_exit_s=0, labs=[{LABS[0]!r}])
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "at the first claim nbgrader is imported: True" in done.stdout, done.stdout
