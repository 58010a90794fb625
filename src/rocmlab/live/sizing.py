"""Sizing a live day: how many grading workers a room needs, and what queue times to expect, from
the CPU seconds one live submission costs (measured by ``benchmarks/live_load.py --real``).

A worker grades one submission at a time and keeps one core busy while it does (the kernel runs
the learner's notebook and the checks; the worker waits), so the rule is one worker per core given
to grading. The room submits in bursts: everyone finishes an exercise within a couple of minutes.
``burst_latencies`` plays such a burst through the workers: submissions arriving evenly over the
window, each taken by the first free worker, each grading taking its CPU seconds on a free core.

docs/hub.md holds the table between markers; ``python -m rocmlab.live.sizing docs/hub.md``
writes it, and a test keeps the two the same.
"""

from __future__ import annotations

import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from ..markdown_table import splice

START, END = "<!-- live-sizing:start -->", "<!-- live-sizing:end -->"
# CPU seconds of one live submission, by lab: the mean per-lab batch figures of two idle runs of
# `benchmarks/live_load.py --real 01-rocm-setup 07-triton-kernels --learners 10 --window 30`
# (5.05 and 15.14, every process counted, the kernels included) times the larger live/batch ratio
# of the two, with the kill (1.14), on the 2-core development machine (docs/hub.md, "How fast";
# docs/measurements.md, 2026-12-06).
CPU_S = {"01-rocm-setup": 5.8, "07-triton-kernels": 17.3}
WORKERS_PER_CORE = 1  # a grading keeps a core busy: a second worker on it halves both, adds nothing
WINDOW_S = 120.0  # the room submits an exercise within about two minutes
ROOMS = (20, 60, 120)
CORES = (1, 2, 4)
TARGET_P95_S = 60.0  # a learner waits about a minute at worst


@dataclass(frozen=True)
class Room:
    lab: str
    cpu_s: float
    learners: int
    times: dict  # grading cores -> (p50, p95) seconds from submit to result
    cores_needed: int  # for a p95 within TARGET_P95_S


def per_core_per_minute(cpu_s: float) -> float:
    """Submissions one core grades in a minute."""
    return 60.0 / cpu_s


def burst_latencies(learners: int, cpu_s: float, workers: int, window_s: float = WINDOW_S) -> list[float]:
    """Submit -> result of each of ``learners`` submissions arriving evenly over ``window_s``,
    graded by ``workers`` on a core each, first come first served."""
    free_at = [0.0] * max(1, workers)
    latencies = []
    for index in range(learners):
        arrival = window_s * index / learners
        worker = min(range(len(free_at)), key=free_at.__getitem__)
        free_at[worker] = max(arrival, free_at[worker]) + cpu_s
        latencies.append(free_at[worker] - arrival)
    return latencies


def percentile(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def cores_for(learners: int, cpu_s: float, p95_s: float, window_s: float = WINDOW_S) -> int:
    """The fewest grading cores (workers) that keep a burst's p95 within ``p95_s``."""
    cores = max(1, math.ceil(learners * cpu_s / (window_s + p95_s)))
    while percentile(burst_latencies(learners, cpu_s, cores * WORKERS_PER_CORE, window_s), 95) > p95_s:
        cores += 1
    return cores


def rooms() -> list[Room]:
    rows = []
    for lab, cpu_s in CPU_S.items():
        for learners in ROOMS:
            times = {}
            for cores in CORES:
                latencies = burst_latencies(learners, cpu_s, cores * WORKERS_PER_CORE)
                times[cores] = (percentile(latencies, 50), percentile(latencies, 95))
            rows.append(Room(lab, cpu_s, learners, times, cores_for(learners, cpu_s, TARGET_P95_S)))
    return rows


def markdown(rows: list[Room]) -> str:
    lines = [
        "| lab | CPU-s per submission | submissions a minute per core | learners | "
        + " | ".join(f"{cores} core{'s' if cores > 1 else ''}: p50 / p95" for cores in CORES)
        + f" | cores for p95 ≤ {TARGET_P95_S:g} s |",
        "| --- " * (5 + len(CORES)) + "|",
    ]
    for r in rows:
        times = " | ".join(f"{p50:.0f} s / {p95:.0f} s" for p50, p95 in r.times.values())
        lines.append(
            f"| {r.lab} | {r.cpu_s:g} | {per_core_per_minute(r.cpu_s):.0f} | {r.learners} | {times} | {r.cores_needed} |"
        )
    return "\n".join(lines) + "\n"


def write(doc: Path) -> bool:
    """Splice the table into ``doc``; True when it changed."""
    text = doc.read_text(encoding="utf-8")
    new = splice(text, START, END, markdown(rooms()))
    if new != text:
        doc.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":
    write(Path(sys.argv[1]))
