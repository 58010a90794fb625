"""nbgrader's exchange with one inbound and one feedback folder per learner, and nothing writable
shared between learners (nbgrader 0.9's pluggable exchange classes, set through ``ExchangeFactory``).

nbgrader's own exchange is one world-writable folder: every learner writes the class's
``inbound/`` (a submission is whoever's name it is filed under; ``check_owner`` only warns), the
class's ``feedback/`` is hidden only by its file names, the collect copies with ``copytree``
(following links with the instructor's rights), and a learner who makes ``<root>/<course>`` first
owns the course. Here the layout is the one of the Kubernetes hub (rocmlab.hub.exchange_layout
makes it):

- ``<root>/<course>/outbound/``: released labs, written by instructors, read by everyone;
- ``<root>/<course>/inbound/<learner>/`` and ``feedback/<learner>/``: one learner's submissions
  and feedback, which no classmate can enter. The folders around them are not writable by any
  learner (on a workshop server they are root's, made at hub start; on Kubernetes each learner's
  pod mounts only its own two).

A learner's nbgrader sees an exchange root of its own whose ``inbound`` and ``feedback`` are its
two folders, and runs nbgrader's stock fetch, submit, list and fetch-feedback there
(``CourseFetchAssignment``, ... only stop nbgrader from demanding, or making, a world-writable
root). The instructor's steps are rocmlab's:

- ``LearnerFolderCollect``: the folder names the student, never the name a submission is filed
  under; every folder and file is opened through directory descriptors, each with
  ``O_NOFOLLOW``, so a folder swapped for a link during the copy fails it; every entry must belong
  to the owner of the learner's folder (no hard link to someone else's file); the time of a
  submission is the last change the file system recorded in it (the newest ctime, which no
  learner can set back), written into the collected ``timestamp.txt`` in place of the learner's;
  a folder whose name nbgrader cannot parse is named in the log and skipped, never fatal;
- ``LearnerFolderReleaseFeedback``: feedback written into each learner's own folder, through a
  descriptor of it, never following a link the learner put there;
- ``CourseReleaseAssignment``: releases into the prepared ``outbound/``, open to the other
  instructors, without touching the root's mode.
"""

from __future__ import annotations

import contextlib
import datetime
import fnmatch
import glob
import os
import pwd
import re
import stat

from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.exchange.default.fetch_assignment import ExchangeFetchAssignment
from nbgrader.exchange.default.fetch_feedback import ExchangeFetchFeedback
from nbgrader.exchange.default.list import ExchangeList
from nbgrader.exchange.default.release_assignment import ExchangeReleaseAssignment
from nbgrader.exchange.default.release_feedback import ExchangeReleaseFeedback
from nbgrader.exchange.default.submit import ExchangeSubmit
from nbgrader.utils import notebook_hash
from traitlets import Bool

COPY_CHUNK = 1 << 20
SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")  # one path component (a user name), never ".."
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f UTC"  # nbgrader's own (ExchangeSubmit.timestamp)


class UnsafeSubmission(Exception):
    """A submission the collect step refuses; the message says which entry and why."""


# ------------------------------------------------------------------ descriptors, never paths


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


def as_timestamp(ctime_ns: int) -> datetime.datetime:
    """nbgrader's timestamps: naive datetimes in UTC."""
    return datetime.datetime.fromtimestamp(ctime_ns / 1e9, datetime.UTC).replace(tzinfo=None)


# ------------------------------------------------------------------ a root no learner writes


class ClosedRoot:
    """The exchange root is never world-writable here: nbgrader's check that it is (and the
    release's chmod 777 of it) would fail or open it. It must exist, that is all."""

    def ensure_root(self):
        if not os.path.isdir(self.root):
            self.fail(f"The exchange {self.root} does not exist; the hub makes it at start")


class CourseFetchAssignment(ClosedRoot, ExchangeFetchAssignment):
    pass


class CourseSubmit(ClosedRoot, ExchangeSubmit):
    """nbgrader's submit, without its mode 777 on the submission (there "so the instructor can
    delete it"): the learner's own folder gives the instructors' group what it needs."""

    def copy_files(self):
        super().copy_files()
        os.chmod(os.path.join(self.inbound_path, self.assignment_filename), 0o755)


class CourseList(ClosedRoot, ExchangeList):
    pass


class CourseFetchFeedback(ClosedRoot, ExchangeFetchFeedback):
    pass


