"""CPU seconds of one lab's grading as the slow suite grades it (tests/labs/test_every_lab.py,
tests/grading/test_grade_references.py): ``build.verify.verify_lab`` on the zh solution and the
student version, no mistakes, on this machine's default sandbox backend (``ROCMLAB_SANDBOX`` to
pick another).

Each way runs in a child process of its own, in a CPU-accounting cgroup as root
(``cpu_accounting.CpuGroup``: the forked kernels, the reference kernels and torchrun's ranks
too); ways alternate which goes first each round. The ways: ``--jobs`` slots (the default: what
``verify_lab`` chooses, one slot where a check takes the reference kernel, else two) and, with
``--solution-only``, a class of the solution alone (``verify_lab(student=False)``). On a shared
machine compare CPU seconds; wall time measures the neighbours too.

    .venv/bin/python benchmarks/verify_cost.py --lab 02 [--jobs 2 0] [--solution-only] [--rounds 1] [--record]

``--record`` adds the figures to docs/measurements.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measurements
from cpu_accounting import CpuGroup

REPO = Path(__file__).resolve().parents[1]


def grade(lab_id: str, jobs: int | None, student: bool) -> dict:
    """In the child: one grading, what it found."""
    from rocmlab.build.verify import verify_lab
    from rocmlab.course.catalog import discover, select
    from rocmlab.grading.analytics import read_summary

    lab = select(discover(REPO), [lab_id])[0]
    with tempfile.TemporaryDirectory(prefix="rocmlab-bench-verify-cost-") as tmp:
        out = Path(tmp) / "out"
        result = verify_lab(REPO, lab, out, lang="zh", mistakes=False, jobs=jobs, student=student)
        runs = {e["student"]: round(float(e.get("duration_s") or 0), 1) for e in read_summary(out)["students"]}
    return {"ok": result.ok, "problems": result.problems, "scores": result.scores, "run_s": runs}


def measure(lab_id: str, jobs: int | None, student: bool) -> tuple[float, float, dict, str]:
    """(CPU s, wall s, the child's report, how the CPU was counted) of one grading in a child process."""
    command = [sys.executable, __file__, "--child", "--lab", lab_id, "--jobs", str(jobs or 0)]
    command += [] if student else ["--solution-only"]
    group = CpuGroup("verify-cost")
    started = time.monotonic()
    try:
        proc = subprocess.run(command, cwd=REPO, preexec_fn=group.join, capture_output=True, text=True, timeout=1800)
    finally:
        wall = time.monotonic() - started
        group.close()
    lines = proc.stdout.strip().splitlines()
    report = (
        json.loads(lines[-1]) if proc.returncode == 0 and lines else {"ok": False, "problems": [proc.stderr[-800:]]}
    )
    return group.cpu_s(), wall, report, group.how


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", required=True)
    parser.add_argument("--jobs", type=int, nargs="+", default=[0], help="slots per way; 0: verify_lab's choice")
    parser.add_argument("--solution-only", action="store_true", help="also grade the solution alone")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--record", action="store_true", help="add the figures to docs/measurements.md")
    parser.add_argument("--note", default="", help="what was measured, for the record")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(grade(args.lab, args.jobs[0] or None, not args.solution_only)))
        return 0
    ways = [(jobs or None, True) for jobs in args.jobs] + (
        [(args.jobs[0] or None, False)] if args.solution_only else []
    )
    print(f"lab {args.lab}")
    failed, figures = False, []
    for round_ in range(args.rounds):
        for jobs, student in ways if round_ % 2 == 0 else list(reversed(ways)):
            load = os.getloadavg()[0]
            cpu, wall, report, how = measure(args.lab, jobs, student)
            what = f"jobs {jobs or 'default'}, {'solution and student' if student else 'solution alone'}"
            runs = report.get("run_s")
            print(f"{what:<40} {cpu:7.1f} CPU-s {wall:7.1f} s wall (load {load:.1f}), each learner's run (s) {runs}")
            figures.append(f"{what}: {cpu:.1f} CPU-s, {wall:.0f} s wall at load {load:.1f}")
            if not report.get("ok"):
                print(f"  FAILED: {report.get('problems')}", file=sys.stderr)
                failed = True
    print(f"CPU counted by {how}")
    if args.record and not failed:
        note = f" ({args.note})" if args.note else ""
        line = f"lab {args.lab}{note}, CPU counted by {how}: " + "; ".join(figures)
        print(f"recorded in {measurements.record('verify_cost', line)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
