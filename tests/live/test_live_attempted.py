"""An exercise left as released is "not attempted", apart from "failed" (issue 49: a learner who
tried 2 exercises was told 32 rules were not met), on the real lab 01 as built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from labsource import REPO

from rocmlab.grading.notebook_limits import NotebookRefused, check_notebook
from rocmlab.live import attempted as live_attempted
from rocmlab.live.attempted import exercises, not_attempted, untouched_in
from rocmlab.live.attempts import Attempt, CheckOutcome
from rocmlab.live.view import exercise_rows, failed_exercises, stuck_learners

LAB = "01-rocm-setup"
RELEASED = REPO / "labs" / "en" / LAB / f"{LAB}.ipynb"


def answered(notebook: dict, grade_id: str, source: str) -> dict:
    edited = json.loads(json.dumps(notebook))
    for cell in edited["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            cell["source"] = source
    return edited


def test_only_the_exercises_whose_answers_changed_are_attempted(tmp_path):
    released = json.loads(RELEASED.read_text(encoding="utf-8"))
    tests = list(exercises(released))
    assert tests[:2] == ["01-backend-1", "01-rocminfo-1"] and exercises(released)["01-backend-1"] == [
        "01-backend-sol-1"
    ]
    assert not_attempted(released, released) == set(tests)
    mine = answered(released, "01-backend-sol-1", "def backend_of(torch_module):\n    return 'cpu'\n")
    assert not_attempted(released, mine) == set(tests) - {"01-backend-1"}
    path = tmp_path / f"{LAB}.ipynb"
    path.write_text(json.dumps(mine), encoding="utf-8")
    assert untouched_in(REPO, LAB, "en", path) == set(tests) - {"01-backend-1"}
    path.write_text("{not json", encoding="utf-8")
    assert untouched_in(REPO, LAB, "en", path) == set()  # unreadable: nothing is called not attempted


def test_not_attempted_is_neither_failed_nor_a_hint_target_nor_in_the_pass_rate():
    def outcome(grade_id, passed, attempted=True):
        return CheckOutcome(grade_id, grade_id + "-rule", passed, float(passed), 1.0, {"en": grade_id}, attempted)

    def graded(learner, checks):
        return Attempt(id=len(learner), learner=learner, lab=LAB, submitted_at="t", state="graded", checks=checks)

    ana = graded("ana", [outcome("a", False), outcome("b", False, attempted=False)])
    bo = graded("bob", [outcome("a", True), outcome("b", False)])
    assert (
        failed_exercises(ana) == ["a"]
        and ana.not_attempted == ["b"]
        and [c.grade_id for c in ana.failed_checks] == ["a"]
    )
    assert stuck_learners([ana, bo], LAB, "b") == ["bob"]
    rows = {row.grade_id: row for row in exercise_rows([ana, bo])}
    assert (rows["b"].graded, rows["b"].passed, rows["b"].not_attempted) == (1, 0, 1)
    assert (rows["a"].graded, rows["a"].passed, rows["a"].pass_rate) == (2, 1, 0.5)
    assert CheckOutcome.from_dict({**ana.checks[1].__dict__}).attempted is False
    assert CheckOutcome.from_dict({k: v for k, v in ana.checks[1].__dict__.items() if k != "attempted"}).attempted


def test_an_exercise_nobody_attempted_has_no_pass_rate_rather_than_zero():
    """Issue 49's walk: an exercise no learner attempted showed a red "0%" on the instructor's page."""

    def graded(learner, attempted_b):
        checks = [
            CheckOutcome("a", "a-rule", True, 1.0, 1.0, {"en": "a"}),
            CheckOutcome("b", "b-rule", False, 0.0, 1.0, {"en": "b"}, attempted_b),
        ]
        return Attempt(id=len(learner), learner=learner, lab=LAB, submitted_at="t", state="graded", checks=checks)

    rows = {row.grade_id: row for row in exercise_rows([graded("ana", False), graded("bob", False)])}
    assert (rows["b"].graded, rows["b"].passed, rows["b"].not_attempted, rows["b"].pass_rate) == (0, 0, 2, None)
    assert rows["a"].pass_rate == 1.0
    attempted_once = {row.grade_id: row for row in exercise_rows([graded("ana", False), graded("bob", True)])}
    assert attempted_once["b"].pass_rate == 0.0  # one learner tried it and failed: that is a 0 % pass rate


def test_the_learners_report_lists_not_attempted_apart():
    from rocmlab.hub.submit import report

    checks = [
        {"grade_id": "a", "passed": False, "message": {"en": "rule a"}, "attempted": True},
        {"grade_id": "b", "passed": False, "message": {"en": "rule b"}, "attempted": False},
    ]
    lines = report({"state": "graded", "score": 0, "max_score": 2, "checks": checks}, "en")
    assert lines == ["score: 0 / 2", "rules not met:", "  - [a] rule a", "not attempted yet (left as handed out): b"]


@pytest.mark.parametrize(
    "bomb, limit",
    [
        # past the interpreter's recursion limit: json.loads in the root worker raised RecursionError
        ("[" * 5000 + "]" * 5000, "nested"),
        # 600 000 values in 1.2 MB, under the 2 MiB this module reads: what makes parsing cost memory
        ("[" + "0," * 599_999 + "0]", "JSON values"),
    ],
)
def test_a_learners_notebook_over_a_limit_is_never_parsed_by_the_worker(tmp_path, monkeypatch, bomb, limit):
    """Issue 49's debt: the root worker parsed a learner's notebook with json.loads before any
    limit was checked. Every exercise here is as released, so a parse would call them all not attempted."""
    notebook = json.loads(RELEASED.read_text(encoding="utf-8"))
    notebook["metadata"]["padding"] = "BOMB"
    path = tmp_path / f"{LAB}.ipynb"
    path.write_text(json.dumps(notebook).replace('"BOMB"', bomb), encoding="utf-8")
    assert path.stat().st_size < live_attempted.MAX_NOTEBOOK_BYTES
    parsed = []
    read_small = live_attempted.read_small
    monkeypatch.setattr(live_attempted, "read_small", lambda p: parsed.append(Path(p)) or read_small(p))
    assert untouched_in(REPO, LAB, "en", path, "ana") == set()
    assert path not in parsed and RELEASED in parsed  # the course's own notebook is read, the learner's never
    with pytest.raises(NotebookRefused, match=limit):
        check_notebook(path, "ana")
