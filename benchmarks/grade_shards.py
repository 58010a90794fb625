"""What grading in shards costs: a class graded at once, the same class in N shards, and the merge.

The class is grade_throughput.py's (correct, partial, wrong and slow learners from the grading
fixture lab). On one machine the shards run one after the other, so the figure that matters for
a cluster is the longest shard (the wall time when each shard has its own pod) and the merge,
which runs no learner code (nbgrader autograde of the already executed notebooks). The script
checks that the merged scores and flags equal the unsharded ones and exits 1 when they do not.

    .venv/bin/python benchmarks/grade_shards.py [--students 24] [--shards 3] [--jobs 2] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "fixtures" / "submissions"))
sys.path.insert(0, str(REPO / "benchmarks"))

import classroom  # noqa: E402 (after the sys.path setup)
from grade_throughput import make_fixture_class  # noqa: E402 (after the sys.path setup)

BIN = Path(sys.executable).parent


def rocmlab(*argv) -> float:
    started = time.monotonic()
    command = [str(BIN / "rocmlab"), "--root", str(classroom.COURSE), "grade", *map(str, argv)]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return time.monotonic() - started


def verdicts(out: Path) -> dict:
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    return {s["student"]: (s["score"], sorted(s["flags"])) for s in summary["students"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=24)
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="keep the class and the outputs in this folder")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="rocmlab-shards-"))
    try:
        base = classroom.student_notebook(classroom.COURSE, work)
        entries = {name: (nb,) for name, nb in make_fixture_class(base, args.students).items()}
        classroom.write_class(entries, work / "course" / "submitted", layout="nbgrader")
        submissions = work / "course"
        whole = rocmlab(classroom.LAB, "--submissions", submissions, "--jobs", args.jobs, "--out", work / "whole")
        outs, shard_times = [], []
        for k in range(1, args.shards + 1):
            outs.append(work / f"shard-{k}")
            shard_times.append(
                rocmlab(
                    classroom.LAB,
                    "--submissions",
                    submissions,
                    "--shard",
                    f"{k}/{args.shards}",
                    "--jobs",
                    args.jobs,
                    "--out",
                    outs[-1],
                )
            )
        merge = rocmlab("merge", *outs, "--out", work / "merged")
        same = verdicts(work / "merged") == verdicts(work / "whole")
        print(f"class of {args.students}, {args.shards} shards, --jobs {args.jobs} each, on this machine")
        print(f"  unsharded:        {whole:7.1f} s")
        print(f"  shards:           {' '.join(f'{t:.1f}' for t in shard_times)} s (sum {sum(shard_times):.1f} s)")
        print(
            f"  longest shard:    {max(shard_times):7.1f} s  ({whole / max(shard_times):.2f}x the unsharded wall time)"
        )
        print(f"  merge:            {merge:7.1f} s  ({merge / args.students:.2f} s per learner)")
        print(
            f"  one pod per shard, then merge: {max(shard_times) + merge:.1f} s ({whole / (max(shard_times) + merge):.2f}x)"
        )
        print(f"  merged scores and flags equal the unsharded run: {same}")
        return 0 if same else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
