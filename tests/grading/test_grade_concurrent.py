"""Two ``rocmlab grade`` runs at once on one machine, as root: each holds grader users of its own,
both score their perfect learner fully, and neither leaves a process behind.

Each class has a learner who keeps 150 processes alive for a while (under the 256 each grader
user may have) and one who leaves a detached sleeper: runs sharing a user would push each other
past the process limit, and a run sweeping a shared user would kill the other's kernels."""

import json
import subprocess
import sys

import classroom
import pytest

from rocmlab.processes import is_root
from rocmlab.sandbox.grader_users import USER_PREFIX

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not is_root(), reason="grader users exist only when grading as root"),
]

HOG = (
    "import subprocess, time\n"
    "held = [subprocess.Popen(['sleep', '60']) for _ in range(150)]\n"
    "time.sleep(4)\n"
    "for p in held:\n    p.kill()\n    p.wait()\n"
)
ORPHAN = "import subprocess\nsubprocess.Popen(['sleep', '600'], start_new_session=True)\n"


def _write_class(base, folder):
    entries = {
        "correct": (classroom.answer(base), 5, set()),
        "hog": (classroom.answer(base, classroom.SUM_OK + HOG), 5, set()),
        "orphan": (classroom.answer(base, classroom.SUM_OK + ORPHAN), 5, set()),
        "partial": (classroom.answer(base, norm_src=classroom.NORM_WRONG), 2, set()),
    }
    classroom.write_class(entries, folder)
    return {name: score for name, (_, score, _) in entries.items()}


def _grade(folder, out):
    argv = [sys.executable, "-m", "rocmlab.cli", "--root", str(classroom.COURSE), "grade", classroom.LAB]
    argv += ["--submissions", str(folder), "--jobs", "2", "--out", str(out)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    work = tmp_path_factory.mktemp("concurrent")
    base = classroom.student_notebook(classroom.COURSE, work)
    expected = {}
    for name in ("a", "b"):
        expected = _write_class(base, work / name / "submitted")
    procs = [_grade(work / name / "submitted", work / name / "out") for name in ("a", "b")]
    try:
        for proc in procs:
            output, _ = proc.communicate(timeout=500)
            assert proc.returncode == 0, output
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    summaries = [json.loads((work / name / "out" / "summary.json").read_text()) for name in ("a", "b")]
    return summaries, expected


def test_each_run_holds_grader_users_of_its_own(two_runs):
    summaries, _ = two_runs
    users = [set(s["sandbox"]["grader_users"]) for s in summaries]
    assert all(u and all(name.startswith(USER_PREFIX) for name in u) for u in users), users
    assert not users[0] & users[1]


def test_both_classes_get_what_each_learner_earned(two_runs):
    summaries, expected = two_runs
    for summary in summaries:
        scores = {s["student"]: s["score"] for s in summary["students"]}
        assert scores == expected, [(s["student"], s["score"], s["flags"], s["notes"]) for s in summary["students"]]


def test_nothing_is_left_running_as_either_runs_users(two_runs, left_as_grader_users):
    summaries, _ = two_runs
    names = {name for s in summaries for name in s["sandbox"]["grader_users"]}
    assert not left_as_grader_users(names)
