"""nbgrader's course folder and gradebook: every workaround around nbgrader lives here.

The workarounds reach into nbgrader's internals (``nbgrader.api.create_engine``,
``get_alembic_version``), so they apply only to the nbgrader series they were written for
(``WORKAROUNDS_FOR``); with another version nbgrader runs as it ships, slower but correct.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import shutil
import warnings
from pathlib import Path

from ..build import nbgrader_config, write_notebook
from ..catalog import Lab
from ..errors import LabError

WORKAROUNDS_FOR = (0, 9)  # nbgrader major, minor


@functools.cache
def workarounds_apply() -> bool:
    from importlib.metadata import version

    try:
        return tuple(int(part) for part in version("nbgrader").split(".")[:2]) == WORKAROUNDS_FOR
    except ValueError:
        return False


@functools.cache
def _alembic_head() -> str:
    import nbgrader
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(Path(nbgrader.__file__).parent / "alembic")).get_current_head()


def alembic_head_in_process() -> None:
    """nbgrader asks a subprocess (`alembic heads`) for the schema head of every new gradebook;
    the answer is a constant of the installed nbgrader, so read it once, in process."""
    if not workarounds_apply():
        return
    import nbgrader.api

    nbgrader.api.get_alembic_version = _alembic_head


def _fast_sqlite_commits() -> None:
    """WAL journal and synchronous=NORMAL for sqlite gradebooks: nbgrader commits about 30 times per
    notebook, and each fsync of the default journal costs more than the grading itself. A crash can
    lose the last grades written (a re-run restores them), never corrupt the file."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    if not event.contains(Engine, "connect", _sqlite_pragmas):
        event.listen(Engine, "connect", _sqlite_pragmas)


@contextlib.contextmanager
def shared_gradebook_engines():
    """nbgrader opens a new Gradebook about ten times per autograded notebook, each with a new
    engine, a check of every table and a dispose of the engine's connections; within one grading
    run they share one engine per database, kept connected, and the tables are checked once."""
    if not workarounds_apply():
        yield
        return
    import nbgrader.api

    original, engines, checked = nbgrader.api.create_engine, {}, set()
    metadata = nbgrader.api.Base.metadata

    def create_engine(url, **kwargs):
        if url not in engines:
            engines[url] = original(url, **kwargs)
            engines[url].dispose = lambda *args, **kw: None  # Gradebook.close: the run closes it at its end
        return engines[url]

    def create_all(bind=None, **kwargs):
        if bind not in checked:
            type(metadata).create_all(metadata, bind=bind, **kwargs)
            checked.add(bind)

    nbgrader.api.create_engine, metadata.create_all = create_engine, create_all
    try:
        yield
    finally:
        nbgrader.api.create_engine = original
        del metadata.create_all
        for engine in engines.values():
            del engine.dispose
            engine.dispose()


def _sqlite_pragmas(connection, _record) -> None:
    if type(connection).__module__.startswith("sqlite3"):
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()


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
        logging.getLogger("traitlets").setLevel(logging.ERROR)
        if self.db_url.startswith("sqlite") and workarounds_apply():
            _fast_sqlite_commits()
        warnings.filterwarnings("ignore", module="nbgrader")  # its own SQLAlchemy session warnings

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
        result = self._api().autograde(self.lab.id, student, force=True, create=True)
        if not result["success"]:
            log = (result.get("log") or "") + (result.get("error") or "")
            raise RuntimeError(f"nbgrader autograde failed for {student}: {log.strip()[-1500:]}")

    def _zero(self, student: str) -> None:
        from nbgrader.api import Gradebook, MissingEntry

        with Gradebook(self.db_url) as gb:
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

        with Gradebook(self.db_url) as gb:
            submission = gb.find_submission(self.lab.id, student)
            grades = {g.name: (g.score, g.max_score) for nb in submission.notebooks for g in nb.grades}
            return submission.score, submission.max_score, grades

    def export_csv(self, path: Path) -> None:
        from nbgrader.api import Gradebook
        from nbgrader.plugins import CsvExportPlugin

        plugin = CsvExportPlugin(to=str(path), assignment=[self.lab.id])
        with Gradebook(self.db_url) as gb:
            plugin.export(gb)


def safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
