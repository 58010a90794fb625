"""A newcomer's first session, timed: a fresh clone, an empty model cache, `make run` twice, `make test`.

The clone goes into a temporary folder with a cache of its own (ROCMLAB_CACHE), so the user's
cache is neither read nor written. Phases: install (`make setup`), then for each `make run` the
lab build, the course model, lab 03's adapter, each lab and the report, read from run's progress lines as they come.
Ends with one line: `first: X s second: Y s test: Z s`. Figures depend on the machine's load,
printed at the start and the end; pip's own download cache is used as any user's would be.

With --record the summary goes to docs/measurements.md (benchmarks/measurements.py).

Usage: python benchmarks/newcomer.py [--source REPO] [--keep] [--jobs N] [--record]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PHASE_TIMEOUT_S = 3600
# `rocmlab run` progress: "[  12.3s] passed  01-rocm-setup (12.3s) [1/10]", "[ 5.0s] ready   model tiny-qwen-zh (300.1s)"
FINISHED = re.compile(r"^\[\s*[\d.]+s\] (?P<status>\S+)\s+(?P<key>.+?) \((?P<seconds>[\d.]+)s\)(?: \[\d+/\d+\])?$")
STARTED = re.compile(r"^\[\s*[\d.]+s\] start\s+")
RUN_DONE = "records and executed notebooks:"
MODEL_PREFIX, ADAPTER_PREFIX = "model ", "adapter "  # the run's course assets (rocmlab.execution.course_assets)


@dataclass
class Timed:
    """A command's exit status, wall time and output lines, each with its arrival in seconds from start."""

    rc: int
    seconds: float
    lines: list[tuple[float, str]] = field(default_factory=list)


@dataclass
class RunPhases:
    build: float  # `rocmlab build`, until the run's first progress line
    model: float  # 0 when the cache held the model
    adapter: float  # lab 03's QC adapter, built after the model; 0 when cached
    labs: dict[str, tuple[str, float]]  # lab -> (status, seconds)
    report: float  # after the run's last line, until make ends
    total: float


def parse_make_run(timed: Timed) -> RunPhases:
    """The phases of one `make run` from its timestamped output."""
    first_progress = next((t for t, line in timed.lines if STARTED.match(line)), None)
    run_done = next((t for t, line in timed.lines if line.startswith(RUN_DONE)), None)
    model, adapter, labs = 0.0, 0.0, {}
    for _, line in timed.lines:
        match = FINISHED.match(line)
        if not match:
            continue
        key, seconds = match["key"], float(match["seconds"])
        if key.startswith(MODEL_PREFIX):
            model = seconds
        elif key.startswith(ADAPTER_PREFIX):
            adapter = seconds
        else:
            labs[key] = (match["status"], seconds)
    return RunPhases(
        build=round(first_progress if first_progress is not None else 0.0, 1),
        model=model,
        adapter=adapter,
        labs=labs,
        report=round(timed.seconds - run_done, 1) if run_done is not None else 0.0,
        total=round(timed.seconds, 1),
    )


def format_run(name: str, phases: RunPhases, rc: int) -> list[str]:
    lines = [f"{name}: {phases.total:.1f} s (rc {rc})", f"  build   {phases.build:8.1f} s"]
    lines.append(f"  model   {phases.model:8.1f} s" + ("" if phases.model else "  (cached)"))
    lines.append(f"  adapter {phases.adapter:8.1f} s" + ("" if phases.adapter else "  (cached)"))
    for lab, (status, seconds) in sorted(phases.labs.items()):
        lines.append(f"  {lab:<28} {seconds:8.1f} s  {status}")
    lines.append(f"  report  {phases.report:8.1f} s")
    return lines


def summary_line(first: float, second: float, test: float) -> str:
    return f"first: {first:.0f} s second: {second:.0f} s test: {test:.0f} s"


def timed(command: list[str], cwd: Path, env: dict, echo=None) -> Timed:
    """Run ``command``, stamping each output line as it arrives; killed after PHASE_TIMEOUT_S."""
    started = time.monotonic()
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    timer = threading.Timer(PHASE_TIMEOUT_S, proc.kill)
    timer.start()
    lines = []
    try:
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            lines.append((time.monotonic() - started, line))
            if echo:
                echo(line)
        rc = proc.wait()
    finally:
        timer.cancel()
        proc.stdout.close()
    return Timed(rc, round(time.monotonic() - started, 1), lines)


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.1f} {five:.1f} {fifteen:.1f} on {os.cpu_count()} cores"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=str(REPO), help="the repository to clone (default: this one, at HEAD)")
    parser.add_argument("--jobs", type=int, default=2, help="make run's JOBS")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (its path is printed)")
    parser.add_argument("--quiet", action="store_true", help="do not echo the commands' output")
    parser.add_argument("--record", action="store_true", help="add the summary to docs/measurements.md")
    args = parser.parse_args()
    echo = None if args.quiet else (lambda line: print(f"    | {line}", flush=True))
    tmp = Path(tempfile.mkdtemp(prefix="rocmlab-newcomer-"))
    try:
        rc, summary = measure(Path(args.source), tmp, args.jobs, echo)
        if args.record:
            import measurements

            print(f"recorded in {measurements.record('newcomer', summary)}")
        return rc
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def measure(source: Path, tmp: Path, jobs: int, echo) -> tuple[int, str]:
    """The exit status (0: every step passed) and the summary to record."""
    print(f"newcomer benchmark: {source} into {tmp}; {load()}", flush=True)
    clone, cache = tmp / "rocmlab", tmp / "cache"
    subprocess.run(["git", "clone", "--quiet", str(source), str(clone)], check=True, timeout=600)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "ROCMLAB_"))}
    env.update(ROCMLAB_CACHE=str(cache), JOBS=str(jobs), PYTHONUNBUFFERED="1")  # lines stamped as printed
    install = timed(["make", "setup"], clone, env, echo)
    print(f"install: {install.seconds:.1f} s (rc {install.rc}); {load()}", flush=True)
    if install.rc != 0:
        print("\n".join(line for _, line in install.lines[-20:]))
        return 1, ""
    runs = []
    for name in ("first make run", "second make run"):
        result = timed(["make", "run"], clone, env, echo)
        runs.append(result)
        print("\n".join(format_run(name, parse_make_run(result), result.rc)) + f"\n  {load()}", flush=True)
    test = timed(["make", "test"], clone, env, echo)
    print(f"make test: {test.seconds:.1f} s (rc {test.rc}); {test.lines[-1][1] if test.lines else ''}; {load()}")
    line = summary_line(install.seconds + runs[0].seconds, runs[1].seconds, test.seconds)
    print(line)
    passed = all(r.rc == 0 for r in (*runs, test))
    summary = (
        f"`{line}` (install {install.seconds:.0f} s; {'every step passed' if passed else 'a step FAILED'}; {load()})"
    )
    return (0 if passed else 1), summary


if __name__ == "__main__":
    sys.exit(main())
