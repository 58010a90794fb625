"""Live grading workers on the grading fixture lab: the live score is the batch `rocmlab grade`'s,
and a worker killed with SIGKILL mid-grade has its attempt regraded once by another."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import classroom
import pytest

from rocmlab.grading.grader import ClassGrader, grade_class
from rocmlab.grading.submissions import find_submissions
from rocmlab.live import graders as live_graders
from rocmlab.live.queue import LiveQueue
from rocmlab.live.worker import Worker
from rocmlab.sandbox.limits import Sandbox

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return classroom.student_notebook(classroom.COURSE, tmp_path_factory.mktemp("release"))


def queue_class(queue: LiveQueue, folder: Path, notebooks: dict) -> dict:
    """Each learner's notebook written as a spooled submission and queued; learner -> attempt."""
    attempts = {}
    for name, nb in notebooks.items():
        path = classroom.write(nb, folder / name / classroom.LAB / f"{classroom.LAB}.ipynb")
        attempts[name] = queue.submit(name, classroom.LAB, "2026-12-02T03:00:00.000000", str(path))
    return attempts


def snooping_answer(base, path: Path):
    """Right only where ``path`` cannot be seen: its score says whether the kernel saw it."""
    sees = f"import os\ndef scaled_sum(x, scale):\n    if os.path.exists({str(path)!r}):\n        return 0.0\n"
    right = "    return float(np.sum(np.asarray(x, dtype=float)) * scale)\n"
    return classroom.answer(base, sees + right)


# Where a kernel could leave something for the next learner's: its folders, the shared temp
# folders, the modules the zygote loaded, builtins. The peeker is right only where it finds nothing.
PLACES = "(os.getcwd(), os.path.expanduser('~'), '/tmp', '/var/tmp', '/dev/shm', tempfile.gettempdir())"
LEAVES = (
    f"import builtins, os, tempfile\nfor _f in {PLACES}:\n"
    "    try:\n        open(os.path.join(_f, 'left-by-leaker'), 'w').write('x')\n"
    "    except OSError:\n        pass\nbuiltins.left_by_leaker = np.left_by_leaker = True\n"
)
PEEKS = (
    f"import builtins, os, tempfile\n_SEEN = [_f for _f in {PLACES} if os.path.exists(os.path.join(_f, 'left-by-leaker'))]\n"
    "_SEEN += [m for m in (builtins, np) if hasattr(m, 'left_by_leaker')]\n"
    "def scaled_sum(x, scale):\n    if _SEEN:\n        return 0.0\n"
    "    return float(np.sum(np.asarray(x, dtype=float)) * scale)\n"
)


@pytest.fixture
def visible_folder():
    """A folder kernels would see if it were not hidden: not in a private /tmp, open to the grader users."""
    folder = Path(tempfile.mkdtemp(prefix=".live-test-", dir=Path(__file__).resolve().parents[2]))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_live_scores_equal_the_batch_grade_on_the_same_seeds(tmp_path, base, visible_folder, monkeypatch):
    """One worker grades the class with one grader of the lab, opened once (issue 49), and each
    attempt still in a kernel of its own: the peeker, graded after the leaker, finds nothing of it."""
    live_folder = visible_folder / "live"
    queue = LiveQueue(live_folder / "queue.sqlite")
    live_folder.chmod(0o755)
    expected = {name: score for name, (_nb, score, _flags) in classroom.regular_class(base).items()}
    expected |= {"leaker": 5.0, "peeker": 5.0}
    spool = live_folder / "spool"
    queue_class(queue, spool, {name: nb for name, (nb, _s, _f) in classroom.regular_class(base).items()})
    queue_class(queue, spool, {"leaker": classroom.answer(base, classroom.SUM_OK + LEAVES)})
    queue_class(queue, spool, {"peeker": classroom.answer(base, PEEKS)})
    queue_class(queue, spool, {"snoop": snooping_answer(base, queue.path)})
    opened, ahead_for = [], []
    monkeypatch.setattr(live_graders, "ClassGrader", lambda *a, **k: opened.append(ClassGrader(*a, **k)) or opened[-1])
    new_run = Sandbox.new_run

    def recording_new_run(sandbox, slot, cell_timeout_s, runs_left=None):
        run = new_run(sandbox, slot, cell_timeout_s, runs_left)
        ahead_for.append(run.upcoming is not None)  # a kernel started ahead for a next attempt
        return run

    monkeypatch.setattr(Sandbox, "new_run", recording_new_run)
    graded = Worker(queue, classroom.COURSE, poll_s=0.2, log=lambda _m: None).run(idle_exit_s=1)
    assert graded == len(expected) + 1
    assert len(opened) == 1 and opened[0].closed  # opened at the first attempt, closed when the worker stopped
    # every attempt was queued before the first was claimed: a kernel waited for each next one, and
    # none was started past the last (issue 49: a kernel started for nobody made live cost more than batch)
    assert ahead_for == [True] * len(expected) + [False]
    leaker, peeker = queue.get(5), queue.get(6)
    assert (leaker.learner, peeker.learner) == ("leaker", "peeker") and leaker.finished_at <= peeker.started_at
    live = {a.learner: a for a in queue.attempts()}
    assert live["snoop"].score == 5.0  # the queue's folder, every learner's submissions, was covered
    assert {name: a.score for name, a in live.items() if name != "snoop"} == expected
    assert all(a.state == "graded" and a.tries == 1 for a in live.values())
    wrong = live["wrong"].failed_checks
    assert wrong and all(c.message["en"] and c.message["zh"] for c in wrong)
    seeds = tmp_path / "seeds.json"
    seeds.write_text(json.dumps(queue.seeds_summary(classroom.LAB)))
    from rocmlab.course.catalog import discover, select
    from rocmlab.grading.command import recorded_seeds

    lab = select(discover(classroom.COURSE), [classroom.LAB])[0]
    batch = grade_class(
        classroom.COURSE,
        lab,
        find_submissions(spool, classroom.LAB),
        tmp_path / "batch",
        jobs=2,
        progress=lambda _m: None,
        seeds=recorded_seeds(seeds),
    )
    batch = {r.student: (r.score, r.seed) for r in batch}
    assert batch.pop("snoop")[0] == 5.0  # the batch's allow-listed view (issue 47) hides the queue's folder too
    assert batch == {n: (a.score, a.seed) for n, a in live.items() if n != "snoop"}


