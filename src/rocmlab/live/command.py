"""``rocmlab live``: the live workshop's grading workers and what the instructor's final grading
takes from it.

- ``rocmlab live worker --queue DATA/live/queue.sqlite`` (on the hub's server) or ``--service URL``
  with ``ROCMLAB_LIVE_WORKER_TOKEN`` (Kubernetes): grade submissions as they come
  (rocmlab.live.worker);
- ``rocmlab live seeds LAB --queue FILE --out seeds.json``: each learner's live variant, for
  ``rocmlab grade LAB --seeds seeds.json`` (the batch grade then agrees with the live scores);
- ``rocmlab live status --queue FILE``: attempts per state.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from .. import processes
from ..course.catalog import PROFILE_NAMES, SMOKE
from ..course.course import Course
from ..errors import ExitCode, InputError
from ..execution.results import write_json_atomic


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "The live workshop: grading workers that grade submissions as learners make them, and the "
        "learners' live variants for the final `rocmlab grade --seeds`."
    )
    parser.add_argument("action", choices=["worker", "seeds", "status"])
    parser.add_argument("lab", nargs="?", metavar="LAB", help="with `seeds`: the lab id")
    parser.add_argument("--queue", metavar="FILE", help="the live queue (the hub's DATA/live/queue.sqlite)")
    parser.add_argument(
        "--service",
        metavar="URL",
        help="worker: the live service's URL (Kubernetes); the token comes from ROCMLAB_LIVE_WORKER_TOKEN",
    )
    parser.add_argument("--out", metavar="FILE", help="with `seeds`: where to write them (a summary.json for --seeds)")
    parser.add_argument("--lease", type=float, default=300, metavar="S", help="worker: lease per attempt, renewed")
    parser.add_argument("--poll", type=float, default=1.0, metavar="S", help="worker: seconds between empty claims")
    parser.add_argument("--profile", default=SMOKE, choices=PROFILE_NAMES)
    parser.add_argument("--unsafe", action="store_true", help="worker: grade without a sandbox (see rocmlab grade)")
    parser.add_argument(
        "--labs",
        metavar="IDS",
        default=os.environ.get("ROCMLAB_HUB_LABS", ""),
        help="worker: the labs it may be handed, checked before it starts (default: $ROCMLAB_HUB_LABS, else all)",
    )
    parser.add_argument(
        "--budget", type=float, default=600, metavar="S", help="worker: the longest one attempt may be graded"
    )
    parser.add_argument(
        "--open-labs",
        type=int,
        metavar="N",
        help="worker: labs whose grader (sandbox, zygote, gradebook) it keeps open at once (default 3)",
    )
    parser.add_argument("--max-attempts", type=int, metavar="N", help="worker: stop after N attempts")
    parser.add_argument("--idle-exit", type=float, metavar="S", help="worker: stop after S seconds without work")


def needs_course(options: dict) -> bool:
    """Only the worker grades, with the course's labs; the queue's commands read its file alone."""
    return options["action"] == "worker"


def main(
    *,
    action: str,
    lab: str | None = None,
    queue: str | None = None,
    service: str | None = None,
    out: str | None = None,
    lease: float = 300,
    poll: float = 1.0,
    profile: str = SMOKE,
    unsafe: bool = False,
    max_attempts: int | None = None,
    idle_exit: float | None = None,
    labs: str = "",
    budget: float = 600,
    open_labs: int | None = None,
    course: Course | None = None,
) -> int:
    if action == "worker":
        from .worker import worker_main

        labs_given = [lab.strip() for lab in labs.split(",") if lab.strip()]
        if budget <= 0:
            raise InputError(f"--budget {budget:g}: expected a positive number of seconds")
        if lease < 10:
            raise InputError(f"--lease {lease:g}: at least 10 seconds (it is renewed every third of it)")
        if open_labs is not None and open_labs < 1:
            raise InputError(f"--open-labs {open_labs}: expected at least 1")
        may_start(course.root, labs_given, profile, unsafe, queue)
        return worker_main(
            course.root,
            queue_path=queue,
            service=service,
            token=os.environ.get("ROCMLAB_LIVE_WORKER_TOKEN", ""),
            lease_s=lease,
            poll_s=poll,
            profile=profile,
            unsafe=unsafe,
            max_attempts=max_attempts,
            idle_exit_s=idle_exit,
            labs=labs_given,
            budget_s=budget,
            open_labs=open_labs,
        )
    from .queue import LiveQueue

    if not queue or not Path(queue).is_file():
        raise InputError(f"{queue}: expected the live queue file (the hub's DATA/live/queue.sqlite)")
    live = LiveQueue(queue)
    if action == "status":
        print(json.dumps(live.counts()))
        return ExitCode.OK
    if not lab or not out:
        raise InputError("seeds: expected `rocmlab live seeds LAB --queue FILE --out FILE`")
    summary = live.seeds_summary(lab)
    write_json_atomic(Path(out), summary)
    print(f"{len(summary['students'])} learner(s)' seeds of {lab}: {out} (rocmlab grade {lab} --seeds {out})")
    return ExitCode.OK


def may_start(root: Path, labs: list[str], profile: str, unsafe: bool, queue: str | None) -> None:
    """Return once the worker may grade here. Started by hand, a worker that may not exits naming
    why and the fix; one the hub runs (which JupyterHub would start again every 30 s) says it once
    and waits, checking again (rocmlab.live.supervise)."""
    from . import supervise

    def check() -> None:
        supervise.check_may_start(root, labs, profile, unsafe)

    name = os.environ.get(supervise.MANAGED_BY_HUB, "")
    if not name or not queue or not Path(queue).is_file():
        check()
        return
    processes.exit_on_sigterm()  # the hub's stop ends the wait, and the refusal is removed
    supervise.hold_until_it_may_start(name, supervise.RefusalStore(Path(queue)), check)
