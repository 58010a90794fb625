"""Every lab's reference solution scores full marks in the real grader (issue 47): ``rocmlab grade``
through the CLI, as a class is graded (as root: bubblewrap with kernels forked from a zygote),
the lab's solution notebook (from solutions/, in zh) submitted as the one learner of the class.

``build --verify`` runs each solution as a learner runs it, outside the sandbox; this is the
perfect learner of a held-out class graded under each sandbox's mounts, users and environment.
Lab 10 is also graded on the other backends here: its export checks are what a kernel's
inconsistent working folder broke (a rename across the folder's two mounts).

Each grading runs the whole lab once more (lab 10: about 160 s on a 2-core machine), so CI's slow
suite grades lab 10 on the default path only; ``ROCMLAB_EVERY_REFERENCE=1`` grades every lab,
and lab 10 on every other backend (before a release, or after a change to the sandbox).
``tests/sandbox/test_kernel_world.py`` attacks the same mechanisms on every backend in seconds."""

import json
import os
from pathlib import Path

import pytest

from rocmlab.cli import main
from rocmlab.course.catalog import discover
from rocmlab.course.notebooks import solution_notebook, write_notebook
from rocmlab.grading import grader
from rocmlab.sandbox import limits as sandbox
from rocmlab.sandbox.limits import bubblewrap_works, is_root, namespaces_work

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
LABS = {lab.id: lab for lab in discover(ROOT)}
FSDP2 = next(lab_id for lab_id in LABS if lab_id.startswith("10-"))
EVERY = os.environ.get("ROCMLAB_EVERY_REFERENCE") == "1"
ALSO = pytest.mark.skipif(not EVERY, reason="set ROCMLAB_EVERY_REFERENCE=1 (a full run of the lab)")


def grade_reference(lab_id: str, folder: Path) -> dict:
    """The summary of a class of one learner who submitted the lab's reference solution."""
    write_notebook(solution_notebook(LABS[lab_id], "zh"), folder / "submitted" / "reference.ipynb")
    out = folder / "out"
    argv = ["--root", str(ROOT), "grade", lab_id, "--submissions", str(folder / "submitted"), "--out", str(out)]
    assert main(argv) == 0
    return json.loads((out / "summary.json").read_text(encoding="utf-8"))


def assert_full_marks(summary: dict) -> None:
    (learner,) = summary["students"]
    broken = [(c["name"], c.get("detail", "")[:300]) for c in learner["checks"] if not c["passed"]]
    assert learner["score"] == learner["max_score"] > 0, (learner["score"], learner["max_score"], broken)
    assert not broken and not learner.get("flags"), (broken, learner.get("flags"))


@pytest.mark.parametrize("lab_id", [lab_id if lab_id == FSDP2 else pytest.param(lab_id, marks=ALSO) for lab_id in LABS])
def test_each_labs_reference_scores_full_marks_graded_as_a_class_is(lab_id, tmp_path):
    summary = grade_reference(lab_id, tmp_path)
    assert summary["sandbox"]["backend"] == sandbox.choose_backend(None)
    assert summary["sandbox"]["forked_kernels"] == sandbox.fork_server_applies(summary["sandbox"]["backend"], is_root())
    assert_full_marks(summary)


OTHER_WAYS = ["bubblewrap-per-kernel", "namespaces", "namespaces-per-kernel"]


@ALSO
@pytest.mark.parametrize("way", OTHER_WAYS)
def test_lab10s_reference_scores_full_marks_on_every_other_backend(way, tmp_path, monkeypatch):
    backend = way.removesuffix("-per-kernel")
    if backend == "bubblewrap" and not bubblewrap_works():
        pytest.skip("bubblewrap is not installed (make system-deps installs it)")
    if backend == "namespaces" and not namespaces_work():
        pytest.skip("the namespace fallback needs root and unshare")
    monkeypatch.setattr(grader, "choose_backend", lambda _isolate: backend)
    if way.endswith("-per-kernel"):
        monkeypatch.setattr(sandbox, "fork_server_applies", lambda *_: False)
    summary = grade_reference(FSDP2, tmp_path)
    assert summary["sandbox"]["backend"] == backend
    assert summary["sandbox"]["forked_kernels"] == (not way.endswith("-per-kernel") and is_root())
    assert_full_marks(summary)
