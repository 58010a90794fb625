"""nbgrader's course folder and gradebook for one lab (its workarounds: ``nbgrader_compat``)."""

from __future__ import annotations

import shutil
from pathlib import Path

from ..course.catalog import Lab
from ..course.notebooks import write_notebook
from ..errors import LabError
from .nbgrader_compat import nbgrader_config, running_nbgrader


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
        from nbgrader.api import Gradebook

        with running_nbgrader(), Gradebook(self.db_url) as gb:
            submission = gb.find_submission(self.lab.id, student)
            grades = {g.name: (g.score, g.max_score) for nb in submission.notebooks for g in nb.grades}
            return submission.score, submission.max_score, grades

    def export_csv(self, path: Path) -> None:
        from nbgrader.api import Gradebook
        from nbgrader.plugins import CsvExportPlugin

        plugin = CsvExportPlugin(to=str(path), assignment=[self.lab.id])
        with running_nbgrader(), Gradebook(self.db_url) as gb:
            plugin.export(gb)


def safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
