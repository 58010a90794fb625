"""What changed since the previous run of each pair (rocmlab.report.diff)."""

import dataclasses

from freshness_helpers import make_run

from rocmlab.report.diff import compare, diff_runs, to_markdown
from rocmlab.report.history import FreezeStore

STORE = FreezeStore(None)


def cells(*seconds):
    return [{"index": i, "label": f"step_{i}()", "duration_s": s} for i, s in enumerate(seconds)]


def test_newly_failing_and_fixed():
    passed, failed = make_run(days_ago=2), make_run(status="failed", days_ago=1)
    broke = compare(passed, failed, STORE)
    assert broke.status == "newly failed: cell 7: RuntimeError: HIP error: invalid device function"
    fixed = compare(failed, make_run(days_ago=0), STORE)
    assert fixed.status.startswith("fixed (was failed: cell 7")
    assert compare(passed, make_run(days_ago=0), STORE).anything is False


def test_new_warnings_and_environment_changes():
    old = make_run(days_ago=2, warnings=[{"category": "FutureWarning", "message": "a is deprecated"}])
    new = make_run(
        days_ago=1,
        warnings=[
            {"category": "FutureWarning", "message": "a is deprecated"},
            {"category": "log", "message": "`torch_dtype` is deprecated! Use `dtype` instead!"},
        ],
    )
    new.fingerprint = dataclasses.replace(new.fingerprint, python="3.11.9")
    diff = compare(old, new, STORE)
    assert diff.new_warnings == ["log: `torch_dtype` is deprecated! Use `dtype` instead!"]
    assert diff.environment == ["Python 3.11.7 → 3.11.9"]


def test_cells_that_got_much_slower_on_the_same_source():
    before = make_run(days_ago=2, cells=cells(1.0, 2.0, 0.1), lab_source_sha256="abc")
    after = make_run(days_ago=1, cells=cells(1.2, 9.5, 3.0), lab_source_sha256="abc")
    diff = compare(before, after, STORE)
    assert diff.slower_cells == ["cell 1 (step_1()): 2.0 s → 9.5 s", "cell 2 (step_2()): 0.1 s → 3.0 s"]
    changed = compare(before, make_run(days_ago=1, cells=cells(9, 9, 9), lab_source_sha256="def"), STORE)
    assert changed.slower_cells == [] and "cell timings not compared" in changed.notes[0]


def test_only_pairs_with_a_new_run_are_compared_when_asked():
    runs = [
        make_run(days_ago=3),
        make_run(days_ago=2),
        make_run(lab="02-other", days_ago=3),
        make_run(lab="02-other", days_ago=1),
    ]
    assert [(d.lab, d.env) for d in diff_runs(runs, STORE)] == [("01-demo", "cpu-current"), ("02-other", "cpu-current")]
    assert [d.lab for d in diff_runs(runs, STORE, only={("02-other", "cpu-current")})] == ["02-other"]
    assert "Nothing changed (2 pair(s) compared)." in to_markdown(diff_runs(runs, STORE))
    assert "no pair has run twice yet" in to_markdown([])


def test_a_run_without_a_freeze_is_compared_on_the_packages_it_recorded():
    old = make_run(days_ago=2, freeze=None)
    old.freeze = None  # a run recorded before freezes were kept: only the fingerprint's packages
    old.freeze_sha256 = None
    new = make_run(
        days_ago=1, freeze=["torch==2.13.0+cpu", "transformers==5.25.0", "peft==0.21.2", "numpy==2.4.6", "six==1.17.0"]
    )
    assert compare(old, new, STORE).packages == ["transformers 5.24.0 → 5.25.0"]
