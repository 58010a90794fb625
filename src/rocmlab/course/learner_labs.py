"""The lab notebooks a learner has in a folder: what ``rocmlab list`` shows outside a course repository.

A notebook made by ``rocmlab build`` carries ``metadata.rocmlab`` (id, lang, version); its title is
the first heading of its markdown cells. Nothing here needs ``solutions/``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

MAX_DEPTH = 3  # a home folder, a course folder, a lab folder
SKIPPED = (".ipynb_checkpoints", "__pycache__", "node_modules")


@dataclass(frozen=True)
class LabNotebook:
    id: str
    version: str
    lang: str
    title: str
    path: Path


def find_notebooks(folder: Path, max_depth: int = MAX_DEPTH) -> list[LabNotebook]:
    """The rocmlab lab notebooks in ``folder`` and up to ``max_depth`` folders below, sorted by id and path."""
    found = [nb for path in _notebook_paths(folder, max_depth) if (nb := read_lab_notebook(path))]
    return sorted(found, key=lambda nb: (nb.id, str(nb.path)))


def read_lab_notebook(path: Path) -> LabNotebook | None:
    """The notebook's lab, or None when ``path`` is not a readable notebook made by rocmlab build."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    meta = nb.get("metadata", {}).get("rocmlab") if isinstance(nb, dict) else None
    if not isinstance(meta, dict) or not meta.get("id"):
        return None
    return LabNotebook(
        id=str(meta["id"]),
        version=str(meta.get("version", "?")),
        lang=str(meta.get("lang", "?")),
        title=_title(nb.get("cells", [])),
        path=path,
    )


def select_notebooks(notebooks: list[LabNotebook], wanted: list[str]) -> list[LabNotebook]:
    """The notebooks of the labs named (full id or its two-digit number); all when none named."""
    if not wanted:
        return notebooks
    unknown = [name for name in wanted if not any(name in (nb.id, nb.id[:2]) for nb in notebooks)]
    if unknown:
        have = ", ".join(sorted({nb.id for nb in notebooks})) or "none"
        raise InputError(f"no notebook of lab {unknown[0]!r} here (labs here: {have})")
    return [nb for nb in notebooks if any(name in (nb.id, nb.id[:2]) for name in wanted)]


def no_notebooks_error(folder: Path) -> InputError:
    return InputError(
        f"no lab notebooks in {folder} or the {MAX_DEPTH} folder levels below it. Learners: run rocmlab list in the "
        "folder that holds your lab notebooks (.ipynb from the course site, the hub or nbgrader). Course authors: "
        "run it inside the course repository (the folder holding solutions/), or pass --root"
    )


def _notebook_paths(folder: Path, depth: int):
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith(".") or entry.name in SKIPPED:
            continue
        if entry.is_file() and entry.suffix == ".ipynb":
            yield entry
        elif depth > 0 and entry.is_dir() and not entry.is_symlink():
            yield from _notebook_paths(entry, depth - 1)


def _title(cells: list) -> str:
    for cell in cells:
        if not isinstance(cell, dict) or cell.get("cell_type") != "markdown":
            continue
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else str(source)
        heading = next((line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")), "")
        if heading:
            return heading
    return ""
