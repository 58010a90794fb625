"""What the live service does when it starts: it collects the exchange again, so that a learner's
``rocmlab submit`` whose request was lost with the service (stopped, restarting) is queued without
the learner doing anything.

For each learner's inbound folder and each lab of the workshop: the newest submission, if it was
made in the last ``RECOLLECT_WINDOW_S`` and is newer than the learner's last attempt at the lab,
is collected and queued as ``api/submit`` would (under the rate limit, a byte-identical notebook
answered by its attempt). Older submissions are the instructor's to collect (nbgrader's collect).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time

from ..hub.safe_copy import SAFE_NAME, UnsafeSubmission, as_timestamp, descriptor, open_dir, open_dir_at
from .attempts import Attempt
from .collect import NothingToCollect, collect, newest_submission
from .handlers import LiveSettings
from .queue import LiveQueue, RateLimited

RECOLLECT_WINDOW_S = 15 * 60.0  # longer than `rocmlab submit` keeps retrying by default (600 s)
log = logging.getLogger("rocmlab.live")


def file_sha256(path) -> str:
    """The notebook's content hash: a byte-identical resubmission is answered by its attempt."""
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def submission_labs(inbound: int, learner: str, labs: tuple[str, ...]) -> set[str]:
    """The labs ``learner`` has submissions of (among ``labs``, when the workshop names them)."""
    try:
        with descriptor(open_dir_at(inbound, learner)) as folder:
            names = os.listdir(folder)
    except (UnsafeSubmission, OSError):
        return set()
    found = {name.split("+")[1] for name in names if name.count("+") == 2 and name.startswith(f"{learner}+")}
    return {lab for lab in found if SAFE_NAME.fullmatch(lab) and (not labs or lab in labs)}


def recollect(live: LiveSettings, queue: LiveQueue, *, window_s: float = RECOLLECT_WINDOW_S, now=time.time):
    """Queue the recent submissions no attempt was made for; the attempts queued."""
    inbound_path = live.exchange / live.course_id / "inbound"
    try:
        inbound = open_dir(str(inbound_path))
    except OSError as exc:
        log.warning("re-collect at start: %s: %s", inbound_path, exc)
        return []
    queued: list[Attempt] = []
    with descriptor(inbound):
        for learner in sorted(n for n in os.listdir(inbound) if SAFE_NAME.fullmatch(n)):
            for lab in sorted(submission_labs(inbound, learner, live.labs)):
                attempt = _recollect_one(live, queue, inbound, learner, lab, now() - window_s, file_sha256)
                if attempt is not None:
                    queued.append(attempt)
    return queued


def _recollect_one(live, queue, inbound: int, learner: str, lab: str, since: float, digest) -> Attempt | None:
    try:
        _, newest_ns, _ = newest_submission(inbound, learner, lab, live.owner_is_account)
    except NothingToCollect:
        return None
    submitted_at = as_timestamp(newest_ns).isoformat(timespec="microseconds")
    latest = queue.latest(learner, lab)
    if newest_ns / 1e9 < since or (latest is not None and latest.submitted_at >= submitted_at):
        return None
    try:
        collected = collect(
            live.exchange, live.course_id, learner, lab, live.spool, owner_is_account=live.owner_is_account
        )
        attempt = queue.submit(
            learner,
            lab,
            collected.submitted_at,
            str(collected.notebook),
            limit=(live.rate_limit, live.rate_window_s),
            content_hash=digest(collected.notebook),
        )
    except (NothingToCollect, RateLimited) as exc:
        log.info("re-collect at start: %s %s not queued: %s", learner, lab, exc)
        return None
    if attempt.duplicate:
        return None
    log.info("re-collect at start: queued %s %s (attempt %d)", learner, lab, attempt.id)
    return attempt
