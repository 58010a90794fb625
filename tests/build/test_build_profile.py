"""``rocmlab build --profile NAME --out DIR``: the student notebooks with a profile's parameters."""

import ast

import nbformat
import pytest
from conftest import GOOD_PY, GOOD_TOML
from nbgrader import utils as nbgrader_utils
from nbgrader.validator import Validator

from rocmlab.build.assignments import build, profile_assignments, profile_out
from rocmlab.cli import main
from rocmlab.course.catalog import LabError, discover

GPU_TOML = (
    GOOD_TOML
    + """
[profiles.gpu]
params = {{ SCALE = 7, NAMES = ["a", "b"], RATE = 5e-3, FLAG = true }}
timeout_s = 600
"""
)
GPU_PY_EXTRA = 'NAMES = ["x"]\nRATE = 0.5\nFLAG = False\n'


def gpu_course(make_course, **more):
    py = GOOD_PY.replace("SCALE = 1\n", "SCALE = 1\n" + GPU_PY_EXTRA)
    return make_course({"01-demo": (GPU_TOML.format(id="01-demo"), py), **more})


def notebook(out, lab_id="01-demo", lang="en"):
    return nbformat.read(out / lang / lab_id / f"{lab_id}.ipynb", as_version=4)


def parameters_cell(nb):
    [cell] = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    return cell


def run_cell(source: str) -> dict:
    """The values a parameters cell assigns (the last assignment of a name wins, as when it runs)."""
    return {
        target.id: ast.literal_eval(node.value)
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign)
        for target in node.targets
    }


def test_the_parameters_cell_sets_the_profiles_values_after_the_defaults(make_course, tmp_path):
    root = gpu_course(make_course)
    build(root, discover(root), ["en", "zh"], tmp_path / "gpu", progress=lambda _m: None, profile="gpu")
    for lang in ("en", "zh"):
        nb = notebook(tmp_path / "gpu", lang=lang)
        cell = parameters_cell(nb)
        values = run_cell(cell.source)
        assert (values["SCALE"], values["NAMES"], values["RATE"], values["FLAG"]) == (7, ["a", "b"], 5e-3, True)
        assert values["PROFILE"] == "gpu" and values["SEED"] == 0
        defaults, _, injected = cell.source.partition("\n\n# Parameters of the gpu profile")
        assert run_cell(defaults)["SCALE"] == 1, "the smoke defaults stay above the profile's values"
        assert "solutions/01-demo/lab.toml [profiles.gpu]" in injected
        assert cell.metadata == {"tags": ["parameters"]}
        assert nb.metadata["rocmlab"]["profile"] == "gpu"


def test_graded_cells_are_those_of_the_smoke_build_and_nbgrader_accepts_the_edit(make_course, tmp_path):
    root = gpu_course(make_course)
    labs = discover(root)
    build(root, labs, ["en"], tmp_path / "smoke", progress=lambda _m: None)
    build(root, labs, ["en"], tmp_path / "gpu", progress=lambda _m: None, profile="gpu")
    smoke, gpu = notebook(tmp_path / "smoke"), notebook(tmp_path / "gpu")
    assert len(smoke.cells) == len(gpu.cells)
    for before, after in zip(smoke.cells, gpu.cells):
        if "parameters" in before.metadata.get("tags", []):
            assert before.source != after.source
        else:
            assert (before.source, before.metadata) == (after.source, after.metadata)
    assert not nbgrader_utils.is_locked(parameters_cell(gpu)) and not nbgrader_utils.is_grade(parameters_cell(gpu))
    # nbgrader's check for edited locked or graded cells finds nothing, in the profile build and in a
    # smoke notebook whose parameters cell a learner replaced with the gpu one.
    assert Validator()._get_changed_cells(gpu) == []
    parameters_cell(smoke).source = parameters_cell(gpu).source
    assert Validator()._get_changed_cells(smoke) == []


def test_a_lab_without_the_profile_is_skipped_and_the_others_built(make_course, tmp_path):
    root = gpu_course(make_course, **{"02-smoke-only": (None, None)})
    messages = []
    built = build(root, discover(root), ["en"], tmp_path / "gpu", progress=messages.append, profile="gpu")
    assert [p.name for p in built] == ["01-demo"]
    assert not (tmp_path / "gpu" / "en" / "02-smoke-only").exists()
    skipped = [m for m in messages if m.startswith("skip")]
    assert len(skipped) == 1 and "02-smoke-only" in skipped[0] and "[profiles.gpu]" in skipped[0]


def test_a_value_python_cannot_write_is_named(make_course):
    toml = GPU_TOML.replace("FLAG = true", "FLAG = 1979-05-27")
    root = make_course({"01-demo": (toml.format(id="01-demo"), None)})
    [lab] = discover(root)
    with pytest.raises(LabError, match=r"profiles\.gpu\.params\.FLAG"):
        profile_assignments(lab, "gpu")


def test_labs_and_check_and_verify_are_refused(tmp_path):
    with pytest.raises(LabError, match="--out"):
        profile_out(tmp_path, None)
    for out in (tmp_path / "labs", tmp_path / "labs" / "gpu"):
        with pytest.raises(LabError, match="smoke build"):
            profile_out(tmp_path, str(out))
    for flag in ("check", "verify"):
        with pytest.raises(LabError, match=f"--{flag}"):
            profile_out(tmp_path, str(tmp_path / "gpu"), **{flag: True})
    assert profile_out(tmp_path, str(tmp_path / "gpu")) == tmp_path / "gpu"


def test_the_command_refuses_labs_and_builds_elsewhere(make_course, tmp_path, capsys):
    root = gpu_course(make_course, **{"02-smoke-only": (None, None)})
    assert main(["--root", str(root), "build", "--profile", "gpu"]) == 2
    assert main(["--root", str(root), "build", "--profile", "gpu", "--out", str(root / "labs")]) == 2
    assert main(["--root", str(root), "build", "--profile", "gpu", "--check", "--out", str(tmp_path / "x")]) == 2
    assert "smoke build" in capsys.readouterr().err
    assert not (root / "labs").exists() and not (tmp_path / "x").exists()
    assert main(["--root", str(root), "build", "--profile", "gpu", "--lang", "en", "--out", str(tmp_path / "gpu")]) == 0
    out = capsys.readouterr()
    assert "built 1 notebook folder(s)" in out.out
    assert "skip   02-smoke-only" in out.err
    assert run_cell(parameters_cell(notebook(tmp_path / "gpu")).source)["SCALE"] == 7
