"""What of the course checkout learners may read on a workshop server, and closing the rest.

Learners' servers run as their own Unix users and need only the built notebooks, the package
and its environment, the configs, and each lab's ``lab.toml`` (``rocmlab check`` reads its smoke
profile). Everything else, above all ``solutions/`` (sources with the answers and the hidden
tests), ``.git`` (every past solution) and ``results/`` (executed solution notebooks), is closed
to others and opened to the instructor group, who grade with it. ``rocmlab hub`` does this at
start (as root), so a checkout made world-readable by ``git clone`` cannot leak answers, and
again every ``RECLOSE_S`` seconds while the hub runs (``keep_closed``), so a lab added or
changed meanwhile (``git pull``) is closed within that time.
"""

from __future__ import annotations

import grp
import logging
import os
import stat
import subprocess
from pathlib import Path

LEARNER_READABLE = frozenset(
    {"labs", "autograder", "env", "src", ".venv", "pyproject.toml", "README.md", "docs", "Makefile"}
)
LAB_METADATA = "lab.toml"  # solutions/<lab>/lab.toml: ids, versions, profiles; no answers
RECLOSE_S = float(os.environ.get("ROCMLAB_HUB_RECLOSE_S", "5"))
log = logging.getLogger(__name__)


def keep_closed(process: subprocess.Popen, root: Path, instructor_group: str, every_s: float = RECLOSE_S) -> int:
    """Until ``process`` (the hub) exits, close the course again every ``every_s`` seconds: a file
    added or changed in the checkout while the hub runs gets git's mode, often world-readable.
    Returns the process's exit status. A walk that fails (a file removed meanwhile, the group
    gone) is logged and retried at the next turn: it never stops the hub."""
    while True:
        try:
            return process.wait(timeout=every_s)
        except subprocess.TimeoutExpired:
            pass
        try:
            close_course(root, instructor_group)
        except (OSError, KeyError) as exc:  # KeyError: the instructor group was removed meanwhile
            log.warning("closing the course to learners again failed, retried in %ss: %s", every_s, exc)


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
