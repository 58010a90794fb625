"""benchmarks/newcomer.py reads `make run`'s progress into phases and prints the summary line (no clone here)."""

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "newcomer.py"


@pytest.fixture(scope="module")
def newcomer():
    spec = importlib.util.spec_from_file_location("newcomer", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["newcomer"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules["newcomer"]


FIRST_RUN = [
    (0.4, ".venv/bin/rocmlab build"),
    (9.8, "built 10 labs"),
    (12.0, "[   0.0s] start   model tiny-qwen-zh"),
    (12.1, "[   0.1s] start   01-rocm-setup"),
    (13.0, "[   1.0s] model tiny-qwen-zh:   step 25/400 loss 5.120, ETA 4 min 10 s"),
    (70.2, "[  58.2s] passed  01-rocm-setup (58.1s) [1/3]"),
    (300.5, "[ 288.5s] ready   model tiny-qwen-zh (288.4s) [1/3]"),
    (300.5, "[ 288.5s] start   adapter qc-lora"),
    (301.0, "[ 289.0s] adapter qc-lora:   step 40/320 loss 1.220, ETA 2 min 1 s"),
    (451.0, "[ 439.0s] ready   adapter qc-lora (150.5s) [1/3]"),
    (300.6, "[ 288.6s] start   03-lora-finetune-zh"),
    (301.0, "[ 289.0s] running 03-lora-finetune-zh 0s"),
    (420.0, "[ 408.0s] failed  03-lora-finetune-zh (119.4s) [2/3]"),
    (421.0, "[ 409.0s] skipped 04-collectives-rccl (0.0s) [3/3]"),
    (421.5, "records and executed notebooks: results/local"),
    (430.0, "freshness report: 3 labs"),
]


def test_a_first_run_splits_into_build_assets_labs_and_report(newcomer):
    phases = newcomer.parse_make_run(newcomer.Timed(2, 433.0, FIRST_RUN))
    assert phases.build == 12.0 and phases.model == 288.4 and phases.adapter == 150.5 and phases.total == 433.0
    assert phases.labs == {
        "01-rocm-setup": ("passed", 58.1),
        "03-lora-finetune-zh": ("failed", 119.4),
        "04-collectives-rccl": ("skipped", 0.0),
    }
    assert phases.report == 11.5


def test_a_second_run_with_the_model_cached_has_no_model_phase(newcomer):
    lines = [line for line in FIRST_RUN if "model" not in line[1] and "adapter" not in line[1]]
    phases = newcomer.parse_make_run(newcomer.Timed(0, 300.0, lines))
    assert phases.model == phases.adapter == 0.0 and set(phases.labs) == {
        "01-rocm-setup",
        "03-lora-finetune-zh",
        "04-collectives-rccl",
    }
    printed = newcomer.format_run("second make run", phases, 0)
    assert printed[0] == "second make run: 300.0 s (rc 0)"
    assert "  model        0.0 s  (cached)" in printed and "  adapter      0.0 s  (cached)" in printed
    assert "  03-lora-finetune-zh             119.4 s  failed" in printed


def test_output_that_never_started_a_lab_has_only_a_total(newcomer):
    phases = newcomer.parse_make_run(newcomer.Timed(2, 5.0, [(0.1, "make: *** [build] Error 2")]))
    assert (phases.build, phases.model, phases.adapter, phases.labs, phases.report, phases.total) == (
        0.0,
        0.0,
        0.0,
        {},
        0.0,
        5.0,
    )


def test_the_last_line_is_the_three_totals(newcomer):
    assert newcomer.summary_line(471.64, 190.2, 58.49) == "first: 472 s second: 190 s test: 58 s"


def test_timed_stamps_each_line_and_keeps_the_exit_status(newcomer, tmp_path):
    import os

    script = "import time; print('a', flush=True); time.sleep(0.3); print('b'); raise SystemExit(4)"
    result = newcomer.timed([sys.executable, "-c", script], tmp_path, dict(os.environ))
    assert result.rc == 4 and [line for _, line in result.lines] == ["a", "b"]
    assert result.lines[1][0] - result.lines[0][0] >= 0.25
