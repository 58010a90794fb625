"""One way for the lab tests to read a lab's source and run its cells outside the notebook.

``LabSource("04-collectives-rccl")`` reads ``solutions/<id>/lab.py`` with jupytext (the cells and
their metadata as rocmlab's build sees them) and ``lab.toml`` with rocmlab's own catalog. Its
``run`` executes cell sources in one namespace; ``student`` turns a solution cell into what the
learner gets (nbgrader's stub), ``definitions`` keeps only what a cell defines.
"""

from __future__ import annotations

import ast
import contextlib
import itertools
import linecache
import re
from functools import cached_property
from pathlib import Path

import jupytext

from rocmlab.course.catalog import parse_lab
from rocmlab.course.source import MARKERS, parameter_names

REPO = Path(__file__).resolve().parents[1]
_BEGIN, _END = (re.escape(marker) for marker in MARKERS["solution"])
SOLUTION_BLOCK = re.compile(rf"^(\s*){_BEGIN}\n.*?^\s*{_END}\n?", re.DOTALL | re.MULTILINE)
HIDDEN_MARKER = re.compile(r"^\s*(?:" + "|".join(re.escape(m) for m in MARKERS["test"]) + r")\n?", re.MULTILINE)
_CELL_NUMBERS = itertools.count(1)


class LabSource:
    """A lab's ``lab.py`` cells and ``lab.toml``, each read once, when a test first asks: the lab
    test modules make theirs at import, and every pytest-xdist worker imports every test module."""

    def __init__(self, lab_id: str):
        self.folder = REPO / "solutions" / lab_id

    @cached_property
    def lab(self):
        return parse_lab(self.folder)

    @cached_property
    def notebook(self):
        return jupytext.read(self.folder / "lab.py")

    @property
    def cells(self) -> list:
        return self.notebook.cells

    @property
    def code_cells(self) -> list:
        return [cell for cell in self.cells if cell.cell_type == "code"]

    def tagged(self, tag: str) -> list:
        return [cell for cell in self.cells if tag in cell.metadata.get("tags", [])]

    @cached_property
    def graded(self) -> dict[str, str]:
        """The source of every cell with a grade_id (solutions and tests), by grade_id."""
        return {cell.metadata["grade_id"]: cell.source for cell in self.cells if cell.metadata.get("grade_id")}

    @property
    def parameters(self) -> str:
        (cell,) = self.tagged("parameters")
        return cell.source

    @property
    def parameter_names(self) -> set[str]:
        return parameter_names(self.parameters)

    def cell_starting(self, prefix: str) -> str:
        """The source of the one code cell that starts with ``prefix`` (e.g. ``%%writefile x.py``)."""
        (source,) = [cell.source for cell in self.code_cells if cell.source.startswith(prefix)]
        return source

    def run(self, *sources: str, namespace: dict | None = None, cwd: Path | None = None, name: str = "") -> dict:
        """Execute ``sources`` (as ``as_code`` makes them) in ``namespace``, in ``cwd`` (the lab's
        own folder reads its data/ relatively); the namespace. Each source is registered with
        linecache under its own name, as IPython does for a cell, so ``inspect.getsource`` works on
        what it defines (Triton reads a kernel's source that way)."""
        namespace = {} if namespace is None else namespace
        with contextlib.chdir(cwd) if cwd else contextlib.nullcontext():
            for source in sources:
                code = as_code(source)
                filename = f"<{name or self.lab.id} cell {next(_CELL_NUMBERS)}>"
                linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
                exec(compile(code, filename, "exec"), namespace)  # noqa: S102 (our own lab source)
        return namespace

    def run_solutions(self, *grade_ids: str, defining=(), namespace: dict | None = None, **options) -> dict:
        """Run the solution cells named by grade_id, or every solution cell that defines one of
        ``defining``; every name in ``defining`` must end up defined."""
        cells = [self.graded[g] for g in grade_ids] or [
            cell.source
            for cell in self.tagged("solution")
            if not defining or any(re.search(rf"^(def|class) {name}\b", cell.source, re.M) for name in defining)
        ]
        namespace = self.run(*cells, namespace=namespace, **options)
        missing = [name for name in defining if name not in namespace]
        assert not missing, f"{self.lab.id}: no solution cell defines {missing}"
        return namespace


def as_code(source: str) -> str:
    """A cell as plain Python: no leading ``%%writefile`` line, no hidden-test markers."""
    lines = source.splitlines(keepends=True)
    if lines and lines[0].startswith("%%writefile"):
        lines = lines[1:]
    return HIDDEN_MARKER.sub("", "".join(lines))


def student(source: str) -> str:
    """The learner's version of a solution cell: each solution block becomes nbgrader's stub."""
    return SOLUTION_BLOCK.sub(lambda m: f"{m.group(1)}raise NotImplementedError()\n", source)


def definitions(source: str, constants=lambda node: True) -> str:
    """Only the imports, functions, classes and UPPER_CASE assignments of a cell (no demos, no
    launches); ``constants(node)`` narrows which assignments are kept."""
    tree = ast.parse(source)
    kept = [node for node in tree.body if _defines(node) or (_upper_assignment(node) and constants(node))]
    return ast.unparse(ast.Module(body=kept, type_ignores=[]))


def _defines(node) -> bool:
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom))


def _upper_assignment(node) -> bool:
    return isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) and t.id.isupper() for t in node.targets)
