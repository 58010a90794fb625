"""Notebook files: the solution notebook of a lab in one language, and writing a notebook validated.

A leaf below ``build``, ``run``, ``verify``, ``check`` and ``grading``: they all read a lab's
solution notebook and write notebooks, and none of them needs another to do it.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

from .catalog import Lab
from .source import for_language, read_notebook


def solution_notebook(lab: Lab, lang: str = "en") -> nbformat.NotebookNode:
    """The instructor notebook in one language: what ``rocmlab run`` executes."""
    return for_language(lab, read_notebook(lab), lang)


def write_notebook(nb, path: Path) -> None:
    """Validate ``nb`` against the nbformat schema and write it, making the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.validate(nb)
    with open(path, "w", encoding="utf-8") as fh:
        nbformat.write(nb, fh)
