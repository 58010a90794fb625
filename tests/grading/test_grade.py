"""Grading units: finding submissions, validation, restoring test cells, the harness's scores, feedback."""

import copy
import json

import classroom
import nbformat
import pytest

from rocmlab.course.catalog import LabError, discover, select
from rocmlab.course.notebooks import solution_notebook
from rocmlab.grading.cells import (
    NOT_RUN_ENAME,
    cell_points,
    check_results,
    mark_unrun_tests,
    restore_cells,
    score_tests,
    shown_message,
)
from rocmlab.grading.feedback import feedback_html, stage_feedback
from rocmlab.grading.submissions import (
    GradedTest,
    StudentResult,
    Submission,
    find_submissions,
    load_submission,
    valid_id,
)
from rocmlab.harness import lab_checks


@pytest.fixture(scope="module")
def lab():
    return select(discover(classroom.COURSE), [classroom.LAB])[0]


@pytest.fixture(scope="module")
def source(lab):
    return solution_notebook(lab, "en")


@pytest.fixture
def student(source):
    """What nbgrader hands out, near enough: solutions stubbed."""
    nb = copy.deepcopy(source)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution") and not cell.metadata["nbgrader"].get("grade"):
            cell.source = "raise NotImplementedError()"
    return nb


def grade_ids(nb):
    return [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells if c.metadata.get("nbgrader")]


def cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


# ---------------------------------------------------------------- finding submissions


def test_finds_nbgrader_layout_and_flat_files(tmp_path):
    (tmp_path / "submitted" / "ann" / "01-grade").mkdir(parents=True)
    (tmp_path / "submitted" / "ann" / "01-grade" / "01-grade.ipynb").write_text("{}")
    (tmp_path / "submitted" / "bob" / "02-other").mkdir(parents=True)
    (tmp_path / "submitted" / "bob" / "02-other" / "x.ipynb").write_text("{}")
    (tmp_path / "submitted" / "cat.ipynb").write_text("{}")
    found = find_submissions(tmp_path, "01-grade")
    assert [(s.student, s.path.name) for s in found] == [("ann", "01-grade.ipynb"), ("cat", "cat.ipynb")]


def test_a_newer_version_delivered_beside_the_old_one_is_graded_when_saved_last(tmp_path):
    import os

    lab = tmp_path / "ann" / "01-grade"
    lab.mkdir(parents=True)
    old, new, other = lab / "01-grade.ipynb", lab / "01-grade.v1.1.0.ipynb", lab / "notes.ipynb"
    for i, path in enumerate((new, other, old)):
        path.write_text("{}")
        os.utime(path, (1000 + i, 1000 + i))
    assert find_submissions(tmp_path, "01-grade")[0].path == old  # went on in the edited notebook
    os.utime(new, (2000, 2000))
    assert find_submissions(tmp_path, "01-grade")[0].path == new  # moved to the new version
    old.unlink()
    new.unlink()
    assert find_submissions(tmp_path, "01-grade")[0].path == other


def test_no_submissions_is_a_clear_error(tmp_path):
    with pytest.raises(LabError, match="no submissions of 01-grade"):
        find_submissions(tmp_path, "01-grade")
    with pytest.raises(LabError, match="no such submissions folder"):
        find_submissions(tmp_path / "missing", "01-grade")


def test_a_learner_in_both_layouts_is_refused(tmp_path):
    (tmp_path / "ann" / "01-grade").mkdir(parents=True)
    (tmp_path / "ann" / "01-grade" / "a.ipynb").write_text("{}")
    (tmp_path / "ann.ipynb").write_text("{}")
    with pytest.raises(LabError, match="also has a submission"):
        find_submissions(tmp_path, "01-grade")


# ---------------------------------------------------------------- validation


def _load(tmp_path, lab, nb_or_text, student="ann"):
    path = tmp_path / f"{student}.ipynb"
    if isinstance(nb_or_text, str):
        path.write_text(nb_or_text)
    else:
        nbformat.write(nb_or_text, str(path))
    result = StudentResult(student, str(path))
    return load_submission(Submission(student, path), lab, result), result


def test_invalid_json_is_flagged_invalid(tmp_path, lab):
    nb, result = _load(tmp_path, lab, '{"cells": [')
    assert nb is None and result.status == "invalid" and result.flags == ["invalid"]
    assert "not a readable notebook" in result.notes[0]


