"""bubblewrap (``bwrap``) command lines for the grading sandbox: what a kernel sees of this
machine, and one run's folders in that view. ``rocmlab.sandbox.limits`` decides who gets which."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..processes import is_root, succeeds
from .paths import PRIVATE_TEMP, closed_ways, is_under, under_private_temp


def bubblewrap_works() -> bool:
    """True when ``bwrap`` can start a process in fresh network, PID and mount namespaces here."""
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return False
    user = [] if is_root() else ["--unshare-user"]
    return succeeds(
        [bwrap, *user, "--unshare-net", "--unshare-pid", "--die-with-parent", "--ro-bind", "/", "/", "true"]
    )


def view_argv(expose: list, hide: list[str], *, switch_user: bool, own_user: bool, own_pids: bool = True) -> list[str]:
    """``bwrap`` and its options for a kernel's view: the whole file system read-only, private
    temp folders, ``hide`` covered, ``expose`` kept below closed folders (``switch_user``: for the
    grader user) and below the temp folders. ``own_user``: a user namespace (not root);
    ``own_pids`` False: a zygote's, which sees the workers that ask it for kernels."""
    argv = [shutil.which("bwrap") or "bwrap", *(["--unshare-user"] if own_user else [])]
    argv += ["--unshare-net", *(["--unshare-pid"] if own_pids else []), "--unshare-ipc", "--unshare-uts"]
    argv += ["--die-with-parent", "--new-session", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for tmp in filter(os.path.isdir, PRIVATE_TEMP):
        argv += ["--perms", "1777", "--tmpfs", tmp]
    for tmp, path in under_private_temp(expose):  # a checkout in /tmp: its interpreter and package
        # listable on the way down: a checkout's src/ is on sys.path, and Python lists its entries
        argv += put_back(tmp, path, mode="0755")
    covered = closed_ways(expose) if switch_user else {}
    for folder, paths in covered.items():  # /root holding pyenv or the cache: only the way down stays
        argv += ["--perms", "0711", "--tmpfs", folder]
        for path in paths:
            argv += put_back(folder, path)
    for path in hide:
        if any(is_under(path, f) and not any(is_under(path, e) for e in es) for f, es in covered.items()):
            continue
        argv += ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", "/dev/null", path]
    return argv


def run_argv(view: list[str], base: Path, private: Path, work: Path, ipc: Path, policy_path: Path) -> list[str]:
    """``view`` around one run's kernel: its work and socket folders writable, its policy readable."""
    argv = list(view)
    for folder in (base, work.parent, private):  # bwrap would make them root-only
        argv += ["--perms", "0711", "--dir", str(folder)]
    argv += ["--bind", str(work), str(work), "--bind", str(ipc), str(ipc)]
    argv += ["--ro-bind", str(policy_path), str(policy_path), "--chdir", str(work)]
    return argv


def put_back(folder: str, path: str, mode: str = "0711") -> list[str]:
    """bwrap options that make ``path`` reachable again below ``folder``, covered by a tmpfs: the
    folders on the way down (which bwrap would make root-only; they hold only what is put back),
    then ``path`` itself, read-only."""
    steps = [str(step) for step in reversed(Path(path).parents) if is_under(str(step), folder) and str(step) != folder]
    return [*(arg for step in steps for arg in ("--perms", mode, "--dir", step)), "--ro-bind", path, path]
