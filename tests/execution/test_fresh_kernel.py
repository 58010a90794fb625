"""The fresh kernel (``rocmlab.harness.Fresh``, ``rocmlab.execution.worker.FreshKernels``), attacked
through a real worker and real kernels: a learner whose last cell patches the course's launcher and
``subprocess.run``, and leaves a process that rewrites a file of the work folder with its tag
stripped from its environment, in a session of its own. The checks that take ``fresh`` run after the
others, in a kernel that sees none of it; a lab without such a check starts no extra kernel."""

import json

import nbformat
import psutil
import pytest
from fresh_attack import CHECKS, IN_KERNEL, LEARNER
from harness_schema import harness_errors

from rocmlab.execution.worker import Spec, Worker

pytestmark = pytest.mark.slow


def run_spec(tmp_path, checks: str, cells: list[str]) -> Spec:
    notebook = tmp_path / "learner.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in cells]), str(notebook))
    out = tmp_path / "checks.json"
    return Spec(
        input=str(notebook),
        output=str(tmp_path / "out" / "learner.ipynb"),
        cwd=str(tmp_path / "work"),
        parameters={},
        cell_timeout_s=30,
        timeout_s=120,
        engine_options={
            "harness": {
                "source": checks,
                "kernel": {"source": IN_KERNEL, "filename": "in_kernel.py"},
                "seed": 1,
                "out": str(out),
                "probe_timeout_s": 30.0,
                "answer_budget_s": 120.0,
                "budget_s": 300.0,
            }
        },
    )


def test_a_fresh_kernel_sees_none_of_the_learners_patches_or_processes_and_runs_last(tmp_path):
    with Worker() as worker:
        outcome = worker.run(run_spec(tmp_path, CHECKS, LEARNER))
    assert outcome.status == "passed", outcome.reason
    record = outcome.harness
    # the lab's order stays; the learner's kernel was still there for the check that came later in
    # the file: the fresh one ran after it (before it, the learner's kernel would be shut down)
    assert [(c["name"], c["passed"], c["detail"], c["error"]) for c in record["checks"]] == [
        ("in_fresh_kernel", True, "", ""),
        ("in_learner_kernel", True, "", ""),
    ], json.dumps(record, indent=1)
    assert record["fresh_start_s"] > 0 and record["requests"] == 2
    assert harness_errors(record) == []
    rewriters = [p for p in psutil.process_iter(["cmdline", "cwd"]) if str(tmp_path) in (p.info["cwd"] or "")]
    assert not rewriters  # the run's sweep ended it


def test_a_lab_without_a_fresh_check_starts_no_extra_kernel(tmp_path):
    learner_only = CHECKS[: CHECKS.index('@check("t-1", points=1, en="fresh"')] + CHECKS[CHECKS.index("@check(", 200) :]
    with Worker() as worker:
        record = worker.run(run_spec(tmp_path, learner_only, LEARNER)).harness
    assert [c["name"] for c in record["checks"]] == ["in_learner_kernel"] and record["checks"][0]["passed"]
    assert "fresh_start_s" not in record
    assert harness_errors(record) == []
