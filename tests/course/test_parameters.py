"""One reader of a lab's parameters cell (course/parameters.py) for the harness and for ``rocmlab check``."""

import pytest

from rocmlab.course.catalog import discover
from rocmlab.course.notebooks import solution_notebook
from rocmlab.course.parameters import lab_py_parameters, literal_assignments, notebook_parameters
from rocmlab.errors import LabError
from rocmlab.harness import lab_parameters
from rocmlab.root import find_root

LABS = discover(find_root())


@pytest.mark.parametrize("lab", LABS, ids=[lab.id for lab in LABS])
def test_the_lab_source_and_its_notebook_give_the_same_parameters(lab):
    """What the checks read (PARAMETERS) is what a downloaded notebook's own cell says."""
    from_source = lab_parameters(lab.checks)
    assert from_source, f"{lab.id}: no literal parameter read"
    for lang in ("zh", "en"):
        assert notebook_parameters(solution_notebook(lab, lang)) == from_source, f"{lab.id} [{lang}]"


def test_only_literal_assignments_count():
    assert literal_assignments("A = 1\nB = [1, 'x']\nC = len('ab')\nD, E = 1, 2\nF: int = 3\n") == {
        "A": 1,
        "B": [1, "x"],
    }


def test_an_unreadable_parameters_cell_names_the_file(tmp_path):
    lab_py = tmp_path / "lab.py"
    lab_py.write_text('# %% tags=["parameters"]\nPROFILE = (\n', encoding="utf-8")
    with pytest.raises(LabError, match=r"lab\.py: cannot read the parameters cell"):
        lab_py_parameters(lab_py)


def test_injected_parameters_override_the_cell_s_own():
    import nbformat

    own = nbformat.v4.new_code_cell("PROFILE = 'gpu'\nN = 8", metadata={"tags": ["parameters"]})
    injected = nbformat.v4.new_code_cell("PROFILE = 'smoke'", metadata={"tags": ["injected-parameters"]})
    nb = nbformat.v4.new_notebook(cells=[own, injected])
    assert notebook_parameters(nb) == {"PROFILE": "smoke", "N": 8}


LAB_PY = """# %% tags=["parameters"]
SEED = 0

# %%
import torch as TORCH
CATEGORIES = {"matmul": ["aten::mm"]}
CHOICES = ("a", "b")
TWICE = 1
helper_rows = [1, 2]
COMPUTED = len("ab")

# %% tags=["solution"] grade_id="x-sol-1"
JUDGEMENTS = {"A": "batching"}
def answer():
    ### BEGIN SOLUTION
    return 1
    ### END SOLUTION

# %%
TWICE = 2
SEED_COPY = 5
"""


def test_lab_constants_are_the_notebook_s_literal_upper_case_names_bound_once(tmp_path):
    """``LAB_CONSTANTS``: course data the checks read from lab.py. Not the parameters (``PARAMETERS``,
    with the profile's values), not a solution cell's answer, not a name rebound later."""
    from rocmlab.course.parameters import lab_py_constants

    (tmp_path / "lab.py").write_text(LAB_PY)
    assert lab_py_constants(tmp_path / "lab.py") == {
        "CATEGORIES": {"matmul": ["aten::mm"]},
        "CHOICES": ("a", "b"),
        "SEED_COPY": 5,
    }
    (tmp_path / "lab.py").write_text("A = (\n")
    with pytest.raises(LabError, match="lab.py: cannot read its constants"):
        lab_py_constants(tmp_path / "lab.py")
