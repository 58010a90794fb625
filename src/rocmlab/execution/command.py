"""``rocmlab run``: the command's options, and one line per lab run (``run`` does the work)."""

from __future__ import annotations

from pathlib import Path

from ..course.catalog import PROFILE_NAMES, SMOKE
from ..course.course import Course
from ..errors import ExitCode, InputError
from .results import Record
from .run import env_target, local_target, run_labs


def add_arguments(parser) -> None:
    parser.description = (
        "Execute labs with papermill in a profile; one JSON record and the executed notebook per lab and "
        "environment. --repeat N runs each lab N times and prints its pass rate: a lab that failed any run "
        "is flaky (never fresh), with every failure's cell and error in its record and its notebook kept as "
        "`<lab>.run<K>.ipynb`. --env NAME runs in a release-matrix environment made by `rocmlab env create`. "
        "With --jobs N the labs start longest first, by the time of their last record in --out (those "
        "without one first), so that no long lab starts last."
    )
    parser.add_argument("labs", nargs="*", metavar="LAB", help="lab ids or their numbers (default: all)")
    parser.add_argument("--profile", default=SMOKE, choices=[*PROFILE_NAMES, "auto"])
    parser.add_argument("--lang", default="en", choices=["zh", "en"])
    parser.add_argument("--jobs", type=int, default=1, metavar="N", help="labs run at once")
    parser.add_argument("--out", metavar="DIR", help="results folder (default results/)")
    parser.add_argument(
        "--student", action="store_true", help="run the generated student notebook instead of the solution"
    )
    parser.add_argument(
        "--env", metavar="NAME", help="run inside a release-matrix environment made by `rocmlab env create`"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run each lab N times; a lab that fails any run is recorded as flaky, with every failure",
    )


def main(
    *,
    labs=(),
    profile: str = SMOKE,
    lang: str = "en",
    jobs: int = 1,
    out: str | None = None,
    student: bool = False,
    env: str | None = None,
    repeat: int = 1,
    course: Course,
) -> int:
    """Run ``labs`` and print one line per lab; 1 when one failed, 3 when one was skipped and none failed."""
    root = course.root
    chosen = course.select(labs)
    if jobs < 1:
        raise InputError(f"--jobs: expected a positive number, got {jobs}")
    if repeat < 1:
        raise InputError(f"--repeat: expected a positive number, got {repeat}")
    results = Path(out) if out else root / "results"
    target = env_target(env, root) if env else local_target()
    records = run_labs(root, chosen, profile, target, results, jobs=jobs, lang=lang, student=student, repeat=repeat)
    for record in records:
        print(_run_line(record))
        for run in record.repeats:
            if run["status"] != "passed":
                print(f"    run {run['run']}: {run['status']} after {run['duration_s']:.1f}s: {run['reason'][:300]}")
    print(f"records and executed notebooks: {results / target.name}")
    if any(r.status in ("failed", "timeout", "crashed", "flaky") for r in records):
        return ExitCode.FAILED
    return ExitCode.SKIPPED if any(r.status == "skipped" for r in records) else ExitCode.OK


def _run_line(record: Record) -> str:
    warnings = f"{len(record.warnings)} warning(s)"
    if record.repeats:
        passed = sum(run["status"] == "passed" for run in record.repeats)
        rate = f"{passed}/{len(record.repeats)} passed"
        return f"{record.lab:<28} {record.status:<8} {rate:<14} median {record.duration_s:6.1f}s  {warnings}"
    detail = f" — {record.reason}" if record.reason else ""
    return f"{record.lab:<28} {record.status:<8} {record.duration_s:7.1f}s  {warnings}{detail}"
