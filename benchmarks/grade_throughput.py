"""Grade a class of 40 with ``rocmlab grade --jobs 2`` and with stock ``nbgrader autograde`` (serial).

The class (10 correct, 10 partial, 10 wrong, 10 slow) is made from the real student notebook
of the grading fixture lab (tests/fixtures/submissions). Both graders get the same files;
the script checks that every learner gets the same score from both, then prints both wall
times and the ratio. Exit 1 when a score differs.

    .venv/bin/python benchmarks/grade_throughput.py [--students 40] [--jobs 2] [--keep DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "fixtures" / "submissions"))

import classroom  # noqa: E402 (after the sys.path setup)

from rocmlab.build import solution_notebook, write_notebook  # noqa: E402 (after the sys.path setup)
from rocmlab.catalog import discover, select  # noqa: E402 (after the sys.path setup)

BIN = Path(sys.executable).parent
SLOW_SECONDS = 2


def make_class(base, students: int) -> dict:
    kinds = {
        "correct": classroom.answer(base),
        "partial": classroom.answer(base, norm_src=classroom.NORM_WRONG),
        "wrong": classroom.answer(base, classroom.SUM_WRONG, classroom.NORM_WRONG),
        "slow": classroom.answer(base, classroom.SUM_OK + classroom.SLOW.format(seconds=SLOW_SECONDS)),
    }
    names = list(kinds)
    return {f"{names[i % 4]}{i:02d}": kinds[names[i % 4]] for i in range(students)}


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_rocmlab(course_root: Path, submissions: Path, out: Path, jobs: int) -> tuple[float, dict]:
    started = time.monotonic()
    proc = subprocess.run(
        [
            str(BIN / "rocmlab"),
            "--root",
            str(course_root),
            "grade",
            classroom.LAB,
            "--submissions",
            str(submissions),
            "--jobs",
            str(jobs),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    wall = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"rocmlab grade failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    return wall, {s["student"]: float(s["score"]) for s in summary["students"]}


def stock_course(course_root: Path, submissions: Path, course: Path) -> None:
    """An nbgrader course with the same source assignment and the same submitted notebooks."""
    lab = select(discover(course_root), [classroom.LAB])[0]
    source = course / "source" / lab.id
    write_notebook(solution_notebook(lab, "en"), source / f"{lab.id}.ipynb")
    shutil.copytree(lab.data_dir, source / "data")
    config = (REPO / "autograder" / "nbgrader_config.py").read_text(encoding="utf-8")
    (course / "nbgrader_config.py").write_text(
        config + f"\nc.CourseDirectory.root = {str(course)!r}\n", encoding="utf-8"
    )
    for path in submissions.glob("*.ipynb"):
        target = course / "submitted" / path.stem / lab.id / f"{lab.id}.ipynb"
        target.parent.mkdir(parents=True)
        shutil.copyfile(path, target)
    subprocess.run(
        [str(BIN / "nbgrader"), "generate_assignment", lab.id, "--create", "--force"],
        cwd=course,
        check=True,
        capture_output=True,
        timeout=600,
    )


def run_stock(course: Path) -> tuple[float, dict]:
    started = time.monotonic()
    proc = subprocess.run(
        [str(BIN / "nbgrader"), "autograde", classroom.LAB, "--create", "--force"],
        cwd=course,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    wall = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"nbgrader autograde failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    subprocess.run(
        [str(BIN / "nbgrader"), "export", "--to", str(course / "grades.csv")],
        cwd=course,
        check=True,
        capture_output=True,
        timeout=600,
    )
    with (course / "grades.csv").open() as fh:
        return wall, {row["student_id"]: float(row["score"]) for row in csv.DictReader(fh)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=40)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--keep", help="keep the work folder here instead of a temporary one")
    args = parser.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="rocmlab-bench-"))
    try:
        base = classroom.student_notebook(classroom.COURSE, work)
        submissions = work / "class"
        for name, nb in make_class(base, args.students).items():
            classroom.write(nb, submissions / f"{name}.ipynb")
        stock_course(classroom.COURSE, submissions, work / "stock")
        print(
            f"class: {args.students} submissions of {classroom.LAB} (correct, partial, wrong, slow "
            f"with a {SLOW_SECONDS} s cell)",
            flush=True,
        )
        cpu = children_cpu_s()
        stock_s, stock = run_stock(work / "stock")
        stock_cpu, cpu = children_cpu_s() - cpu, children_cpu_s()
        print(f"nbgrader autograde (serial): {stock_s:7.1f} s wall, {stock_cpu:7.1f} s CPU", flush=True)
        ours_s, ours = run_rocmlab(classroom.COURSE, submissions, work / "rocmlab", args.jobs)
        ours_cpu = children_cpu_s() - cpu
        print(f"rocmlab grade --jobs {args.jobs}:      {ours_s:7.1f} s wall, {ours_cpu:7.1f} s CPU", flush=True)
        print(f"load average after the runs: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
        differ = sorted(s for s in set(ours) | set(stock) if ours.get(s) != stock.get(s))
        for student in differ:
            print(f"score differs for {student}: rocmlab {ours.get(student)} vs nbgrader {stock.get(student)}")
        print(f"scores identical: {not differ} ({len(ours)} learners)")
        print(
            f"speed-up: {stock_s / ours_s:.2f}x (target >= 1.7x on 2 cores; timings on a shared machine "
            "are inflated by other load)"
        )
        return 1 if differ else 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
