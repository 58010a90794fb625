"""A lab's parameters cell, read in one place: in ``lab.py`` (jupytext, for the harness's
``PARAMETERS``) and in a notebook (a downloaded one's own profile, for ``rocmlab check``).

Only literal assignments count (``NAME = <literal>``): a value computed at run time is not one a
check or a preflight can rely on, so it is left out.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from ..errors import LabError

INJECTED = "injected-parameters"  # papermill's tag on the parameters cell it adds for a run
JUPYTEXT_CELL = re.compile(r"^# %%[^\n]*\btags=\[[^\]]*[\"']parameters[\"'][^\n]*\n(.*?)(?=^# %%|\Z)", re.M | re.S)


def literal_assignments(source: str) -> dict:
    """``NAME = <literal>`` of ``source``, in order; SyntaxError when it does not parse."""
    values = {}
    for node in ast.parse(source).body:
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
