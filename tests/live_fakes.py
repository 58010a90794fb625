"""Attempts as the live queue stores them, for the tests of the live pages."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

from rocmlab.live.attempts import Attempt, CheckOutcome, GradeResult
from rocmlab.live.queue import LiveQueue

_ids = itertools.count(1)


def iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat()


def check(grade_id: str, passed: bool, en: str = "", zh: str = "", points: float = 1.0) -> CheckOutcome:
    message = {"en": en, "zh": zh} if en else {}
    return CheckOutcome(grade_id, f"{grade_id}-rule", passed, points if passed else 0.0, points, message)


def attempt(learner: str, lab: str, at: float, state: str = "graded", checks=(), started_at=None) -> Attempt:
    """An attempt received at ``at`` (epoch s); a graded one started 1 s and finished 3 s later."""
    graded = state == "graded"
    return Attempt(
        id=next(_ids),
        learner=learner,
        lab=lab,
        submitted_at=iso(at - 1),
        state=state,
        queued_at=at,
        started_at=at + 1 if graded else started_at,
        finished_at=at + 3 if graded else None,
        score=sum(c.points for c in checks) if graded else None,
        max_score=sum(c.max_points for c in checks) if graded else None,
        checks=list(checks),
    )


def graded_in(queue: LiveQueue, learner: str, lab: str, checks, at: float, source: str = "") -> None:
    """Submit, claim and complete an attempt in a real queue, as the service and a worker do, with
    the queue's clock at ``at`` (received, started and graded then); ``source``: the service's copy
    (default: a path that does not exist)."""
    queue = LiveQueue(queue.path, clock=lambda: at)
    queue.submit(learner, lab, iso(at), source or f"/srv/copies/{learner}-{at}")
    claimed = queue.claim("worker-test", lease_s=60)
    assert claimed is not None and claimed.learner == learner
    score = sum(c.points for c in checks)
    queue.complete(claimed.id, "worker-test", GradeResult(score, sum(c.max_points for c in checks), list(checks)))
