"""Timers that measure GPU work honestly: warm-up excluded, device synchronized before the clock."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .env import synchronize


@dataclass
class Timer:
    """Context manager: ``with Timer(device) as t: ...`` then ``t.seconds``.

    ``clock`` and ``sync`` are injectable so that tests can check the harness with a fake clock.
    """

    device: object = None
    clock: Callable[[], float] = time.perf_counter
    sync: Callable[[object], None] = synchronize
    seconds: float = field(default=float("nan"), init=False)

    def __enter__(self):
        self.sync(self.device)
        self._start = self.clock()
        return self

    def __exit__(self, *exc):
        self.sync(self.device)
        self.seconds = self.clock() - self._start
        return False


def time_it(
    fn: Callable[[], object],
    *,
    repeats: int = 5,
    warmup: int = 1,
    device=None,
    clock: Callable[[], float] = time.perf_counter,
    sync: Callable[[object], None] = synchronize,
) -> dict:
    """Run ``fn`` ``warmup`` times untimed, then ``repeats`` timed runs; seconds per run.

    Returns ``{"median": s, "mean": s, "min": s, "samples": [...]}``.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        with Timer(device, clock=clock, sync=sync) as t:
            fn()
        samples.append(t.seconds)
    return {
        "median": statistics.median(samples),
        "mean": statistics.fmean(samples),
        "min": min(samples),
        "samples": samples,
    }
