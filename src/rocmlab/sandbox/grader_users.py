"""The unprivileged users that graded kernels run as (root only): ``rocmlab-grader-N``, created
as system users when missing.

Each user belongs to one grading run at a time: a run claims it with an exclusive ``flock`` on
``LOCK_FOLDER/rocmlab-grader-N.lock``, a root-only folder, and holds the lock until it releases
the user. Linux drops the lock when its holder dies, so a crashed run's users are free again; the
next run to claim one first kills what the crashed run left running as it. A run therefore only
ever sweeps the processes of users it holds, never another run's kernels."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .. import processes

USER_PREFIX = "rocmlab-grader-"
LOCK_FOLDER = Path("/run/rocmlab/grader-users")
MAX_USERS = 512  # far more than any machine's job slots: past it, something else is wrong


class UnsafeLockFolder(RuntimeError):
    """The lock folder is not root's alone: a run must not fall back to anything, it stops."""


@dataclass
class GraderUser:
    """One claimed grader user; ``fd`` holds its lock until ``release``."""

    index: int
    uid: int
    gid: int
    fd: int

    @property
    def name(self) -> str:
        return f"{USER_PREFIX}{self.index}"

    def release(self) -> None:
        """Kill what still runs as this user, then let other runs claim it."""
        if self.fd < 0:
            return
        processes.kill_user(self.uid)
        os.close(self.fd)  # closing the last descriptor drops the flock
        self.fd = -1


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


def lock_folder(folder: Path = LOCK_FOLDER) -> Path:
    """``folder``, created root-only when missing; an error naming it unless only root can write it
    (a lock file others could create or hold would let them keep a run from its users)."""
    for path in (folder.parent, folder):
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o755 if path == folder.parent else 0o700)
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o022:
            raise UnsafeLockFolder(f"{path}: must be a folder owned by root that only root can write")
    return folder


def claim_users(count: int, folder: Path = LOCK_FOLDER) -> list[GraderUser]:
    """``count`` grader users no other grading run on this machine holds, each swept of what a
    crashed run left running as it. Release them with ``release_users``."""
    folder = lock_folder(folder)
    claimed: list[GraderUser] = []
    try:
        for index in range(MAX_USERS):
            if len(claimed) == count:
                return claimed
            user = try_claim(folder, index)
            if user is not None:
                claimed.append(user)
    except BaseException:
        release_users(claimed)
        raise
    release_users(claimed)
    raise RuntimeError(f"{folder}: all {MAX_USERS} grader users are held by other grading runs")


def try_claim(folder: Path, index: int) -> GraderUser | None:
    """Grader user ``index`` if no other run holds its lock, else None."""
    fd = os.open(folder / f"{USER_PREFIX}{index}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    try:
        uid, gid = ensure_user(index)
        processes.kill_user(uid)  # a crashed run's leftovers
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())  # who holds it, for whoever looks
    except BaseException:
        os.close(fd)
        raise
    return GraderUser(index, uid, gid, fd)


def release_users(users: list[GraderUser]) -> None:
    for user in users:
        user.release()