def test_another_labs_notebook_is_flagged(tmp_path, lab, student):
    student.metadata["rocmlab"] = dict(student.metadata["rocmlab"], id="02-other")
    nb, result = _load(tmp_path, lab, student)
    assert nb is None and result.flags == ["wrong_lab"] and "02-other" in result.notes[0]


def test_older_version_is_graded_with_a_warning_newer_is_refused(tmp_path, lab, student):
    student.metadata["rocmlab"] = dict(student.metadata["rocmlab"], version="1.0.3")
    nb, result = _load(tmp_path, lab, student)
    assert nb is not None and result.flags == ["old_version"] and result.status == "graded"
    student.metadata["rocmlab"] = dict(student.metadata["rocmlab"], version="2.0.0")
    nb, result = _load(tmp_path, lab, student)
    assert nb is None and result.flags == ["invalid"] and "2.0.0" in result.notes[0]


def test_notebook_without_course_metadata_is_invalid(tmp_path, lab, student):
    del student.metadata["rocmlab"]
    nb, result = _load(tmp_path, lab, student)
    assert nb is None and "no rocmlab metadata" in result.notes[0]


@pytest.mark.parametrize("bad", ["..bad", "..", "ann\n", "a/b", "caf\udce9", "x" * 65, ""])
def test_unsafe_learner_id_is_invalid(tmp_path, lab, student, bad):
    assert not valid_id(bad)
    path = tmp_path / "sub.ipynb"
    nbformat.write(student, str(path))
    result = StudentResult(bad, str(path))
    assert load_submission(Submission(bad, path), lab, result) is None and "not a valid id" in result.notes[0]
    json.dumps(result.notes, ensure_ascii=False).encode("utf-8")  # printable and storable


def test_a_lone_surrogate_in_the_version_is_stored_escaped(tmp_path, lab, student):
    student.metadata["rocmlab"] = dict(student.metadata["rocmlab"], version="1.0\ud800")
    nb, result = _load(tmp_path, lab, json.dumps(student))  # JSON escapes the lone surrogate
    assert nb is None and result.submitted_version == "1.0\\ud800"
    json.dumps(result.notes + [result.submitted_version], ensure_ascii=False).encode("utf-8")


def test_symlinked_submissions_are_refused(tmp_path, lab, student):
    real = tmp_path / "instructor" / "source.ipynb"
    real.parent.mkdir()
    nbformat.write(student, str(real))
    (tmp_path / "sub" / "ann" / lab.id).mkdir(parents=True)
    (tmp_path / "sub" / "ann" / lab.id / f"{lab.id}.ipynb").symlink_to(real)
    (tmp_path / "sub" / "bob").symlink_to(tmp_path / "sub" / "ann")
    (tmp_path / "sub" / "cat.ipynb").symlink_to(real)
    found = {s.student: s for s in find_submissions(tmp_path / "sub", lab.id)}
    assert set(found) == {"ann", "bob", "cat"}
    for sub in found.values():
        result = StudentResult(sub.student, str(sub.path))
        assert load_submission(sub, lab, result) is None and "symbolic link" in result.notes[0], result.notes


# ---------------------------------------------------------------- restoring cells


def test_untouched_submission_gets_its_test_cells_and_no_notes(student, source):
    restored, notes = restore_cells(student, source)
    assert notes == []
    assert grade_ids(restored) == grade_ids(source)
    assert cell(restored, "01-grade-sum").source == cell(source, "01-grade-sum").source


def test_edited_test_cell_is_restored_and_noted(student, source):
    cell(student, "01-grade-sum").source = "pass"
    restored, notes = restore_cells(student, source)
    assert cell(restored, "01-grade-sum").source == cell(source, "01-grade-sum").source
    assert notes == ["edited test cell 01-grade-sum (restored from the source)"]


def test_deleted_test_cell_is_put_back_after_its_solution(student, source):
    student.cells.remove(cell(student, "01-grade-sum"))
    restored, notes = restore_cells(student, source)
    assert grade_ids(restored) == ["01-grade-sum-sol", "01-grade-sum", "01-grade-norm-sol", "01-grade-norm"]
    assert notes == ["deleted test cell 01-grade-sum (put back from the source)"]


def test_duplicated_test_cell_is_dropped(student, source):
    student.cells.append(copy.deepcopy(cell(student, "01-grade-norm")))
    restored, notes = restore_cells(student, source)
    assert grade_ids(restored).count("01-grade-norm") == 1
    assert "duplicated test cell 01-grade-norm" in notes[0]


