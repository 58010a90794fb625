"""What the live workshop pages show, computed from the queue's attempts (no I/O here).

The attempts are ``rocmlab.live.attempts.Attempt``: ``learner``, ``lab``, ``state``
(queued, grading, graded, failed), the server's times (``queued_at``, ``started_at``,
``finished_at``), ``score``, ``max_score`` and, once graded, ``checks`` (each with ``grade_id``,
``passed`` and its rule's ``message`` in both languages). Only the service and its workers write
them, so everything derived here (pass rates, levels, the certificate) rests on grading the
service did, never on what a learner's browser says. "Latest" is the last received (the
queue's id order), as ``LiveQueue.latest``.

- the instructor's page: one row per learner (current lab, last attempt, time since; every
  learner on the roster, ``not submitted`` for one with no attempt yet), one per exercise (pass rate over the learners' latest graded attempts, the most common failures);
- hint targeting: the learners whose latest graded attempt of a lab failed an exercise;
- levels: per learner and lab, the best score and the exercises passed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..grading.analytics import NO_MESSAGE, TOP_FAILURES, rule_message

GRADED = "graded"


def last_activity(attempt) -> float:
    """The server's latest time for the attempt: received, started or finished grading."""
    return max(t for t in (attempt.queued_at, attempt.started_at, attempt.finished_at) if t is not None)


def attempted(check) -> bool:
    """False for a check of an exercise left as released (rocmlab.live.attempted)."""
    return getattr(check, "attempted", True)


def failed_exercises(attempt) -> list[str]:
    """grade_ids with a failed check in a graded attempt, in the order of its checks; an exercise
    the learner did not attempt is not failed (it is ``not_attempted_exercises``)."""
    failed = []
    for check in attempt.checks or []:
        if not check.passed and attempted(check) and check.grade_id not in failed:
            failed.append(check.grade_id)
    return failed


def not_attempted_exercises(attempt) -> list[str]:
    return list(dict.fromkeys(c.grade_id for c in attempt.checks or [] if not attempted(c)))


def passed_exercises(attempt) -> list[str]:
    failed = set(failed_exercises(attempt)) | set(not_attempted_exercises(attempt))
    seen = []
    for check in attempt.checks or []:
        if check.grade_id not in failed and check.grade_id not in seen:
            seen.append(check.grade_id)
    return seen


def latest_graded(attempts) -> dict[tuple[str, str], object]:
    """(learner, lab) -> that learner's latest graded attempt of the lab."""
    latest = {}
    for attempt in sorted(attempts, key=lambda a: a.id):
        if attempt.state == GRADED:
            latest[(attempt.learner, attempt.lab)] = attempt
    return latest


# ------------------------------------------------------------------ the instructor's page


@dataclass
class LearnerRow:
    learner: str
    lab: str  # the lab of the latest attempt: where the learner is working now
    state: str  # of that attempt: queued, grading, graded, failed
    score: float | None
    max_score: float | None
    failed: list[str]  # exercises failed in the latest graded attempt of that lab
    idle_s: float | None  # since the latest submit, start or result (None: never submitted)
    not_attempted: list[str] = field(default_factory=list)  # exercises of that attempt left as released


@dataclass
class ExerciseRow:
    lab: str
    grade_id: str
    graded: int = 0  # learners with a graded attempt of the lab who attempted this exercise
    passed: int = 0
    not_attempted: int = 0  # learners whose latest graded attempt left it as released
    failures: list = field(default_factory=list)  # (message, learners), most common first

    @property
    def pass_rate(self) -> float | None:
        """Passed over attempted; None when nobody attempted it (not attempted is no failure, so no 0 %)."""
        return round(self.passed / self.graded, 3) if self.graded else None


NOT_SUBMITTED = "not submitted"


