"""Every lab's reference solution scores full marks, and its student version its blank score,
graded as a class is graded, on every sandbox backend (issue 47: every backend proves every lab).

``rocmlab build --verify`` grades a class of two, the lab's zh solution and its built student
version, through ``rocmlab grade``'s own code (``rocmlab.build.verify.verify_lab``): as root,
each learner as a grader user in its own work folder. tests/labs/test_every_lab.py grades every
lab so on the default backend (bubblewrap, kernels forked from a zygote); this module grades
them on each other backend: bubblewrap with a kernel per learner, the namespace fallback with
forked kernels and with a kernel per learner, and Landlock.

Each grading runs the whole lab once more, so CI grades on the other backends the labs whose
graded runs differ most by backend: lab 01 (reads the machine: sysfs, /proc, the tools on PATH),
solution and student version on each other backend; and lab 10 (its export checks are what a
kernel's inconsistent working folder broke, a rename across the folder's two mounts), its
solution alone on the namespace fallback with a kernel per learner, the way that differs from
the default in both its backend and how a kernel starts. Lab 10's student version (its blank
score comes from its missing answers and the checks, which run in the harness whatever the
sandbox) and its other ways cost a full run of lab 10 each: CI leaves them to the default
backend (test_every_lab.py) and to tests/sandbox/test_kernel_world.py, which attacks the same
mechanisms on every way in seconds (renames and temp files across the working folder's
spellings, loopback TCP between ranks, the environment). ``ROCMLAB_EVERY_REFERENCE=1`` grades
every lab on every backend, each with its student version (before a release, after a change to
the sandbox, and weekly in .github/workflows/references.yml).

A lab that talks over loopback TCP (``needs = ["loopback-tcp"]``: 02 and 06 serve on 127.0.0.1, the ranks
of 04, 05 and 10 rendezvous there) is not graded on
Landlock, which gives a kernel no TCP: the grader refuses it, and the tests below (no lab run) attack
that refusal."""

import os
from pathlib import Path

import pytest
from conftest import GRADING_WAYS, force_grading_way

from rocmlab.build.verify import verify_lab, verify_labs
from rocmlab.course.catalog import LOOPBACK_TCP, discover, select
from rocmlab.errors import CommandFailed
from rocmlab.sandbox import landlock
from rocmlab.sandbox import limits as sandbox
from rocmlab.sandbox.limits import is_root

ROOT = Path(__file__).resolve().parents[2]
LABS = discover(ROOT)
EVERY = os.environ.get("ROCMLAB_EVERY_REFERENCE") == "1"
ALSO = pytest.mark.skipif(not EVERY, reason="set ROCMLAB_EVERY_REFERENCE=1 (a full run of the lab per backend)")
OTHER_WAYS = [way for way in GRADING_WAYS if way != "bubblewrap"]  # the default: tests/labs/test_every_lab.py
# lab -> the ways CI grades it on, and whether with its student version (the docstring says why)
IN_CI = {"01-rocm-setup": (OTHER_WAYS, True), "10-fsdp2": (["namespaces-per-kernel"], False)}


def in_ci(way: str, lab) -> bool:
    return way in IN_CI.get(lab.id, ((), False))[0]


def with_student(lab) -> bool:
    return EVERY or IN_CI.get(lab.id, ((), True))[1]


LOOPBACK_LABS = [lab for lab in LABS if LOOPBACK_TCP in lab.needs]
NEEDS_LANDLOCK = pytest.mark.skipif(
    landlock.abi() < landlock.SANDBOX_ABI, reason="the Landlock backend needs Landlock ABI 6 (Linux 6.12 or later)"
)