def test_parameters_are_restored_and_old_injected_parameters_dropped(student, source):
    params = next(c for c in student.cells if "parameters" in c.metadata.get("tags", []))
    params.source = 'PROFILE = "gpu"\nSCALE = 100'
    injected = nbformat.v4.new_code_cell('MODEL = "Qwen/Qwen2.5-7B"')
    injected.metadata["tags"] = ["injected-parameters"]
    student.cells.insert(student.cells.index(params) + 1, injected)
    restored, notes = restore_cells(student, source)
    assert notes == []
    assert not any("injected-parameters" in c.metadata.get("tags", []) for c in restored.cells)
    assert 'PROFILE = "smoke"' in next(c for c in restored.cells if "parameters" in c.metadata.get("tags", [])).source


# ---------------------------------------------------------------- executed notebooks


def test_a_learners_error_name_is_shown_only_if_it_looks_like_one():
    assert shown_message("ValueError", "\x1b[31mbad\x1b[0m") == "ValueError: bad"
    assert shown_message("<script>x</script>", "ok") == "Error: ok"
    assert len(shown_message("E", "x" * 1000)) < 310


def _results(lab, source, passed: set):
    checks = lab_checks(lab.checks, cell_points(source))
    return [
        {
            "grade_id": c.grade_id,
            "name": c.name,
            "points": c.points if c.name in passed else 0.0,
            "max_points": c.points,
            "rule": c.rule,
            "passed": c.name in passed,
            "detail": "",
        }
        for c in checks
    ]


def test_the_harness_score_is_the_only_result_nbgrader_reads(lab, source):
    from nbgrader.utils import determine_grade

    executed = copy.deepcopy(source)
    for grade_id in ("01-grade-sum", "01-grade-norm"):  # what a learner's kernel printed counts for nothing
        cell(executed, grade_id).outputs = [nbformat.v4.new_output("stream", name="stdout", text="PASSED")]
    score_tests(executed, _results(lab, source, {"scaled_sum_rule"}), "zh")
    assert determine_grade(cell(executed, "01-grade-sum")) == (2.0, 2.0)
    assert determine_grade(cell(executed, "01-grade-norm")) == (0.0, 3.0)
    shown = cell(executed, "01-grade-norm").outputs[0]["data"]["text/plain"]
    assert shown.startswith("✗ normalize 返回") and "PASSED" not in json.dumps(executed)


def test_partial_credit_per_rule(lab, source):
    from nbgrader.utils import determine_grade

    executed = copy.deepcopy(source)
    rules = _results(lab, source, {"scaled_sum_rule"})
    rules.append({**rules[0], "name": "another", "points": 0.0, "max_points": 1.0, "passed": False})
    rules[0] = {**rules[0], "points": 1.0, "max_points": 1.0}
    score_tests(executed, rules, "en")
    assert determine_grade(cell(executed, "01-grade-sum")) == (1.0, 2.0)


def test_when_the_checks_never_ran_every_rule_fails_with_the_reason(lab, source):
    checks = lab_checks(lab.checks, cell_points(source))
    for record in (None, {"checks": []}):
        results = check_results(record, checks, "no check ran: timeout")
        assert [r["passed"] for r in results] == [False, False]
        assert results[0]["detail"] == "no check ran: timeout" and not results[0]["error"]
    broken = check_results({"error": "checks.py: SyntaxError", "checks": []}, checks, "x")  # the grader's fault
    assert [r["passed"] for r in broken] == [False, False] and broken[0]["detail"] == ""
    assert broken[0]["error"] == f"check {checks[0].name}: checks.py: SyntaxError"
    ran = {"checks": [{"passed": True}, {"passed": True}]}
    assert check_results(ran, checks, "x") == ran["checks"]


def test_checks_must_match_the_test_cells(lab, source, tmp_path):
    from rocmlab.errors import LabError

    points = cell_points(source)
    with pytest.raises(LabError, match="01-grade-norm: its checks give 3 points, the cell has 4"):
        lab_checks(lab.checks, {**points, "01-grade-norm": 4.0})
    with pytest.raises(LabError, match="test cell 01-grade-new: no check grades it"):
        lab_checks(lab.checks, {**points, "01-grade-new": 1.0})
    broken = tmp_path / "checks.py"
    broken.write_text("def oops(:\n")
    with pytest.raises(LabError, match="checks.py: the checks do not load: SyntaxError"):
        lab_checks(broken, points)
    with pytest.raises(LabError, match="cannot read the lab's checks"):
        lab_checks(tmp_path / "missing.py", points)


