"""`make test`'s cost: wall time, CPU seconds in all, and where they go by test file and by test.

Runs the fast suite as `make test` does (two xdist workers, ``--dist loadfile``) in a CPU-accounting
cgroup as root (every process it starts, forked kernels too; elsewhere the waited-for children),
with the pytest_cpu plugin timing each test's CPU. Prints the totals, each worker's share, the
costliest files and tests; ``--record`` adds the totals to docs/measurements.md. On a shared
machine wall time measures the neighbours too: compare CPU seconds, and read the load it prints.

Usage: python benchmarks/fast_suite.py [--workers 2] [--top 25] [--record] [--note TEXT] [-- PYTEST ARGS]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measurements
from cpu_accounting import CpuGroup

REPO = Path(__file__).resolve().parents[1]


def run_suite(workers: int, extra: list[str], into: Path) -> tuple[int, float, float, str, str]:
    """(pytest's exit status, wall s, CPU s, how the CPU was counted, pytest's last line)."""
    env = dict(os.environ, ROCMLAB_TEST_CPU_DIR=str(into))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "benchmarks"), env.get("PYTHONPATH")]))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as the Makefile's unexport
    xdist = ["-n", str(workers), "--dist", "loadfile"] if workers > 1 else []
    command = [sys.executable, "-m", "pytest", "-q", "-p", "pytest_cpu", *xdist, *extra]
    group = CpuGroup("fast-suite")
    started = time.monotonic()
    try:
        proc = subprocess.run(
            command, cwd=REPO, env=env, preexec_fn=group.join, capture_output=True, text=True, timeout=3600
        )
    finally:
        wall = time.monotonic() - started
        group.close()
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("FAILED ", "ERROR ")):
            print(line)
    return proc.returncode, wall, group.cpu_s(), group.how, lines[-1] if lines else proc.stderr[-500:]


def read_reports(folder: Path) -> list[dict]:
    return [json.loads(path.read_text(encoding="utf-8")) for path in sorted(folder.glob("*.json"))]


def by_file(tests: dict[str, dict[str, float]]) -> dict[str, float]:
    files: dict[str, float] = defaultdict(float)
    for nodeid, figures in tests.items():
        files[nodeid.split("::", 1)[0]] += figures["cpu_s"]
    return files


def summary(reports: list[dict], top: int) -> tuple[str, list[str]]:
    """One line for the page (each worker's CPU, its tests', the costliest files) and the detail."""
    workers = [r for r in reports if r["worker"] != "main"] or reports
    controller = [f"controller {r['own_cpu_s']:.0f}" for r in reports if r["worker"] == "main" and workers != reports]
    shares = ", ".join(
        controller
        + [
            f"{r['worker']} {r['process_cpu_s']:.0f} (tests {sum(t['cpu_s'] for t in r['tests'].values()):.0f})"
            for r in workers
        ]
    )
    tests = {nodeid: figures for r in workers for nodeid, figures in r["tests"].items()}
    files = sorted(by_file(tests).items(), key=lambda kv: -kv[1])
    head = ", ".join(f"{Path(name).name} {cpu:.1f}" for name, cpu in files[:5])
    detail = [f"{len(tests)} tests; CPU-s by worker process (its tests): {shares}", "", "costliest files (CPU-s):"]
    detail += [f"  {cpu:7.2f}  {name}" for name, cpu in files[:top]]
    detail += ["", "costliest tests (CPU-s, wall s):"]
    ranked = sorted(tests.items(), key=lambda kv: -kv[1]["cpu_s"])[:top]
    detail += [f"  {f['cpu_s']:7.2f} {f['wall_s']:7.2f}  {nodeid}" for nodeid, f in ranked]
    return f"by worker (its tests): {shares}; costliest files: {head}", detail


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--record", action="store_true", help="add the totals to docs/measurements.md")
    parser.add_argument("--note", default="", help="what ran, said in the recorded entry")
    parser.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments (a folder, -k)")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="rocmlab-fast-suite-") as folder:
        status, wall, cpu, how, last = run_suite(args.workers, args.pytest_args, Path(folder))
        reports = read_reports(Path(folder))
    load_after = os.getloadavg()[0]
    line, detail = summary(reports, args.top) if reports else ("no per-test figures", [])
    totals = (
        f"`make test` ({args.workers} workers): {wall:.0f} s wall, {cpu:.0f} CPU-s ({how}), load "
        f"{load_before:.1f} before and {load_after:.1f} after; {last.strip()}"
    )
    print(totals, *detail, sep="\n")
    if args.record and status not in (0, 1):  # pytest's 2-5: interrupted, an internal or usage error, no tests
        print(f"not recorded: pytest exited {status}")
    elif args.record:
        note = f" ({args.note})" if args.note else ""
        print(f"recorded in {measurements.record('fast_suite', f'{totals}{note}; {line}')}")
    return status


if __name__ == "__main__":
    sys.exit(main())