@pytest.mark.slow
@pytest.mark.runs_a_lab
@pytest.mark.parametrize(
    ("way", "lab"),
    [
        pytest.param(way, lab, marks=() if in_ci(way, lab) else ALSO, id=f"{way}-{lab.id}")
        for way in OTHER_WAYS
        for lab in LABS
    ],
)
def test_the_reference_scores_full_marks_and_the_student_version_its_blank_score(way, lab, tmp_path, monkeypatch):
    if way == "landlock" and LOOPBACK_TCP in lab.needs:
        pytest.skip("Landlock gives no loopback TCP: grading refuses the lab (test_landlock_refuses_...)")
    force_grading_way(way, monkeypatch)
    monkeypatch.delenv("ROCMLAB_ROOT", raising=False)
    student = with_student(lab)
    result = verify_lab(ROOT, lab, tmp_path / "out", lang="zh", mistakes=False, student=student)
    backend = way.removesuffix("-per-kernel")
    assert result.sandbox["backend"] == backend and result.sandbox["loopback_tcp"] == sandbox.LOOPBACK_TCP[backend]
    assert result.sandbox["forked_kernels"] == sandbox.fork_server_applies(backend, is_root())
    assert result.ok, "\n".join(result.problems)
    assert set(result.scores) == ({"solution", "student"} if student else {"solution"}), result.scores
    score, max_score = result.scores["solution"]
    assert score == max_score > 0, result.scores
    if student:
        assert result.scores["student"][0] == 0, result.scores


def assert_refused_for_landlock(message: str, lab_id: str) -> None:
    assert f"lab {lab_id} cannot be graded on the landlock sandbox backend" in message
    assert 'needs = ["loopback-tcp"]' in message and "nobody was graded" in message
    assert "as root" in message and "bubblewrap" in message and "ROCMLAB_SANDBOX=bubblewrap" in message


def test_ci_grades_labs_that_exist_on_ways_that_exist():
    assert set(IN_CI) <= {lab.id for lab in LABS}
    assert all(set(ways) <= set(OTHER_WAYS) for ways, _student in IN_CI.values())


def test_the_labs_that_talk_over_loopback_are_02_04_05_06_and_10():
    assert [lab.id for lab in LOOPBACK_LABS] == [
        "02-llm-inference",
        "04-collectives-rccl",
        "05-distributed-training",
        "06-multi-agent",
        "10-fsdp2",
    ]


@NEEDS_LANDLOCK
@pytest.mark.parametrize("lab", LOOPBACK_LABS, ids=lambda lab: lab.id)
def test_landlock_refuses_a_lab_whose_ranks_talk_over_loopback_and_grades_nobody(lab, tmp_path, monkeypatch):
    """Landlock denies every TCP bind and connect (rocmlab.sandbox.landlock: its net rules name
    ports, not addresses), so torchrun's rendezvous and gloo would fail for every learner, the
    reference included (lab 10's reference: torchrun exit 1, both ranks killed): refused instead,
    before a kernel starts or a gradebook is written."""
    monkeypatch.setenv(sandbox.BACKEND_VARIABLE, "landlock")
    out = tmp_path / "out"
    with pytest.raises(CommandFailed) as refused:
        verify_lab(ROOT, lab, out, lang="zh", mistakes=False)  # rocmlab grade's own ClassGrader
    assert_refused_for_landlock(str(refused.value), lab.id)
    assert not out.exists()  # no gradebook, no grades.csv, no summary.json


@NEEDS_LANDLOCK
def test_build_verify_on_landlock_refuses_before_the_first_lab_is_graded(tmp_path, monkeypatch):
    monkeypatch.setenv(sandbox.BACKEND_VARIABLE, "landlock")
    graded = []
    with pytest.raises(CommandFailed) as refused:
        verify_labs(ROOT, select(LABS, ["01", "04"]), tmp_path / "out", progress=graded.append)
    assert_refused_for_landlock(str(refused.value), "04-collectives-rccl")
    assert graded == [] and not (tmp_path / "out").exists()


@pytest.mark.parametrize("backend", sandbox.BACKENDS)
def test_every_backend_says_whether_a_kernel_gets_loopback_tcp(backend):
    from rocmlab.grading.preflight import check_sandbox_gives

    lab = LOOPBACK_LABS[0]
    if sandbox.LOOPBACK_TCP[backend]:
        check_sandbox_gives(lab, backend)
    else:
        with pytest.raises(CommandFailed, match=f"lab {lab.id} cannot be graded on the {backend} sandbox"):
            check_sandbox_gives(lab, backend)
    check_sandbox_gives(select(LABS, ["01"])[0], backend)  # a lab that needs nothing: every backend
    assert set(sandbox.LOOPBACK_TCP) == set(sandbox.BACKENDS)
