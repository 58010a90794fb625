"""Which paths a sandboxed kernel sees: an allow-list of the machine (``allowed_view``), the
folders covered in it (``split_hidden``) and, below folders
other users cannot enter (``/root`` holding the interpreter or the model cache), the ways put
back for the grader user (``closed_ancestor``, ``closed_ways``), and those below the temp folders
each kernel gets empty (``under_private_temp``). ``rocmlab.sandbox.limits`` plans with them;
``rocmlab.sandbox.entry`` applies them inside.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def split_hidden(hide: list[Path], expose: list[Path]) -> list[Path]:
    """The paths to cover so that everything under ``hide`` is hidden except ``expose``: a hidden
    folder holding an exposed path is replaced by its other entries, recursively."""
    exposed = [Path(p).resolve() for p in expose if Path(p).exists()]
    covered: list[Path] = []

    def visit(path: Path) -> None:
        if any(path == e or path in e.parents for e in exposed):
            if path in exposed:
                return
            for child in sorted(path.iterdir()):
                if not child.is_symlink():
                    visit(child)
        else:
            covered.append(path)

    for path in hide:
        path = Path(path)
        if path.exists() and not path.is_symlink():
            visit(path.resolve())
    return [p for p in covered if not any(q in p.parents for q in covered)]


# Each kernel gets its own, empty: the folders every user may write (/run/lock too, which the
# namespace fallback's writable root left shared between learners), where they exist.
PRIVATE_TEMP = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


def under_private_temp(paths: list) -> list[tuple[str, str]]:
    """(temp folder, path) for each of the paths (existing, resolved) below a private temp folder,
    e.g. a checkout in /tmp: the interpreter and package a kernel needs, which its empty temp
    folders would cover."""
    found = [str(Path(p).resolve()) for p in paths if Path(p).exists()]
    return [(tmp, p) for p in found for tmp in PRIVATE_TEMP if is_under(p, tmp)]


def is_under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def closed_ancestor(path: Path) -> tuple[Path, Path] | None:
    """The first folder above ``path`` that others cannot enter, and its child on the way down."""
    parts = path.resolve().parts
    for i in range(1, len(parts)):
        folder = Path(*parts[:i])
        if not folder.stat().st_mode & 0o001:
            return folder, Path(*parts[: i + 1])
    return None


def interpreter_paths() -> list[Path]:
    return [Path(sys.base_prefix), Path(sys.prefix), Path(__file__).parents[1]]  # the rocmlab package


def closed_ways(paths: list[Path]) -> dict[str, list[str]]:
    """For each folder others cannot enter (e.g. /root), the given paths below it (e.g. pyenv,
    the model cache): a sandbox covers such a folder and puts back only those paths."""
    ways: dict[str, list[str]] = {}
    for path in paths:
        if not Path(path).exists():
            continue
        found = closed_ancestor(Path(path))
        if found is not None:
            ways.setdefault(str(found[0]), []).append(str(Path(path).resolve()))
    return ways


# What a kernel sees of the machine, read-only, where it exists: the system's programs, libraries
# and settings, what the system says of its devices, and ROCm. Nothing else of the machine is in
# its view but what the sandbox exposes (the course's Python environment, the model caches) and
# its run's own folders: no home, no other checkout or backup, whatever their permissions.
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys", "/opt/rocm")
# The device files of a kernel's /dev: the usual ones, and the GPU's where this machine has one.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
GPU_DEVICES = ("/dev/kfd", "/dev/dri")


def allowed_view(expose: list) -> list[tuple[str, str, str]]:
    """The allow-list view of this machine, in the order to build it: ``("bind", path, path)``
    for a folder or file shown read-only, ``("symlink", target, path)`` for a link (``/bin`` to
    ``usr/bin``; an exposed path named through a link). ``SYSTEM_FOLDERS``, then ``expose``;
    none below another one."""
    entries: list[tuple[str, str, str]] = []
    bound: list[str] = []

    def show(path: str) -> None:
        real = os.path.realpath(path)
        if not os.path.exists(real):
            return
        if real != path and not any(is_under(path, b) for b in bound):
            entries.append(("symlink", os.readlink(path) if os.path.islink(path) else real, path))
        if not any(is_under(real, b) for b in bound):
            bound.append(real)
            entries.append(("bind", real, real))

    for folder in SYSTEM_FOLDERS:
        show(folder)
    for path in sorted({os.path.abspath(p) for p in expose}):
        show(path)
    return entries


def ways_down(path: str, bound: list[str]) -> list[str]:
    """The folders to make on the way down to ``path`` in a view: those above it that are neither
    the root, a private temp folder, nor below a folder ``bound`` there; top first."""
    steps = [str(p) for p in reversed(Path(path).parents) if str(p) != "/" and str(p) not in PRIVATE_TEMP]
    return [step for step in steps if not any(is_under(step, b) for b in bound)]
