"""bubblewrap (``bwrap``) command lines for the grading sandbox: what a kernel sees of this
machine (an allow-list), and one run's folders in that view. ``rocmlab.sandbox.limits`` decides who gets which."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..processes import is_root, succeeds
from .paths import GPU_DEVICES, PRIVATE_TEMP, allowed_view, is_under, ways_down


def bubblewrap_works() -> bool:
    """True when ``bwrap`` can start a process in fresh network, PID and mount namespaces here."""
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return False
    user = [] if is_root() else ["--unshare-user"]
    return succeeds(
        [bwrap, *user, "--unshare-net", "--unshare-pid", "--die-with-parent", "--ro-bind", "/", "/", "true"]
    )


def view_argv(
    expose: list, hide: list[str], *, own_user: bool, own_pids: bool = True, temp: dict | None = None, size_mb: int = 0
) -> list[str]:
    """``bwrap`` and its options for a kernel's view, an allow-list (``paths.allowed_view``): the
    system's folders and ``expose`` read-only, a minimal /dev (and the GPU's device files), private
    temp folders (``temp``'s folders in the run's own space, else tmpfs of ``size_mb`` each), ``hide``
    covered where it lies in the view; nothing else of the machine.
    ``own_user``: a user namespace (not root); ``own_pids`` False: a zygote's, which sees the
    workers that ask it for kernels."""
    argv = [shutil.which("bwrap") or "bwrap", *(["--unshare-user"] if own_user else [])]
    argv += ["--unshare-net", *(["--unshare-pid"] if own_pids else []), "--unshare-ipc", "--unshare-uts"]
    argv += ["--die-with-parent", "--new-session", "--dev", "/dev", "--proc", "/proc"]
    for device in GPU_DEVICES:
        argv += ["--dev-bind-try", device, device]
    for tmp in filter(os.path.isdir, PRIVATE_TEMP):
        argv += [arg for step in ways_down(tmp, []) for arg in ("--perms", "0755", "--dir", step)]  # /var, /run
        if tmp in (temp or {}):
            argv += ["--bind", temp[tmp], tmp]
        else:
            argv += ["--perms", "1777", *(["--size", str(size_mb * 2**20)] if size_mb else []), "--tmpfs", tmp]
    bound = []
    for kind, source, path in allowed_view(expose):
        if kind == "symlink":
            argv += ["--symlink", source, path]
            continue
        # listable on the way down: a checkout's src/ is on sys.path, and Python lists its entries;
        # they hold only what is shown
        argv += [arg for step in ways_down(path, bound) for arg in ("--perms", "0755", "--dir", step)]
        argv += ["--ro-bind", source, path]
        bound.append(path)
    for path in hide:
        if any(is_under(path, b) for b in bound):
            argv += ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", "/dev/null", path]
    return argv


def run_argv(view: list[str], base: Path, private: Path, work: Path, ipc: Path, policy_path: Path) -> list[str]:
    """``view`` around one run's kernel: its work and socket folders writable, its policy readable."""
    argv = list(view)
    for folder in (base, private.parent, work.parent, private):  # bwrap would make them root-only
        argv += ["--perms", "0711", "--dir", str(folder)]
    argv += ["--bind", str(work), str(work), "--bind", str(ipc), str(ipc)]
    argv += ["--ro-bind", str(policy_path), str(policy_path), "--chdir", str(work)]
    return argv
