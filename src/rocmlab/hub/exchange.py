"""nbgrader's exchange with one inbound and one feedback folder per learner, and nothing writable
shared between learners (nbgrader 0.9's pluggable exchange classes, set through ``ExchangeFactory``).

nbgrader's own exchange is one world-writable folder: every learner writes the class's
``inbound/`` (a submission is whoever's name it is filed under; ``check_owner`` only warns), the
class's ``feedback/`` is hidden only by its file names, the collect copies with ``copytree``
(following links with the instructor's rights), and a learner who makes ``<root>/<course>`` first
owns the course. Here the layout is the one of the Kubernetes hub (rocmlab.hub.exchange_layout
makes it), and every learner's folder is read and written through descriptors
(rocmlab.hub.safe_copy):

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
- ``CourseReleaseAssignment``: releases into the prepared ``outbound/`` without touching the
  root's mode; a release is its instructor's, whom no co-instructor can replace.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd

from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.exchange.default.fetch_assignment import ExchangeFetchAssignment
from nbgrader.exchange.default.fetch_feedback import ExchangeFetchFeedback
from nbgrader.exchange.default.list import ExchangeList
from nbgrader.exchange.default.release_assignment import ExchangeReleaseAssignment
from nbgrader.exchange.default.release_feedback import ExchangeReleaseFeedback
from nbgrader.exchange.default.submit import ExchangeSubmit
from nbgrader.utils import notebook_hash
from traitlets import Bool

from .safe_copy import (
    SAFE_NAME,
    TreeCopy,
    UnsafeSubmission,
    as_timestamp,
    descriptor,
    examine_at,
    not_owned_by,
    open_dir,
    open_dir_at,
    submission_at,
    write_at,
)

TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f UTC"  # nbgrader's own (ExchangeSubmit.timestamp)


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
    """A release into the prepared ``<course>/outbound/`` (instructors' group may add to it); the
    course folder and the learners' folders are not the instructor's to make.

    A release is its instructor's: only they (and root) replace it. ``outbound/`` has the sticky bit
    (rocmlab.hub.exchange_layout), so the kernel lets no one else rename or remove a release
    (unlink(2), rename(2): EPERM in a sticky folder for a file one does not own); its files and
    folders are writable by its owner only; and a co-instructor's ``--force`` is refused here,
    naming the owner, before anything is removed."""

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
        self.refuse_anothers_release()
        super().copy_files()
        self.set_perms(self.dest_path, fileperms=0o644, dirperms=0o2755)  # read by all, changed by its instructor

    def refuse_anothers_release(self) -> None:
        try:
            owner = os.lstat(self.dest_path).st_uid
        except FileNotFoundError:
            return
        if os.geteuid() not in (0, owner):
            self.fail(
                f"{self.dest_path} was released by {account_name(owner)}: only they (or root) may replace it. "
                "Ask them to release it again, or root to hand it over (chown -R)"
            )


def account_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


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
                    newest = examine_at(fd, name, uid, os.path.join(student, name), **self.limits())
                except (UnsafeSubmission, OSError) as exc:
                    self.log.warning("not collected: %s/%s (%s)", student, name, exc)
                    continue
                when = as_timestamp(newest)
                records.append({"username": student, "filename": name, "timestamp": when, "uid": uid})
        return records

    def owned_by_account(self, student: str, uid: int) -> bool:
        refused = not_owned_by(student, uid)
        if refused:
            self.log.warning("not collected: %s", refused)
        return not refused

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
            with submission_at(self.inbound_path, student, name) as submission:
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
