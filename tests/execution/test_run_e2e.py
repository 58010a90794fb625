"""End to end: real papermill kernels on the fixture labs in tests/fixtures/course."""

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from rocmlab.build.verify import verify_lab
from rocmlab.cli import main
from rocmlab.course.catalog import discover, select
from rocmlab.execution.run import CHECKS_SANDBOX, local_target, run_lab
from rocmlab.execution.worker import RUN_TAG

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def target():
    return local_target()


def lab(root, lab_id):
    return select(discover(root), [lab_id])[0]


def no_tagged_processes(*labs):
    """No process started by a run (tagged environment) still works in the working folder of one
    of ``labs`` (``rocmlab-<lab>-…`` in the temp folder, where a lab runs as a learner would)."""
    return not tagged(*(f"rocmlab-{lab_id}-" for lab_id in labs))


def kept_folder(record) -> Path:
    """The working folder a failed run kept, as its reason names it."""
    return Path(re.search(r"its working folder is kept: (\S+)\)", record.reason)[1])


def test_passing_lab_gets_profile_parameters_and_a_full_record(fixture_course, tmp_path, target):
    record, outcome = run_lab(fixture_course, lab(fixture_course, "01-pass"), "smoke", target, tmp_path)
    assert record.status == "passed", record.reason
    saved = json.loads((tmp_path / "local" / "01-pass.json").read_text())
    assert saved["lab_version"] == "1.2.0" and saved["profile"] == "smoke"
    assert saved["checks_sandbox"] == CHECKS_SANDBOX  # said: rocmlab run's checks are not sandboxed
    assert saved["fingerprint"]["packages"]["papermill"]
    executed = (tmp_path / "local" / "01-pass.ipynb").read_text()
    assert '{\\"result\\": 18}' in executed  # 6 * SCALE with SCALE=3 injected from lab.toml
    assert [c["passed"] for c in outcome.harness["checks"]] == [True]


