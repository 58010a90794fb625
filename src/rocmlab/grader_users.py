"""The unprivileged users that graded kernels run as (root only): ``rocmlab-grader-N``, created
as system users when missing, each held by one grading run at a time through a file lock."""

from __future__ import annotations

import pwd
import subprocess
import tempfile
from pathlib import Path

USER_PREFIX = "rocmlab-grader-"


def ensure_user(slot: int) -> tuple[int, int]:
    """The unprivileged grader user of one job slot, created (as a system user) when missing."""
    name = f"{USER_PREFIX}{slot}"
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        proc = subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                "--user-group",
                name,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if proc.returncode != 0 and "already exists" not in proc.stderr:
            raise RuntimeError(f"cannot create the grader user {name}: {proc.stderr.strip()}") from None
        entry = pwd.getpwnam(name)
    if entry.pw_uid == 0:
        raise RuntimeError(f"the grader user {name} has uid 0: refusing to run learner code as root")
    return entry.pw_uid, entry.pw_gid


def claim_users(count: int) -> list:
    """``count`` grader users no other grading run on this machine holds, as (index, held lock):
    a run kills its users' leftovers, so two runs never share one."""
    from filelock import FileLock, Timeout

    claimed, index = [], 0
    while len(claimed) < count:
        lock = FileLock(str(Path(tempfile.gettempdir()) / f"{USER_PREFIX}{index}.lock"))
        try:
            lock.acquire(timeout=0)
            claimed.append((index, lock))
        except Timeout:
            pass
        index += 1
    return claimed
