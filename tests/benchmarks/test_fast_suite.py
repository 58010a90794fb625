"""benchmarks/fast_suite.py and its pytest plugin: each test's CPU, children included, summed by file."""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fast_suite = load("fast_suite")

BUSY_CHILD = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'sum(i * i for i in range(3_000_000))'])"


def test_the_plugin_counts_each_tests_cpu_and_the_children_it_waited_for(tmp_path):
    """A test whose child burns CPU while the test itself waits is charged for it; one that sleeps is not."""
    (tmp_path / "test_sample.py").write_text(
        textwrap.dedent(f"""
            import time

            def test_sleeps():
                time.sleep(0.2)

            def test_waits_for_a_busy_child():
                {BUSY_CHILD}
        """),
        encoding="utf-8",
    )
    out = tmp_path / "out"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # not this run's xdist worker
    env |= {"ROCMLAB_TEST_CPU_DIR": str(out), "PYTHONPATH": str(BENCHMARKS)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "pytest_cpu", "-p", "no:cacheprovider", "test_sample.py"]
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:]
    (report,) = [json.loads(p.read_text(encoding="utf-8")) for p in out.glob("*.json")]
    assert report["worker"] == "main" and report["own_cpu_s"] <= report["process_cpu_s"]
    tests = report["tests"]
    assert set(tests) == {"test_sample.py::test_sleeps", "test_sample.py::test_waits_for_a_busy_child"}
    assert tests["test_sample.py::test_sleeps"]["wall_s"] >= 0.2
    assert tests["test_sample.py::test_waits_for_a_busy_child"]["cpu_s"] > tests["test_sample.py::test_sleeps"]["cpu_s"]


def test_the_summary_ranks_files_and_names_each_worker_and_the_controller():
    reports = [
        {"worker": "main", "own_cpu_s": 3.0, "process_cpu_s": 3.0, "tests": {}},
        {"worker": "gw0", "own_cpu_s": 20.0, "process_cpu_s": 25.0, "tests": {
            "tests/a/test_x.py::test_1": {"cpu_s": 4.0, "wall_s": 5.0},
            "tests/a/test_x.py::test_2[p]": {"cpu_s": 3.0, "wall_s": 3.0},
        }},
        {"worker": "gw1", "own_cpu_s": 12.0, "process_cpu_s": 12.0, "tests": {
            "tests/b/test_y.py::test_3": {"cpu_s": 5.0, "wall_s": 9.0},
        }},
    ]  # fmt: skip
    line, detail = fast_suite.summary(reports, top=2)
    assert (
        line
        == "by worker (its tests): controller 3, gw0 25 (tests 7), gw1 12 (tests 5); costliest files: test_x.py 7.0, test_y.py 5.0"
    )
    assert detail[0].startswith("3 tests;")
    files = detail[detail.index("costliest files (CPU-s):") + 1 :][:2]
    assert [f.split()[-1] for f in files] == ["tests/a/test_x.py", "tests/b/test_y.py"]
    ranked = detail[detail.index("costliest tests (CPU-s, wall s):") + 1 :]
    assert [t.split()[-1] for t in ranked] == ["tests/b/test_y.py::test_3", "tests/a/test_x.py::test_1"]


def test_without_workers_the_one_process_is_the_worker():
    reports = [
        {"worker": "main", "own_cpu_s": 2.0, "process_cpu_s": 2.5, "tests": {"t.py::a": {"cpu_s": 1.0, "wall_s": 1.0}}}
    ]
    line, _ = fast_suite.summary(reports, top=5)
    assert line.startswith("by worker (its tests): main 2 (tests 1);")
