"""Mounts the grader makes on this machine, as root, around its runs: the sandbox's folder a
shared mount (what is mounted below it later reaches the views of kernels started before), and
each run's own size-limited tmpfs (``space``), where its kernel writes everything it may write,
apart from the file system of the grader's own files. The mounts made inside a kernel's or a
slot's namespace are ``rocmlab.sandbox.entry``'s."""

from __future__ import annotations

import ctypes
import os
import shutil
from pathlib import Path

import psutil

MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_SHARED = 2, 4, 4096, 16384, 1 << 20
MNT_DETACH = 2
# The folders of a run's space: the kernel's work folder, its Unix sockets, and each temp folder
# (``paths.PRIVATE_TEMP``) it gets.
SPACE_TEMP = {"/tmp": "tmp", "/var/tmp": "var-tmp", "/dev/shm": "shm", "/run/lock": "lock"}


def _mount(source: str | None, target: Path, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda v: None if v is None else v.encode()  # noqa: E731
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(enc(source), str(target).encode(), enc(fstype), flags, enc(data)) != 0:
        raise OSError(ctypes.get_errno(), f"cannot mount {source or fstype} on {target}")


OWNER = "owner"  # in a shared sandbox folder: the pid and start time of the grader that made it


def share(folder: Path) -> None:
    """``folder`` becomes a mount of its own whose later submounts propagate to its copies in other
    mount namespaces (a zygote's, a slot worker's), which are its slaves. It names its owner, this
    process: a grader killed before it could unmount leaves it to the next one's ``sweep``."""
    (folder / OWNER).write_text(f"{os.getpid()} {psutil.Process().create_time()}", encoding="utf-8")
    _mount(str(folder), folder, None, MS_BIND)
    _mount(None, folder, None, MS_SHARED)


def sweep(prefix: str) -> list[str]:
    """Unmount and remove the shared sandbox folders (``prefix``: their path up to the random
    part) whose grader has ended; the ones it removed."""
    swept = []
    for folder in sorted({m.mountpoint for m in psutil.disk_partitions(all=True) if m.mountpoint.startswith(prefix)}):
        if not _owner_alive(Path(folder) / OWNER):
            unmount(Path(folder))
            shutil.rmtree(folder, ignore_errors=True)
            swept.append(folder)
    return swept


def _owner_alive(owner: Path) -> bool:
    """Whether the grader that wrote ``owner`` still runs; True where it cannot be told (a mount
    that is not a sandbox's of ours is never touched)."""
    try:
        pid, started = owner.read_text(encoding="utf-8").split()
        return psutil.Process(int(pid)).create_time() == float(started)
    except psutil.NoSuchProcess:
        return False
    except (OSError, ValueError, psutil.Error):
        return True


def own_space(folder: Path, size_mb: int) -> None:
    """A tmpfs of ``size_mb`` on ``folder`` (made), which only root may list."""
    folder.mkdir(mode=0o711)
    _mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size_mb}m,mode=0711")


def temp_folders(space: Path) -> dict[str, str]:
    """Each private temp folder of a kernel, made in its run's ``space``: /tmp's rights."""
    folders = {}
    for tmp, name in SPACE_TEMP.items():
        (space / name).mkdir()
        (space / name).chmod(0o1777)
        folders[tmp] = str(space / name)
    return folders


def unmount(folder: Path) -> None:
    """Detach the mount on ``folder`` and those below it (a tmpfs's memory is freed once no process
    holds a file of it); nothing where none is mounted."""
    ctypes.CDLL(None, use_errno=True).umount2(str(folder).encode(), MNT_DETACH)
