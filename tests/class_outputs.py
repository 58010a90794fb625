"""A grading output folder as `rocmlab grade` writes it (summary.json, grades.csv, feedback), made
without grading: the class page's tests (test_grade_analytics.py, test_grade_class_browser.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

LAB = "01-demo"
HOSTILE = "<script>alert(1)</script>"


SCALES = {"en": "scaled_sum multiplies by scale", "zh": "scaled_sum 乘以 scale"}
DIRECTION = {"en": "normalize keeps the direction", "zh": "normalize 保持方向"}


def graded_test(grade_id, points, max_points, *broken):
    """A test cell's result; ``broken``: the rules (en/zh) its checks found broken."""
    rules = [{"name": r["en"], "rule": r, "points": 0.0, "max_points": 1.0, "passed": False} for r in broken]
    return {
        "grade_id": grade_id,
        "max_points": float(max_points),
        "points": float(points),
        "passed": points >= max_points,
        "message": "; ".join(r["en"] for r in broken),
        "rules": rules,
    }


def learner(student, tests, *, status="graded", flags=(), notes=(), version="1.2.0", duration=3.0):
    return {
        "student": student,
        "file": f"/submissions/{student}.ipynb",
        "lang": "en",
        "status": status,
        "score": sum(t["points"] for t in tests),
        "max_score": sum(t["max_points"] for t in tests),
        "flags": list(flags),
        "notes": list(notes),
        "tests": tests,
        "duration_s": duration,
        "submitted_version": version,
    }


def demo_class() -> list[dict]:
    """Six learners: two make the same mistake with different numbers, one is flagged with a
    hostile message, one is ungradable, one works on an older lab version."""
    return [
        learner("ada", [graded_test("sum", 2, 2), graded_test("norm", 3, 3)], duration=2.5),
        learner(
            "bob",
            [
                graded_test("sum", 0, 2, SCALES),
                graded_test("norm", 3, 3),
            ],
            duration=4.0,
        ),
        learner(
            "cy",
            [
                graded_test("sum", 0, 2, SCALES),
                graded_test("norm", 0, 3, DIRECTION),
            ],
            version="1.1.0",
            flags=["old_version"],
            notes=["made from lab version 1.1.0, graded against 1.2.0"],
            duration=9.75,
        ),
        learner(
            "dee",
            [
                graded_test("sum", 0, 2, {"en": HOSTILE, "zh": "x"}),
                graded_test("norm", 0, 3, DIRECTION, {"en": "normalize returns a float array", "zh": "返回浮点数组"}),
            ],
            flags=["tampered", "timeout"],
            notes=["edited test cell sum (restored from the source)", f"a cell ran past its limit: {HOSTILE}"],
            duration=31.0,
        ),
        learner(
            "eve",
            [graded_test("sum", 0, 2), graded_test("norm", 0, 3)],
            status="invalid",
            flags=["invalid"],
            notes=["eve.ipynb: not a readable notebook"],
            version="",
            duration=0.1,
        ),
        learner(
            "=cmd",
            [graded_test("sum", 2, 2), graded_test("norm", 0, 3, {"en": '=HYPERLINK("http://x")', "zh": ""})],
            duration=3.0,
        ),
    ]


def write_outputs(out: Path, students: list[dict] | None = None, gradebook: dict | None = None) -> Path:
    """summary.json, grades.csv (``gradebook`` overrides scores) and a feedback page per gradable learner."""
    students = demo_class() if students is None else students
    out.mkdir(parents=True, exist_ok=True)
    summary = {
        "lab": LAB,
        "version": "1.2.0",
        "profile": "smoke",
        "graded_at": "2026-12-01T10:00:00+00:00",
        "students": students,
        "flag_counts": {},
    }
    (out / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    with (out / "grades.csv").open("w", encoding="utf-8", errors="backslashreplace", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["assignment", "student_id", "raw_score", "score", "max_score"])
        for s in students:
            score = (gradebook or {}).get(s["student"], s["score"])
            writer.writerow([LAB, s["student"], score, score, s["max_score"]])
    for s in students:
        if s["status"] == "graded":
            page = out / "feedback" / s["student"] / f"{LAB}.html"
            page.parent.mkdir(parents=True)
            page.write_text(f"<p>feedback of {s['student']}</p>", encoding="utf-8")
    return out
