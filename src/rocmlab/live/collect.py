"""The live service's collect of one learner's newest submission of one lab, from that learner's
own inbound folder, with the exchange's safe copy (rocmlab.hub.safe_copy): every entry opened through
a descriptor with O_NOFOLLOW, owned by the owner of the learner's folder, the time of the
submission its newest ctime (which no learner can set back).

The copy goes into the service's spool, ``<spool>/<learner>/<lab>/<time>/``, a folder no learner
can write: what is graded is that copy, never the learner's folder, which they may change after
submitting. The service first examines the submission (``find_newest``: nothing copied), takes
a rate token, and only then copies its notebooks (``copy_found``), which a child checks before
anything else parses them (rocmlab.grading.notebook_limits). Copies no attempt waits for are pruned,
and each learner's copies have a quota (``prune_spool``, ``SPOOL_QUOTA_BYTES``).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..grading import notebook_limits
from ..grading.submissions import pick_lab_notebook
from ..hub import safe_copy
from ..hub.safe_copy import UnsafeSubmission, descriptor

MAX_FILE_BYTES = 100 * 2**20  # nbgrader's own defaults (CourseDirectory.max_file_size, max_dir_size)
MAX_TOTAL_BYTES = 1000 * 2**20
NOTEBOOKS = ("*.ipynb",)  # all the live grader takes of a submission
MAX_COPY_BYTES = 4 * notebook_limits.MAX_BYTES  # the notebooks of one spooled copy
SPOOL_QUOTA_BYTES = 256 * 2**20  # what one learner's copies may hold in root's spool


class NothingToCollect(Exception):
    """No submission of that lab in the learner's folder (or none that may be collected: the
    message says why)."""


class NotebookRefused(NothingToCollect):
    """The submission's notebook breaks the limits a grader takes (rocmlab.grading.notebook_limits)."""


@dataclass(frozen=True)
class Collected:
    learner: str
    lab: str
    submitted_at: str  # ISO 8601, UTC: the newest ctime in the submission
    folder: Path  # the spooled copy
    notebook: Path  # the notebook of the lab in it


def newest_submission(inbound: int, learner: str, lab: str, owner_is_account: bool) -> tuple[str, int, int]:
    """(name, newest ctime in ns, owner uid) of the learner's newest submission of ``lab`` in their
    folder under the descriptor ``inbound``; NothingToCollect if there is none that may be collected."""
    try:
        folder = safe_copy.open_dir_at(inbound, learner)
    except UnsafeSubmission as exc:
        raise NothingToCollect(f"no inbound folder of {learner}: {exc}") from None
    with descriptor(folder):
        uid = os.fstat(folder).st_uid
        refused = owner_is_account and safe_copy.not_owned_by(learner, uid)
        if refused:
            raise NothingToCollect(refused)
        found = []
        for name in sorted(os.listdir(folder)):
            if not name.startswith(f"{learner}+{lab}+"):  # filed under another name, or another lab
                continue
            try:
                newest = safe_copy.examine_at(
                    folder, name, uid, name, max_file=MAX_FILE_BYTES, max_total=MAX_TOTAL_BYTES
                )
            except (UnsafeSubmission, OSError):
                continue  # the instructor's collect names it in its log; a live submit skips it
            found.append((newest, name))
    if not found:
        raise NothingToCollect(f"no submission of {lab} by {learner}: submit it first (nbgrader's Assignment List)")
    newest, name = max(found)
    return name, newest, uid


@dataclass(frozen=True)
class Found:
    """A learner's newest submission of a lab, examined (nothing copied yet)."""

    learner: str
    lab: str
    name: str  # its folder in the learner's inbound folder
    submitted_at: str
    uid: int


def find_newest(exchange: Path, course_id: str, learner: str, lab: str, *, owner_is_account: bool) -> Found:
    """The learner's newest submission of ``lab``, only examined; NothingToCollect if there is none."""
    if not safe_copy.SAFE_NAME.fullmatch(learner) or not safe_copy.SAFE_NAME.fullmatch(lab):
        raise NothingToCollect(f"{learner!r}/{lab!r} cannot name an exchange folder")
    with descriptor(safe_copy.open_dir(str(Path(exchange) / course_id / "inbound"))) as inbound:
        name, newest, uid = newest_submission(inbound, learner, lab, owner_is_account)
    return Found(learner, lab, name, safe_copy.as_timestamp(newest).isoformat(timespec="microseconds"), uid)


def copy_found(exchange: Path, course_id: str, found: Found, spool: Path) -> Collected:
    """Copy the notebooks of ``found`` (nothing else: the grader takes the notebook alone, its data
    are the course's) into the spool, once per submission; NothingToCollect if that fails, or if
    the notebook breaks the limits of rocmlab.grading.notebook_limits (checked in a child)."""
    learner, lab, name = found.learner, found.lab, found.name
    final = Path(spool) / learner / lab / found.submitted_at.replace(":", "-")
    if not final.exists():
        partial = final.parent / f".partial-{os.getpid()}-{name}"
        partial.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        shutil.rmtree(partial, ignore_errors=True)
        copy = safe_copy.TreeCopy(found.uid, include=NOTEBOOKS, max_total=MAX_COPY_BYTES)  # one too big: refused below
        inbound = Path(exchange) / course_id / "inbound"
        try:
            with safe_copy.submission_at(str(inbound), learner, name) as submission:
                copy.run(submission, str(partial), name)
            if safe_copy.as_timestamp(copy.newest).isoformat(timespec="microseconds") != found.submitted_at:
                raise UnsafeSubmission("it changed while it was copied: submit again")
        except (UnsafeSubmission, OSError) as exc:
            shutil.rmtree(partial, ignore_errors=True)
            raise NothingToCollect(f"{learner}/{name} cannot be collected: {exc}") from None
        os.rename(partial, final)
    notebook = pick_lab_notebook(sorted(final.glob("*.ipynb")), lab)
    if notebook is None:
        raise NothingToCollect(f"the submission {name} of {learner} holds no notebook")
    try:
        notebook_limits.check_notebook(notebook, learner)
    except notebook_limits.NotebookRefused as exc:
        shutil.rmtree(final, ignore_errors=True)
        raise NotebookRefused(f"{learner}/{name}: {exc}") from None
    return Collected(learner, lab, found.submitted_at, final, notebook)


def collect(
    exchange: Path, course_id: str, learner: str, lab: str, spool: Path, *, owner_is_account: bool
) -> Collected:
    """Copy the learner's newest submission of ``lab`` into the spool (once per submission: a copy
    already there is reused); NothingToCollect if there is none."""
    found = find_newest(exchange, course_id, learner, lab, owner_is_account=owner_is_account)
    return copy_found(exchange, course_id, found, spool)


def folder_bytes(folder: Path) -> int:
    return sum(p.lstat().st_size for p in folder.rglob("*") if not p.is_symlink() and p.is_file())


def prune_spool(spool: Path, learner: str, keep) -> int:
    """Remove the learner's spooled copies that are not in ``keep`` (those of attempts still queued
    or being graded, and the newest of each lab); the bytes the learner's spool holds then."""
    keep = {Path(p).resolve() for p in keep}
    total = 0
    for lab_folder in sorted((Path(spool) / learner).glob("*")):
        copies = sorted(p for p in lab_folder.iterdir() if p.is_dir() and not p.name.startswith("."))
        for index, copy in enumerate(copies):
            if copy.resolve() in keep or index == len(copies) - 1:
                total += folder_bytes(copy)
            else:
                shutil.rmtree(copy, ignore_errors=True)
    return total