class CourseReleaseAssignment(ClosedRoot, ExchangeReleaseAssignment):
    """A release into the prepared ``<course>/outbound/`` (instructors' group may write it); the
    course folder and the learners' folders are not the instructor's to make."""

    def init_dest(self):
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.outbound_path = os.path.join(self.course_path, "outbound")
        self.inbound_path = os.path.join(self.course_path, "inbound")
        self.dest_path = os.path.join(self.outbound_path, self.coursedir.assignment_id)
        if not os.path.isdir(self.outbound_path) or os.path.islink(self.outbound_path):
            self.fail(f"{self.outbound_path} does not exist; the hub makes the course's exchange at start")
        if not os.access(self.outbound_path, os.W_OK | os.X_OK):
            self.fail(f"You may not release into {self.outbound_path} (not in the instructors' group?)")

    def copy_files(self):
        super().copy_files()
        self.set_perms(self.dest_path, fileperms=0o664, dirperms=0o2775)  # the other instructors may replace it


# ------------------------------------------------------------------ the instructor's collect


class LearnerFolderCollect(ClosedRoot, ExchangeCollect):
    """Collect from ``inbound/<learner>/``: the folder names the student (see the module's doc)."""

    owner_is_account = Bool(
        False,
        help="the learner's folder must be owned by the Unix account of that name (workshop server; "
        "on Kubernetes every pod is uid 1000)",
    ).tag(config=True)

    def limits(self) -> dict:
        return {
            "ignore": self.coursedir.ignore,
            "include": self.coursedir.include,
            "max_file": 1000 * self.coursedir.max_file_size,
            "max_total": 1000 * self.coursedir.max_dir_size,
            "log": self.log,
        }

    def init_src(self):
        from nbgrader.api import Gradebook, MissingEntry

        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.inbound_path = os.path.join(self.course_path, "inbound")
        if not os.path.isdir(self.inbound_path):
            self.fail(f"Course not found: {self.inbound_path}")
        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            try:
                self.duedate = gb.find_assignment(self.coursedir.assignment_id).duedate
            except MissingEntry:
                self.duedate = None
        self.src_records = []
        with descriptor(open_dir(self.inbound_path)) as inbound:
            for folder in sorted(os.listdir(inbound)):
                if self.coursedir.student_id not in ("", "*") and folder != self.coursedir.student_id:
                    continue
                if not SAFE_NAME.fullmatch(folder):
                    self.log.warning("not collected: the inbound folder %r is not a user name", folder)
                    continue
                records = self.learner_records(inbound, folder)
                if records:
                    self.src_records.append(self.choose(records))

    def learner_records(self, inbound: int, student: str) -> list[dict]:
        try:
            fd = open_dir_at(inbound, student)
        except UnsafeSubmission as exc:
            self.log.warning("not collected: inbound folder of %s (%s)", student, exc)
            return []
        records = []
        with descriptor(fd):
            uid = os.fstat(fd).st_uid
            if self.owner_is_account and self.check_owner and not self.owned_by_account(student, uid):
                return []
            marker = f"+{self.coursedir.assignment_id}+"
            for name in sorted(os.listdir(fd)):
                if marker not in name:
                    continue
                filed_as = name.split("+", 1)[0]
                if filed_as != student:
                    self.log.warning(
                        "not collected: %s is filed under %s in the inbound folder of %s", name, filed_as, student
                    )
                    continue
                try:
                    with descriptor(open_dir_at(fd, name)) as submission:
                        examined = TreeCopy(uid, **self.limits())
                        examined.run(submission, None, os.path.join(student, name))
                except (UnsafeSubmission, OSError) as exc:
                    self.log.warning("not collected: %s/%s (%s)", student, name, exc)
                    continue
                when = as_timestamp(examined.newest)
                records.append({"username": student, "filename": name, "timestamp": when, "uid": uid})
        return records

    def owned_by_account(self, student: str, uid: int) -> bool:
        try:
            expected = pwd.getpwnam(student).pw_uid
        except KeyError:
            self.log.warning("not collected: %s is not a user of this machine", student)
            return False
        if uid != expected:
            self.log.warning("not collected: the inbound folder of %s is owned by uid %d", student, uid)
            return False
        return True

    def choose(self, records: list[dict]) -> dict:
        newest_first = sorted(records, key=lambda record: record["timestamp"], reverse=True)
        if self.duedate is not None and self.before_duedate:
            on_time = [record for record in newest_first if record["timestamp"] <= self.duedate]
            if on_time:
                return on_time[0]
        return newest_first[0]

    def copy_files(self):
        if not self.src_records:
            self.log.warning(
                "No submissions of '%s' for course '%s' to collect",
                self.coursedir.assignment_id,
                self.coursedir.course_id,
            )
        for record in self.src_records:
            student = record["username"]
            dest = self.coursedir.format_path(self.coursedir.submitted_directory, student, self.coursedir.assignment_id)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if os.path.isdir(dest):
                existing = self.coursedir.get_existing_timestamp(dest)
                newer = existing is None or record["timestamp"] > existing
                if not (self.update and newer) and not (self.before_duedate and existing != record["timestamp"]):
                    self.log.info("Submission already exists, use --update to update: %s", student)
                    continue
            self.collect_one(record, dest)

    def collect_one(self, record: dict, dest: str) -> None:
        import shutil

        student, name = record["username"], record["filename"]
        partial = f"{dest}.rocmlab-partial"
        shutil.rmtree(partial, ignore_errors=True)
        try:
            with (
                descriptor(open_dir(self.inbound_path)) as inbound,
                descriptor(open_dir_at(inbound, student)) as folder,
                descriptor(open_dir_at(folder, name)) as submission,
            ):
                copy = TreeCopy(record["uid"], **self.limits())
                copy.run(submission, partial, os.path.join(student, name))
        except (UnsafeSubmission, OSError) as exc:
            shutil.rmtree(partial, ignore_errors=True)
            self.log.warning("not collected: %s/%s (%s)", student, name, exc)
            return
        when = as_timestamp(copy.newest)
        stamp = os.path.join(partial, "timestamp.txt")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stamp)
        with open(stamp, "x") as file:
            file.write(when.strftime(TIMESTAMP_FORMAT))
        if os.path.isdir(dest):
            self.log.info("Updating submission: %s %s", student, self.coursedir.assignment_id)
            shutil.rmtree(dest)
        else:
            self.log.info("Collecting submission: %s %s", student, self.coursedir.assignment_id)
        os.rename(partial, dest)