def test_checks_run_with_a_relative_output_folder(fixture_course, tmp_path, target, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the worker runs papermill in the notebook's own folder
    record, outcome = run_lab(fixture_course, lab(fixture_course, "01-pass"), "smoke", target, Path("results"))
    assert record.status == "passed", record.reason
    assert outcome.harness["seed"] and [c["passed"] for c in outcome.harness["checks"]] == [True]


def test_failing_cell_is_named(fixture_course, tmp_path, target):
    record, _ = run_lab(fixture_course, lab(fixture_course, "02-fail"), "smoke", target, tmp_path)
    assert record.status == "failed"
    assert record.failing_cell["ename"] == "ValueError"
    assert "broken on purpose" in record.failing_cell["evalue"]
    assert "raise ValueError" in record.failing_cell["source"]


def test_cell_that_sleeps_forever_is_stopped_and_cleaned_up(fixture_course, tmp_path, target):
    record, _ = run_lab(fixture_course, lab(fixture_course, "03-sleep"), "smoke", target, tmp_path)
    assert record.status == "timeout"
    assert "8 s" in record.reason
    assert no_tagged_processes("03-sleep")


def test_hung_child_and_escaped_grandchild_are_reaped(fixture_course, tmp_path, target):
    record, _ = run_lab(fixture_course, lab(fixture_course, "04-child-hang"), "smoke", target, tmp_path)
    assert record.status == "timeout"
    work = kept_folder(record)
    child_pid = int((work / "pids.txt").read_text())
    assert not psutil.pid_exists(child_pid) or psutil.Process(child_pid).status() == psutil.STATUS_ZOMBIE
    assert no_tagged_processes("04-child-hang")
    shutil.rmtree(work)


def test_deprecation_and_future_warnings_are_captured(fixture_course, tmp_path, target):
    record, _ = run_lab(fixture_course, lab(fixture_course, "05-deprecation"), "smoke", target, tmp_path)
    assert record.status == "passed"
    categories = sorted(w["category"] for w in record.warnings)
    assert categories == ["DeprecationWarning", "FutureWarning"]
    assert any("removed in version 3.0" in w["message"] for w in record.warnings)


def test_dead_kernel_is_recorded_as_crashed(fixture_course, tmp_path, target):
    record, _ = run_lab(fixture_course, lab(fixture_course, "07-dies"), "smoke", target, tmp_path)
    assert record.status == "crashed"
    assert (tmp_path / "local" / "07-dies.json").is_file()


def test_gpu_profile_is_skipped_with_a_reason_on_a_cpu_machine(fixture_course, tmp_path, target):
    if target.gpus:
        pytest.skip("this machine has a GPU")
    record, _ = run_lab(fixture_course, lab(fixture_course, "01-pass"), "gpu", target, tmp_path)
    assert record.status == "skipped" and "needs 1 GPU" in record.reason


def test_verify_rejects_a_test_that_passes_on_the_student_version(fixture_course, tmp_path, target):
    result = verify_lab(fixture_course, lab(fixture_course, "06-weak-test"), tmp_path)
    verdicts = {t.grade_id: (t.on_solution, t.on_student) for t in result.tests}
    assert verdicts == {
        "06-double-1": ("pass", "fail"),
        "06-weak-1": ("pass", "pass"),
        "06-double-1:doubles": ("pass", "fail"),
        "06-weak-1:weak": ("pass", "pass"),
    }
    assert not result.ok
    assert any("06-weak-1:weak" in p and "student version" in p for p in result.problems)


def test_verify_accepts_a_sound_lab(fixture_course, tmp_path, target):
    result = verify_lab(fixture_course, lab(fixture_course, "01-pass"), tmp_path)
    assert result.ok, result.problems
    assert [(t.grade_id, t.on_solution, t.on_student) for t in result.tests] == [
        ("01-sum-1", "pass", "fail"),
        ("01-sum-1:scales", "pass", "fail"),
    ]


def test_cli_run_in_parallel_then_report(fixture_course, tmp_path, capsys):
    out = tmp_path / "results"
    status = main(["--root", str(fixture_course), "run", "01", "02", "05", "--jobs", "2", "--out", str(out)])
    assert status == 1  # 02-fail failed
    assert main(["--root", str(fixture_course), "report", "--results", str(out)]) == 0
    report = capsys.readouterr().out
    assert "| 01-pass | 1.2.0 | ✅ passed" in report and "❌ failed" in report
    assert no_tagged_processes("01-pass", "02-fail", "05-deprecation")


def test_cells_after_a_timeout_count_as_not_run(fixture_course, tmp_path, target):
    record, outcome = run_lab(fixture_course, lab(fixture_course, "03-sleep"), "smoke", target, tmp_path)
    assert record.status == "timeout"
    sleeping, unreached = outcome.cells[-2:]
    assert sleeping["executed"] and sleeping["error"] is not None
    assert not unreached["executed"]


def test_repeat_reports_a_pass_rate_and_marks_a_lab_that_fails_sometimes_flaky(
    fixture_course, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("FLAKY_COUNTER", str(tmp_path / "runs.txt"))
    out = tmp_path / "results"
    status = main(["--root", str(fixture_course), "run", "08", "01", "--repeat", "3", "--jobs", "2", "--out", str(out)])
    assert status == 1
    printed = capsys.readouterr().out
    assert "08-flaky                     flaky    2/3 passed" in printed
    assert "01-pass                      passed   3/3 passed" in printed
    assert "run 2: failed" in printed and "fails on even runs" in printed
    saved = json.loads((out / "local" / "08-flaky.json").read_text())
    assert [run["status"] for run in saved["repeats"]] == ["passed", "failed", "passed"]
    assert saved["failing_cell"]["ename"] == "AssertionError"
    kept = sorted(p.name for p in (out / "local").glob("08-flaky.run*.ipynb"))
    assert kept == ["08-flaky.run2.ipynb"]
    assert main(["--root", str(fixture_course), "report", "--results", str(out)]) == 0
    assert "🔁 flaky" in capsys.readouterr().out
    assert no_tagged_processes("08-flaky", "01-pass")


SLEEPER = """\
# %% [markdown] tags=["zh"]
# 睡

# %% [markdown] tags=["en"]
# Sleeps

# %% tags=["parameters"]
PROFILE = "smoke"
SEED = 0

# %%
import time
time.sleep(120)
"""
SLEEPER_TOML = """\
id = "01-sleeper"
version = "1.0.0"
title = { zh = "睡", en = "Sleeper" }
minutes = 5

[profiles.smoke]
timeout_s = 300
"""


def tagged(*markers) -> list:
    """The processes of a run (tagged environment) whose command line or folder holds a marker."""
    found = []
    for proc in psutil.process_iter():
        try:
            where = " ".join(proc.cmdline() + [proc.cwd()])
            if RUN_TAG in proc.environ() and any(str(m) in where for m in markers):
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGKILL, -signal.SIGKILL)])
def test_a_run_stopped_from_outside_leaves_no_kernel_behind(make_course, tmp_path, sig, status):
    """SIGTERM unwinds like Ctrl-C; after SIGKILL the worker dies with its parent and ends the kernel."""
    root = make_course({"01-sleeper": (SLEEPER_TOML, SLEEPER)})
    out, work = tmp_path / "results", "rocmlab-01-sleeper-"
    cli = subprocess.Popen([sys.executable, "-m", "rocmlab.cli", "--root", str(root), "run", "--out", str(out)])
    deadline = time.monotonic() + 60
    while not any("ipykernel" in " ".join(p.cmdline()) for p in tagged(work)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert tagged(work), "the kernel never started"
    cli.send_signal(sig)
    assert cli.wait(timeout=60) == status
    deadline = time.monotonic() + 30
    while tagged(work) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert tagged(work) == []


def test_sigterm_stops_a_repeated_run_before_its_next_run(make_course, tmp_path):
    """SIGTERM while run 1 of 3 waits on its worker: the run stops, with 143, instead of starting run 2
    in a new worker (whose 120 s sleep it then waited for), and leaves no kernel behind."""
    root = make_course({"01-sleeper": (SLEEPER_TOML, SLEEPER)})
    out, work = tmp_path / "results", "rocmlab-01-sleeper-"
    argv = [sys.executable, "-m", "rocmlab.cli", "--root", str(root), "run", "--repeat", "3", "--out", str(out)]
    cli = subprocess.Popen(argv)
    try:
        deadline = time.monotonic() + 60
        while not any("ipykernel" in " ".join(p.cmdline()) for p in tagged(work)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert tagged(work), "the kernel never started"
        cli.send_signal(signal.SIGTERM)
        assert cli.wait(timeout=60) == 143  # run 2 would sleep 120 s
    finally:
        cli.kill()
        cli.wait()
    deadline = time.monotonic() + 30
    while tagged(work) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert tagged(work) == []
