"""``rocmlab grade``'s options and entry point."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import processes
from ..catalog import discover, select
from ..errors import ExitCode, InputError
from ..root import find_root
from ..sandbox import Limits
from .feedback import stage_feedback
from .grader import grade_class
from .submissions import find_submissions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Autograde a class with nbgrader, in parallel and sandboxed: each submission re-run in the profile "
        "with the test cells restored from the source; grades.csv, summary.json (score and flags per learner) "
        "and a feedback page per learner in --out."
    )
    parser.add_argument("lab", metavar="LAB", help="lab id or its number")
    parser.add_argument(
        "--submissions",
        required=True,
        metavar="DIR",
        help="folder of submitted/<student>/<lab>/*.ipynb or of <student>.ipynb files",
    )
    parser.add_argument("--jobs", type=int, default=1, metavar="N", help="submissions executed at once")
    parser.add_argument("--profile", default="smoke", choices=["smoke", "gpu", "multi-gpu"])
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
        help="grade even where no sandbox is available (no bubblewrap, not root): learner code then "
        "runs with your rights",
    )
    parser.add_argument(
        "--feedback-to",
        metavar="COURSE_ROOT",
        help="also put each learner's feedback page in this nbgrader course's feedback/ folder, "
        "ready for `nbgrader release_feedback` (submissions collected by nbgrader only)",
    )


def main(
    *,
    lab: str,
    submissions: str,
    jobs: int = 1,
    profile: str = "smoke",
    gradebook: str | None = None,
    out: str | None = None,
    memory_mb: int | None = None,
    max_processes: int = Limits.max_processes,
    max_output_kb: int = Limits.max_cell_output_kb,
    feedback_to: str | None = None,
    unsafe: bool = False,
    root: str | None = None,
) -> int:
    processes.exit_on_sigterm()  # finally blocks end the kernels and remove the sandbox
    root = find_root(root)
    lab = select(discover(root), [lab])[0]
    if jobs < 1:
        raise InputError(f"--jobs: expected a positive number, got {jobs}")
    submissions = find_submissions(Path(submissions).resolve(), lab.id)
    out = Path(out).resolve() if out else root / "grades" / lab.id
    memory_mb = memory_mb if memory_mb is not None else Limits.memory_mb if profile == "smoke" else 0
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
    )
    for r in results:
        print(f"{r.student:<24} {r.score:>6g} / {r.max_score:<6g} {','.join(r.flags) or '-'}")
    print(
        f"graded {len(results)} submission(s) of {lab.id} {lab.version}: {out / 'grades.csv'}, "
        f"{out / 'summary.json'}, feedback in {out / 'feedback'}"
    )
    if feedback_to:
        course_root = Path(feedback_to).resolve()
        staged = stage_feedback(course_root, lab.id, out)
        print(
            f"feedback of {len(staged)} learner(s) staged in {course_root / 'feedback'}: "
            f"release it with `nbgrader release_feedback {lab.id}`"
        )
    return ExitCode.OK
