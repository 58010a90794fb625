"""The live workshop's durable queue of attempts: one SQLite file in WAL mode, on one server.

This is the contract the live service, the grading workers and the instructor's pages build on;
what an attempt holds is rocmlab.live.attempts.

An **attempt** is one submission of one lab by one learner. Its life:

``queued`` --claim--> ``grading`` --complete--> ``graded``
                         |  \\--fail-----------> ``failed``   (the grader could not grade it)
                         \\--lease expires-----> claimable again; after ``max_tries`` claims
                                                 whose leases all ran out: ``failed``

Guarantees (each held by one SQL statement in an IMMEDIATE transaction, so they hold across
processes sharing the file):

- **Durable.** ``submit`` returns only after the row is committed (``synchronous=FULL``): a crash of
  the service or of a worker after that loses no submission.
- **Idempotent submit.** (learner, lab, submitted_at) is unique: submitting it again returns the
  attempt already there (in whatever state it is), never a second one; ``Attempt.duplicate`` says so.
- **Leases.** ``claim`` hands a queued attempt (or one whose lease ran out: its worker died) to one
  worker until ``lease_until``; ``renew`` extends it while the grading runs.
- **Fair.** At most one attempt of a learner is graded at a time, and learners take turns: ``claim``
  serves the learner served least recently (``turns``), their oldest attempt first; a learner
  who queues many attempts waits behind everyone else's next one.
- **Lab affinity, bounded.** A worker says which labs' graders it has open; ``claim`` may pass the
  attempt first in turn over for one of those labs (then for a lab no other worker has open), so
  that a room on two labs does not make every worker open both (issue 49: a grader's opening is
  what live grading costs above batch). Only while that attempt has waited less than
  ``affinity_s`` (30 s), or while another live worker has its lab open: that worker takes it at
  its next claim, as it is first in turn among that worker's labs too. Past that, it is the next
  handed out, whatever the worker has open; a worker never idles while an attempt waits.
- **Same notebook, same answer.** A submit whose notebook is byte-identical (``content_hash``) to the
  learner's last attempt at the lab is answered with that attempt (``duplicate``): not graded, not
  counted again. (Unless that attempt was ``failed`` and not counted: then it is graded anew.)
- **Regrades cost no attempt.** ``requeue`` grades a finished attempt's copy again (the instructor
  fixed a check) as a new attempt with ``regrade_of`` set, which the rate limit never counts.
- **Our failures cost no attempt.** An attempt that failed for a reason of the grading system (a
  worker killed ``max_tries`` times, missing assets, a crash: ``fail(..., counted=False)``) is
  ``counted = 0``: the rate limit counts only attempts that were graded or that the learner's own
  notebook failed.
- **Graded once.** ``complete`` and ``fail`` write only while that worker still holds the attempt
  (state ``grading``, ``worker`` = it): once another worker has claimed it after the lease ran
  out, the first worker's late result is refused (``LeaseLost``), so every attempt has exactly one
  recorded result. A lease that ran out but was not yet claimed by anyone is still held.
- **Seeds.** ``seed(learner, lab)`` is drawn once per learner and lab and kept: every attempt of a
  learner is graded on the same variant of the hidden checks, and the instructor's final
  ``rocmlab grade --seeds`` (``seeds_summary``) regrades with it, so batch and live scores agree.
- **Heartbeats.** Every ``claim`` and ``renew`` records the worker as seen (``workers``): the
  instructor's page tells a room with no live worker from a busy one (``room``).
- **Rate limit.** ``submissions_since(learner, lab, t)`` counts the attempts the server received
  (``queued_at``, the server's clock, not the learner's) since ``t`` and that count; duplicates are
  not new rows.

Times are seconds since the epoch (UTC, floats); ``submitted_at`` is the submission's own time as
collected (an ISO 8601 text in UTC, the file system's newest ctime in it: no learner can set it back).
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from .attempts import STATES, Attempt, GradeResult, attempt_from_row

BUSY_TIMEOUT_S = 30.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    learner TEXT NOT NULL,
    lab TEXT NOT NULL,
    submitted_at TEXT NOT NULL,
    source TEXT NOT NULL,
    lang TEXT NOT NULL DEFAULT 'en',
    state TEXT NOT NULL DEFAULT 'queued',
    queued_at REAL NOT NULL,
    worker TEXT,
    lease_until REAL,
    tries INTEGER NOT NULL DEFAULT 0,
    started_at REAL,
    finished_at REAL,
    score REAL,
    max_score REAL,
    checks TEXT NOT NULL DEFAULT '[]',
    flags TEXT NOT NULL DEFAULT '[]',
    notes TEXT NOT NULL DEFAULT '[]',
    seed INTEGER,
    error TEXT NOT NULL DEFAULT '',
    content_hash TEXT NOT NULL DEFAULT '',
    counted INTEGER NOT NULL DEFAULT 1,
    regrade_of INTEGER,
    UNIQUE (learner, lab, submitted_at)
);
CREATE INDEX IF NOT EXISTS attempts_state ON attempts (state, lease_until, id);
CREATE INDEX IF NOT EXISTS attempts_learner ON attempts (learner, lab, queued_at);
CREATE TABLE IF NOT EXISTS workers (
    worker TEXT PRIMARY KEY,
    seen_at REAL NOT NULL,
    attempt_id INTEGER,
    labs TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS turns (
    learner TEXT PRIMARY KEY,
    turn INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS seeds (
    learner TEXT NOT NULL,
    lab TEXT NOT NULL,
    seed INTEGER NOT NULL,
    PRIMARY KEY (learner, lab)
);
"""


