"""What one attempt of the live workshop is, as the queue (rocmlab.live.queue) stores it and
its readers see it: its state, its graded checks, the result a worker hands back, and its JSON.

An attempt is one submission of one lab by one learner: ``queued``, then ``grading`` (held by one
worker under a lease), then ``graded`` or ``failed``. ``Attempt.to_json(private=False)`` is what a
learner may see of it (never the service's copy of the folder, the worker, the lease or the seed).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, dataclass, field
from typing import Literal

State = Literal["queued", "grading", "graded", "failed"]
STATES: tuple[str, ...] = ("queued", "grading", "graded", "failed")


@dataclass
class CheckOutcome:
    """One hidden check of one attempt, as the learner and the instructor see it."""

    grade_id: str  # the test cell (nbgrader grade id) the check scores
    check: str  # the check's name in checks.py
    passed: bool
    points: float
    max_points: float
    message: dict[str, str] = field(default_factory=dict)  # lang -> the rule, as the learner reads it
    attempted: bool = True  # False: its answer cells are as released (rocmlab.live.attempted)
    graded: bool = True  # False: the check itself failed (a grading error): never the learner's broken rule

    @classmethod
    def from_dict(cls, data: dict) -> CheckOutcome:
        return cls(
            grade_id=str(data["grade_id"]),
            check=str(data["check"]),
            passed=bool(data["passed"]),
            points=float(data["points"]),
            max_points=float(data["max_points"]),
            message={str(k): str(v) for k, v in dict(data.get("message") or {}).items()},
            attempted=data.get("attempted", True) is not False,
            graded=data.get("graded", True) is not False,
        )


@dataclass
class GradeResult:
    """What a worker hands to ``complete``."""

    score: float
    max_score: float
    checks: list[CheckOutcome] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)  # rocmlab grade's flags (tampered, timeout, ...)
    seed: int | None = None
    lang: str | None = None  # the language the submitted notebook is in (None: keep the submit's)
    notes: list[str] = field(default_factory=list)  # why a flag was raised (the notebook was edited, ...)

    @property
    def counted(self) -> bool:
        """False when a check failed itself: the grading system's failure costs the learner no attempt."""
        return all(c.graded for c in self.checks)


@dataclass
class Attempt:
    id: int
    learner: str
    lab: str
    submitted_at: str
    state: State
    worker: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    score: float | None = None
    max_score: float | None = None
    checks: list[CheckOutcome] = field(default_factory=list)
    error: str = ""
    source: str = ""  # the service's own copy of the submitted folder (never the learner's folder)
    lang: str = "en"
    queued_at: float = 0.0
    lease_until: float | None = None
    tries: int = 0  # claims so far (a claim whose worker died counts)
    flags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seed: int | None = None
    content_hash: str = ""  # sha256 of the submitted notebook
    counted: bool = True  # False: failed by the grading system, not counted against the rate limit
    regrade_of: int | None = None  # the attempt this one grades again (an instructor's regrade): never counted
    duplicate: bool = False  # set by ``submit`` when this (learner, lab, submitted_at) was already there

    @property
    def failed_checks(self) -> list[CheckOutcome]:
        """The checks failed in exercises the learner attempted (a grading error is no failure of theirs)."""
        return [c for c in self.checks if not c.passed and c.attempted and c.graded]

    @property
    def not_attempted(self) -> list[str]:
        """The exercises (test grade_ids) left as released, in the order of the checks."""
        return list(dict.fromkeys(c.grade_id for c in self.checks if not c.attempted))

    def to_json(self, *, private: bool = True) -> dict:
        """A JSON-ready dict; ``private=False`` leaves out what only the service needs (source, worker, lease)."""
        data = asdict(self)
        if not private:
            for key in ("source", "worker", "lease_until", "seed", "content_hash"):
                data.pop(key)
        return data


def attempt_from_row(row: sqlite3.Row) -> Attempt:
    """The attempt a row of the queue's ``attempts`` table holds."""
    return Attempt(
        id=row["id"],
        learner=row["learner"],
        lab=row["lab"],
        submitted_at=row["submitted_at"],
        state=row["state"],
        worker=row["worker"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        score=row["score"],
        max_score=row["max_score"],
        checks=[CheckOutcome.from_dict(c) for c in json.loads(row["checks"])],
        error=row["error"],
        source=row["source"],
        lang=row["lang"],
        queued_at=row["queued_at"],
        lease_until=row["lease_until"],
        tries=row["tries"],
        flags=json.loads(row["flags"]),
        notes=json.loads(row["notes"]),
        seed=row["seed"],
        content_hash=row["content_hash"],
        counted=bool(row["counted"]),
        regrade_of=row["regrade_of"],
    )
