"""Optional (``-stretch-``) work is outside the core's max_score (docs/lab-guide.md: optional
work is graded separately or not at all), in the learner's total and in the gradebook's export."""

import copy
import csv

from conftest import GOOD_CHECKS, GOOD_PY

from rocmlab.course.catalog import parse_lab
from rocmlab.course.notebooks import solution_notebook
from rocmlab.grading.cells import score_tests
from rocmlab.grading.gradebook import Course

STRETCH_PY = (
    GOOD_PY
    + """
# %% tags=["solution"] grade_id="t-stretch-sol"
def g(x):
    ### BEGIN SOLUTION
    return -x
    ### END SOLUTION

# %% tags=["test"] grade_id="t-stretch-1" points=3
assert g(1) == -1
"""
)
STRETCH_CHECKS = (
    GOOD_CHECKS
    + """

@check("t-stretch-1", points=3, en="g negates", zh="g 取负")
def negates(learner, variant):
    assert learner.call("g", 2) == -2
"""
)


def _graded(nb, core: float, optional: float):
    executed = copy.deepcopy(nb)
    rule = {"en": "r", "zh": "r"}
    results = [
        {"grade_id": "t-1", "rule": rule, "points": core, "max_points": 1.0, "passed": core == 1.0},
        {"grade_id": "t-stretch-1", "rule": rule, "points": optional, "max_points": 3.0, "passed": optional == 3.0},
    ]
    score_tests(executed, results, "en")
    return executed


def test_optional_points_count_neither_in_the_total_nor_in_the_max(tmp_path, make_course):
    root = make_course({"01-demo": (None, STRETCH_PY)})
    (root / "solutions" / "01-demo" / "checks.py").write_text(STRETCH_CHECKS, encoding="utf-8")
    lab = parse_lab(root / "solutions" / "01-demo")
    nb = solution_notebook(lab, "en")
    course = Course(root, lab, tmp_path / "course", None)
    course.create_assignment(nb)
    course.record("ada", _graded(nb, core=1.0, optional=3.0))
    course.record("bo", _graded(nb, core=0.0, optional=0.0))

    score, max_score, grades = course.scores("ada")
    assert (score, max_score) == (1.0, 1.0)
    assert grades["t-stretch-1"] == (3.0, 3.0)  # graded apart, still in the cell's grade

    course.export_csv(tmp_path / "grades.csv")
    rows = {r["student_id"]: r for r in csv.DictReader((tmp_path / "grades.csv").open(encoding="utf-8"))}
    assert {k: float(rows["ada"][k]) for k in ("score", "max_score", "optional_score", "optional_max_score")} == {
        "score": 1.0,
        "max_score": 1.0,
        "optional_score": 3.0,
        "optional_max_score": 3.0,
    }
    assert (float(rows["bo"]["score"]), float(rows["bo"]["max_score"])) == (0.0, 1.0)
