"""Which exercises of a submission the learner did not attempt: every answer cell of the exercise
is byte-identical to the released notebook's. Such an exercise is "not attempted", apart from
"failed", on the instructor's page, in hint targeting and in the learner's result (issue 49: a
learner who tried 2 exercises was listed 32 rules not met).

An exercise is a test cell (nbgrader ``grade: true``, its ``grade_id`` is what the checks score)
and the answer cells (``solution: true``) between the previous test cell and it, as the labs are
written (solutions/*/: each answer cell is followed by its test cell).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..grading.notebook_limits import NotebookRefused, check_notebook

MAX_NOTEBOOK_BYTES = 2 * 2**20  # larger: not parsed here (issue 48: parsing costs about 175x the size)


def _nbgrader(cell: dict) -> dict:
    meta = cell.get("metadata") if isinstance(cell, dict) else None
    found = meta.get("nbgrader") if isinstance(meta, dict) else None
    return found if isinstance(found, dict) else {}


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def exercises(notebook: dict) -> dict[str, list[str]]:
    """test cell grade_id -> the grade_ids of its answer cells."""
    found, pending = {}, []
    for cell in notebook.get("cells", []) if isinstance(notebook, dict) else []:
        meta = _nbgrader(cell)
        if meta.get("solution") and meta.get("grade_id"):
            pending.append(str(meta["grade_id"]))
        elif meta.get("grade") and meta.get("grade_id"):
            found[str(meta["grade_id"])] = pending
            pending = []
    return found


def answers(notebook: dict) -> dict[str, str]:
    """answer cell grade_id -> its source."""
    cells = notebook.get("cells", []) if isinstance(notebook, dict) else []
    return {str(_nbgrader(c)["grade_id"]): _source(c) for c in cells if _nbgrader(c).get("solution")}


def not_attempted(released: dict, submitted: dict) -> set[str]:
    """The test cells' grade_ids whose every answer cell the submission left as released."""
    given, handed = answers(released), answers(submitted)
    return {
        test
        for test, cells in exercises(released).items()
        if cells and all(cell in handed and handed[cell] == given.get(cell) for cell in cells)
    }


def read_small(path: Path) -> dict | None:
    """The JSON object in ``path``, or None when it is too large, unreadable or not a JSON object."""
    try:
        if Path(path).stat().st_size > MAX_NOTEBOOK_BYTES:
            return None
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def load_learners(path: Path, learner: str = "") -> dict | None:
    """A learner's notebook as ``read_small`` reads it, once a child with a memory ceiling, running as
    ``learner``, has parsed it and found it within ``notebook_limits`` (issue 48: parsing costs many
    times the file's size, and this runs in the root worker); None when it is not."""
    try:
        if Path(path).stat().st_size > MAX_NOTEBOOK_BYTES:
            return None
        check_notebook(path, learner)
    except (OSError, NotebookRefused):
        return None
    return read_small(path)


def untouched_in(root: Path, lab: str, lang: str, submitted: Path, learner: str = "") -> set[str]:
    """The exercises of ``submitted`` (``learner``'s notebook) left as released
    (``labs/<lang>/<lab>/<lab>.ipynb``); empty when either notebook cannot be read or the learner's
    breaks a limit (then nothing is called not attempted)."""
    released = read_small(Path(root) / "labs" / lang / lab / f"{lab}.ipynb")
    mine = load_learners(submitted, learner) if released else None
    return not_attempted(released, mine) if released and mine else set()
