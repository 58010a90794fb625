"""The grading benchmarks still run and still compare scores (tiny classes; no timing is judged)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run_benchmark(script: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args], capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def test_throughput_grades_a_class_with_both_graders_and_compares_every_score():
    out = run_benchmark("grade_throughput.py", "--only", "fixture", "--students", "4")
    assert "scores identical: True (4 learners)" in out
    assert "CPU per learner:" in out and "speed-up:" in out


def test_shards_merge_to_the_unsharded_scores():
    out = run_benchmark("grade_shards.py", "--students", "4", "--shards", "2")
    assert "merged scores and flags equal the unsharded run: True" in out


def test_live_load_grades_every_submission_once_and_agrees_with_the_batch_grade():
    out = run_benchmark("live_load.py", "--learners", "4", "--window", "10")
    assert "live scores equal the batch rocmlab grade: True (8 submissions)" in out
    assert "held by the killed worker: graded, claimed 2 times" in out
    assert "CPU counted from " in out  # a cgroup per side as root, else the waited-for children, said
    assert re.search(r"CPU-s per submission with the kill .*: live [\d.]+ batch [\d.]+ live/batch [\d.]+", out), out
    if "a CPU-accounting cgroup" in out:  # as root: each worker's CPU apart, and every process's kind
        assert re.search(r"in the steady state .*: live [\d.]+ batch [\d.]+ live/batch [\d.]+", out), out
        assert re.search(r"live CPU-s per submission by process kind .*kernel [\d.]+", out), out
    assert re.search(r"live p95 within the batch's wall time for the same burst: (True|False)", out), out
    assert re.search(r"batch CPU-s per submission of 01-grade: [\d.]+", out), out
    assert re.search(r"batch rocmlab grade of the same 8 submissions \(--jobs 2\): [\d.]+ s; load average", out), out
    last = out.strip().splitlines()[-1]
    assert re.fullmatch(r"submissions: 8 graded: 8 lost: 0 duplicated: 0 p50: [\d.]+ s p95: [\d.]+ s", last), last
