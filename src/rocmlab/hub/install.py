"""What of the course checkout learners may read on a workshop server, and closing the rest.

Learners' servers run as their own Unix users and need only the built notebooks, the package
and its environment, the configs, and each lab's ``lab.toml`` (``rocmlab check`` reads its smoke
profile). Everything else, above all ``solutions/`` (sources with the answers and the hidden
tests), ``.git`` (every past solution) and ``results/`` (executed solution notebooks), is closed
to others and opened to the instructor group, who grade with it. ``rocmlab hub`` does this at
start (as root), so a checkout made world-readable by ``git clone`` cannot leak answers.
"""

from __future__ import annotations

import grp
import os
import stat
from pathlib import Path

LEARNER_READABLE = frozenset(
    {"labs", "autograder", "env", "src", ".venv", "pyproject.toml", "README.md", "docs", "Makefile"}
)
LAB_METADATA = "lab.toml"  # solutions/<lab>/lab.toml: ids, versions, profiles; no answers


def close_course(root: Path, instructor_group: str) -> list[Path]:
    """Close every top-level entry of ``root`` learners do not need (o-rwx, group
    ``instructor_group`` with g+rX); ``solutions/`` keeps only its listing and each
    ``<lab>/lab.toml`` open. Links are never followed. Returns the paths closed."""
    gid = grp.getgrnam(instructor_group).gr_gid
    closed = []
    for entry in sorted(root.iterdir()):
        if entry.name in LEARNER_READABLE or entry.is_symlink():
            continue
        if entry.name == "solutions" and entry.is_dir():
            close_solutions(entry, gid)
        else:
            close_tree(entry, gid)
        closed.append(entry)
    return closed


def close_solutions(solutions: Path, gid: int) -> None:
    """Lab folders stay traversable (not listable) so ``solutions/*/lab.toml`` is found; all else closes."""
    _set(solutions, gid, open_to_others=0o005)
    for lab in solutions.iterdir():
        if lab.is_symlink():
            continue
        if not lab.is_dir():
            close_tree(lab, gid)
            continue
        _set(lab, gid, open_to_others=0o001)
        for entry in lab.iterdir():
            if entry.name == LAB_METADATA and entry.is_file() and not entry.is_symlink():
                _set(entry, gid, open_to_others=0o004)
            elif not entry.is_symlink():
                close_tree(entry, gid)


def close_tree(top: Path, gid: int) -> None:
    paths = [top]
    if top.is_dir() and not top.is_symlink():
        for parent, folders, files in os.walk(top):
            paths += [Path(parent) / name for name in folders + files]
    for path in paths:
        if not path.is_symlink():
            _set(path, gid, open_to_others=0)


def _set(path: Path, gid: int, open_to_others: int) -> None:
    mode = path.lstat().st_mode
    group = 0o050 if stat.S_ISDIR(mode) or mode & 0o100 else 0o040
    others = open_to_others if stat.S_ISDIR(mode) else open_to_others & 0o004
    os.chown(path, -1, gid, follow_symlinks=False)
    path.chmod((stat.S_IMODE(mode) & 0o7700) | group | others)
