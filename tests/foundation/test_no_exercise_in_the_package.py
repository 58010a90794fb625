"""The rocmlab package is importable in the learner's kernel (lab 01 runs `python -m rocmlab.doctor`
there; the harness's kernel side imports it), so no module of it may hold a function or class that
a lab's exercise asks the learner to write: a learner would import it and rebuild the answer.

The exercises' names are those defined in each lab's solution cells (solutions/<lab>/lab.py, cells
tagged "solution"); the package's are every module's top-level bindings (definitions, assignments,
imports), read without importing it. Methods are left out: ``Slice.bandwidth()`` is not lab 04's
``bandwidth(op, size_bytes, seconds, world_size)``."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
from labsource import LabSource, as_code

import rocmlab

PACKAGE = Path(rocmlab.__file__).parent
LAB_IDS = sorted(p.parent.name for p in (Path(__file__).resolve().parents[2] / "solutions").glob("*/lab.py"))


def exercise_names(lab_id: str) -> set[str]:
    names = set()
    for cell in LabSource(lab_id).tagged("solution"):
        tree = ast.parse(as_code(cell.source))  # a cell's IPython magics as comments
        names |= {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    return names


def top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def package_bindings() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in top_level_names(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            found.setdefault(name, []).append(str(path.relative_to(PACKAGE.parent)))
    return found


def test_every_lab_has_exercises_to_compare():
    assert len(LAB_IDS) == 10 and all(exercise_names(lab) for lab in LAB_IDS)
    assert "parse_rocminfo" in exercise_names("01-rocm-setup")


@pytest.mark.parametrize("lab_id", LAB_IDS)
def test_no_module_of_the_package_binds_an_exercise_name(lab_id):
    bound = package_bindings()
    clashes = {name: bound[name] for name in sorted(exercise_names(lab_id)) if name in bound}
    assert not clashes, f"{lab_id}: the importable package binds exercise names: {clashes}"


def test_lab_01s_rocminfo_parser_is_not_importable():
    for module in ("rocmlab.probes", "rocmlab.doctor", "rocmlab.doctor.facts", "rocmlab.doctor.checks_gpu"):
        assert not hasattr(importlib.import_module(module), "parse_rocminfo"), module


def test_the_scan_sees_every_kind_of_binding():
    tree = ast.parse(
        "import a.b\nfrom c import d as triage\ndef parse_rocminfo(t): pass\nclass BM25: pass\n"
        "roofline = None\nx, (perplexity, y) = 1, (2, 3)\nclass K:\n    def bandwidth(self): pass\n"
    )
    assert top_level_names(tree) == {"a", "triage", "parse_rocminfo", "BM25", "roofline", "x", "perplexity", "y", "K"}
