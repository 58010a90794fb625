"""How ``build --verify`` reads a graded learner (``verify.graded_outcome``): the run's own cells
(kept by the grader before the harness's scores replace the test cells' outputs), its flags and
its checks. The graded runs themselves: tests/build/test_verify_mistakes.py and the slow suite."""

from rocmlab.build.verify import graded_outcome, judge, sandbox_text, slot_jobs
from rocmlab.grading.submissions import StudentResult
from rocmlab.harness import check


def graded(name, *, test_error=None, other_error=None, check_passed=True, flags=(), status="graded"):
    result = StudentResult(name, f"{name}.ipynb", status=status, seed=7)
    result.cells = [{"index": 4, "grade_id": "t-1", "graded": True, "executed": True, "error": test_error}]
    if other_error:
        result.cells.append({"index": 2, "grade_id": None, "graded": False, "executed": True, "error": other_error})
    result.checks = [
        {"grade_id": "t-1", "name": "scales", "passed": check_passed, "detail": "" if check_passed else "wrong"}
    ]
    for flag in flags:
        result.flag(flag, f"{flag} happened")
    return result


RAISED = {"ename": "AssertionError", "evalue": "f(1) != SCALE"}


def test_a_clean_graded_solution_passes_and_its_verdicts_are_the_runs():
    solution = graded_outcome(graded("solution"))
    student = graded_outcome(graded("student", test_error=RAISED, check_passed=False))
    result = judge("01-demo", solution, solution.reason, student)
    assert result.ok, result.problems
    assert [(t.grade_id, t.on_solution, t.on_student) for t in result.tests] == [
        ("t-1", "pass", "fail"),
        ("t-1:scales", "pass", "fail"),
    ]


def test_without_the_student_version_the_solution_alone_is_judged():
    """``verify_lab(student=False)``: a backend's check of the reference (tests/grading/test_grade_references.py)."""
    solution = graded_outcome(graded("solution"))
    result = judge("01-demo", solution, solution.reason, None, with_student=False)
    assert result.ok, result.problems
    assert [(t.grade_id, t.on_solution, t.on_student) for t in result.tests] == [
        ("t-1", "pass", "not run"),
        ("t-1:scales", "pass", "not run"),
    ]
    failed = graded_outcome(graded("solution", check_passed=False))
    assert not judge("01-demo", failed, failed.reason, None, with_student=False).ok
    assert not judge("01-demo", solution, solution.reason, None).ok  # asked for, the student version must be there


def test_a_class_of_a_lab_that_takes_the_reference_kernel_gets_one_slot():
    """Each slot starts a reference kernel that runs the whole solution: two slots, two runs."""

    @check("t-1", points=1, en="right", zh="对")
    def plain(answer):
        return answer == 1

    @check("t-1", points=1, en="as the reference", zh="同参考")
    def differential(answer, reference):
        return answer == reference

    plain, differential = plain.rocmlab_check, differential.rocmlab_check
    assert slot_jobs([plain]) == 2 and slot_jobs([plain, differential]) == 1


def test_a_solution_that_raises_anywhere_or_was_flagged_or_failed_a_check_does_not_pass():
    raised = graded_outcome(graded("solution", other_error={"ename": "JSONDecodeError", "evalue": "line 1"}))
    assert raised.status == "failed" and raised.reason == "cell 2: JSONDecodeError: line 1"
    stopped = graded_outcome(graded("solution", flags=["timeout"]))
    assert stopped.status == "timeout" and "timeout happened" in stopped.reason
    checked = graded_outcome(graded("solution", check_passed=False))
    assert checked.status == "failed" and checked.reason == "hidden checks (seed 7): scales: wrong"
    invalid = graded_outcome(graded("solution", status="invalid", flags=["invalid"]))
    assert invalid.status == "failed"


def test_the_sandbox_is_named_and_no_sandbox_says_so():
    assert sandbox_text({"backend": "bubblewrap", "forked_kernels": True}) == (
        "sandbox bubblewrap, kernels forked from a zygote"
    )
    assert (
        sandbox_text({"backend": "landlock", "forked_kernels": False})
        == "sandbox landlock, a kernel started per learner"
    )
    assert "graded unsandboxed, as this user" in sandbox_text({"backend": "none"})
    cgroup = {"memory_max_mb": 6144, "pids_max": 256}
    assert sandbox_text({"backend": "bubblewrap", "forked_kernels": True, "kernel_cgroup": cgroup}) == (
        "sandbox bubblewrap, kernels forked from a zygote, each in a cgroup of its own (6144 MB, 256 tasks)"
    )
    assert sandbox_text({"backend": "landlock", "no_kernel_cgroup": "no cgroup per kernel (that needs root)"}) == (
        "sandbox landlock, a kernel started per learner, no cgroup per kernel"
    )
