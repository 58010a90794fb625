"""The course's cache of built assets (the offline model, lab 03's adapter): where it is, and the
one way an entry is written into it.

An entry is a folder with a manifest that lists its files. ``build_once`` makes it: under a file
lock beside the entry (several processes may ask at once: one builds, the others wait and reuse
it), in a staging folder next to it, made readable to every user (the grader's kernels and the
learners' servers run as others), and swapped in with one rename, so that a reader sees no entry
or a whole one. A folder whose manifest does not match its files (an interrupted or corrupted
build) is built again.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from ..errors import CommandFailed

CACHE_VARIABLE = "ROCMLAB_CACHE"


class CacheError(CommandFailed, RuntimeError):
    """The cache cannot be used (lock timeout, unwritable folder)."""


def cache_root(cache_dir=None) -> Path:
    """``cache_dir``, else ``$ROCMLAB_CACHE``, else the user cache dir for rocmlab."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    if os.environ.get(CACHE_VARIABLE):
        return Path(os.environ[CACHE_VARIABLE]).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("rocmlab"))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(folder: Path, name: str, manifest: dict, *, hashes: bool = True) -> dict:
    """Write ``manifest`` as ``folder/name`` with ``files``: each file below ``folder`` by its
    relative path, with its size and (``hashes``) its sha256, or its size alone. Returns it."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != name)
    manifest = {
        **manifest,
        "files": {
            p.relative_to(folder).as_posix(): (
                {"sha256": sha256_file(p), "bytes": p.stat().st_size} if hashes else p.stat().st_size
            )
            for p in files
        },
    }
    (folder / name).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def read_valid_manifest(folder: Path, name: str) -> dict | None:
    """The manifest ``folder/name`` if every file it lists is there as listed (a size, or a size
    and a sha256), else None."""
    try:
        manifest = json.loads((Path(folder) / name).read_text(encoding="utf-8"))
        for relative, entry in manifest["files"].items():
            if not _matches(Path(folder) / relative, entry):
                return None
        return manifest
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _matches(path: Path, entry) -> bool:
    if isinstance(entry, int):
        return path.stat().st_size == entry
    return path.stat().st_size == entry["bytes"] and sha256_file(path) == entry["sha256"]


def make_world_readable(folder: Path) -> None:
    """Files 0644 and folders 0755, whatever the builder's umask: the grader's kernels run as other
    users (rocmlab-grader-N) and a learner's server as the learner, and all of them read this cache."""
    for current, _dirs, files in os.walk(folder):
        os.chmod(current, 0o755)
        for name in files:
            os.chmod(os.path.join(current, name), 0o644)


def build_once(
    target: Path,
    build: Callable[[Path], object],
    *,
    manifest: str,
    what: str,
    lock_timeout_s: float,
    log=print,
) -> Path:
    """``target`` when its manifest is valid; else ``build(staging)`` (which writes the files and
    the manifest into a folder it creates) under the entry's lock, swapped in whole."""
    log = log or (lambda _message: None)
    if read_valid_manifest(target, manifest):
        return target
    from filelock import FileLock, Timeout

    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CacheError(f"cannot create the {what} cache {target.parent}: {exc}; {_ELSEWHERE}") from exc
    lock = FileLock(str(target) + ".lock", timeout=lock_timeout_s)
    try:
        _say_when_waiting(lock, target, lock_timeout_s, log)
        with lock:
            if read_valid_manifest(target, manifest):
                return target
            if target.exists():
                log(f"{target} is incomplete or corrupt; rebuilding")
                shutil.rmtree(target)
            _build_and_swap(target, build)
    except Timeout:
        raise CacheError(
            f"waited {lock_timeout_s:.0f} s for another process building {target}; "
            f"if none is running, delete {target}.lock"
        ) from None
    except OSError as exc:
        if exc.errno not in _NOT_WRITABLE:
            raise
        raise CacheError(f"cannot build the {what} in {target.parent}: {exc}; {_ELSEWHERE}") from exc
    return target


_ELSEWHERE = f"set {CACHE_VARIABLE} to a writable directory"
# A cache this user may read but not write: a hub's, a grader's read-only view, a read-only mount.
_NOT_WRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS}


def _build_and_swap(target: Path, build: Callable[[Path], object]) -> None:
    staging = target.with_name(f"{target.name}.building-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        build(staging)
        make_world_readable(staging)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _say_when_waiting(lock, target: Path, timeout_s: float, log) -> None:
    """Log once when another process holds the build lock, so a waiting build does not look hung."""
    from filelock import Timeout

    try:
        lock.acquire(timeout=0)
    except Timeout:
        log(f"another process is building {target.name}; waiting for it (up to {timeout_s:.0f} s)")
    else:
        lock.release()
