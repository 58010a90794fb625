"""Reading a learner's folder, and writing into one, through directory descriptors only: every
entry opened relative to its parent's descriptor with ``O_NOFOLLOW``, so that a folder swapped for
a link while it is read fails the read instead of leading it elsewhere.

The instructor's collect and feedback release (rocmlab.hub.exchange) and the live service's
collect (rocmlab.live.collect) copy submissions with it: ``TreeCopy`` refuses links, devices,
FIFOs and entries not owned by the folder's owner (no hard link to someone else's file), keeps
nbgrader's size limits, and records the newest ctime it saw, the submission's time (which no
learner can set back); ``examine_at`` (a submission checked through, nothing copied),
``submission_at`` (a submission's folder opened level by level) and ``not_owned_by`` (a learner's
folder owned by another account) are the steps both collects take; ``write_at`` replaces a file in a learner's folder without following a
link planted there.
"""

from __future__ import annotations

import contextlib
import datetime
import fnmatch
import os
import pwd
import re
import stat

COPY_CHUNK = 1 << 20
SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")  # one path component (a user name), never ".."
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UnsafeSubmission(Exception):
    """A submission the collect step refuses; the message says which entry and why."""


def open_dir(path: str) -> int:
    """A descriptor of the folder ``path`` (its last component must not be a link)."""
    return os.open(path, DIR_FLAGS)


def open_dir_at(parent: int, name: str) -> int:
    """A descriptor of the folder ``name`` in the folder ``parent``; a link, or anything that is not
    a folder, raises UnsafeSubmission."""
    _check_component(name)
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        raise UnsafeSubmission(f"{name}: {exc.strerror} (a link or not a folder?)") from None


def _check_component(name: str) -> None:
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise UnsafeSubmission(f"{name!r} is not a plain name")


@contextlib.contextmanager
def descriptor(fd: int):
    try:
        yield fd
    finally:
        os.close(fd)


def _ignored(name: str, patterns) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in patterns)


class TreeCopy:
    """Copies (or with ``dest=None`` only examines) the tree below a folder descriptor. Every entry
    is opened relative to its parent's descriptor with O_NOFOLLOW; a link, a device, a FIFO or an
    entry not owned by ``uid`` raises UnsafeSubmission. ``newest`` is the latest ctime seen."""

    def __init__(self, uid: int | None, ignore=(), include=("*",), max_file=0, max_total=0, log=None):
        self.uid, self.ignore, self.include = uid, list(ignore), list(include)
        self.max_file, self.max_total, self.log = max_file, max_total, log
        self.total, self.newest = 0, 0

    def _seen(self, status: os.stat_result, where: str) -> None:
        if self.uid is not None and status.st_uid != self.uid:
            raise UnsafeSubmission(f"{where} belongs to uid {status.st_uid}, not to the learner's folder's owner")
        self.newest = max(self.newest, status.st_ctime_ns)

    def run(self, fd: int, dest: str | None, where: str = ".") -> None:
        status = os.fstat(fd)
        if not stat.S_ISDIR(status.st_mode):
            raise UnsafeSubmission(f"{where} is not a folder")
        self._seen(status, where)
        if dest is not None:
            os.mkdir(dest, 0o700)
        for name in sorted(os.listdir(fd)):
            path = os.path.join(where, name)
            if _ignored(name, self.ignore):
                continue
            try:
                kind = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
            except FileNotFoundError:
                raise UnsafeSubmission(f"{path} vanished during the copy") from None
            if stat.S_ISDIR(kind):
                with descriptor(open_dir_at(fd, name)) as child:
                    self.run(child, None if dest is None else os.path.join(dest, name), path)
            elif stat.S_ISREG(kind):
                self._file(fd, name, dest, path)
            else:
                what = "a symbolic link" if stat.S_ISLNK(kind) else "not a regular file"
                raise UnsafeSubmission(f"{path} is {what}")
        if dest is not None:
            os.chmod(dest, 0o755)

    def _file(self, fd: int, name: str, dest: str | None, path: str) -> None:
        try:
            source = os.open(name, FILE_FLAGS, dir_fd=fd)
        except OSError as exc:
            raise UnsafeSubmission(f"{path}: {exc.strerror} (replaced by a link?)") from None
        with descriptor(source):
            status = os.fstat(source)
            if not stat.S_ISREG(status.st_mode):
                raise UnsafeSubmission(f"{path} is not a regular file")
            self._seen(status, path)
            if not _ignored(name, self.include):
                return
            if self.max_file and status.st_size > self.max_file:
                if self.log:
                    self.log.warning("not collected: %s (%d bytes, more than %d)", path, status.st_size, self.max_file)
                return
            self.total += status.st_size
            if self.max_total and self.total > self.max_total:
                raise UnsafeSubmission(f"more than {self.max_total} bytes")
            if dest is None:
                return
            target = os.open(os.path.join(dest, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(target, "wb") as writer:
                while chunk := os.read(source, COPY_CHUNK):
                    writer.write(chunk)
            after = os.fstat(source)  # written to while we read: the later change counts
            self._seen(after, path)
            os.utime(os.path.join(dest, name), ns=(after.st_atime_ns, after.st_mtime_ns))


def copy_without_links(src: str, dest: str, uid: int | None = None, **limits) -> int:
    """Copy the folder ``src`` to ``dest`` (which must not exist) through descriptors (TreeCopy);
    the newest ctime in it, in nanoseconds. Raises UnsafeSubmission."""
    try:
        fd = open_dir(src)
    except OSError as exc:
        raise UnsafeSubmission(f"{src}: {exc.strerror} (a link or not a folder?)") from None
    with descriptor(fd):
        copy = TreeCopy(uid, **limits)
        copy.run(fd, dest)
        return copy.newest


def examine_at(folder: int, name: str, uid: int, label: str, **limits) -> int:
    """The newest ctime (ns) in the submission ``name`` of a learner's folder (descriptor ``folder``),
    every entry checked as ``TreeCopy`` checks it and nothing copied. Raises UnsafeSubmission or OSError."""
    with descriptor(open_dir_at(folder, name)) as submission:
        examined = TreeCopy(uid, **limits)
        examined.run(submission, None, label)
    return examined.newest


@contextlib.contextmanager
def submission_at(inbound: str, learner: str, name: str):
    """The descriptor of ``<inbound>/<learner>/<name>``, each level opened without following a link."""
    with descriptor(open_dir(inbound)) as folders, descriptor(open_dir_at(folders, learner)) as mine:
        with descriptor(open_dir_at(mine, name)) as submission:
            yield submission


def not_owned_by(learner: str, uid: int) -> str:
    """Why a learner's folder owned by ``uid`` is not the account ``learner``'s; empty when it is."""
    try:
        expected = pwd.getpwnam(learner).pw_uid
    except KeyError:
        return f"{learner} is not a user of this machine"
    return "" if uid == expected else f"the inbound folder of {learner} is owned by uid {uid}, not by {learner}"


def as_timestamp(ctime_ns: int) -> datetime.datetime:
    """nbgrader's timestamps: naive datetimes in UTC."""
    return datetime.datetime.fromtimestamp(ctime_ns / 1e9, datetime.UTC).replace(tzinfo=None)


def write_at(folder: int, name: str, data: bytes, mode: int = 0o644) -> None:
    """Replace ``name`` in the folder ``folder`` by a new file: whatever was there (a link to
    somewhere else included) is unlinked, never followed."""
    _check_component(name)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=folder)
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=folder)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
        os.fchmod(file.fileno(), mode)
