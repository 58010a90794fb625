"""Two labs' graders open at once in one process, grading at the same time: build --verify's labs
side by side, and the live worker, which keeps up to ``--open-labs`` graders open in one process.
Each grader's nbgrader calls chdir the whole process (``running_nbgrader``: one at a time), and
each has its own sandbox, zygotes and grader users; both classes get what each learner earned,
and the process is left in the folder it was in."""

import os
import threading

import classroom
import pytest

from rocmlab.course.catalog import discover
from rocmlab.grading.grader import ClassGrader
from rocmlab.grading.submissions import find_submissions

pytestmark = pytest.mark.slow


def test_two_labs_graders_open_at_once_in_one_process_grade_both_classes(tmp_path):
    root = classroom.two_lab_course(tmp_path)
    labs = {lab.id: lab for lab in discover(root)}
    expected = {"perfect": 5, "partial": 2}
    for lab_id in labs:
        base = classroom.student_notebook(root, tmp_path, lab_id=lab_id)
        entries = {
            "perfect": (classroom.answer(base, lab=lab_id), 5, set()),
            "partial": (classroom.answer(base, norm_src=classroom.NORM_WRONG, lab=lab_id), 2, set()),
        }
        classroom.write_class(entries, tmp_path / lab_id / "submitted")
    before, scores, failures = os.getcwd(), {}, []
    both_open = threading.Barrier(len(labs), timeout=300)

    def grade(lab_id: str) -> None:
        try:
            submitted = tmp_path / lab_id / "submitted"
            with ClassGrader(root, labs[lab_id], tmp_path / lab_id / "out", extra_hidden=[submitted]) as grader:
                both_open.wait()  # neither grades before both are open
                results = grader.grade(find_submissions(submitted, lab_id), progress=lambda _m: None)
                both_open.wait()  # neither closes before both graded
            scores[lab_id] = {r.student: r.score for r in results}
        except BaseException as exc:  # noqa: BLE001 (reported by the test's thread)
            both_open.abort()
            failures.append((lab_id, exc))

    threads = [threading.Thread(target=grade, args=(lab_id,)) for lab_id in labs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not failures, failures
    assert scores == {lab_id: expected for lab_id in labs}
    assert os.getcwd() == before