# ------------------------------------------------------------------ feedback into each learner's folder


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


class LearnerFolderReleaseFeedback(ClosedRoot, ExchangeReleaseFeedback):
    """Feedback released into ``feedback/<student>/``, the learner's own folder, through its
    descriptor (a link planted there is replaced, never followed)."""

    def init_dest(self):
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.dest_path = self.outbound_feedback_path = os.path.join(self.course_path, "feedback")
        if not os.path.isdir(self.dest_path):
            try:  # Kubernetes: the instructor's pod may make it; a workshop server's hub made it at start
                os.makedirs(self.dest_path, 0o755)
            except OSError:
                self.fail(f"{self.dest_path} does not exist; the hub makes the course's exchange at start")

    def copy_files(self):
        chosen = self.coursedir.student_id if self.coursedir.student_id not in ("", "*") else "*"
        pattern = self.coursedir.format_path(self.coursedir.feedback_directory, chosen, self.coursedir.assignment_id)
        excluded = set(filter(None, (self.coursedir.student_id_exclude or "").split(",")))
        for folder in sorted(glob.glob(pattern)):  # the instructor's own course folder
            student = os.path.basename(os.path.dirname(folder))
            if student in excluded:
                continue
            if not SAFE_NAME.fullmatch(student):
                self.log.warning("feedback of %r not released: not a user name", student)
                continue
            try:
                self.release_one(student, folder)
            except (OSError, UnsafeSubmission) as exc:
                self.log.warning("feedback of %s not released: %s", student, exc)

    def release_one(self, student: str, folder: str) -> None:
        with open(os.path.join(folder, "submission_secret.txt")) as file:
            secret = file.read()
        with descriptor(open_dir(self.dest_path)) as feedback:
            try:
                fd = open_dir_at(feedback, student)
            except UnsafeSubmission:
                if os.path.lexists(os.path.join(self.dest_path, student)):
                    raise
                os.mkdir(student, 0o700, dir_fd=feedback)  # Kubernetes: the instructor's pod may make it
                fd = open_dir_at(feedback, student)
            with descriptor(fd):
                for html in sorted(glob.glob(os.path.join(glob.escape(folder), "*.html"))):
                    notebook_id = os.path.splitext(os.path.basename(html))[0]
                    with open(html, "rb") as file:
                        data = file.read()
                    write_at(fd, f"{notebook_hash(secret=secret, notebook_id=notebook_id)}.html", data)
                    self.log.info(
                        "Releasing feedback for student '%s' on assignment '%s/%s/%s'",
                        student,
                        self.coursedir.course_id,
                        self.coursedir.assignment_id,
                        notebook_id,
                    )
