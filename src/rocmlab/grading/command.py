"""``rocmlab grade``'s options and entry point."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .. import processes
from ..course.catalog import PROFILE_NAMES, SMOKE
from ..course.course import Course
from ..errors import ExitCode, InputError
from ..sandbox.runs import Limits
from . import analytics, shards
from .feedback import stage_feedback
from .grader import grade_class, grading_errors
from .submissions import find_submissions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Autograde a class with nbgrader, in parallel and sandboxed: each submission re-run in the profile "
        "with the test cells restored from the source, then the lab's hidden checks (checks.py) run in a "
        "trusted process on inputs drawn per learner; grades.csv, summary.json (score, seed, checks and "
        "flags per learner) and a feedback page per learner naming each broken rule in --out."
    )
    parser.add_argument("lab", metavar="LAB", help="lab id or its number; `merge`: merge the shard outputs OUT...")
    parser.add_argument(
        "--submissions",
        metavar="DIR",
        help="folder of submitted/<student>/<lab>/*.ipynb or of <student>.ipynb files (required to grade)",
    )
    # ---- scale-out (grading/shards.py): grade a part of the class, merge the parts
    parser.add_argument("shard_outputs", nargs="*", metavar="OUT", help="with `merge`: the --out folders of the shards")
    parser.add_argument(
        "--shard",
        metavar="K/N",
        help="grade only the K-th of N deterministic parts of the class (learners by id, round-robin); "
        "`rocmlab grade merge OUT... --out DIR` joins the N outputs",
    )
    parser.description += (
        " Also class.html (the class at a glance) with its CSV files. With --shard K/N only a part of the class; "
        "`rocmlab grade merge OUT... --out DIR` merges the parts into one gradebook, as one run would have written it."
    )
    # ----
    parser.add_argument("--jobs", type=int, default=1, metavar="N", help="submissions executed at once")
    parser.add_argument("--profile", default=SMOKE, choices=PROFILE_NAMES)
    parser.add_argument("--gradebook", metavar="URL", help="SQLAlchemy URL of the gradebook (default: sqlite in --out)")
    parser.add_argument("--out", metavar="DIR", help="output folder (default grades/<lab>/ in the course root)")
    parser.add_argument(
        "--memory-mb",
        type=int,
        metavar="MB",
        help=f"address-space limit per kernel process (default {Limits.memory_mb} in the smoke "
        "profile, none in GPU profiles, whose runtimes reserve large virtual ranges; 0: none)",
    )
    parser.add_argument(
        "--max-processes",
        type=int,
        default=Limits.max_processes,
        metavar="N",
        help="processes and threads a kernel may have",
    )
    parser.add_argument(
        "--max-output-kb", type=int, default=Limits.max_cell_output_kb, metavar="KB", help="output kept per cell"
    )
    parser.add_argument(
        "--unsafe",
        action="store_true",
        help="grade even where no sandbox is available (no bubblewrap, not root, no Landlock in the "
        "Linux kernel): learner code then runs with your rights",
    )
    parser.add_argument(
        "--seeds",
        metavar="SUMMARY",
        help="regrade with the hidden checks' inputs of an earlier grading: its summary.json "
        "(each learner found there gets the seed recorded for them; others get a new one)",
    )
    parser.add_argument(
        "--feedback-to",
        metavar="COURSE_ROOT",
        help="also put each learner's feedback page in this nbgrader course's feedback/ folder, "
        "ready for `nbgrader release_feedback` (submissions collected by nbgrader only)",
    )


def recorded_seeds(summary: Path) -> dict[str, int]:
    """learner -> the seed an earlier grading recorded in its summary.json."""
    try:
        students = json.loads(summary.read_text(encoding="utf-8"))["students"]
        return {str(s["student"]): int(s["seed"]) for s in students if "seed" in s}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(
            f"--seeds {summary}: expected the summary.json of an earlier `rocmlab grade` "
            f"(students with their seed): {type(exc).__name__}: {exc}"
        ) from None


def main(
    *,
    lab: str,
    submissions: str | None = None,
    shard_outputs: list[str] = (),
    shard: str | None = None,
    jobs: int = 1,
    profile: str = SMOKE,
    gradebook: str | None = None,
    out: str | None = None,
    memory_mb: int | None = None,
    max_processes: int = Limits.max_processes,
    max_output_kb: int = Limits.max_cell_output_kb,
    feedback_to: str | None = None,
    seeds: str | None = None,
    unsafe: bool = False,
    course: Course,
) -> int:
    processes.exit_on_sigterm()  # finally blocks end the kernels and remove the sandbox
    root = course.root
    # ---- scale-out (grading/shards.py)
    if lab == "merge":
        return shards.merge_command(root, shard_outputs, out, gradebook, submissions, shard, feedback_to)
    if shard_outputs or not submissions:
        raise InputError("grade: expected `rocmlab grade LAB --submissions DIR` (OUT folders only with `merge`)")
    part = shards.parse_shard(shard) if shard else None
    # ----
    lab = course.select([lab])[0]
    if jobs < 1:
        raise InputError(f"--jobs: expected a positive number, got {jobs}")
    everyone = submissions = find_submissions(Path(submissions).resolve(), lab.id)
    out = Path(out).resolve() if out else root / "grades" / lab.id
    # ---- scale-out: this shard's learners; a shard without any still writes its summary for merge
    if part:
        submissions = shards.select_shard(everyone, part)
        if not submissions:
            shards.write_empty_shard(out, lab, profile, part, everyone)
            print(f"shard {part}: no learner of the {len(everyone)} falls in this shard: {out / 'summary.json'}")
            return ExitCode.OK
    # ----
    memory_mb = memory_mb if memory_mb is not None else Limits.memory_mb if profile == SMOKE else 0
    limits = Limits(memory_mb=memory_mb, max_processes=max_processes, max_cell_output_kb=max_output_kb)

    def say(msg):
        print(msg, file=sys.stderr, flush=True)

    results = grade_class(
        root,
        lab,
        submissions,
        out,
        profile_name=profile,
        jobs=jobs,
        db_url=gradebook,
        limits=limits,
        progress=say,
        unsafe=unsafe,
        seeds=recorded_seeds(Path(seeds)) if seeds else None,
    )
    if part:  # ---- scale-out
        shards.record_shard(out, part, everyone)
    analytics.write_class_page(out)  # ---- the instructor's class page
    for r in results:
        print(f"{r.student:<24} {r.score:>6g} / {r.max_score:<6g} {','.join(r.flags) or '-'}")
    print(
        f"graded {len(results)} submission(s) of {lab.id} {lab.version}: {out / 'grades.csv'}, "
        f"{out / 'summary.json'}, {out / analytics.PAGE}, feedback in {out / 'feedback'}"
    )
    errors = grading_errors(results)
    if errors:
        print(
            f"{len(errors)} grading error(s): checks that failed themselves, not the learners' "
            f"(points withheld, shown as not graded; fix the check and regrade with --seeds {out / 'summary.json'}):"
        )
        for error in errors:
            print(f"  grading error {error['student']}: {error['error']}")
    if feedback_to:
        course_root = Path(feedback_to).resolve()
        staged = stage_feedback(course_root, lab.id, out)
        print(
            f"feedback of {len(staged)} learner(s) staged in {course_root / 'feedback'}: "
            f"release it with `nbgrader release_feedback {lab.id}`"
        )
    return ExitCode.OK
