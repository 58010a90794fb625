"""`rocmlab run --repeat N`: one record over N runs; flaky when only some of them passed."""

from types import SimpleNamespace

import pytest

from rocmlab.errors import InputError
from rocmlab.execution.fingerprint import Fingerprint
from rocmlab.execution.outcome import Outcome
from rocmlab.execution.run import Target, _record, run_lab

LAB = SimpleNamespace(id="05-demo", version="1.1.0")
TARGET = Target("local", "python", Fingerprint(python="3.11"))


def outcome(status, seconds=10.0, cell=None):
    reason = "" if status == "passed" else f"cell {cell}: RuntimeError: rank 0 killed by SIGABRT"
    failing = None if status == "passed" else {"index": cell, "ename": "AssertionError", "evalue": "torchrun failed"}
    return Outcome(status, seconds, reason, failing)


def test_all_runs_passing_is_passed_with_every_run_listed():
    record = _record(LAB, "smoke", TARGET, "t", [(outcome("passed", s), "") for s in (9.0, 11.0, 10.0)], False)
    assert record.status == "passed" and record.reason == ""
    assert [run["status"] for run in record.repeats] == ["passed"] * 3
    assert record.duration_s == 10.0  # the median


def test_some_runs_failing_is_flaky_and_names_the_failure():
    runs = [(outcome("passed"), ""), (outcome("failed", cell=11), "05-demo.run2.ipynb"), (outcome("passed"), "")]
    record = _record(LAB, "smoke", TARGET, "t", runs, False)
    assert record.status == "flaky"
    assert record.failing_cell["index"] == 11 and "SIGABRT" in record.reason
    assert record.repeats[1] == {
        "run": 2,
        "status": "failed",
        "duration_s": 10.0,
        "reason": runs[1][0].reason,
        "failing_cell": runs[1][0].failing_cell,
        "notebook": "05-demo.run2.ipynb",
    }


def test_every_run_failing_is_a_failure_not_flaky():
    runs = [(outcome("failed", cell=3), "a"), (outcome("crashed", cell=4), "b")]
    assert _record(LAB, "smoke", TARGET, "t", runs, False).status == "crashed"


def test_a_single_run_keeps_no_repeat_list():
    assert _record(LAB, "smoke", TARGET, "t", [(outcome("passed"), "")], False).repeats == []


def test_repeat_below_one_is_bad_input(make_course, tmp_path):
    from rocmlab.course.catalog import discover

    root = make_course()
    with pytest.raises(InputError, match="--repeat: expected a positive number, got 0"):
        run_lab(root, discover(root)[0], "smoke", TARGET, tmp_path, repeat=0)
