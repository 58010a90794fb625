"""What a user's server process does for itself between fork and exec, and where its temporary
files go: the spawners (rocmlab.hub.spawner) run these in the child they start.

- ``limit_resources``: ``RLIMIT_AS`` per process and ``RLIMIT_NPROC`` per Unix user, inherited by
  every kernel the server starts;
- ``private_tmp``: as root, before the switch to the user, a mount namespace of its own with empty
  ``/tmp``, ``/var/tmp``, ``/dev/shm`` and ``/run/lock`` (``private_paths``: those that hold nothing the server needs);
- ``show_only``: in that namespace, a GPU slice holder's ``/dev/dri`` holding their render nodes only;
- ``own_log``: as the user, the server's output into ``~/.rocmlab-server.log``, never the hub's log;
- ``cache_environment``: ``TMPDIR`` and the compile caches in the user's home, where no classmate writes.

The child may only call what was looked up before the fork: libc's ``unshare`` and ``mount`` are
found when this module is imported.
"""

from __future__ import annotations

import ctypes
import os
import resource
from pathlib import Path

from ..sandbox.paths import PRIVATE_TEMP

SERVER_LOG = ".rocmlab-server.log"  # in the home: each server's own log, owned by its user
TMP_FOLDER = ".tmp"  # in the home: TMPDIR, where /tmp cannot be made private
CLONE_NEWNS, MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 0x00020000, 2, 4, 16384, 1 << 18
MS_BIND, MS_NOEXEC = 4096, 8


def cache_environment(home: Path) -> dict[str, str]:
    """Temporary files and the compile caches of a user's server in their own home (mode 700), never
    in a folder classmates write: torch.compile's Inductor cache defaults to /tmp/torchinductor_<user>,
    where a classmate who makes it first plants code that the owner's next compile runs."""
    cache = home / ".cache"
    return {
        "TMPDIR": str(home / TMP_FOLDER),
        "XDG_CACHE_HOME": str(cache),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "torchinductor"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "TORCH_EXTENSIONS_DIR": str(cache / "torch_extensions"),
        "PYTORCH_KERNEL_CACHE_PATH": str(cache / "torch" / "kernels"),
        "HF_MODULES_CACHE": str(cache / "huggingface" / "modules"),  # code of trust_remote_code models
        "HF_DATASETS_CACHE": str(cache / "huggingface" / "datasets"),
        "NUMBA_CACHE_DIR": str(cache / "numba"),
        "MIOPEN_USER_DB_PATH": str(cache / "miopen"),
        "MIOPEN_CUSTOM_CACHE_DIR": str(cache / "miopen"),
    }


_libc = ctypes.CDLL(None, use_errno=True)  # looked up before any fork: the child only calls
_unshare, _mount = _libc.unshare, _libc.mount
_unshare.argtypes = [ctypes.c_int]
_mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]


def private_paths(needed) -> list[str]:
    """Of the folders every user may write (``PRIVATE_TEMP``), those that hold none of the ``needed`` paths (the home, the
    course, the exchange: a test or a laptop may keep them in /tmp, and a fresh tmpfs would hide them)."""
    resolved = [os.path.realpath(path) for path in needed if path]
    return [
        folder
        for folder in PRIVATE_TEMP
        if os.path.isdir(folder)
        and not any(
            path == os.path.realpath(folder) or path.startswith(os.path.realpath(folder) + os.sep) for path in resolved
        )
    ]


def tmpfs_options(size_bytes: int = 0) -> bytes:
    """The mount options of a server's private tmpfs: world-writable with the sticky bit, and at
    most ``size_bytes`` (tmpfs's own default is half the RAM, each; 0 keeps that)."""
    return b"mode=1777" + (f",size={size_bytes}".encode() if size_bytes > 0 else b"")


def private_tmp(paths=PRIVATE_TEMP, options: bytes = b"mode=1777") -> bool:
    """In the child, as root, before it becomes the user: a mount namespace of its own with empty
    tmpfs on ``paths`` (systemd's PrivateTmp), mounted with ``options`` (``tmpfs_options``). False
    when the kernel refuses."""
    if _unshare(CLONE_NEWNS) != 0:
        return False
    if _mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:  # nothing propagates back
        return False
    for path in paths:
        if os.path.isdir(path):
            if _mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options) != 0:
                return False
    return True


def show_only(nodes: list[str], folder: str) -> bool:
    """In the child's own mount namespace (after ``private_tmp``), as root: an empty tmpfs on
    ``folder`` (/dev/dri) with each of ``nodes`` (paths in it) bind-mounted back, so the server lists
    and opens its own render nodes only. False when the kernel refuses (their owners still decide)."""
    try:
        held = [(os.path.basename(node), os.open(node, os.O_PATH | os.O_CLOEXEC)) for node in nodes]
        if _mount(b"tmpfs", folder.encode(), b"tmpfs", MS_NOSUID | MS_NOEXEC, b"mode=755") != 0:
            return False
        for name, fd in held:
            target = os.path.join(folder, name)
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
            if _mount(f"/proc/self/fd/{fd}".encode(), target.encode(), None, MS_BIND, None) != 0:
                return False
    except OSError:
        return False
    return True


def own_log(home: Path) -> None:
    """In the child, as the user: stdout and stderr into ``home/.rocmlab-server.log``, opened as the
    user (never through a link by root); /dev/null when that fails. Nothing reaches the hub's log."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = -1
    for path in (SERVER_LOG, home / SERVER_LOG):  # the child is in the home (its ancestors may be closed)
        try:
            fd = os.open(path, flags, 0o600)
            break
        except OSError:
            continue
    if fd < 0:
        fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    for path in (TMP_FOLDER, home / TMP_FOLDER):
        try:
            os.mkdir(path, 0o700)
            break
        except OSError:
            continue


def limit_resources(memory_bytes: int, max_processes: int) -> None:
    """Run in the child between fork and exec: the limits pass on to kernels and their children."""
    if memory_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    if max_processes > 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (max_processes, max_processes))
