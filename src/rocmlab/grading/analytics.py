"""The instructor's view of a graded class: ``class.html`` and the same figures as CSV.

Read from what ``rocmlab grade`` (or ``rocmlab grade merge``) left in its output folder:
``summary.json`` (per learner: status, score, flags and their reasons, run time, lab version,
per test points and the rules its hidden checks found broken), ``grades.csv`` (the gradebook's scores, which win where
the two differ, e.g. after manual grading) and ``feedback/<learner>/<lab>.html`` (linked).

Written beside them:

- ``class.html``: score distribution (a matplotlib histogram embedded as a PNG), per exercise
  the mean points, the pass rate and the rules most often broken (each hidden check names one
  rule, in both languages, so one mistake made by many learners counts once),
  run time per learner, flagged submissions with the reasons, the lab version of each learner.
  jinja2 with autoescaping: learner ids and notes are learner input.
- ``class-learners.csv``, ``class-exercises.csv``, ``class-failures.csv``: the same data.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from ..errors import InputError
from ..pages import render_page

PAGE = "class.html"
CSV_FILES = {"learners": "class-learners.csv", "exercises": "class-exercises.csv", "failures": "class-failures.csv"}
TOP_FAILURES = 5
MESSAGE_CHARS = 160
NO_MESSAGE = "(no rule recorded)"

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


@dataclass
class Exercise:
    grade_id: str
    max_points: float
    graded: int = 0
    passed: int = 0
    points: list = field(default_factory=list)
    failures: list = field(default_factory=list)  # (normalized message, count), most common first

    @property
    def mean_points(self) -> float:
        return round(statistics.fmean(self.points), 2) if self.points else 0.0

    @property
    def pass_rate(self) -> float:
        return round(self.passed / self.graded, 3) if self.graded else 0.0


@dataclass
class Learner:
    student: str
    status: str
    score: float
    max_score: float
    duration_s: float
    version: str
    flags: list
    reasons: list
    feedback: str | None  # link relative to class.html, None when there is no page


@dataclass
class ClassView:
    lab: str
    version: str
    profile: str
    graded_at: str
    learners: list
    exercises: list
    versions: list  # (lab version, learners), most common first
    warnings: list
    grading_errors: list = field(default_factory=list)  # checks that failed themselves, not the learner

    @property
    def graded(self) -> list:
        return [learner for learner in self.learners if learner.status == "graded"]

    @property
    def flagged(self) -> list:
        return [learner for learner in self.learners if learner.flags]


def read_summary(out: Path) -> dict:
    path = out / "summary.json"
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable summary of `rocmlab grade` ({exc})") from None
    if not isinstance(summary, dict) or not isinstance(summary.get("students"), list):
        raise InputError(f"{path}: field students: expected a list of learners")
    return summary


def gradebook_scores(out: Path) -> dict[str, float]:
    """student id -> score from grades.csv (nbgrader's CSV export); empty when there is none."""
    path = out / "grades.csv"
    if not path.is_file():
        return {}
    with path.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    scores = {}
    for row in rows:
        try:
            scores[row["student_id"]] = float(row["score"])
        except (KeyError, TypeError, ValueError):
            raise InputError(f"{path}: expected the columns student_id and score of nbgrader's export") from None
    return scores


def _feedback_link(out: Path, lab: str, student: str) -> str | None:
    if student in ("", ".", "..") or "/" in student or "\0" in student:
        return None
    page = out / "feedback" / student / f"{lab}.html"
    return f"feedback/{quote(student, safe='')}/{quote(lab)}.html" if page.is_file() else None


def class_view(out: Path) -> ClassView:
    summary = read_summary(out)
    lab = str(summary.get("lab", ""))
    book = gradebook_scores(out)
    learners, warnings = [], []
    for entry in summary["students"]:
        student = str(entry.get("student", ""))
        score = float(entry.get("score") or 0.0)
        if student in book and book[student] != score:
            warnings.append(
                f"{student}: grades.csv says {book[student]:g}, summary.json {score:g} "
                "(the gradebook changed after grading; the page shows the gradebook's score)"
            )
            score = book[student]
        learners.append(
            Learner(
                student=student,
                status=str(entry.get("status", "")),
                score=score,
                max_score=float(entry.get("max_score") or 0.0),
                duration_s=float(entry.get("duration_s") or 0.0),
                version=str(entry.get("submitted_version") or "") or "?",
                flags=[str(f) for f in entry.get("flags", [])],
                reasons=[str(n) for n in entry.get("notes", [])],
                feedback=_feedback_link(out, lab, student),
            )
        )
    return ClassView(
        lab=lab,
        version=str(summary.get("version", "")),
        profile=str(summary.get("profile", "")),
        graded_at=str(summary.get("graded_at", "")),
        learners=learners,
        exercises=exercise_stats(summary["students"]),
        versions=Counter(learner.version for learner in learners).most_common(),
        warnings=warnings,
        grading_errors=grading_errors(summary["students"]),
    )


def grading_errors(students: list[dict]) -> list[dict]:
    """Each check that failed itself (``harness.GradingError``), per learner, from the harness's
    record: counted apart from the rules learners broke."""
    return [
        {"student": str(entry.get("student", "")), "grade_id": str(c.get("grade_id", "")), "error": str(c["error"])}
        for entry in students
        for c in entry.get("checks") or []
        if isinstance(c, dict) and c.get("error")
    ]


def rule_message(rule) -> str:
    """A check's rule as the class page counts it: both languages."""
    if not isinstance(rule, dict):
        return ""
    return " / ".join(str(rule[lang]) for lang in ("en", "zh") if rule.get(lang))[:MESSAGE_CHARS]


def exercise_stats(students: list[dict]) -> list[Exercise]:
    """Per test, over the learners whose notebook was graded (invalid ones are counted apart)."""
    exercises: dict[str, Exercise] = {}
    messages: dict[str, Counter] = {}
    for entry in students:
        for test in entry.get("tests", []):
            grade_id = str(test.get("grade_id", ""))
            exercise = exercises.setdefault(grade_id, Exercise(grade_id, float(test.get("max_points") or 0.0)))
            if entry.get("status") != "graded":
                continue
            exercise.graded += 1
            exercise.points.append(float(test.get("points") or 0.0))
            if test.get("passed"):
                exercise.passed += 1
                continue
            rules = test.get("rules", [])
            broken = [r for r in rules if not r.get("passed") and not r.get("grading_error")]
            if not broken and any(r.get("grading_error") for r in rules):
                continue  # only the grader failed here: counted in the grading errors
            for rule in broken or [{}]:
                message = rule_message(rule.get("rule")) or NO_MESSAGE
                messages.setdefault(grade_id, Counter())[message] += 1
    for grade_id, exercise in exercises.items():
        counted = messages.get(grade_id, Counter())
        exercise.failures = sorted(counted.items(), key=lambda item: (-item[1], item[0]))[:TOP_FAILURES]
    return list(exercises.values())


# ------------------------------------------------------------------ plots


def _png(figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def score_plot(view: ClassView) -> str | None:
    """A histogram of the scores (one bar per point for small tests); None without matplotlib."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    scores = [learner.score for learner in view.learners]
    top = max([learner.max_score for learner in view.learners] + scores + [1.0])
    bins = int(top) + 1 if top <= 40 else 20
    figure = Figure(figsize=(6.4, 2.4))
    ax = figure.subplots()
    ax.hist(scores, bins=bins, range=(-0.5, top + 0.5) if top <= 40 else (0, top), color="#2563eb", rwidth=0.85)
    if scores:
        ax.axvline(
            statistics.median(scores), color="#b91c1c", linewidth=1, label=f"median {statistics.median(scores):g}"
        )
        ax.legend(fontsize=7, frameon=False)
    ax.set_xlabel(f"score (of {top:g})", fontsize=8)
    ax.set_ylabel("learners", fontsize=8)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.tick_params(labelsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    return _png(figure)


# ------------------------------------------------------------------ the page and the CSV files


def class_page(view: ClassView) -> str:
    scores = [learner.score for learner in view.learners]
    return render_page(
        "class.html.j2",
        view=view,
        plot=score_plot(view),
        mean=round(statistics.fmean(scores), 2) if scores else 0.0,
        median=statistics.median(scores) if scores else 0.0,
        by_time=sorted(view.learners, key=lambda learner: (-learner.duration_s, learner.student)),
        csv_files=CSV_FILES,
    )


def _cell(value) -> str:
    """A CSV cell a spreadsheet shows as text: learner text starting with = + - @ is not a formula."""
    text = value if isinstance(value, str) else f"{value:g}" if isinstance(value, float) else str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def csv_tables(view: ClassView) -> dict[str, list[list]]:
    learners = [["student", "status", "score", "max_score", "duration_s", "lab_version", "flags", "reasons"]]
    for learner in view.learners:
        learners.append(
            [
                learner.student,
                learner.status,
                learner.score,
                learner.max_score,
                learner.duration_s,
                learner.version,
                " ".join(learner.flags),
                " | ".join(learner.reasons),
            ]
        )
    exercises = [["grade_id", "max_points", "mean_points", "pass_rate", "passed", "graded"]]
    failures = [["grade_id", "message", "learners"]]
    for exercise in view.exercises:
        exercises.append(
            [
                exercise.grade_id,
                exercise.max_points,
                exercise.mean_points,
                exercise.pass_rate,
                exercise.passed,
                exercise.graded,
            ]
        )
        failures += [[exercise.grade_id, message, count] for message, count in exercise.failures]
    return {"learners": learners, "exercises": exercises, "failures": failures}


def write_class_page(out: Path) -> Path:
    """Write class.html and the CSV files into ``out`` (a grading output folder); returns the page."""
    out = Path(out)
    view = class_view(out)
    for name, rows in csv_tables(view).items():
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows([[_cell(v) for v in row] for row in rows])
        _write_text(out / CSV_FILES[name], buffer.getvalue())
    page = out / PAGE
    _write_text(page, class_page(view))
    return page


def _write_text(path: Path, text: str) -> None:
    # A learner's id or message may hold lone surrogates (undecodable file names): escape them.
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(text.encode("utf-8", errors="backslashreplace"))
    tmp.replace(path)
