"""Regrade everyone: after the instructor fixed a check of a lab, every learner's last attempt at
it is graded again, with the new scores shown beside the old.

A regrade is a row of ``live_regrades`` (lab, author, time) and one row of ``live_regrade_items``
per learner who ever submitted the lab: the attempt regraded (their last one at the lab), the new
attempt (``LiveQueue.requeue``: the same copy, hash and seed, never counted against the rate
limit), or why none was made. Both tables live in the live queue's SQLite file, beside the hints,
so a restart of the service loses no regrade and its progress is read from the queue itself.

A learner whose last attempt still waits or is being graded is skipped: the workers grade it with
the fixed check anyway. One whose copy has left the spool is skipped with that reason.
"""

from __future__ import annotations

import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError
from .hints import LAB_ID
from .queue import LiveQueue
from .tables import QueueTables

FINISHED = ("graded", "failed")
SCHEMA = """
CREATE TABLE IF NOT EXISTS live_regrades (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    lab TEXT NOT NULL,
    author TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS live_regrade_items (
    regrade_id INTEGER NOT NULL REFERENCES live_regrades(id),
    learner TEXT NOT NULL,
    old_attempt INTEGER,
    new_attempt INTEGER,
    skipped TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (regrade_id, learner)
);
"""


@dataclass
class RegradeItem:
    learner: str
    old_id: int | None
    old_state: str
    old_score: float | None
    new_id: int | None
    new_state: str  # queued, grading, graded, failed; "skipped" when no attempt was made
    new_score: float | None
    max_score: float | None
    skipped: str = ""  # why no new attempt


@dataclass
class Regrade:
    id: int
    lab: str
    author: str
    created_at: float
    items: list[RegradeItem] = field(default_factory=list)

    @property
    def progress(self) -> dict[str, int]:
        """How many new attempts are in each state, and how many learners were skipped."""
        counts = dict.fromkeys(("queued", "grading", "graded", "failed", "skipped"), 0)
        for item in self.items:
            counts[item.new_state] += 1
        return counts


def last_attempts(queue: LiveQueue, lab: str) -> dict:
    """learner -> their last attempt at ``lab`` (the last received, whatever its state)."""
    last = {}
    for attempt in queue.attempts(lab=lab):
        last[attempt.learner] = attempt  # oldest first: the last one stays
    return last


class RegradeStore(QueueTables):
    """The regrades and their items, in ``path`` (the live queue's database)."""

    SCHEMA = SCHEMA

    def start(self, queue: LiveQueue, lab: str, author: str, now: float | None = None) -> Regrade:
        """Queue every learner's last finished attempt at ``lab`` again; InputError naming the field
        when ``lab`` is no lab id or nobody submitted it."""
        if not LAB_ID.fullmatch(lab or ""):
            raise InputError(f"regrade field lab: {lab!r} is not a lab id")
        last = last_attempts(queue, lab)
        if not last:
            raise InputError(f"regrade field lab: nobody has submitted {lab}: nothing to regrade")
        with closing(self._connect()) as db, db:
            cursor = db.execute(
                "INSERT INTO live_regrades (lab, author, created_at) VALUES (?, ?, ?)",
                (lab, author, time.time() if now is None else now),
            )
        regrade_id = cursor.lastrowid
        for learner, attempt in sorted(last.items()):
            new_id, skipped = None, why_not_regraded(attempt)
            if not skipped:
                new_id = queue.requeue(attempt.id, f"regrade-{regrade_id}").id
            with closing(self._connect()) as db, db:
                db.execute(
                    "INSERT INTO live_regrade_items (regrade_id, learner, old_attempt, new_attempt, skipped) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (regrade_id, learner, attempt.id, new_id, skipped),
                )
        return self.regrades(queue, regrade_id)[0]

    def regrades(self, queue: LiveQueue, regrade_id: int | None = None) -> list[Regrade]:
        """The regrades, newest first (or the one ``regrade_id``), each item with its old and new
        attempt as the queue holds them now."""
        query, args = "SELECT id, lab, author, created_at FROM live_regrades", ()
        if regrade_id is not None:
            query, args = query + " WHERE id = ?", (regrade_id,)
        with closing(self._connect()) as db:
            found = [Regrade(*row) for row in db.execute(query + " ORDER BY id DESC", args)]
            for regrade in found:
                rows = db.execute(
                    "SELECT learner, old_attempt, new_attempt, skipped FROM live_regrade_items "
                    "WHERE regrade_id = ? ORDER BY learner",
                    (regrade.id,),
                ).fetchall()
                regrade.items = [regrade_item(queue, *row) for row in rows]
        return found


def why_not_regraded(attempt) -> str:
    if attempt.state not in FINISHED:
        return f"their last attempt is {attempt.state}: graded with the fixed check anyway"
    if not Path(attempt.source).exists():
        return "the copy of their last attempt is no longer in the service's spool"
    return ""


def regrade_item(queue: LiveQueue, learner: str, old_id, new_id, skipped: str) -> RegradeItem:
    old = queue.get(old_id) if old_id is not None else None
    new = queue.get(new_id) if new_id is not None else None
    return RegradeItem(
        learner=learner,
        old_id=old_id,
        old_state=old.state if old else "",
        old_score=old.score if old else None,
        new_id=new_id,
        new_state=new.state if new else "skipped",
        new_score=new.score if new else None,
        max_score=(new.max_score if new and new.max_score is not None else old.max_score if old else None),
        skipped=skipped,
    )
