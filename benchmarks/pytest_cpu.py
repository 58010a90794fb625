"""A pytest plugin for benchmarks/fast_suite.py: the CPU seconds of each test, per worker.

Loaded with ``-p pytest_cpu`` (benchmarks/ on PYTHONPATH) and ``ROCMLAB_TEST_CPU_DIR`` set. Each
test's figure is the user and system CPU of its pytest process over setup, call and teardown, plus
that of the children it waited for in that time (``getrusage``); a module- or session-scoped
fixture is paid by the first test that asks for it. A kernel forked from a sandbox zygote is not
waited for by pytest and is missed here (the suite's total, from a cgroup, counts it). Each
process writes ``<worker>.json``: its tests, and its total from start to the end of the session (with
the children it waited for, and without: pytest-xdist's controller has not yet waited for its workers).
"""

from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path

import pytest

_tests: dict[str, dict[str, float]] = {}


def _own_cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def _cpu_s() -> float:
    waited = resource.getrusage(resource.RUSAGE_CHILDREN)
    return _own_cpu_s() + waited.ru_utime + waited.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu, wall = _cpu_s(), time.monotonic()
    yield
    _tests[item.nodeid] = {"cpu_s": _cpu_s() - cpu, "wall_s": time.monotonic() - wall}


def pytest_sessionfinish(session):
    folder = os.environ.get("ROCMLAB_TEST_CPU_DIR")
    if not folder:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    report = {"worker": worker, "process_cpu_s": _cpu_s(), "own_cpu_s": _own_cpu_s(), "tests": _tests}
    (Path(folder) / f"{worker}.json").write_text(json.dumps(report), encoding="utf-8")
