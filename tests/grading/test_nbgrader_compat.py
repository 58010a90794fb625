"""rocmlab's changes around nbgrader hold only while a build or grading run is inside them."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import jsonschema
import nbformat
import nbgrader.api
import pytest
from nbgrader.nbgraderformat import MetadataValidator
from nbgrader.nbgraderformat.common import BaseMetadataValidator, SchemaTooOldError
from sqlalchemy import event

from rocmlab.grading import nbgrader_compat
from rocmlab.grading.nbgrader_compat import (
    nbgrader_config,
    nbgrader_tools,
    running_nbgrader,
    shared_gradebook_engines,
    workarounds_apply,
)


def process_state() -> dict:
    metadata = nbgrader.api.Base.metadata
    return {
        "PATH": os.environ.get("PATH"),
        "get_alembic_version": nbgrader.api.get_alembic_version,
        "create_engine": nbgrader.api.create_engine,
        "create_all": metadata.__dict__.get("create_all"),
        "validate_cell": BaseMetadataValidator.validate_cell,
        "traitlets level": logging.getLogger("traitlets").level,
        "warning filters": list(warnings.filters),
    }


@pytest.fixture
def without_interpreter_bin(monkeypatch):
    """PATH without the folder of this Python, so that putting it there is a change to undo."""
    bin_dir = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != bin_dir))
    return bin_dir


def test_the_workarounds_are_for_the_installed_nbgrader():
    """Written for 0.9: when nbgrader moves on, this says the workarounds are off and need a look."""
    assert workarounds_apply()


def test_the_tools_change_the_process_only_inside(without_interpreter_bin):
    before = process_state()
    with nbgrader_tools():
        assert os.environ["PATH"].split(os.pathsep)[0] == without_interpreter_bin
        assert nbgrader.api.get_alembic_version is not before["get_alembic_version"]
        assert logging.getLogger("traitlets").level == logging.ERROR
    assert process_state() == before


def test_grading_run_changes_are_undone_and_no_listener_stays(tmp_path, without_interpreter_bin):
    before = process_state()
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with shared_gradebook_engines(), running_nbgrader():
        with nbgrader.api.Gradebook(url) as gradebook:
            gradebook.update_or_create_student("ada")
            engine = gradebook.engine
        assert nbgrader.api.Gradebook(url).engine is engine  # shared within the run
        assert event.contains(engine, "connect", nbgrader_compat._sqlite_pragmas)
        with engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    assert process_state() == before
    from sqlalchemy.engine import Engine

    assert not event.contains(Engine, "connect", nbgrader_compat._sqlite_pragmas)  # never on every engine
    with nbgrader.api.Gradebook(url) as gradebook:
        assert gradebook.engine is not engine


def test_nested_and_concurrent_users_undo_once_the_last_leaves(without_interpreter_bin):
    before = process_state()
    inside, leave = threading.Barrier(3), threading.Event()

    def user():
        with nbgrader_tools():
            inside.wait(timeout=30)
            leave.wait(timeout=30)

    threads = [threading.Thread(target=user) for _ in range(2)]
    for thread in threads:
        thread.start()
    inside.wait(timeout=30)
    with nbgrader_tools():  # a third, nested inside the other two
        pass
    assert nbgrader.api.get_alembic_version is not before["get_alembic_version"]  # the others are still inside
    leave.set()
    for thread in threads:
        thread.join(timeout=30)
    assert process_state() == before


def test_a_failure_inside_still_undoes_the_change(without_interpreter_bin):
    before = process_state()
    with pytest.raises(RuntimeError, match="boom"), shared_gradebook_engines():
        raise RuntimeError("boom")
    assert process_state() == before


def test_the_config_names_the_run_folder_and_gradebook_and_changes_nothing(tmp_path, without_interpreter_bin):
    (tmp_path / "autograder").mkdir()
    (tmp_path / "autograder" / "nbgrader_config.py").write_text("c = get_config()\nc.CourseDirectory.course_id = 'x'\n")
    before = process_state()
    config = nbgrader_config(tmp_path, tmp_path / "course")
    assert config.CourseDirectory.course_id == "x"
    assert config.CourseDirectory.root == str(tmp_path / "course")
    assert config.CourseDirectory.db_url == f"sqlite:///{tmp_path / 'course' / 'gradebook.db'}"
    assert process_state() == before


@pytest.mark.slow
def test_in_process_alembic_head_matches_nbgrader_subprocess(tmp_path):
    from nbgrader.dbutil import _temp_alembic_ini

    alembic = Path(sys.executable).parent / "alembic"
    with _temp_alembic_ini(f"sqlite:///{tmp_path / 'gradebook.db'}") as ini:
        head = subprocess.check_output([str(alembic), "-c", ini, "heads"], timeout=120).decode().split()[0]
    assert nbgrader_compat._alembic_head() == head


def _metadata_error(cell):
    try:
        MetadataValidator().validate_cell(cell)
    except (jsonschema.ValidationError, SchemaTooOldError) as exc:
        return type(exc), str(exc)
    return None


def test_metadata_schema_checked_once_gives_nbgraders_own_verdicts(monkeypatch, without_interpreter_bin):
    if not workarounds_apply():
        pytest.skip("the workarounds are for another nbgrader series")
    meta = {"grade": True, "solution": False, "locked": True, "points": 2, "grade_id": "t1", "schema_version": 3}
    cells = [
        nbformat.v4.new_code_cell("assert True", metadata={"nbgrader": meta}),
        nbformat.v4.new_code_cell("x", metadata={"nbgrader": {**meta, "points": "two"}}),
        nbformat.v4.new_code_cell("x", metadata={"nbgrader": {**meta, "grade_id": 5, "locked": "no"}}),
        nbformat.v4.new_code_cell("x", metadata={"nbgrader": {**meta, "schema_version": 1}}),
        nbformat.v4.new_code_cell("x"),
    ]
    stock = [_metadata_error(cell) for cell in cells]
    assert stock[0] is None and stock[1] and stock[2] and stock[3][0] is SchemaTooOldError
    checks = []
    schema_class = jsonschema.validators.validator_for(MetadataValidator().schema)
    real_check = schema_class.check_schema
    monkeypatch.setattr(schema_class, "check_schema", lambda schema: checks.append(schema) or real_check(schema))
    with nbgrader_tools():
        assert [_metadata_error(cell) for cell in cells * 3] == stock * 3
    assert len(checks) == 1


def test_two_threads_building_two_labs_at_once_leave_the_process_in_its_own_folder(tmp_path, monkeypatch):
    """nbgrader's converters chdir the whole process into their course folder and back
    (nbgrader/converters/base.py, BaseConverter.start). Two at once, held inside that window
    together here, returned into each other's folder, deleted once its build ended: build
    --verify's labs side by side ended with exit status 2 (generate_assignment failed) and, as
    their redirected stderr was never put back, silently. One call into nbgrader at a time: the
    second waits, both builds succeed and the process stays where it was."""
    import classroom
    from nbgrader.converters.base import BaseConverter

    from rocmlab.build.assignments import render_lab
    from rocmlab.course.catalog import discover

    both_inside, first_built = threading.Barrier(2), threading.Event()
    convert = BaseConverter.convert_notebooks

    def convert_together(self):
        try:
            both_inside.wait(timeout=2)
        except threading.BrokenBarrierError:  # the other one waits outside: one at a time
            return convert(self)
        entered_last = os.path.samefile(os.getcwd(), self.coursedir.root)  # the other's chdir came first
        converted = convert(self)
        if entered_last:  # back into the other's folder only after its build removed it
            first_built.wait(timeout=60)
        return converted

    monkeypatch.setattr(BaseConverter, "convert_notebooks", convert_together)
    root = classroom.two_lab_course(tmp_path)
    labs = discover(root)
    before, built, stderr = os.getcwd(), {}, sys.stderr

    def build(lab):
        built[lab.id] = render_lab(root, lab, "en", tmp_path / "release" / lab.id)
        first_built.set()

    threads = [threading.Thread(target=build, args=(lab,)) for lab in labs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(built) == ["01-grade", "02-grade"] and all(path.is_file() for path in built.values())
    assert os.getcwd() == before and sys.stderr is stderr
