"""nbgrader's course folder and gradebook for one lab (its workarounds: ``nbgrader_compat``)."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

from ..course.catalog import Lab
from ..course.notebooks import write_notebook
from ..errors import LabError
from .nbgrader_compat import nbgrader_config, running_nbgrader
from .self_check import is_optional


class Course:
    """nbgrader's course folder and gradebook for one lab; only the main thread calls it."""

    def __init__(self, root: Path, lab: Lab, folder: Path, db_url: str | None):
        from nbconvert.preprocessors import ClearMetadataPreprocessor
        from nbgrader.preprocessors import (
            AssignLatePenalties,
            CheckCellMetadata,
            DeduplicateIds,
            IgnorePattern,
            LimitOutput,
            OverwriteCells,
            OverwriteKernelspec,
            SaveAutoGrades,
        )

        self.lab, self.folder = lab, folder
        self._nbgrader = None
        folder.mkdir(parents=True, exist_ok=True)
        self.db_url = db_url or f"sqlite:///{folder / 'gradebook.db'}"
        self.config = nbgrader_config(root, folder, self.db_url)
        # The notebook was executed in the sandbox: nbgrader must neither clear its outputs nor run it again.
        self.config.Autograde.sanitize_preprocessors = [
            DeduplicateIds,
            OverwriteKernelspec,
            OverwriteCells,
            CheckCellMetadata,
        ]
        self.config.Autograde.autograde_preprocessors = [
            IgnorePattern,
            ClearMetadataPreprocessor,
            LimitOutput,
            SaveAutoGrades,
            AssignLatePenalties,
            CheckCellMetadata,
        ]
        # nbconvert validates the notebook after each of those preprocessors; once, after the last, is enough
        self.config.Exporter.optimistic_validation = True

    def _api(self):
        from nbgrader.apps import NbGraderAPI
        from nbgrader.coursedir import CourseDirectory

        if self._nbgrader is None:
            self._nbgrader = NbGraderAPI(coursedir=CourseDirectory(config=self.config), config=self.config)
        return self._nbgrader

    def create_assignment(self, source_nb) -> None:
        """The gradebook's source assignment: the solution notebook, through generate_assignment."""
        source = self.folder / "source" / self.lab.id
        shutil.rmtree(source, ignore_errors=True)
        write_notebook(source_nb, source / f"{self.lab.id}.ipynb")
        if self.lab.data_dir.is_dir():
            shutil.copytree(self.lab.data_dir, source / "data")
        with running_nbgrader():
            result = self._api().generate_assignment(self.lab.id, force=True, create=True)
        if not result["success"]:
            log = (result.get("log") or "") + (result.get("error") or "")
            raise LabError(
                f"{self.lab.source}: nbgrader generate_assignment into the gradebook failed "
                f"({self.db_url}):\n{log.strip()[-2000:]}"
            )

    def record(self, student: str, executed_nb) -> None:
        """Autograde one executed notebook (or zero an ungradable one) in the gradebook."""
        folder = self.folder / "submitted" / student / self.lab.id
        shutil.rmtree(folder, ignore_errors=True)
        if executed_nb is None:
            self._zero(student)
            return
        write_notebook(executed_nb, folder / f"{self.lab.id}.ipynb")
        with running_nbgrader():
            result = self._api().autograde(self.lab.id, student, force=True, create=True)
        if not result["success"]:
            log = (result.get("log") or "") + (result.get("error") or "")
            raise RuntimeError(f"nbgrader autograde failed for {student}: {log.strip()[-1500:]}")

    def _zero(self, student: str) -> None:
        from nbgrader.api import Gradebook, MissingEntry

        with running_nbgrader(), Gradebook(self.db_url) as gb:
            gb.update_or_create_student(student)
            try:
                gb.remove_submission(self.lab.id, student)
            except MissingEntry:
                pass
            submission = gb.add_submission(self.lab.id, student)
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    grade.auto_score, grade.needs_manual_grade = 0, False
            gb.db.commit()

    def scores(self, student: str) -> tuple[float, float, dict]:
        """The core's score and max score (optional ``-stretch-`` cells excluded: docs/lab-guide.md,
        optional work is graded apart) and every cell's (score, max score), optional ones included."""
        from nbgrader.api import Gradebook

        with running_nbgrader(), Gradebook(self.db_url) as gb:
            submission = gb.find_submission(self.lab.id, student)
            grades = {g.name: (g.score, g.max_score) for nb in submission.notebooks for g in nb.grades}
        score, max_score = core_total(grades)
        return score, max_score, grades

    def export_csv(self, path: Path) -> None:
        """nbgrader's CSV export's columns, with ``score``/``max_score`` the core's and the optional
        cells' points in two more columns (nbgrader's own export sums every cell into one score)."""
        from nbgrader.api import Gradebook, MissingEntry

        with running_nbgrader(), Gradebook(self.db_url) as gb, path.open("w", encoding="utf-8", newline="") as fh:
            assignment = gb.find_assignment(self.lab.id)
            max_grades = {c.name: c.max_score for nb in assignment.notebooks for c in nb.grade_cells}
            writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
            writer.writeheader()
            for student in gb.students:
                row = {
                    "assignment": assignment.name,
                    "duedate": assignment.duedate or "",
                    "student_id": student.id,
                    "last_name": student.last_name or "",
                    "first_name": student.first_name or "",
                    "email": student.email or "",
                }
                try:
                    submission = gb.find_submission(self.lab.id, student.id)
                except MissingEntry:
                    grades, penalty, row["timestamp"] = {k: (0.0, v) for k, v in max_grades.items()}, 0.0, ""
                else:
                    grades = {g.name: (g.score, g.max_score) for nb in submission.notebooks for g in nb.grades}
                    penalty, row["timestamp"] = submission.late_submission_penalty or 0.0, submission.timestamp
                raw, max_score = core_total(grades)
                optional, optional_max = optional_total(grades)
                row |= {
                    "raw_score": raw,
                    "late_submission_penalty": penalty,
                    "score": max(0.0, raw - penalty),
                    "max_score": max_score,
                    "optional_score": optional,
                    "optional_max_score": optional_max,
                }
                writer.writerow(row)


CSV_COLUMNS = [
    "assignment",
    "duedate",
    "timestamp",
    "student_id",
    "last_name",
    "first_name",
    "email",
    "raw_score",
    "late_submission_penalty",
    "score",
    "max_score",
    "optional_score",
    "optional_max_score",
]


def _total(grades: dict, optional: bool) -> tuple[float, float]:
    cells = [v for k, v in grades.items() if is_optional(k) == optional]
    return float(sum(s or 0.0 for s, _ in cells)), float(sum(m or 0.0 for _, m in cells))


def core_total(grades: dict) -> tuple[float, float]:
    """(score, max score) of the graded core: every cell but the optional (``-stretch-``) ones."""
    return _total(grades, optional=False)


def optional_total(grades: dict) -> tuple[float, float]:
    """(score, max score) of the optional (``-stretch-``) cells, graded apart from the core."""
    return _total(grades, optional=True)


def safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
