"""The fresh kernel (``rocmlab.harness.Fresh``, ``rocmlab.execution.worker.FreshKernels``), attacked
through a real worker and real kernels: a learner whose last cell patches the course's launcher and
``subprocess.run``, and leaves a process that rewrites a file of the work folder with its tag
stripped from its environment, in a session of its own. The checks that take ``fresh`` run after the
others, in a kernel that sees none of it; a lab without such a check starts no extra kernel."""

import json
import textwrap

import nbformat
import psutil
import pytest

from rocmlab.execution.worker import Spec, Worker

pytestmark = pytest.mark.slow

LEARNER = [
    "import subprocess, sys\nLEARNER_MARK = 1\nopen('evidence.txt', 'w').write('the learner')\nopen('evidence.json', 'w').write('[1]')",
    # the last cell: every forgery at once
    textwrap.dedent(
        """
        import json, rocmlab.lab.launch
        REWRITER = subprocess.Popen(
            [sys.executable, "-c",
             "import time\\nwhile True:\\n    open('evidence.txt', 'w').write('forged')\\n    time.sleep(0.02)"],
            start_new_session=True, env={}, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        )
        rocmlab.lab.launch.run_torchrun = lambda *a, **k: "forged"
        subprocess.run = lambda *a, **k: "forged"
        json.load = lambda *a, **k: "forged"  # (json.loads too would break the kernel's own messages)
        """
    ),
]

IN_KERNEL = '''
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import rocmlab.lab.launch


def world():
    """What a check launched here would rely on: the launcher, subprocess, json, the work folder."""
    Path("evidence.txt").write_text("checked")
    time.sleep(1.0)  # a rewriter left running would have struck by now
    ran = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True)
    return {
        "launcher": getattr(rocmlab.lab.launch.run_torchrun, "__qualname__", "?"),
        "subprocess": ran.stdout.strip() if hasattr(ran, "stdout") else str(ran),
        "json": json.load(open("evidence.json")) if Path("evidence.json").is_file() else None,
        "evidence": Path("evidence.txt").read_text(),
        "learner_names": "LEARNER_MARK" in globals(),
        "pid": os.getpid(),
    }
'''

CHECKS = """
from rocmlab.harness import check

WORLD = {
    "launcher": "run_torchrun", "subprocess": "42", "json": [1], "evidence": "checked", "learner_names": False,
}


@check("t-1", points=1, en="fresh", zh="新内核")
def in_fresh_kernel(learner, variant, fresh):
    got = fresh.run("world")
    assert {k: v for k, v in got.items() if k != "pid"} == WORLD, got


@check("t-1", points=1, en="the attack is real", zh="攻击是真的")
def in_learner_kernel(learner, variant):
    got = learner.run("world")
    assert got["launcher"] == "<lambda>" and got["subprocess"] == "forged" and got["json"] == "forged", got
    assert got["learner_names"] and got["evidence"] != "checked", got  # (the rewriter may be mid-write)
"""


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
    assert not [p for p in psutil.process_iter(["cmdline"]) if "forged" in " ".join(p.info["cmdline"] or [])]


def test_a_check_that_asks_the_learners_kernel_after_the_fresh_one_is_a_grading_error(tmp_path):
    late = CHECKS.replace(
        'got = fresh.run("world")', 'got = fresh.run("world")\n    learner.get("LEARNER_MARK")  # too late'
    )
    with Worker() as worker:
        record = worker.run(run_spec(tmp_path, late, LEARNER)).harness
    first, second = record["checks"]
    assert "asked a kernel after the learner's kernel was shut down" in first["error"] and not first["detail"]
    assert second["passed"]


def test_a_lab_without_a_fresh_check_starts_no_extra_kernel(tmp_path):
    learner_only = CHECKS[: CHECKS.index('@check("t-1", points=1, en="fresh"')] + CHECKS[CHECKS.index("@check(", 200) :]
    with Worker() as worker:
        record = worker.run(run_spec(tmp_path, learner_only, LEARNER)).harness
    assert [c["name"] for c in record["checks"]] == ["in_learner_kernel"] and record["checks"][0]["passed"]
    assert "fresh_start_s" not in record