MIGRATIONS = (
    ("attempts", "content_hash", "TEXT NOT NULL DEFAULT ''"),
    ("attempts", "counted", "INTEGER NOT NULL DEFAULT 1"),
    ("attempts", "regrade_of", "INTEGER"),
    ("workers", "labs", "TEXT NOT NULL DEFAULT '[]'"),
)


# The next attempt to grade: claimable, of a learner with no other attempt under a live lease, the
# learner served least recently (never served: first), then the oldest of theirs.
CLAIMABLE = """
SELECT a.* FROM attempts a LEFT JOIN turns t ON t.learner = a.learner
WHERE (a.state = 'queued' OR (a.state = 'grading' AND a.lease_until < :now))
  AND NOT EXISTS (
    SELECT 1 FROM attempts b
    WHERE b.learner = a.learner AND b.id != a.id AND b.state = 'grading' AND b.lease_until >= :now
  )
ORDER BY COALESCE(t.turn, 0), a.id
LIMIT 500
"""
# The labs other live workers have open (each reports them when it claims): seen within the last
# minute, or grading under a live lease (a grading worker renews only every third of its lease).
OPEN_ELSEWHERE = """
SELECT w.labs FROM workers w LEFT JOIN attempts a ON a.id = w.attempt_id
WHERE w.worker != :worker
  AND (w.seen_at >= :since OR (a.state = 'grading' AND a.worker = w.worker AND a.lease_until >= :now))
"""

AFFINITY_S = 30.0  # how long the attempt first in turn may be passed over for a lab a worker has open


class QueueError(RuntimeError):
    """The queue file cannot be used; the message names it."""


class RateLimited(QueueError):
    """A learner reached the submissions allowed per lab in the window; ``retry_at`` (epoch seconds)
    is when the oldest of them leaves it."""

    def __init__(self, message: str, retry_at: float):
        super().__init__(message)
        self.retry_at = retry_at


class LeaseLost(QueueError):
    """A worker wrote a result for an attempt it no longer holds (another worker claimed it after its
    lease ran out, or it was already completed): the result is dropped."""