def test_tests_that_never_ran_get_an_error(source):
    nb = copy.deepcopy(source)
    for c in nb.cells:  # papermill says "completed" even for cells after a dead kernel
        c.metadata["papermill"] = {"status": "completed"}
        if "sum" in c.metadata.get("nbgrader", {}).get("grade_id", ""):
            c.metadata["execution"] = {"shell.execute_reply": "2026-01-01T00:00:00Z"}
    assert mark_unrun_tests(nb) == 1
    assert cell(nb, "01-grade-norm").outputs[0].ename == NOT_RUN_ENAME
    assert cell(nb, "01-grade-sum").get("outputs") == []


def test_feedback_names_each_broken_rule_in_the_learners_language(lab):
    rule = {"en": "normalize keeps the direction", "zh": "normalize 保持方向"}
    result = StudentResult("ann", "ann.ipynb", lang="zh", score=2, max_score=5, flags=["tampered"])
    result.tests = [
        GradedTest("01-grade-sum", 2, 2, True),
        GradedTest(
            "01-grade-norm",
            3,
            0,
            False,
            rules=[{"name": "direction", "rule": rule, "points": 0.0, "max_points": 3.0, "passed": False}],
        ),
    ]
    result.checks = [{"detail": "wrong: expected [0.6, 0.8]"}]
    page = feedback_html(lab, result)
    assert "评分反馈" in page and "✗ normalize 保持方向 (0/3)" in page and "01-grade-norm" in page
    assert "expected" not in page and "测试单元被改动" in page
    result.lang = "en"
    assert "✗ normalize keeps the direction" in feedback_html(lab, result)


def test_copied_answer_cell_becomes_plain_code_without_a_flag(student, source):
    answer = cell(student, "01-grade-sum-sol")
    student.cells.insert(student.cells.index(answer) + 1, copy.deepcopy(answer))
    restored, notes = restore_cells(student, source)
    assert notes == [] and grade_ids(restored).count("01-grade-sum-sol") == 1


def test_malformed_cell_is_invalid_not_a_crash(tmp_path, lab):
    text = (
        '{"nbformat": 4, "nbformat_minor": 5, "metadata": {"rocmlab": {"id": "01-grade", "version": "1.1.0"}}, '
        '"cells": [{"id": "c1", "cell_type": "weird", "source": 3, "metadata": {}}]}'
    )
    nb, result = _load(tmp_path, lab, text)
    assert nb is None and result.flags == ["invalid"]


def test_feedback_is_staged_beside_the_submission_secret(tmp_path):
    submitted = tmp_path / "course" / "submitted" / "ann" / "01-rocm-setup"
    submitted.mkdir(parents=True)
    (submitted / "timestamp.txt").write_text("2026-11-30 01:00:00 UTC")
    (submitted / "submission_secret.txt").write_text("abc")
    for student in ("ann", "ghost"):
        (tmp_path / "grades" / "feedback" / student).mkdir(parents=True)
        (tmp_path / "grades" / "feedback" / student / "01-rocm-setup.html").write_text(f"<p>{student}</p>")
    assert stage_feedback(tmp_path / "course", "01-rocm-setup", tmp_path / "grades") == ["ann"]
    staged = tmp_path / "course" / "feedback" / "ann" / "01-rocm-setup"
    assert sorted(p.name for p in staged.iterdir()) == ["01-rocm-setup.html", "submission_secret.txt", "timestamp.txt"]


def test_feedback_escapes_what_it_shows(lab):
    result = StudentResult("<script>alert(1)</script>", "ann.ipynb", status="invalid")
    rule = {"en": "<b>x</b>", "zh": "x"}
    result.tests = [
        GradedTest("01-grade-sum", 2.0, 0.0, rules=[{"rule": rule, "points": 0, "max_points": 2, "passed": False}])
    ]
    result.flag("invalid", "note")
    page = feedback_html(lab, result)
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;b&gt;x" in page
    assert "This submission could not be graded." in page and "0 / 2" in page


