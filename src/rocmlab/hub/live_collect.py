"""The live service's collect of one learner's newest submission of one lab, from that learner's
own inbound folder, with the exchange's safe copy (rocmlab.hub.safe_copy): every entry opened through
a descriptor with O_NOFOLLOW, owned by the owner of the learner's folder, the time of the
submission its newest ctime (which no learner can set back).

The copy goes into the service's spool, ``<spool>/<learner>/<lab>/<time>/``, a folder no learner
can write: what is graded is that copy, never the learner's folder, which they may change after
submitting.
"""

from __future__ import annotations

import os
import pwd
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..grading.submissions import pick_lab_notebook
from .safe_copy import (
    SAFE_NAME,
    TreeCopy,
    UnsafeSubmission,
    as_timestamp,
    descriptor,
    open_dir,
    open_dir_at,
)

MAX_FILE_BYTES = 100 * 2**20  # nbgrader's own defaults (CourseDirectory.max_file_size, max_dir_size)
MAX_TOTAL_BYTES = 1000 * 2**20


class NothingToCollect(Exception):
    """No submission of that lab in the learner's folder (or none that may be collected: the
    message says why)."""


@dataclass(frozen=True)
class Collected:
    learner: str
    lab: str
    submitted_at: str  # ISO 8601, UTC: the newest ctime in the submission
    folder: Path  # the spooled copy
    notebook: Path  # the notebook of the lab in it


def _owner_check(learner: str, uid: int) -> None:
    try:
        expected = pwd.getpwnam(learner).pw_uid
    except KeyError:
        raise NothingToCollect(f"{learner} is not a user of this machine") from None
    if uid != expected:
        raise NothingToCollect(f"the inbound folder of {learner} is owned by uid {uid}, not by {learner}")


def newest_submission(inbound: int, learner: str, lab: str, owner_is_account: bool) -> tuple[str, int, int]:
    """(name, newest ctime in ns, owner uid) of the learner's newest submission of ``lab`` in their
    folder under the descriptor ``inbound``; NothingToCollect if there is none that may be collected."""
    try:
        folder = open_dir_at(inbound, learner)
    except UnsafeSubmission as exc:
        raise NothingToCollect(f"no inbound folder of {learner}: {exc}") from None
    with descriptor(folder):
        uid = os.fstat(folder).st_uid
        if owner_is_account:
            _owner_check(learner, uid)
        found = []
        for name in sorted(os.listdir(folder)):
            if not name.startswith(f"{learner}+{lab}+"):  # filed under another name, or another lab
                continue
            try:
                with descriptor(open_dir_at(folder, name)) as submission:
                    examined = TreeCopy(uid, max_file=MAX_FILE_BYTES, max_total=MAX_TOTAL_BYTES)
                    examined.run(submission, None, name)
            except (UnsafeSubmission, OSError):
                continue  # the instructor's collect names it in its log; a live submit skips it
            found.append((examined.newest, name))
    if not found:
        raise NothingToCollect(f"no submission of {lab} by {learner}: submit it first (nbgrader's Assignment List)")
    newest, name = max(found)
    return name, newest, uid


def collect(
    exchange: Path, course_id: str, learner: str, lab: str, spool: Path, *, owner_is_account: bool
) -> Collected:
    """Copy the learner's newest submission of ``lab`` into the spool (once per submission: a copy
    already there is reused); NothingToCollect if there is none."""
    if not SAFE_NAME.fullmatch(learner) or not SAFE_NAME.fullmatch(lab):
        raise NothingToCollect(f"{learner!r}/{lab!r} cannot name an exchange folder")
    inbound_path = Path(exchange) / course_id / "inbound"
    with descriptor(open_dir(str(inbound_path))) as inbound:
        name, _, uid = newest_submission(inbound, learner, lab, owner_is_account)
        partial = Path(spool) / learner / lab / f".partial-{os.getpid()}-{name}"
        partial.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        shutil.rmtree(partial, ignore_errors=True)
        try:
            with descriptor(open_dir_at(inbound, learner)) as folder, descriptor(open_dir_at(folder, name)) as sub:
                copy = TreeCopy(uid, max_file=MAX_FILE_BYTES, max_total=MAX_TOTAL_BYTES)
                copy.run(sub, str(partial), name)
        except (UnsafeSubmission, OSError) as exc:
            shutil.rmtree(partial, ignore_errors=True)
            raise NothingToCollect(f"{learner}/{name} cannot be collected: {exc}") from None
    submitted_at = as_timestamp(copy.newest).isoformat(timespec="microseconds")
    final = partial.parent / submitted_at.replace(":", "-")
    if final.exists():  # the same submission collected before (a second notify)
        shutil.rmtree(partial, ignore_errors=True)
    else:
        os.rename(partial, final)
    notebook = pick_lab_notebook(sorted(final.glob("*.ipynb")), lab)
    if notebook is None:
        raise NothingToCollect(f"the submission {name} of {learner} holds no notebook")
    return Collected(learner, lab, submitted_at, final, notebook)
