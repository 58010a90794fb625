"""nbgrader's collect and release-feedback steps, made safe against a learner who cheats.

nbgrader 0.9 trusts the exchange's inbound folder: the name a submission is filed under says
whose it is (``<student>+<lab>+<timestamp>+<random>``), ``check_owner`` only logs a warning, and
the copy (``shutil.copytree``) follows symlinks with the instructor's rights. Here:

- every collect copies a submission without ever following a link: a submission holding a
  symlink, a device or a FIFO, or being one itself, is refused and named in the log, so a
  learner's ``lab.ipynb -> ~instructor/course/source/...`` cannot fetch a solution;
- ``OwnerCheckedCollect`` (the workshop server, one Unix account per learner) collects, for each
  student, the newest submission that the student's own account owns;
- ``LearnerFolderCollect`` and ``LearnerFolderReleaseFeedback`` (Kubernetes, where every pod runs
  as the same uid) use one inbound and one feedback folder per learner,
  ``inbound/<user>/`` and ``feedback/<user>/``: each learner's pod mounts only its own two
  folders (as its ``inbound`` and ``feedback``) and the released labs read-only, so the folder
  names the learner, whatever name a learner writes into a submission.

The configs name these classes by dotted path (``ExchangeFactory.collect``).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import stat

from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.exchange.default.release_feedback import ExchangeReleaseFeedback

COPY_CHUNK = 1 << 20


class UnsafeSubmission(Exception):
    """A submission the collect step refuses; the message says which entry and why."""


def submission_problem(folder: str) -> str | None:
    """Why ``folder`` cannot be collected safely (a link, a special file), or None."""
    if os.path.islink(folder):
        return f"{folder} is a symbolic link"
    if not os.path.isdir(folder):
        return f"{folder} is not a folder"
    for parent, folders, files in os.walk(folder):  # os.walk never descends into linked folders
        for name in folders + files:
            path = os.path.join(parent, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                return f"{path} is a symbolic link"
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                return f"{path} is not a regular file"
    return None


def copy_without_links(src: str, dest: str, ignore=None) -> None:
    """Copy the tree ``src`` to ``dest`` (which must not exist) opening nothing through a link:
    each entry is checked with lstat and opened with O_NOFOLLOW, so a file swapped for a link
    during the copy fails it instead of being followed. Raises UnsafeSubmission."""
    if os.path.islink(src):
        raise UnsafeSubmission(f"{src} is a symbolic link")
    os.makedirs(dest)
    names = sorted(os.listdir(src))
    ignored = set(ignore(src, names)) if ignore else set()
    for name in names:
        if name in ignored:
            continue
        source, target = os.path.join(src, name), os.path.join(dest, name)
        mode = os.lstat(source).st_mode
        if stat.S_ISDIR(mode):
            copy_without_links(source, target, ignore)
        elif stat.S_ISREG(mode):
            copy_regular_file(source, target)
        else:
            raise UnsafeSubmission(f"{source} is {'a symbolic link' if stat.S_ISLNK(mode) else 'not a regular file'}")


def copy_regular_file(source: str, target: str) -> None:
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise UnsafeSubmission(f"{source}: {exc.strerror} (replaced by a link?)") from None
    with os.fdopen(fd, "rb") as reader:
        status = os.fstat(reader.fileno())
        if not stat.S_ISREG(status.st_mode):
            raise UnsafeSubmission(f"{source} is not a regular file")
        with open(target, "xb") as writer:
            shutil.copyfileobj(reader, writer, COPY_CHUNK)
    os.utime(target, ns=(status.st_atime_ns, status.st_mtime_ns))


class SafeCollect(ExchangeCollect):
    """nbgrader's collect, refusing submissions that hold links or special files."""

    def refused(self, record: dict) -> str | None:
        """Why this record is not collected, or None."""
        return submission_problem(os.path.join(self.inbound_path, record["filename"]))

    def copy_files(self):
        kept = []
        for record in self.src_records:
            reason = self.refused(record)
            if reason:
                self.log.warning("not collected: %s (%s)", record["filename"], reason)
            else:
                kept.append(record)
        self.src_records = kept
        super().copy_files()

    def do_copy(self, src, dest):
        try:
            copy_without_links(src, dest, shutil.ignore_patterns(*self.coursedir.ignore))
        except UnsafeSubmission as exc:
            shutil.rmtree(dest, ignore_errors=True)
            self.log.warning("not collected: %s (%s)", os.path.basename(src), exc)


class OwnerCheckedCollect(SafeCollect):
    """One Unix account per learner: the newest submission each student's own account owns.

    With ``check_owner`` off (the demo hub, where one Unix user owns everything) it only refuses
    links."""

    def owned_by_student(self, record: dict) -> bool:
        try:
            uid = os.stat(os.path.join(self.inbound_path, record["filename"]), follow_symlinks=False).st_uid
            return pwd.getpwuid(uid).pw_name == record["username"]
        except (OSError, KeyError):
            return False

    def _sort_by_timestamp(self, records):
        newest_first = super()._sort_by_timestamp(records)
        if not self.check_owner:
            return newest_first
        for record in newest_first:
            if not self.owned_by_student(record):
                self.log.warning(
                    "not collected: %s is filed under %s but not owned by that user",
                    record["filename"],
                    record["username"],
                )
        return sorted(newest_first, key=lambda record: not self.owned_by_student(record))  # stable: owned first

    def copy_files(self):
        if self.check_owner:  # a student with no submission of their own (each was named above)
            self.src_records = [record for record in self.src_records if self.owned_by_student(record)]
        super().copy_files()


class LearnerFolderCollect(SafeCollect):
    """One inbound folder per learner (``inbound/<user>/``, the only inbound a learner's pod
    mounts): the folder names the student. A submission filed inside it under another name is
    not collected."""

    def init_src(self):
        super().init_src()  # checks the course and reads the due date; its flat records are none
        student = self.coursedir.student_id or "*"
        pattern = os.path.join(self.inbound_path, student, f"*+{glob.escape(self.coursedir.assignment_id)}+*")
        newest = {}
        for path in glob.glob(pattern):
            folder = os.path.basename(os.path.dirname(path))
            record = self._path_to_record(path)
            if record["username"] != folder:
                self.log.warning(
                    "not collected: %s is filed under %s in the inbound folder of %s",
                    record["filename"],
                    record["username"],
                    folder,
                )
                continue
            record["filename"] = os.path.join(folder, record["filename"])
            newest.setdefault(folder, []).append(record)
        self.src_records = [self._sort_by_timestamp(records)[0] for records in newest.values()]


class LearnerFolderReleaseFeedback(ExchangeReleaseFeedback):
    """Feedback released into ``feedback/<student>/``, the one feedback folder a learner's pod
    mounts, instead of one folder shared by the class."""

    def copy_files(self):
        shared, chosen = self.dest_path, self.coursedir.student_id
        pattern = self.coursedir.format_path(
            self.coursedir.feedback_directory, chosen or "*", self.coursedir.assignment_id
        )
        students = sorted({os.path.basename(os.path.dirname(path)) for path in glob.glob(pattern)})
        try:
            for student in students:
                self.coursedir.student_id = student
                self.init_src()
                self.dest_path = os.path.join(shared, student)
                self.ensure_directory(self.dest_path, 0o700)
                super().copy_files()
        finally:
            self.coursedir.student_id, self.dest_path = chosen, shared
            self.init_src()
