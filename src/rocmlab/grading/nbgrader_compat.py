"""Everything rocmlab does around nbgrader that nbgrader does not offer: one module, each change scoped.

- ``nbgrader_config``: the course's nbgrader configuration for one run's folder and gradebook;
  it changes nothing in the process.
- ``nbgrader_tools``: while nbgrader runs, the tools installed beside this Python are on ``PATH``
  (nbgrader runs ``alembic`` by name), nbgrader's logs are quiet, and, on the nbgrader series the
  workarounds were written for (``WORKAROUNDS_FOR``), the gradebook schema's head is read in
  process instead of from an ``alembic heads`` subprocess per new gradebook, and nbgrader's cell
  metadata schema is checked against its meta-schema once instead of before every graded cell.
- ``shared_gradebook_engines``: within one grading run, one kept-open engine per database, the
  tables checked once, sqlite gradebooks committed with a WAL journal (those engines only).

Each is a context manager: the first of nested or concurrent users applies the change, the last
one out undoes it, so the process is as it was once no build or grading run is inside one. The
workarounds reach into nbgrader's internals (``nbgrader.api.create_engine``,
``get_alembic_version``); with another nbgrader version nbgrader runs as it ships, slower but correct.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

CONFIG_FILE = Path("autograder") / "nbgrader_config.py"
WORKAROUNDS_FOR = (0, 9)  # nbgrader major, minor


@functools.cache
def workarounds_apply() -> bool:
    from importlib.metadata import version

    try:
        return tuple(int(part) for part in version("nbgrader").split(".")[:2]) == WORKAROUNDS_FOR
    except ValueError:
        return False


def nbgrader_config(root: Path, course: Path, db_url: str | None = None):
    """The course's nbgrader config (``autograder/nbgrader_config.py``) with this run's folder and gradebook."""
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    config = Config()
    config_file = root / CONFIG_FILE
    if config_file.is_file():
        config.merge(PyFileConfigLoader(config_file.name, path=str(config_file.parent)).load_config())
    config.CourseDirectory.root = str(course)
    config.CourseDirectory.db_url = db_url or f"sqlite:///{course / 'gradebook.db'}"
    return config


class _SharedChange:
    """A change to the process, applied by the first of its nested or concurrent users and undone by
    the last: ``apply`` makes the change and returns the function that undoes it."""

    def __init__(self, apply: Callable[[], Callable[[], None]]):
        self._apply = apply
        self._lock = threading.Lock()
        self._users = 0
        self._undo: Callable[[], None] | None = None

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._users == 0:
                self._undo = self._apply()
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0:
                    undo, self._undo = self._undo, None
                    undo()


def _apply_tools() -> Callable[[], None]:
    undo = [_interpreter_bin_on_path(), _quiet_traitlets()]
    if workarounds_apply():
        undo += [_alembic_head_in_process(), _metadata_schema_checked_once()]

    def undo_all() -> None:
        for step in reversed(undo):
            step()

    return undo_all


def _interpreter_bin_on_path() -> Callable[[], None]:
    """nbgrader runs ``alembic`` by name: make the tools installed beside this Python findable."""
    before = os.environ.get("PATH")
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir in (before or "").split(os.pathsep):
        return lambda: None
    os.environ["PATH"] = bin_dir + (os.pathsep + before if before else "")

    def undo() -> None:
        if before is None:
            os.environ.pop("PATH", None)
        else:
            os.environ["PATH"] = before

    return undo


def _quiet_traitlets() -> Callable[[], None]:
    logger = logging.getLogger("traitlets")
    level = logger.level
    logger.setLevel(logging.ERROR)
    return lambda: logger.setLevel(level)


@functools.cache
def _alembic_head() -> str:
    import nbgrader
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(Path(nbgrader.__file__).parent / "alembic")).get_current_head()


def _alembic_head_in_process() -> Callable[[], None]:
    """nbgrader asks a subprocess (`alembic heads`) for the schema head of every new gradebook;
    the answer is a constant of the installed nbgrader, so read it once, in process."""
    import nbgrader.api

    original = nbgrader.api.get_alembic_version
    nbgrader.api.get_alembic_version = _alembic_head

    def undo() -> None:
        nbgrader.api.get_alembic_version = original

    return undo


def _metadata_schema_checked_once() -> Callable[[], None]:
    """nbgrader checks each graded cell's ``nbgrader`` metadata with ``jsonschema.validate``, which
    first checks the schema itself against jsonschema's meta-schema, in several passes per notebook
    (lab 01: 38 ms a pass, 3 ms without). The schema is a file of the installed nbgrader, one per
    schema version: check it once, then each cell against it as before (the same errors, the same
    best match)."""
    import jsonschema
    from nbgrader.nbgraderformat import common

    validator_class = common.BaseMetadataValidator
    original = validator_class.validate_cell
    checked: dict = {}  # schema version -> its validator
    lock = threading.Lock()

    def validate_cell(self, cell) -> None:
        if "nbgrader" not in cell.metadata:
            return
        if cell.metadata["nbgrader"].get("schema_version", 0) != self.schema_version:
            return original(self, cell)  # nbgrader's own error for a schema too old or too new
        with lock:
            if self.schema_version not in checked:
                cls = jsonschema.validators.validator_for(self.schema)
                cls.check_schema(self.schema)
                checked[self.schema_version] = cls(self.schema)
            validator = checked[self.schema_version]
        error = jsonschema.exceptions.best_match(validator.iter_errors(cell.metadata["nbgrader"]))
        if error is not None:
            raise error
        return None

    validator_class.validate_cell = validate_cell

    def undo() -> None:
        validator_class.validate_cell = original

    return undo


nbgrader_tools = _SharedChange(_apply_tools)
nbgrader_tools.__doc__ = (
    "While nbgrader runs: its tools on PATH, its logs quiet, its schema head read in process, its "
    "metadata schema checked once."
)


def _apply_shared_engines() -> Callable[[], None]:
    """nbgrader opens a new Gradebook about ten times per autograded notebook, each with a new
    engine, a check of every table and a dispose of the engine's connections; within one grading
    run they share one engine per database, kept connected, and the tables are checked once."""
    import nbgrader.api

    original, engines, checked = nbgrader.api.create_engine, {}, set()
    metadata = nbgrader.api.Base.metadata

    def create_engine(url, **kwargs):
        if url not in engines:
            engine = original(url, **kwargs)
            engine.dispose = lambda *args, **kw: None  # Gradebook.close: the run closes it at its end
            if engine.dialect.name == "sqlite":
                _fast_sqlite_commits(engine)
            engines[url] = engine
        return engines[url]

    def create_all(bind=None, **kwargs):
        if bind not in checked:
            type(metadata).create_all(metadata, bind=bind, **kwargs)
            checked.add(bind)

    nbgrader.api.create_engine, metadata.create_all = create_engine, create_all

    def undo() -> None:
        nbgrader.api.create_engine = original
        del metadata.create_all
        for engine in engines.values():
            del engine.dispose
            engine.dispose()

    return undo


def _fast_sqlite_commits(engine) -> None:
    """WAL journal and synchronous=NORMAL for this sqlite gradebook's connections: nbgrader commits
    about 30 times per notebook, and each fsync of the default journal costs more than the grading
    itself. A crash can lose the last grades written (a re-run restores them), never corrupt the file."""
    from sqlalchemy import event

    event.listen(engine, "connect", _sqlite_pragmas)


def _sqlite_pragmas(connection, _record) -> None:
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


_shared_engines = _SharedChange(_apply_shared_engines)


@contextlib.contextmanager
def shared_gradebook_engines() -> Iterator[None]:
    """One grading run's gradebook engines shared and kept open, with ``nbgrader_tools``; both undone after."""
    with nbgrader_tools():
        if not workarounds_apply():
            yield
            return
        with _shared_engines():
            yield


# nbgrader changes the whole process while it runs: its converters (generate_assignment, autograde)
# chdir into the course folder and back (nbgrader/converters/base.py, ``BaseConverter.start``), and
# ``warnings.catch_warnings`` swaps the process's filters. Two graders' calls at once in one process
# (build --verify's labs, the live worker's open graders) returned each other's folder, or one
# already deleted (FileNotFoundError: generate_assignment failed), so one call at a time.
_ONE_CALL_AT_A_TIME = threading.RLock()


@contextlib.contextmanager
def running_nbgrader() -> Iterator[None]:
    """Around one call into nbgrader, one such call in the process at a time: ``nbgrader_tools``,
    and nbgrader's own SQLAlchemy session warnings silenced."""
    with _ONE_CALL_AT_A_TIME, nbgrader_tools(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", module="nbgrader")
        yield
