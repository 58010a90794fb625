"""The instructor's class page (rocmlab.grading.analytics) from a grading output folder."""

from __future__ import annotations

import csv
import html
import sys

import pytest
from class_outputs import DIRECTION, HOSTILE, LAB, SCALES, demo_class, graded_test, learner, write_outputs

from rocmlab.errors import InputError
from rocmlab.grading import analytics
from rocmlab.grading.analytics import class_view, rule_message, write_class_page


def read_csv(path):
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def test_exercises_count_mean_pass_rate_and_common_failures(tmp_path):
    view = class_view(write_outputs(tmp_path))
    by_id = {e.grade_id: e for e in view.exercises}
    assert list(by_id) == ["sum", "norm"]  # the lab's order
    total = by_id["sum"]
    assert (total.graded, total.passed) == (5, 2)  # eve is not gradable: not counted
    assert total.mean_points == pytest.approx(4 / 5)
    assert total.pass_rate == pytest.approx(0.4)
    # bob and cy broke the same rule (on inputs of their own): one line, counted twice, in both languages
    assert total.failures[0] == ("scaled_sum multiplies by scale / scaled_sum 乘以 scale", 2)
    assert (f"{HOSTILE} / x", 1) in total.failures
    norm = by_id["norm"]
    assert (norm.graded, norm.passed) == (5, 2)
    assert dict(norm.failures) == {  # dee broke two rules of one cell: each is counted
        rule_message(DIRECTION): 2,
        "normalize returns a float array / 返回浮点数组": 1,
        '=HYPERLINK("http://x")': 1,
    }


def test_a_rule_message_is_cut():
    assert len(rule_message({"en": "E" * 1000, "zh": "x"})) == analytics.MESSAGE_CHARS
    assert rule_message(None) == "" and rule_message({"en": "a"}) == "a"


def test_flags_versions_and_run_times(tmp_path):
    view = class_view(write_outputs(tmp_path))
    assert [learner.student for learner in view.flagged] == ["cy", "dee", "eve"]
    dee = next(learner for learner in view.learners if learner.student == "dee")
    assert dee.flags == ["tampered", "timeout"] and dee.reasons[0].startswith("edited test cell sum")
    assert dee.duration_s == 31.0
    assert view.versions == [("1.2.0", 4), ("1.1.0", 1), ("?", 1)]
    assert {learner.student: learner.feedback for learner in view.learners}["ada"] == f"feedback/ada/{LAB}.html"
    assert {learner.student: learner.feedback for learner in view.learners}["eve"] is None


def test_the_gradebook_score_wins_and_the_page_says_so(tmp_path):
    view = class_view(write_outputs(tmp_path, gradebook={"bob": 4.0}))
    assert {learner.student: learner.score for learner in view.learners}["bob"] == 4.0
    assert len(view.warnings) == 1 and view.warnings[0].startswith("bob: grades.csv says 4, summary.json 3")


def test_the_page_escapes_learner_text(tmp_path):
    page = write_class_page(write_outputs(tmp_path)).read_text(encoding="utf-8")
    assert HOSTILE not in page
    assert html.escape(f"a cell ran past its limit: {HOSTILE}", quote=False) in page
    assert 'id="score-plot" src="data:image/png;base64,' in page
    assert f'href="feedback/ada/{LAB}.html"' in page


def test_the_csv_files_hold_the_same_data(tmp_path):
    out = write_outputs(tmp_path)
    write_class_page(out)
    learners = read_csv(out / analytics.CSV_FILES["learners"])
    assert [row["student"] for row in learners] == ["ada", "bob", "cy", "dee", "eve", "'=cmd"]
    dee = learners[3]
    assert (dee["score"], dee["duration_s"], dee["lab_version"], dee["flags"]) == (
        "0",
        "31",
        "1.2.0",
        "tampered timeout",
    )
    assert dee["reasons"].startswith("edited test cell sum (restored from the source) | a cell ran past")
    exercises = read_csv(out / analytics.CSV_FILES["exercises"])
    assert [(r["grade_id"], r["mean_points"], r["pass_rate"], r["passed"], r["graded"]) for r in exercises] == [
        ("sum", "0.8", "0.4", "2", "5"),
        ("norm", "1.2", "0.4", "2", "5"),
    ]
    failures = read_csv(out / analytics.CSV_FILES["failures"])
    assert {"grade_id": "sum", "message": rule_message(SCALES), "learners": "2"} in failures
    # a spreadsheet opening the file must not run learner text as a formula
    assert {"grade_id": "norm", "message": '\'=HYPERLINK("http://x")', "learners": "1"} in failures


def test_an_undecodable_learner_id_is_written_escaped(tmp_path):
    students = [{"student": "bad\udcff", "status": "invalid", "score": 0, "max_score": 5, "tests": []}]
    out = write_outputs(tmp_path, students)
    page = write_class_page(out).read_text(encoding="utf-8")
    assert "bad\\udcff" in page


def test_without_matplotlib_the_page_says_how_to_get_the_plot(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    page = write_class_page(write_outputs(tmp_path)).read_text(encoding="utf-8")
    assert "score-plot" not in page and "pip install 'rocmlab[report]'" in page


def test_an_output_folder_without_summary_is_bad_input(tmp_path):
    with pytest.raises(InputError, match="summary.json: not a readable summary"):
        write_class_page(tmp_path)
    (tmp_path / "summary.json").write_text('{"students": 3}', encoding="utf-8")
    with pytest.raises(InputError, match="field students"):
        write_class_page(tmp_path)


def test_grading_errors_are_counted_apart_from_the_rules_learners_broke(tmp_path):
    broken = graded_test("norm", 0, 3, DIRECTION)
    broken["rules"][0]["grading_error"] = True  # the check failed itself: not the learner's rule
    fay = learner("fay", [graded_test("sum", 2, 2), broken])
    fay["checks"] = [{"grade_id": "norm", "name": "direction", "error": "check direction: its setup raised OSError"}]
    out = write_outputs(tmp_path, demo_class() + [fay])
    view = class_view(out)
    assert view.grading_errors == [
        {"student": "fay", "grade_id": "norm", "error": "check direction: its setup raised OSError"}
    ]
    norm = next(e for e in view.exercises if e.grade_id == "norm")
    assert dict(norm.failures)[rule_message(DIRECTION)] == 2  # as without fay
    page = write_class_page(out).read_text(encoding="utf-8")
    assert '<b data-fact="grading-errors">1</b>' in page and "its setup raised OSError" in page
