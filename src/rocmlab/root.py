"""Where the course repository is: the one function every command and the hub use to find it."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import InputError

ROOT_VARIABLE = "ROCMLAB_ROOT"
MARKER = "solutions"  # a course repository is a folder holding solutions/


def find_root(root: str | os.PathLike | None = None) -> Path:
    """The course repository root, first found of:

    1. ``root`` (the command line's ``--root``);
    2. ``$ROCMLAB_ROOT`` (set for every server of the hub);
    3. the working directory, or the nearest folder above it, that holds ``solutions/``.

    A root named by 1 or 2 must be a folder; it need not hold ``solutions/`` (a learner's image
    ships only the built labs).
    """
    if root:
        return _named(root, "--root")
    if os.environ.get(ROOT_VARIABLE):
        return _named(os.environ[ROOT_VARIABLE], f"${ROOT_VARIABLE}")
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / MARKER).is_dir():
            return folder
    raise InputError(
        f"no {MARKER}/ folder in {here} or above: run rocmlab inside the course repository, "
        f"pass --root or set ${ROOT_VARIABLE}"
    )


def _named(value: str | os.PathLike, where: str) -> Path:
    path = Path(value).expanduser().resolve()
    if not path.is_dir():
        raise InputError(f"{where} {value}: not a folder (expected the course repository)")
    return path
