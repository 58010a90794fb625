"""docs/hub.md's live-day sizing, recomputed from the measured CPU seconds per submission
(rocmlab.live.sizing), and the burst model it rests on."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmlab.live import sizing as live_sizing
from rocmlab.live.sizing import burst_latencies, cores_for, percentile

DOC = Path(__file__).parents[2] / "docs" / "hub.md"


def test_the_docs_table_is_the_one_computed_from_the_measured_figures():
    text = DOC.read_text(encoding="utf-8")
    table = text.split(live_sizing.START, 1)[1].split(live_sizing.END, 1)[0].strip()
    expected = live_sizing.markdown(live_sizing.rooms()).strip()
    assert table == expected, "run python -m rocmlab.live.sizing docs/hub.md"


def test_submissions_slower_than_the_grading_wait_only_for_their_own():
    assert burst_latencies(10, cpu_s=2.0, workers=1, window_s=100.0) == [2.0] * 10


def test_a_burst_at_once_drains_at_one_grading_per_worker():
    latencies = burst_latencies(9, cpu_s=4.0, workers=3, window_s=0.0)
    assert sorted(latencies) == [4.0] * 3 + [8.0] * 3 + [12.0] * 3


@pytest.mark.parametrize("learners, cpu_s", [(60, 10.0), (120, 6.0), (20, 30.0)])
def test_the_cores_named_are_the_fewest_that_keep_the_p95(learners, cpu_s):
    cores = cores_for(learners, cpu_s, p95_s=60.0)
    assert percentile(burst_latencies(learners, cpu_s, cores), 95) <= 60.0
    assert cores == 1 or percentile(burst_latencies(learners, cpu_s, cores - 1), 95) > 60.0