def learner_rows(attempts, now: float, roster=()) -> list[LearnerRow]:
    """One row per learner who submitted, and per learner of ``roster`` who has not (yet)."""
    newest, graded = {}, latest_graded(attempts)
    for attempt in attempts:
        known = newest.get(attempt.learner)
        if known is None or attempt.id > known.id:
            newest[attempt.learner] = attempt
    rows = []
    for learner, attempt in sorted(newest.items()):
        last_graded = graded.get((learner, attempt.lab))
        shown = attempt if attempt.state == GRADED or last_graded is None else last_graded
        rows.append(
            LearnerRow(
                learner=learner,
                lab=attempt.lab,
                state=attempt.state,
                score=shown.score if shown.state == GRADED else None,
                max_score=shown.max_score if shown.state == GRADED else None,
                failed=failed_exercises(last_graded) if last_graded else [],
                idle_s=round(max(0.0, now - last_activity(attempt)), 1),
                not_attempted=not_attempted_exercises(last_graded) if last_graded else [],
            )
        )
    rows += [LearnerRow(name, "", NOT_SUBMITTED, None, None, [], None, []) for name in roster if name not in newest]
    return sorted(rows, key=lambda row: row.learner)


def exercise_rows(attempts) -> list[ExerciseRow]:
    """Per (lab, grade_id), over each learner's latest graded attempt of the lab: the pass rate and
    the messages of the broken rules, each counted once per learner."""
    rows: dict[tuple[str, str], ExerciseRow] = {}
    messages: dict[tuple[str, str], Counter] = {}
    for (_learner, lab), attempt in sorted(latest_graded(attempts).items()):
        outcome: dict[str, bool] = {}
        broken: dict[str, set] = {}
        for grade_id in not_attempted_exercises(attempt):
            rows.setdefault((lab, grade_id), ExerciseRow(lab, grade_id)).not_attempted += 1
            messages.setdefault((lab, grade_id), Counter())
        for check in attempt.checks or []:
            if not attempted(check):
                continue
            outcome[check.grade_id] = outcome.get(check.grade_id, True) and bool(check.passed)
            if not check.passed:
                broken.setdefault(check.grade_id, set()).add(rule_message(check.message) or NO_MESSAGE)
        for grade_id, passed in outcome.items():
            row = rows.setdefault((lab, grade_id), ExerciseRow(lab, grade_id))
            row.graded += 1
            row.passed += passed
            messages.setdefault((lab, grade_id), Counter()).update(broken.get(grade_id, ()))
    for key, row in rows.items():
        row.failures = sorted(messages[key].items(), key=lambda item: (-item[1], item[0]))[:TOP_FAILURES]
    return [rows[key] for key in sorted(rows)]


def stuck_learners(attempts, lab: str, grade_id: str) -> list[str]:
    """The learners whose latest graded attempt of ``lab`` failed ``grade_id``: who a hint reaches."""
    return sorted(
        learner
        for (learner, attempt_lab), attempt in latest_graded(attempts).items()
        if attempt_lab == lab and grade_id in failed_exercises(attempt)
    )


# ------------------------------------------------------------------ levels


@dataclass
class LabProgress:
    lab: str
    best_score: float
    max_score: float
    passed: list[str]  # exercises passed in at least one graded attempt
    failed: list[str]  # exercises failed in the latest graded attempt and never passed
    attempts: int  # the learner's own (an instructor's regrade is not one)
    graded_at: float | None  # when the best attempt was graded

    @property
    def fraction(self) -> float:
        return self.best_score / self.max_score if self.max_score else 0.0


def progress(attempts, learner: str) -> list[LabProgress]:
    """One learner's levels: per lab they submitted, the best graded score and the exercises passed."""
    mine = [a for a in attempts if a.learner == learner]
    latest = latest_graded(mine)
    labs = []
    for lab in sorted({a.lab for a in mine}):
        tries = [a for a in mine if a.lab == lab]
        graded = [a for a in tries if a.state == GRADED]
        best = max(graded, key=lambda a: (a.score or 0.0, -a.id), default=None)  # the first to reach the best
        passed = []
        for attempt in graded:
            passed += [g for g in passed_exercises(attempt) if g not in passed]
        last = latest.get((learner, lab))
        labs.append(
            LabProgress(
                lab=lab,
                best_score=float(best.score or 0.0) if best else 0.0,
                max_score=float(best.max_score or 0.0) if best else 0.0,
                passed=passed,
                failed=[g for g in failed_exercises(last) if g not in passed] if last else [],
                attempts=sum(1 for a in tries if not getattr(a, "regrade_of", None)),  # the learner's own
                graded_at=best.finished_at if best else None,
            )
        )
    return labs
