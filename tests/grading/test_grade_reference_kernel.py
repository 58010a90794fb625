"""The reference kernel in a real class (issue 47): graded as ``rocmlab grade`` grades, a check
that takes ``reference`` gets the answers of a second kernel that ran the lab's solution in the
sandbox, with the run's parameters and the lab's data. A learner who rebinds the lab's data so
that its own computation agrees with itself scores the blank score; an honest learner full marks.

Cost: one class of the fixture lab (three learners, one slot): one reference kernel more than
the class's own kernels, about 10-20 s on a 2-core machine."""

import shutil

import classroom
import pytest

from rocmlab.course.catalog import discover, select
from rocmlab.grading.grader import grade_class
from rocmlab.grading.submissions import find_submissions

pytestmark = [pytest.mark.slow, pytest.mark.machine_wide]

# the fixture lab's exercise 1 gets a differential rule: its sum of the lab's own data at the run's
# SCALE must be the reference kernel's (its 2 points: 1.5 for the rule it had, 0.5 for this one)
DIFFERENTIAL = """

@check(
    "01-grade-sum",
    points=0.5,
    en="scaled_sum of the lab's values at the run's SCALE is the reference solution's",
    zh="scaled_sum 对本实验数据按本次运行的 SCALE 求和，与参考解一致",
)
def sums_the_labs_values(learner, variant, reference):
    got = learner.eval("scaled_sum(values, SCALE)")
    want = reference.eval("scaled_sum(values, SCALE)")
    assert want == 2 * 8.0 * 1, want  # the smoke profile's SCALE 2 reached the reference; values.txt sums to 8
    assert got == want, f"got {got}, the reference solution gives {want}"
"""
# in the old design the reference was computed in the learner's kernel: with the data rebound to
# nothing, scaled_sum's 0.0 agreed with it
FORGER = "values = np.zeros(0)\ndef scaled_sum(x, scale):\n    return 0.0\n"


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    shutil.copytree(classroom.COURSE, root, dirs_exist_ok=True)
    checks = root / "solutions" / classroom.LAB / "checks.py"
    text = checks.read_text(encoding="utf-8").replace(
        '"01-grade-sum",\n    points=2,', '"01-grade-sum",\n    points=1.5,'
    )
    checks.write_text(text + DIFFERENTIAL, encoding="utf-8")
    return root


def test_a_differential_rule_is_answered_by_the_reference_kernel_in_the_sandbox(course, tmp_path):
    assert (
        sum(float(v) for v in (course / "solutions" / classroom.LAB / "data" / "values.txt").read_text().split()) == 8.0
    )
    base = classroom.student_notebook(course, tmp_path)
    entries = {
        "honest": (classroom.answer(base), 5, set()),
        "forger": (classroom.answer(base, FORGER, classroom.BLANK_NORM), 0, set()),
        "blank": (classroom.answer(base, classroom.BLANK_SUM, classroom.BLANK_NORM), 0, set()),
    }
    classroom.write_class(entries, tmp_path / "submitted")
    lab = select(discover(course), [classroom.LAB])[0]
    results = grade_class(
        course,
        lab,
        find_submissions(tmp_path / "submitted", classroom.LAB),
        tmp_path / "out",
        jobs=1,
        progress=lambda _: None,
    )
    by_name = {r.student: r for r in results}
    assert {n: r.score for n, r in by_name.items()} == {"honest": 5.0, "forger": 0.0, "blank": 0.0}
    assert all(not c.get("error") for r in results for c in r.checks), [c["error"] for r in results for c in r.checks]
    rule = next(c for c in by_name["forger"].checks if c["name"] == "sums_the_labs_values")
    assert rule["detail"].startswith("wrong: got 0.0, the reference solution gives 16.0"), rule
