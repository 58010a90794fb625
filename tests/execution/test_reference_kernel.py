"""The reference kernel (rocmlab.execution.reference_kernel): started once, it runs the solution's
code cells (its visible tests too), takes the run's parameters, answers the harness's requests, and is
kept for every later run with the same key; one that failed is reported, never started again."""

import os

import nbformat
import pytest

from rocmlab.execution.reference_kernel import Kept, solution_cells
from rocmlab.execution.worker import Spec, _start_kernel, kernel_environment
from rocmlab.harness import GradingError, Reference


def _notebook(*cells):
    nb = nbformat.v4.new_notebook()
    for source, metadata in cells:
        nb.cells.append(nbformat.v4.new_code_cell(source, metadata=metadata))
    nb.cells.insert(0, nbformat.v4.new_markdown_cell("# prose is not run"))
    return nb


SOLUTION = _notebook(
    ("import os\nSCALE = 1", {"tags": ["parameters"]}),
    ("def scaled(x):\n    return x * SCALE", {"nbgrader": {"solution": True, "grade": False}}),
    ("_checked = scaled(2)", {"nbgrader": {"grade": True, "solution": False}}),
    ("READY = _checked > 0  # a later cell uses what a test cell defined (lab 07 does)", {}),
)


def _options(tmp_path, nb, key="k1", parameters=None):
    path = tmp_path / f"{key}.ipynb"
    nbformat.write(nb, str(path))
    spec = Spec(input="", output="", cwd=str(tmp_path), parameters={}, cell_timeout_s=30, timeout_s=60)
    return {
        "key": key,
        "notebook": str(path),
        "parameters": parameters or {},
        "spec": spec.__dict__,
        "env": kernel_environment(f"reference-test-{os.getpid()}", {}),
        "cell_timeout_s": 30,
        "timeout_s": 60,
    }


def _start(spec, env):
    return _start_kernel(Spec(**spec), env)


def test_solution_cells_are_every_code_cell_with_the_parameters_after_the_parameters_cell():
    cells = solution_cells(SOLUTION, {"SCALE": 3})
    code = [c.source for c in SOLUTION.cells if c.cell_type == "code"]
    assert cells == [code[0], "SCALE = 3", *code[1:]]


@pytest.fixture
def kept():
    reference = Kept()
    yield reference
    reference.close()


def test_the_reference_runs_the_solution_once_and_is_kept_for_the_same_key(tmp_path, kept):
    options = _options(tmp_path, SOLUTION, parameters={"SCALE": 3})
    reference = Reference(kept.channel_for(options, _start))
    assert reference.eval("scaled(x)", x=7) == 21  # the run's parameters, not the cell's
    assert reference.get("READY") is True
    pid = reference.eval("os.getpid()")
    assert Reference(kept.channel_for(options, _start)).eval("os.getpid()") == pid  # the same kernel
    assert pid in kept.pids
    other = _options(tmp_path, SOLUTION, key="k2")
    assert Reference(kept.channel_for(other, _start)).eval("scaled(2)") == 2  # another key: a new kernel
    assert kept.key == "k2" and pid not in kept.pids


def test_a_reference_that_fails_is_a_grading_error_and_is_not_started_again(tmp_path, kept):
    broken = _notebook(("raise KeyError('no model here')", {}))
    options = _options(tmp_path, broken)
    why = kept.channel_for(options, _start)
    assert isinstance(why, str) and "KeyError" in why and "code cell 0" in why
    assert kept.channel_for(options, lambda *a: pytest.fail("started again")) == why
    with pytest.raises(GradingError, match="no model here"):
        Reference(unavailable=why).eval("1")


def test_what_the_reference_raises_or_lacks_is_the_graders_fault(tmp_path, kept):
    reference = Reference(kept.channel_for(_options(tmp_path, SOLUTION), _start))
    with pytest.raises(GradingError, match="raised ZeroDivisionError"):
        reference.eval("1 / 0")
    with pytest.raises(GradingError, match="no reference kernel"):
        Reference().eval("1")
