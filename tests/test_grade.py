"""Grading units: finding submissions, validation, restoring test cells, hidden failures, feedback."""

import copy
import json

import classroom
import nbformat
import pytest

from rocmlab.build import solution_notebook
from rocmlab.catalog import LabError, discover, select
from rocmlab.grading.cells import (
    INJECTED_TAG,
    NOT_RUN_ENAME,
    VERDICT_ENAME,
    failure_message,
    hidden_lines,
    judge_tests,
    mark_unrun_tests,
    restore_cells,
    seal_tests,
    trusted_names,
    visible_part,
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
from rocmlab.papermill_engine import SEAL_MIME


@pytest.fixture(scope="module")
def lab():
    return select(discover(classroom.COURSE), [classroom.LAB])[0]


@pytest.fixture(scope="module")
def source(lab):
    return solution_notebook(lab, "en")


@pytest.fixture
def student(source):
    """What nbgrader hands out, near enough: hidden tests removed, solutions stubbed."""
    nb = copy.deepcopy(source)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            cell.source = visible_part(cell.source)
        elif meta.get("solution"):
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


def test_untouched_submission_gets_hidden_tests_back_and_no_notes(student, source):
    restored, notes = restore_cells(student, source)
    assert notes == []
    assert "hidden-sum-secret" in cell(restored, "01-grade-sum").source
    assert restored.cells[0].metadata["tags"] == [INJECTED_TAG]
    assert "numpy.testing.assert_allclose" in restored.cells[0].source
    assert restored.cells[-1].metadata["tags"] == [INJECTED_TAG]


def test_edited_test_cell_is_restored_and_noted(student, source):
    cell(student, "01-grade-sum").source = "pass"
    restored, notes = restore_cells(student, source)
    assert cell(restored, "01-grade-sum").source == cell(source, "01-grade-sum").source
    assert notes == ["edited test cell 01-grade-sum (restored from the source)"]


def test_deleted_test_cell_is_put_back_after_its_solution(student, source):
    student.cells.remove(cell(student, "01-grade-sum"))
    restored, notes = restore_cells(student, source, inject=False)
    assert grade_ids(restored) == ["01-grade-sum-sol", "01-grade-sum", "01-grade-norm-sol", "01-grade-norm"]
    assert notes == ["deleted test cell 01-grade-sum (put back from the source)"]


def test_duplicated_test_cell_is_dropped(student, source):
    student.cells.append(copy.deepcopy(cell(student, "01-grade-norm")))
    restored, notes = restore_cells(student, source, inject=False)
    assert grade_ids(restored).count("01-grade-norm") == 1
    assert "duplicated test cell 01-grade-norm" in notes[0]


def test_parameters_are_restored_and_old_injected_parameters_dropped(student, source):
    params = next(c for c in student.cells if "parameters" in c.metadata.get("tags", []))
    params.source = 'PROFILE = "gpu"\nSCALE = 100'
    injected = nbformat.v4.new_code_cell('MODEL = "Qwen/Qwen2.5-7B"')
    injected.metadata["tags"] = ["injected-parameters"]
    student.cells.insert(student.cells.index(params) + 1, injected)
    restored, notes = restore_cells(student, source, inject=False)
    assert notes == []
    assert not any("injected-parameters" in c.metadata.get("tags", []) for c in restored.cells)
    assert 'PROFILE = "smoke"' in next(c for c in restored.cells if "parameters" in c.metadata.get("tags", [])).source


def test_trusted_names_come_from_the_source_tests(source):
    assert trusted_names(source) == ["numpy.testing.assert_allclose"]


# ---------------------------------------------------------------- executed notebooks


def _error(line, ename="AssertionError", evalue="boom"):
    return nbformat.v4.new_output(
        "error",
        ename=ename,
        evalue=evalue,
        traceback=["\x1b[0;31m---\x1b[0m", f"Cell \x1b[0;32mIn[7], line {line}\x1b[0m", "x"],
    )


def test_failure_on_a_visible_line_shows_its_message(source):
    test = copy.deepcopy(cell(source, "01-grade-sum"))
    test.outputs = [_error(2, evalue="should be 3")]
    assert failure_message(test, test) == (False, "AssertionError: should be 3")


def test_failure_inside_the_hidden_block_is_named_without_message(source):
    test = copy.deepcopy(cell(source, "01-grade-sum"))
    test.outputs = [_error(4, evalue="hidden-sum-secret")]
    assert failure_message(test, test) == (True, "")
    test.outputs = [_error(None, evalue="hidden-sum-secret")]
    test.outputs[0].traceback = ["no line number here"]
    assert failure_message(test, test) == (True, "")


def test_a_learners_exception_never_carries_hidden_test_text(source):
    test = copy.deepcopy(cell(source, "01-grade-sum"))
    hidden = "\n".join(hidden_lines(test.source))
    for evalue in (test.source, hidden, "x = 1\n" + hidden.upper().lower(), "A" * 60):
        test.outputs = [_error(2, ename="ValueError", evalue=evalue)]
        hidden_failed, message = failure_message(test, test)
        assert not hidden_failed and message.startswith("ValueError") and "secret" not in message
        assert "not shown" in message
    test.outputs = [_error(2, ename="<script>hidden-sum-secret</script>", evalue="ok")]
    assert failure_message(test, test)[1] == "Error: ok"


def _executed(source, replies: dict, seals: dict, printed: set):
    """The sealed source as a kernel might leave it: each test's reply and whether its seal printed."""
    nb = copy.deepcopy(source)
    for c in nb.cells:
        grade_id = c.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in seals:
            c.metadata["rocmlab"] = {"reply": replies[grade_id]}
            c.metadata["execution"] = {"shell.execute_reply": "2026-01-01T00:00:00Z"}
            if grade_id in printed:
                c.outputs = [nbformat.v4.new_output("display_data", data={SEAL_MIME: seals[grade_id]})]
    return nb


def test_a_test_passes_only_with_an_ok_reply_and_its_seal(source):
    nb = copy.deepcopy(source)
    seals = seal_tests(nb)
    assert set(seals) == {"01-grade-sum", "01-grade-norm"} and len(set(seals.values())) == 2
    assert sum(INJECTED_TAG in c.metadata.get("tags", []) for c in nb.cells) == 2  # a reset before each test
    assert all(seals[g] in cell(nb, g).source.splitlines()[-1] for g in seals)
    cases = [
        ({"01-grade-sum": "ok", "01-grade-norm": "ok"}, {"01-grade-sum", "01-grade-norm"}, set()),
        ({"01-grade-sum": "error", "01-grade-norm": "ok"}, {"01-grade-sum", "01-grade-norm"}, {"01-grade-sum"}),
        ({"01-grade-sum": "ok", "01-grade-norm": "ok"}, {"01-grade-sum"}, {"01-grade-norm"}),
    ]
    for replies, printed, failing in cases:
        executed = _executed(nb, replies, seals, printed)
        judge_tests(executed, seals)
        assert len(executed.cells) == len(source.cells)
        for grade_id in seals:
            test = cell(executed, grade_id)
            assert test.source == cell(source, grade_id).source and "rocmlab" not in test.metadata
            assert not any(SEAL_MIME in (o.get("data") or {}) for o in test.outputs)
            errors = [o for o in test.outputs if o.output_type == "error"]
            assert (errors[0].ename == VERDICT_ENAME) if grade_id in failing else not errors, (replies, printed)


def test_tests_that_never_ran_get_an_error(source):
    nb = copy.deepcopy(source)
    for c in nb.cells:  # papermill says "completed" even for cells after a dead kernel
        c.metadata["papermill"] = {"status": "completed"}
        if "sum" in c.metadata.get("nbgrader", {}).get("grade_id", ""):
            c.metadata["execution"] = {"shell.execute_reply": "2026-01-01T00:00:00Z"}
    assert mark_unrun_tests(nb) == 1
    assert cell(nb, "01-grade-norm").outputs[0].ename == NOT_RUN_ENAME
    assert cell(nb, "01-grade-sum").get("outputs") == []


def test_feedback_names_hidden_failures_in_the_learners_language(lab):
    result = StudentResult("ann", "ann.ipynb", lang="zh", score=2, max_score=5, flags=["tampered"])
    result.tests = [
        GradedTest("01-grade-sum", 2, 2, True),
        GradedTest("01-grade-norm", 3, 0, False, hidden_failed=True, message="hidden-norm-secret"),
    ]
    page = feedback_html(lab, result)
    assert "评分反馈" in page and "隐藏测试未通过" in page and "01-grade-norm" in page
    assert "hidden-norm-secret" not in page and "测试单元被改动" in page
    result.lang = "en"
    assert "a hidden test failed" in feedback_html(lab, result)


def test_trusted_restores_monkeypatched_functions():
    import numpy.testing

    from rocmlab import lab as helpers
    from rocmlab.lab import integrity

    original = numpy.testing.assert_allclose
    integrity.capture(["numpy.testing.assert_allclose"])
    try:
        numpy.testing.assert_allclose = lambda *a, **k: None
        check = helpers.trusted("numpy.testing.assert_allclose")
        assert check is original and numpy.testing.assert_allclose is original
        with pytest.raises(AssertionError):
            check(1.0, 2.0)
        assert "numpy.testing.assert_allclose" in integrity.patched()
    finally:
        numpy.testing.assert_allclose = original
        integrity._PATCHED.clear()


def test_copied_answer_cell_becomes_plain_code_without_a_flag(student, source):
    answer = cell(student, "01-grade-sum-sol")
    student.cells.insert(student.cells.index(answer) + 1, copy.deepcopy(answer))
    restored, notes = restore_cells(student, source, inject=False)
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


def test_feedback_escapes_learner_text(lab):
    result = StudentResult("ann", "ann.ipynb", status="invalid")
    result.tests = [GradedTest("01-grade-sum", 2.0, 0.0, message="<script>alert(1)</script>")]
    result.flag("invalid", "note")
    page = feedback_html(lab, result)
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "This submission could not be graded." in page and "0 / 2" in page