class LiveQueue:
    """The queue in the SQLite file ``path`` (made with its folder, mode 700, if missing).

    Every method opens its own short transaction, so one ``LiveQueue`` may be used from several
    threads (one connection per call) and several processes may share the file. ``clock`` gives the
    time (tests pass a fake one); ``max_tries`` claims whose leases all ran out fail the attempt
    (a submission that kills every worker that grades it stops there).
    """

    def __init__(self, path: Path | str, *, clock=time.time, max_tries: int = 3, affinity_s: float = AFFINITY_S):
        self.path = Path(path)
        self.clock = clock
        if affinity_s < 0:
            raise QueueError(f"affinity_s must be 0 or more, got {affinity_s}")
        self.affinity_s = affinity_s
        if max_tries < 1:
            raise QueueError(f"max_tries must be 1 or more, got {max_tries}")
        self.max_tries = max_tries
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            db = self._connect()
            try:
                db.executescript(SCHEMA)  # each statement its own transaction; IF NOT EXISTS: safe to race
                self._migrate(db)
            finally:
                db.close()
        except sqlite3.Error as exc:
            raise QueueError(f"{self.path}: not a usable live queue: {exc}") from None

    @staticmethod
    def _migrate(db: sqlite3.Connection) -> None:
        """Add the columns a queue file made by an older rocmlab lacks."""
        for table, column, declaration in MIGRATIONS:
            if column not in {row[1] for row in db.execute(f"PRAGMA table_info({table})")}:
                try:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
                except sqlite3.OperationalError as exc:  # another process added it first
                    if "duplicate column" not in str(exc):
                        raise

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        return db

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """An IMMEDIATE transaction (the write lock taken at once: no two claimers read the same row
        as free), committed on leaving, rolled back on an exception."""
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()

    def _read(self, sql: str, args=()) -> list[sqlite3.Row]:
        db = self._connect()
        try:
            return db.execute(sql, args).fetchall()
        finally:
            db.close()

    # ------------------------------------------------------------------ the service

    def submit(
        self,
        learner: str,
        lab: str,
        submitted_at: str,
        source: str,
        lang: str = "en",
        *,
        limit: tuple[int, float] | None = None,
        content_hash: str = "",
    ) -> Attempt:
        """Queue a submission (``source``: the service's copy of it); the attempt, new or (the same
        learner, lab and submitted_at again) the one already there with ``duplicate=True``.
        ``limit=(n, window_s)``: RateLimited, nothing queued, if the learner already has ``n``
        attempts at the lab received in the last ``window_s`` seconds (checked in the same
        transaction as the insert: concurrent submits cannot both slip under it). ``content_hash``
        (the notebook's sha256): the learner's last attempt at the lab with the same hash is
        answered instead, unless it failed without counting."""
        for name, value in (("learner", learner), ("lab", lab), ("submitted_at", submitted_at), ("source", source)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"submit: {name} must be a non-empty text, got {value!r}")
        with self._transaction() as db:
            row = db.execute(
                "SELECT * FROM attempts WHERE learner = ? AND lab = ? AND submitted_at = ?",
                (learner, lab, submitted_at),
            ).fetchone()
            if row is not None:
                attempt = attempt_from_row(row)
                attempt.duplicate = True
                return attempt
            if content_hash:
                last = db.execute(
                    "SELECT * FROM attempts WHERE learner = ? AND lab = ? ORDER BY id DESC LIMIT 1", (learner, lab)
                ).fetchone()
                if last is not None and last["content_hash"] == content_hash and last["counted"]:
                    attempt = attempt_from_row(last)
                    attempt.duplicate = True
                    return attempt
            if limit is not None:
                self._check_limit(db, learner, lab, *limit)
            seed = self._seed(db, learner, lab)
            cursor = db.execute(
                "INSERT INTO attempts (learner, lab, submitted_at, source, lang, queued_at, seed, content_hash) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (learner, lab, submitted_at, source, lang, self.clock(), seed, content_hash),
            )
            return attempt_from_row(db.execute("SELECT * FROM attempts WHERE id = ?", (cursor.lastrowid,)).fetchone())

    def requeue(self, attempt_id: int, tag: str) -> Attempt:
        """Grade the copy of a finished attempt again (a check was fixed): a new attempt of the same
        learner, lab, copy, hash and seed, queued now, ``regrade_of`` the old one: never counted
        against the rate limit. Requeueing the same attempt under the same ``tag`` (the regrade's
        name) returns the attempt already there (``duplicate``)."""
        with self._transaction() as db:
            old = db.execute("SELECT * FROM attempts WHERE id = ?", (attempt_id,)).fetchone()
            if old is None or old["state"] not in ("graded", "failed"):
                state = old["state"] if old else "missing"
                raise QueueError(f"attempt {attempt_id} is {state}: only a finished one is regraded")
            submitted_at = f"{old['submitted_at']} {tag}"  # sorts after the original (recollect compares)
            row = db.execute(
                "SELECT * FROM attempts WHERE learner = ? AND lab = ? AND submitted_at = ?",
                (old["learner"], old["lab"], submitted_at),
            ).fetchone()
            if row is not None:
                attempt = attempt_from_row(row)
                attempt.duplicate = True
                return attempt
            cursor = db.execute(
                "INSERT INTO attempts (learner, lab, submitted_at, source, lang, queued_at, seed, content_hash, "
                "regrade_of) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    old["learner"],
                    old["lab"],
                    submitted_at,
                    old["source"],
                    old["lang"],
                    self.clock(),
                    old["seed"],
                    old["content_hash"],
                    attempt_id,
                ),
            )
            return attempt_from_row(db.execute("SELECT * FROM attempts WHERE id = ?", (cursor.lastrowid,)).fetchone())

    def _check_limit(self, db: sqlite3.Connection, learner: str, lab: str, count: int, window_s: float) -> None:
        since = self.clock() - window_s
        times = [
            row[0]
            for row in db.execute(
                "SELECT queued_at FROM attempts WHERE learner = ? AND lab = ? AND queued_at > ? AND counted = 1 "
                "AND regrade_of IS NULL "
                "ORDER BY queued_at",
                (learner, lab, since),
            )
        ]
        if len(times) >= count:
            retry_at = times[len(times) - count] + window_s
            raise RateLimited(
                f"{learner} submitted {lab} {len(times)} times in the last {window_s / 60:g} minutes "
                f"(at most {count}): next submission possible in {max(0, retry_at - self.clock()):.0f} s",
                retry_at,
            )

    @staticmethod
    def _seed(db: sqlite3.Connection, learner: str, lab: str) -> int:
        db.execute(
            "INSERT OR IGNORE INTO seeds (learner, lab, seed) VALUES (?, ?, ?)",
            (learner, lab, secrets.randbelow(2**31)),
        )
        return db.execute("SELECT seed FROM seeds WHERE learner = ? AND lab = ?", (learner, lab)).fetchone()[0]

    def seed(self, learner: str, lab: str) -> int:
        """The variant of ``lab``'s hidden checks ``learner`` is graded on (drawn on first use, then kept)."""
        with self._transaction() as db:
            return self._seed(db, learner, lab)

    def submissions_since(self, learner: str, lab: str, since: float) -> int:
        """Attempts of ``learner`` at ``lab`` the server received at or after ``since`` (epoch seconds)
        that count (not those failed by the grading system)."""
        rows = self._read(
            "SELECT COUNT(*) FROM attempts WHERE learner = ? AND lab = ? AND queued_at >= ? AND counted = 1 "
            "AND regrade_of IS NULL",
            (learner, lab, since),
        )
        return rows[0][0]

    # ------------------------------------------------------------------ the workers

    def claim(self, worker_id: str, lease_s: float, labs=()) -> Attempt | None:
        """An attempt free to grade (queued, or grading with its lease run out), now held by
        ``worker_id`` for ``lease_s`` seconds; None when there is none. Only learners with no
        attempt being graded are served, the one served least recently first, their oldest attempt
        first. An attempt claimed ``max_tries`` times already, each lease run out, is failed (not
        counted: the grading stopped, not the learner) instead of handed out again.

        ``labs``: the labs whose graders the worker has open. The attempt first in turn may be passed
        over for one of those labs, then for a lab no other worker has open (opening a grader costs
        more than grading an attempt), while it has waited less than ``affinity_s``, or while
        another live worker has its lab open: that one takes it at its next claim (``choose``)."""
        if lease_s <= 0:
            raise ValueError(f"claim: lease_s must be positive, got {lease_s}")
        now = self.clock()
        labs = sorted({str(lab) for lab in labs})
        with self._transaction() as db:
            self._seen(db, worker_id, None, now, labs=labs)
            self._end_leases_of_ended_workers(db, now)
            while True:
                row = choose(
                    db.execute(CLAIMABLE, {"now": now}).fetchall(),
                    mine=set(labs),
                    elsewhere=self._open_elsewhere(db, worker_id, now),
                    passed_over_until=now - self.affinity_s,
                )
                if row is None:
                    return None
                if row["tries"] >= self.max_tries:
                    db.execute(
                        "UPDATE attempts SET state = 'failed', finished_at = ?, lease_until = NULL, error = ?, "
                        "counted = 0 WHERE id = ?",
                        (now, f"the grading stopped {row['tries']} times without a result (worker killed)", row["id"]),
                    )
                    continue
                db.execute(
                    "UPDATE attempts SET state = 'grading', worker = ?, lease_until = ?, started_at = ?, "
                    "tries = tries + 1 WHERE id = ?",
                    (worker_id, now + lease_s, now, row["id"]),
                )
                self._seen(db, worker_id, row["id"], now, labs=sorted({*labs, row["lab"]}))
                db.execute(
                    "INSERT INTO turns (learner, turn) VALUES (?, (SELECT COALESCE(MAX(turn), 0) + 1 FROM turns)) "
                    "ON CONFLICT (learner) DO UPDATE SET turn = excluded.turn",
                    (row["learner"],),
                )
                return attempt_from_row(db.execute("SELECT * FROM attempts WHERE id = ?", (row["id"],)).fetchone())

    @staticmethod
    def _end_leases_of_ended_workers(db: sqlite3.Connection, now: float) -> None:
        """End now the leases of attempts whose worker, a process of this host, has ended (killed,
        crashed): another worker takes the attempt at once rather than when its lease runs out.
        The claim counts as one of its ``max_tries``, as a lease run out does."""
        held = db.execute("SELECT id, worker FROM attempts WHERE state = 'grading' AND lease_until >= ?", (now,))
        for attempt_id, worker in held.fetchall():
            if worker_ended_here(worker):
                db.execute("UPDATE attempts SET lease_until = ? WHERE id = ?", (now - 0.001, attempt_id))

    def renew(self, attempt_id: int, worker_id: str, lease_s: float) -> None:
        """Extend ``worker_id``'s lease on the attempt to ``lease_s`` from now; LeaseLost if it no longer holds it."""
        with self._transaction() as db:
            self._holding(db, attempt_id, worker_id)
            db.execute("UPDATE attempts SET lease_until = ? WHERE id = ?", (self.clock() + lease_s, attempt_id))
            self._seen(db, worker_id, attempt_id, self.clock())

    def complete(self, attempt_id: int, worker_id: str, result: GradeResult) -> Attempt:
        """Record the grade of an attempt ``worker_id`` holds; the attempt, now ``graded``, not counted
        when a check failed itself (``GradeResult.counted``). LeaseLost (nothing written) if it no
        longer holds it."""
        with self._transaction() as db:
            self._holding(db, attempt_id, worker_id)
            db.execute(
                "UPDATE attempts SET state = 'graded', finished_at = ?, lease_until = NULL, score = ?, "
                "max_score = ?, checks = ?, flags = ?, notes = ?, seed = COALESCE(?, seed), lang = COALESCE(?, lang), "
                "error = '', counted = ? WHERE id = ?",
                (
                    self.clock(),
                    float(result.score),
                    float(result.max_score),
                    json.dumps([asdict(c) for c in result.checks], ensure_ascii=False),
                    json.dumps(list(result.flags)),
                    json.dumps(list(result.notes), ensure_ascii=False),
                    result.seed,
                    result.lang,
                    int(result.counted),
                    attempt_id,
                ),
            )
            return attempt_from_row(db.execute("SELECT * FROM attempts WHERE id = ?", (attempt_id,)).fetchone())

    def fail(self, attempt_id: int, worker_id: str, error: str, *, counted: bool = True) -> Attempt:
        """Record that the attempt ``worker_id`` holds could not be graded (``error`` says why, for the
        learner and the instructor); LeaseLost if it no longer holds it. ``counted=False``: the
        grading system failed, not the learner's notebook: the attempt does not count against the
        rate limit."""
        with self._transaction() as db:
            self._holding(db, attempt_id, worker_id)
            db.execute(
                "UPDATE attempts SET state = 'failed', finished_at = ?, lease_until = NULL, error = ?, counted = ? "
                "WHERE id = ?",
                (self.clock(), str(error)[:2000], int(counted), attempt_id),
            )
            return attempt_from_row(db.execute("SELECT * FROM attempts WHERE id = ?", (attempt_id,)).fetchone())

    def release(self, attempt_id: int, worker_id: str) -> None:
        """Give back an attempt ``worker_id`` holds but will not finish (the worker is stopping): queued
        again at once, this claim not counted against ``max_tries``; nothing if it no longer holds it."""
        with self._transaction() as db:
            try:
                self._holding(db, attempt_id, worker_id)
            except LeaseLost:
                return
            db.execute(
                "UPDATE attempts SET state = 'queued', worker = NULL, lease_until = NULL, started_at = NULL, "
                "tries = MAX(0, tries - 1) WHERE id = ?",
                (attempt_id,),
            )

    @staticmethod
    def _seen(db: sqlite3.Connection, worker_id: str, attempt_id: int | None, now: float, labs=None) -> None:
        """Record the worker as seen now, holding ``attempt_id``, with ``labs`` open (None: as before)."""
        db.execute(
            "INSERT INTO workers (worker, seen_at, attempt_id, labs) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (worker) DO UPDATE SET seen_at = excluded.seen_at, attempt_id = excluded.attempt_id, "
            "labs = COALESCE(?, labs)",
            (worker_id, now, attempt_id, json.dumps(labs or []), None if labs is None else json.dumps(labs)),
        )

    def _open_elsewhere(self, db: sqlite3.Connection, worker_id: str, now: float) -> set[str]:
        """The labs other workers seen lately have open (a grading worker renews its lease while it grades)."""
        rows = db.execute(OPEN_ELSEWHERE, {"worker": worker_id, "since": now - 60.0, "now": now})
        return {lab for (labs,) in rows for lab in json.loads(labs)}

    @staticmethod
    def _holding(db: sqlite3.Connection, attempt_id: int, worker_id: str) -> None:
        row = db.execute("SELECT state, worker FROM attempts WHERE id = ?", (attempt_id,)).fetchone()
        if row is None:
            raise LeaseLost(f"attempt {attempt_id} does not exist")
        if row["state"] != "grading" or row["worker"] != worker_id:
            raise LeaseLost(
                f"attempt {attempt_id} is {row['state']} (held by {row['worker']}), not held by {worker_id}: "
                "its result is dropped"
            )

    # ------------------------------------------------------------------ readers

    def get(self, attempt_id: int) -> Attempt | None:
        rows = self._read("SELECT * FROM attempts WHERE id = ?", (attempt_id,))
        return attempt_from_row(rows[0]) if rows else None

    def attempts(self, learner: str | None = None, lab: str | None = None, since: float | None = None) -> list[Attempt]:
        """Attempts, oldest first, of one learner and/or one lab, queued at or after ``since`` (epoch seconds)."""
        where, args = [], []
        for column, value in (("learner", learner), ("lab", lab)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        if since is not None:
            where.append("queued_at >= ?")
            args.append(since)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        return [attempt_from_row(row) for row in self._read(f"SELECT * FROM attempts{clause} ORDER BY id", args)]

    def latest(self, learner: str, lab: str) -> Attempt | None:
        """The learner's last attempt at the lab (the last received), whatever its state."""
        rows = self._read(
            "SELECT * FROM attempts WHERE learner = ? AND lab = ? ORDER BY id DESC LIMIT 1", (learner, lab)
        )
        return attempt_from_row(rows[0]) if rows else None

    def waiting(self, lab: str) -> int:
        """Attempts of ``lab`` that a worker could claim now (queued, or their lease run out)."""
        return self._read(
            "SELECT COUNT(*) FROM attempts WHERE lab = ? AND (state = 'queued' OR (state = 'grading' "
            "AND lease_until < ?))",
            (lab, self.clock()),
        )[0][0]

    def counts(self) -> dict[str, int]:
        """Attempts per state (every state named, 0 included)."""
        found = dict(self._read("SELECT state, COUNT(*) FROM attempts GROUP BY state"))
        return {state: found.get(state, 0) for state in STATES}

    def room(self, alive_s: float = 60.0) -> dict:
        """What the instructor's page shows of the queue: attempts waiting and being graded, the
        longest wait, and each worker seen in the last hour with its last heartbeat (``alive``:
        seen within ``alive_s``, or holding an attempt under a live lease: a grading worker
        renews only every third of its lease) and the attempt it holds."""
        now = self.clock()
        queued, oldest = self._read("SELECT COUNT(*), MIN(queued_at) FROM attempts WHERE state = 'queued'")[0]
        grading = self._read("SELECT COUNT(*) FROM attempts WHERE state = 'grading'")[0][0]
        workers = [
            {
                "worker": row["worker"],
                "seen_s": round(max(0.0, now - row["seen_at"]), 1),
                "alive": now - row["seen_at"] <= alive_s or bool(row["leased"]),
                "attempt": row["attempt_id"],
            }
            for row in self._read(
                "SELECT w.worker, w.seen_at, w.attempt_id, (a.state = 'grading' AND a.worker = w.worker "
                "AND a.lease_until >= ?) AS leased FROM workers w LEFT JOIN attempts a ON a.id = w.attempt_id "
                "WHERE w.seen_at > ? ORDER BY w.worker",
                (now, now - 3600),
            )
        ]
        return {
            "queued": queued,
            "grading": grading,
            "oldest_wait_s": round(now - oldest, 1) if oldest is not None else 0.0,
            "workers": workers,
            "alive_workers": sum(w["alive"] for w in workers),
        }

    def seeds_summary(self, lab: str) -> dict:
        """``{"students": [{"student", "seed"}]}``: what ``rocmlab grade LAB --seeds FILE`` reads, so the
        instructor's batch grading draws each learner's live variant."""
        rows = self._read("SELECT learner, seed FROM seeds WHERE lab = ? ORDER BY learner", (lab,))
        return {"lab": lab, "students": [{"student": r["learner"], "seed": r["seed"]} for r in rows]}


def choose(rows: list, *, mine: set[str], elsewhere: set[str], passed_over_until: float):
    """The attempt to hand out among the claimable ``rows`` (in turn order), to a worker with the labs
    ``mine`` open while other live workers have ``elsewhere`` open. The first in turn, once queued at
    or before ``passed_over_until``, unless a worker with its lab open will take it at its next claim
    (it is first in turn there too); else the first of a lab in ``mine``; else the first of a lab
    no one has open; else the first in turn. None when there are no rows."""
    if not rows:
        return None
    first = rows[0]
    if first["queued_at"] <= passed_over_until and first["lab"] not in elsewhere:
        return first
    for fits in (lambda lab: lab in mine, lambda lab: lab not in elsewhere):
        found = next((row for row in rows if fits(row["lab"])), None)
        if found is not None:
            return found
    return first


def worker_ended_here(worker_id: str | None) -> bool:
    """Whether ``worker_id`` (``new_worker_id``) names a process of this host that has ended or is a
    zombie. False for a worker of another host (a pod of the Kubernetes deployment, whose claims
    come through the service) or an id of another form: its lease runs out as before. The workers
    of this host share the service's PID namespace (the hub starts them), so their pids mean the same."""
    host, _, rest = (worker_id or "").rpartition("-")[0].rpartition("-")
    if host != os.uname().nodename or not rest.isdigit():
        return False
    try:
        os.kill(int(rest), 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's process: alive
        return False
    try:
        stat = Path(f"/proc/{rest}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] in ("Z", "X")  # state: zombie or dead (proc(5))


def new_worker_id() -> str:
    """A worker id unique across hosts and restarts: host, process id and a random part."""
    return f"{os.uname().nodename}-{os.getpid()}-{secrets.token_hex(3)}"
