"""A learner who attacks the fresh kernel (``rocmlab.harness.Fresh``), and the checks that catch it:
shared by tests/execution/test_fresh_kernel.py (a worker, no sandbox) and
tests/sandbox/test_kernel_world.py (every sandbox backend here). The last cell patches the course's
launcher, ``subprocess.run`` and ``json.load`` and leaves a process that rewrites a file of the work
folder, with the run's tag stripped from its environment, in a session of its own."""

import textwrap

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
    time.sleep(0.3)  # a rewriter left running (every 20 ms) would have struck by now
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


def harness(out: str) -> dict:
    """The harness options of a run graded by ``CHECKS`` (``rocmlab.harness.harness_options``'s keys)."""
    return {
        "source": CHECKS,
        "kernel": {"source": IN_KERNEL, "filename": "in_kernel.py"},
        "seed": 1,
        "out": out,
        "probe_timeout_s": 30.0,
        "answer_budget_s": 120.0,
        "budget_s": 300.0,
    }
