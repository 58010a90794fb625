"""Whether ``rocmlab build --verify`` gains from verifying labs side by side (issue 47, item 2).

``build.verify.verify_labs`` verifies labs one after another, each graded as a class on
``--jobs`` slots. Since nbgrader's calls are serialized per process (``running_nbgrader``), two
labs' graders may also be open at once. This grades the same labs both ways in one invocation,
alternating which goes first each round, with ``build.verify.verify_lab`` (``rocmlab grade``'s own
code): "one after another" (each lab on ``--jobs`` slots) and "side by side" (``--jobs`` labs at
once, each on one slot, as the code before commit 03cb69b did). Prints each wall time and the
median per way; every verification must be ok.

    .venv/bin/python benchmarks/verify_parallel.py [--labs 01 02] [--jobs 2] [--rounds 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rocmlab.build.verify import verify_lab
from rocmlab.course.catalog import discover, select
from rocmlab.execution.worker import parallel_map

REPO = Path(__file__).resolve().parents[1]


def one_after_another(labs, out: Path, jobs: int) -> list:
    return [verify_lab(REPO, lab, out / lab.id, jobs=jobs) for lab in labs]


def side_by_side(labs, out: Path, jobs: int) -> list:
    return parallel_map(lambda lab: verify_lab(REPO, lab, out / lab.id, jobs=1), labs, jobs)


WAYS = {"one after another": one_after_another, "side by side": side_by_side}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labs", nargs="+", default=["01", "02"])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    labs = select(discover(REPO), args.labs)
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    print(f"labs {' '.join(lab.id for lab in labs)}, --jobs {args.jobs}, load {os.getloadavg()[0]:.1f}")
    for round_ in range(args.rounds):
        order = list(WAYS) if round_ % 2 == 0 else list(reversed(WAYS))
        for way in order:
            with tempfile.TemporaryDirectory(prefix="rocmlab-bench-verify-") as tmp:
                started = time.monotonic()
                results = WAYS[way](labs, Path(tmp), args.jobs)
                took = time.monotonic() - started
            bad = [r.lab for r in results if not r.ok]
            if bad:
                print(f"{way}: verification failed for {', '.join(bad)}", file=sys.stderr)
                return 1
            times[way].append(took)
            print(f"round {round_ + 1} {way:<18} {took:6.1f} s (load {os.getloadavg()[0]:.1f})", flush=True)
    for way, seen in times.items():
        print(f"median {way:<18} {statistics.median(seen):6.1f} s over {len(seen)} round(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
