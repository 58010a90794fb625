"""What an executed notebook shows: the cell a dead kernel stopped, whatever reached the client first."""

import json

import nbformat
import pytest

from rocmlab.execution.outcome import Outcome, inspect_output


def _executed(tmp_path, crash_cell_counted: bool):
    """Three code cells run by papermill; the kernel died in the second. Whether its execution
    count arrived before the death is the race the grader must not depend on."""
    nb = nbformat.v4.new_notebook()
    for source in ("x = 1", "import os; os._exit(1)", "y = 2"):
        nb.cells.append(nbformat.v4.new_code_cell(source))
    first, dying, unreached = nb.cells
    first.execution_count = 1
    first.metadata.update(papermill={"start_time": "t0", "status": "completed"})
    first.metadata.execution = {"shell.execute_reply": "t1"}
    dying.metadata.update(papermill={"start_time": "t2", "status": "completed"})
    dying.execution_count = 2 if crash_cell_counted else None
    unreached.metadata.update(papermill={"start_time": None, "status": "completed"})
    path = tmp_path / f"out-{crash_cell_counted}.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    return inspect_output(Outcome("crashed", 1.0, reason="the kernel died"), path).cells


@pytest.mark.parametrize("counted", [True, False])
def test_the_dead_kernels_cell_gets_the_crash_whether_or_not_its_count_arrived(tmp_path, counted):
    first, dying, unreached = _executed(tmp_path, counted)
    assert first["executed"] and first["error"] is None
    assert dying["executed"] and dying["error"] == {"ename": "crashed", "evalue": "the kernel died"}
    assert not unreached["executed"] and unreached["error"] is None


def test_a_passed_run_marks_no_cell(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1", execution_count=1)])
    nb.cells[0].metadata.update(papermill={"start_time": "t0", "status": "completed"})
    path = tmp_path / "out.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    (cell,) = inspect_output(Outcome("passed", 1.0), path).cells
    assert cell["executed"] and cell["error"] is None