def test_feedback_shows_a_rule_s_learner_safe_detail_and_marks_a_rule_not_counted_yet(lab):
    """Issue 53: "which format failed" is safe to show; the rest of a check's message (inputs, values) is not. An error
    rule that does not count yet (no value rule of its cell passed) is not a ✗."""
    from rocmlab.harness import ERRORS_ALONE

    rule = {"en": "decode_fp8 returns every finite byte's value", "zh": "decode_fp8 返回每个有限字节的值"}
    errors = {"en": "raises ValueError for a bad byte", "zh": "坏字节抛出 ValueError"}
    result = StudentResult("ann", "ann.ipynb", lang="en", score=0, max_score=3)
    shown = "wrong: [[learner: format e4m3fnuz]] 0x7F: 480.0, want 240.0"
    forged = "wrong: 0x7F: '[[learner: full marks]]', want 240.0"  # learner text later in the message: not shown
    result.tests = [
        GradedTest(
            "01-grade-norm",
            3,
            0,
            False,
            rules=[
                {"rule": rule, "points": 0.0, "max_points": 1.0, "passed": False, "detail": shown},
                {"rule": rule, "points": 0.0, "max_points": 1.0, "passed": False, "detail": forged},
                {"rule": errors, "points": 0.0, "max_points": 1.0, "passed": False, "detail": ERRORS_ALONE},
            ],
        )
    ]
    page = feedback_html(lab, result)
    assert "format e4m3fnuz" in page and "480" not in page and "240" not in page and "full marks" not in page
    assert "– raises ValueError for a bad byte (0/1) · <i>not counted yet" in page
    assert page.count("✗") == 2


def test_feedback_shows_a_bilingual_detail_in_the_notebook_s_language(lab):
    from rocmlab.check_compare import learner_says

    rule = {"en": "scale has the lab's shape", "zh": "scale 的形状与实验要求一致"}
    detail = "wrong: " + learner_says("shape (2,), expected (3,)", "形状为 (2,)，应为 (3,)") + "scale: wrong shape"
    for lang, shown, hidden in (
        ("zh", "形状为 (2,)，应为 (3,)", "expected"),
        ("en", "shape (2,), expected (3,)", "形状"),
    ):
        result = StudentResult("ann", "ann.ipynb", lang=lang, score=0, max_score=1)
        result.tests = [
            GradedTest(
                "01-grade-norm",
                1,
                0,
                False,
                rules=[{"rule": rule, "points": 0.0, "max_points": 1.0, "passed": False, "detail": detail}],
            )
        ]
        page = feedback_html(lab, result)
        assert shown in page and hidden not in page and "wrong shape" not in page


def test_feedback_labels_optional_exercises_and_scores_the_core_apart(lab):
    result = StudentResult("ann", "ann.ipynb", lang="en", score=3, max_score=6)
    result.tests = [GradedTest("01-grade-sum", 3, 3, True), GradedTest("01-stretch-x-1", 3, 0, False)]
    page = feedback_html(lab, result)
    assert "<code>01-stretch-x-1</code> (optional)" in page and "(core 3 / 3; optional 0 / 3)" in page


def test_a_check_whose_setup_raises_is_a_grading_error_for_the_instructor_and_no_broken_rule(lab, source):
    """Issue 47: an exception in a check's own setup is the grader's failure, never a ✗ rule."""
    from rocmlab.grading import grader
    from rocmlab.harness import Learner, load_checks, run_checks
    from rocmlab.lab.answers import evaluate

    class Channel:
        def ask(self, request):
            return evaluate(request, {"scaled_sum": lambda xs, scale: sum(xs) * scale})

    text = lab.checks.read_text(encoding="utf-8")
    name = lab_checks(lab.checks, cell_points(source))[0].name
    text = text.replace(
        f"def {name}(learner, variant):\n", f"def {name}(learner, variant):\n    open('/nonexistent/ref')\n"
    )
    records = run_checks(load_checks(text, str(lab.checks)), Learner(Channel()), seed=1)
    checks = [{**vars(r), "passed": r.passed} for r in records]
    assert checks[0]["error"].startswith(f"check {name}: its setup raised FileNotFoundError")

    executed = copy.deepcopy(source)
    score_tests(executed, checks, "en")
    shown = cell(executed, checks[0]["grade_id"]).outputs[0]["data"]["text/plain"]
    assert shown.startswith("⚠ ") and "✗" not in shown.splitlines()[0]

    result = StudentResult("ann", "ann.ipynb", lang="en", score=0, max_score=5)
    result.checks = checks
    plan = grader.Plan(None, lab, None, None, {"en": source}, [])
    grader.fill_tests(plan, result, {})
    page = feedback_html(lab, result)
    rule = checks[0]["rule"]["en"]
    assert f"✗ {rule}" not in page and f"⚠ {rule}" in page and "not graded" in page
    assert "FileNotFoundError" not in page and "nonexistent" not in page
    assert rule not in next(t for t in result.tests if t.grade_id == checks[0]["grade_id"]).message
    assert grader.grading_errors([result]) == [
        {"student": "ann", "grade_id": checks[0]["grade_id"], "check": name, "error": checks[0]["error"]}
    ]
