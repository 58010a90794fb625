"""What the reference kernel adds to grading a class (issue 47, docs/grading.md item 11).

Grades one class of a lab whose checks take ``reference`` twice in the same invocation, with
``rocmlab grade``'s own code (``grading.grader.grade_class``): once as it grades (one reference
kernel per job slot, started on the slot's first learner and kept), once with the reference
kernel left out (``grading.reference.needs_reference`` patched to say no: those checks are then
grading errors, so only the time is compared). Every learner submits the lab's solution (zh).
Prints both wall times, the difference per class and per slot, and the reference checks' state.

    .venv/bin/python benchmarks/reference_cost.py [--lab 07-triton-kernels] [--students 3] [--jobs 1]

A class pays one run of the solution's code cells per slot (its graded tests left out), whatever
its size: the difference does not grow with ``--students``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from rocmlab.course.catalog import discover, select
from rocmlab.course.notebooks import solution_notebook, write_notebook
from rocmlab.grading import grader, reference
from rocmlab.grading.cells import cell_points
from rocmlab.grading.submissions import find_submissions
from rocmlab.harness import lab_checks

REPO = Path(__file__).resolve().parents[1]


def grade_once(lab, submitted: Path, out: Path, jobs: int, with_reference: bool) -> tuple[float, list]:
    original = reference.needs_reference
    if not with_reference:
        grader.needs_reference = reference.needs_reference = lambda checks: False
    try:
        started = time.monotonic()
        results = grader.grade_class(
            REPO, lab, find_submissions(submitted, lab.id), out, jobs=jobs, progress=lambda _: None
        )
        return time.monotonic() - started, results
    finally:
        grader.needs_reference = reference.needs_reference = original


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", default="07-triton-kernels")
    parser.add_argument("--students", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    lab = select(discover(REPO), [args.lab])[0]
    checks = lab_checks(lab.checks, cell_points(solution_notebook(lab, "en")))
    referenced = {c.name for c in checks if c.wants_reference}
    with tempfile.TemporaryDirectory(prefix="rocmlab-reference-cost-") as tmp:
        submitted = Path(tmp) / "submitted"
        for i in range(args.students):
            write_notebook(solution_notebook(lab, "zh"), submitted / f"learner{i:02d}.ipynb")
        timings = {}
        for with_reference in (False, True):
            wall, results = grade_once(lab, submitted, Path(tmp) / f"out-{with_reference}", args.jobs, with_reference)
            referenced = [c for r in results for c in r.checks if c["name"] in referenced]
            errors = sum(bool(c.get("error")) for c in referenced)
            scores = sorted({r.score for r in results})
            timings[with_reference] = wall
            label = "with the reference kernel" if with_reference else "without (its checks: grading errors)"
            print(f"{label:<40} {wall:7.1f} s   scores {scores}   reference checks with a grading error: {errors}")
        extra = timings[True] - timings[False]
        print(
            f"extra per class: {extra:.1f} s ({args.students} learners, {args.jobs} slot(s)); per slot {extra / args.jobs:.1f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
