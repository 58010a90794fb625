"""The step times of a `.ci/run` log, in one line, and (--record) in docs/measurements.md.

`.ci/run` ends with its step-times block (its ``report`` function): ``== step times``, one line per
step (``   lint      35 s``, a failed one ends ``(failed)``) and ``   total  1644 s``. This reads the
last such block of a log; ``--note`` adds what the log cannot say (the tree, the cache, the suite's counts).

Usage: python benchmarks/ci_times.py LOG [--note TEXT] [--record]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

STEP = re.compile(r"^\s+(?P<name>\S+)\s+(?P<seconds>\d+) s(?P<failed> \(failed\))?\s*$")


def step_times(log: str) -> list[tuple[str, int, bool]]:
    """(step, seconds, failed) of the last step-times block, total last; ValueError when there is none."""
    if "== step times" not in log:
        raise ValueError("no '== step times' block: is this the output of .ci/run?")
    block = log.rsplit("== step times", 1)[1].splitlines()[1:]
    times = []
    for line in block:
        match = STEP.match(line)
        if not match:
            break
        times.append((match["name"], int(match["seconds"]), bool(match["failed"])))
    if not times or times[-1][0] != "total":
        raise ValueError("the step-times block has no total line: the log is cut")
    return times


def figures(times: list[tuple[str, int, bool]], note: str = "") -> str:
    steps = ", ".join(f"{name} {seconds} s" + (" (failed)" if failed else "") for name, seconds, failed in times[:-1])
    return f"{steps}; {times[-1][1]} s in all" + (f" ({note})" if note else "")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path, help="the output of .ci/run")
    parser.add_argument("--note", default="", help="what the log cannot say, e.g. 'fresh clone, empty model cache'")
    parser.add_argument("--record", action="store_true", help="add the figures to docs/measurements.md")
    args = parser.parse_args(argv)
    try:
        line = figures(step_times(args.log.read_text(encoding="utf-8", errors="replace")), args.note)
    except (OSError, ValueError) as exc:
        print(f"{args.log}: {exc}", file=sys.stderr)
        return 2
    print(line)
    if args.record:
        import measurements

        print(f"recorded in {measurements.record('ci', line)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
