"""A lab's parameters cell, read in one place: in ``lab.py`` (jupytext, for the harness's
``PARAMETERS``) and in a notebook (a downloaded one's own profile, for ``rocmlab check``); and the
other literal constants ``lab.py`` defines (the harness's ``LAB_CONSTANTS``).

Only literal assignments count (``NAME = <literal>``): a value computed at run time is not one a
check or a preflight can rely on, so it is left out.
"""

from __future__ import annotations

import ast
import copy
import functools
import re
from collections import Counter
from pathlib import Path

from .. import python_ast
from ..errors import LabError

ANSWER_CELL = re.compile(r"\A# %%[^\n]*tags=\[[^\]]*[\"'](?:solution|test)[\"']|### BEGIN (?:SOLUTION|HIDDEN TESTS)")
CONSTANT = re.compile(r"[A-Z][A-Z0-9_]*")
INJECTED = "injected-parameters"  # papermill's tag on the parameters cell it adds for a run
JUPYTEXT_CELL = re.compile(r"^# %%[^\n]*\btags=\[[^\]]*[\"']parameters[\"'][^\n]*\n(.*?)(?=^# %%|\Z)", re.M | re.S)


def literal_assignments(source: str) -> dict:
    """``NAME = <literal>`` of ``source``, in order; SyntaxError when it does not parse."""
    values = {}
    for node in python_ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return values


def lab_py_parameters(lab_py: Path) -> dict:
    """The literal values of ``lab.py``'s parameters cell; LabError naming the file when it cannot be read."""
    try:
        match = JUPYTEXT_CELL.search(lab_py.read_text(encoding="utf-8"))
        return literal_assignments(match.group(1)) if match else {}
    except (OSError, SyntaxError) as exc:
        raise LabError(f"{lab_py}: cannot read the parameters cell: {exc}") from exc


def lab_py_constants(lab_py: Path) -> dict:
    """The literal values ``lab.py`` assigns at its top level to UPPER_CASE names, outside its
    parameters cell and its solution and test cells, for the names it binds once only (a name
    bound twice has no one value); LabError naming the file when it cannot be read."""
    try:
        source = lab_py.read_text(encoding="utf-8")
        bound = _bound_once(source)
    except (OSError, SyntaxError) as exc:
        raise LabError(f"{lab_py}: cannot read its constants: {exc}") from exc
    parameters = lab_py_parameters(lab_py)
    given = _given_constants(source)
    found = {k: v for k, v in given.items() if bound[k] == 1 and k not in parameters and CONSTANT.fullmatch(k)}
    return copy.deepcopy(found)  # the values are the caller's: a check may change the lists it was given


# Each load of a lab's checks reads its lab.py (a grader's class, a live worker's every attempt): the
# parse of one text is kept, keyed on the text itself, so an edited lab.py is parsed again.
@functools.lru_cache(maxsize=16)
def _bound_once(source: str) -> Counter:
    return Counter(name for node in python_ast.parse(source).body for name in _bound_names(node))


@functools.lru_cache(maxsize=16)
def _given_constants(source: str) -> dict:
    return literal_assignments(_without_answers(source))


def _without_answers(source: str) -> str:
    """``lab.py`` less its solution and test cells: what the student notebook defines too (a
    constant assigned in a solution cell is the learner's answer, not course data)."""
    cells = re.split(r"^(?=# %%)", source, flags=re.M)
    return "".join(c for c in cells if not ANSWER_CELL.search(c))


def _bound_names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return [n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)]


def notebook_parameters(nb) -> dict:
    """The literal values a notebook's parameters cell assigns (a downloaded notebook's own
    profile), later injected ones overriding; a cell that does not parse is skipped."""
    values = {}
    for cell in nb.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if cell.cell_type != "code" or not {"parameters", INJECTED} & set(tags):
            continue
        try:
            values |= literal_assignments(cell.source)
        except SyntaxError:
            continue
    return values