def worker_process(queue_path: Path, *extra: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "rocmlab.cli", "--root", str(classroom.COURSE), "live", "worker"]
    return subprocess.Popen(
        [*command, "--queue", str(queue_path), "--lease", "10", "--poll", "0.2", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout_s:g} s: {what}")


def test_a_worker_killed_mid_grade_has_its_attempt_regraded_once(tmp_path, base):
    queue_path = tmp_path / "queue.sqlite"
    queue = LiveQueue(queue_path)
    slow = classroom.answer(base, classroom.SUM_OK + classroom.SLOW.format(seconds=4))
    (attempt,) = queue_class(queue, tmp_path / "spool", {"slowpoke": slow}).values()
    first = worker_process(queue_path)
    try:
        wait_for(lambda: queue.get(attempt.id).state == "grading", 120, "the first worker claims it")
        time.sleep(1)
        os.killpg(first.pid, signal.SIGKILL)  # the worker and its sandbox, mid-grade
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    held_by = queue.get(attempt.id).worker
    second = worker_process(queue_path, "--idle-exit", "15")  # longer than the dead lease
    try:
        output, _ = second.communicate(timeout=300)
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
    assert second.returncode == 0, output
    done = queue.get(attempt.id)
    assert done.state == "graded" and done.score == 5.0 and done.tries == 2 and done.worker != held_by
    assert output.count("graded attempt") == 1


def test_sigterm_gives_the_attempt_back_at_once(tmp_path, base):
    queue_path = tmp_path / "queue.sqlite"
    queue = LiveQueue(queue_path)
    slow = classroom.answer(base, classroom.SUM_OK + classroom.SLOW.format(seconds=30))
    (attempt,) = queue_class(queue, tmp_path / "spool", {"slowpoke": slow}).values()
    worker = worker_process(queue_path)
    try:
        wait_for(lambda: queue.get(attempt.id).state == "grading", 120, "the worker claims it")
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
    back = queue.get(attempt.id)
    assert back.state == "queued" and back.tries == 0, output


def test_an_attempt_past_its_budget_is_stopped_and_a_classmate_is_graded(tmp_path, base):
    """Issue 48: one attempt held a worker about 12 minutes while a classmate's 4 s one waited.
    With a budget the long one is stopped (failed, counted: the notebook used the time), and the
    same worker goes on to grade the classmate."""
    queue_path = tmp_path / "queue.sqlite"
    queue = LiveQueue(queue_path)
    slow = classroom.answer(base, classroom.SUM_OK + classroom.SLOW.format(seconds=600))
    quick = classroom.answer(base, classroom.SUM_OK)
    attempts = queue_class(queue, tmp_path / "spool", {"slowpoke": slow, "classmate": quick})
    # the fixture lab stops a cell at 10 s (cell_timeout_s), so the slow one takes more than that; the
    # classmate's takes about 2 s
    worker = worker_process(queue_path, "--budget", "7", "--idle-exit", "5")
    try:
        output, _ = worker.communicate(timeout=300)
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
    stopped, graded = queue.get(attempts["slowpoke"].id), queue.get(attempts["classmate"].id)
    assert stopped.state == "failed" and "time budget of 7 s" in stopped.error and stopped.counted, output
    assert graded.state == "graded" and graded.score == 5.0, output
    assert graded.started_at - stopped.started_at < 60  # not the 600 s the slow notebook asked for
