"""Regrade everyone (rocmlab.live.regrade, LiveQueue.requeue): after a check is fixed, every
learner's last finished attempt at the lab is graded again, never counted against the rate limit,
with the new score beside the old; the instructor's page shows it (test_live_page.py, 403 for a
learner; test_live_browser.py in chromium)."""

from __future__ import annotations

import pytest
from live_fakes import check

from rocmlab.errors import InputError
from rocmlab.live.attempts import GradeResult
from rocmlab.live.queue import LiveQueue, QueueError
from rocmlab.live.regrade import RegradeStore

LAB = "02-hip-kernels"
HOUR = (5, 3600.0)


class Room:
    """A real queue, its copies in a spool folder, and a worker that grades by hand."""

    def __init__(self, tmp_path):
        self.path = tmp_path / "live" / "queue.sqlite"
        self.queue = LiveQueue(self.path)
        self.spool = tmp_path / "spool"
        self.spool.mkdir()

    def submit(self, learner: str, at: str, digest: str = "", keep_copy: bool = True):
        copy = self.spool / f"{learner}-{at}.ipynb"
        if keep_copy:
            copy.write_text("{}", encoding="utf-8")
        return self.queue.submit(learner, LAB, at, str(copy), limit=HOUR, content_hash=digest)

    def grade(self, score: float, *, fail_ours: bool = False):
        claimed = self.queue.claim("worker-1", 60)
        assert claimed is not None
        if fail_ours:
            return self.queue.fail(claimed.id, "worker-1", "the model is not in the cache", counted=False)
        checks = [check("grid", score >= 2), check("reduce", score >= 1)]
        return self.queue.complete(claimed.id, "worker-1", GradeResult(score, 2.0, checks))


@pytest.fixture
def room(tmp_path):
    return Room(tmp_path)


def test_every_last_finished_attempt_is_graded_again_and_nothing_is_counted(room):
    room.submit("ana", "2026-12-06T09:00:00", digest="a1")
    room.grade(1.0)
    room.submit("dee", "2026-12-06T09:00:01")
    room.grade(0.0, fail_ours=True)  # our failure: regraded too
    room.submit("bo", "2026-12-06T09:00:02", keep_copy=False)
    room.grade(2.0)
    room.submit("cy", "2026-12-06T09:00:03")  # still waiting: graded with the fixed check anyway
    store = RegradeStore(room.path)

    regrade = store.start(room.queue, LAB, author="teacher")

    by_learner = {item.learner: item for item in regrade.items}
    assert sorted(by_learner) == ["ana", "bo", "cy", "dee"]
    assert regrade.progress == {"queued": 2, "grading": 0, "graded": 0, "failed": 0, "skipped": 2}
    assert "no longer in the service's spool" in by_learner["bo"].skipped
    assert "queued" in by_learner["cy"].skipped and by_learner["cy"].new_id is None
    assert (by_learner["ana"].old_score, by_learner["ana"].new_state) == (1.0, "queued")
    new = room.queue.get(by_learner["ana"].new_id)
    old = room.queue.get(by_learner["ana"].old_id)
    assert (new.source, new.seed, new.regrade_of) == (old.source, old.seed, old.id)
    assert room.queue.submissions_since("ana", LAB, 0) == 1

    graded = []
    for _ in range(3):  # cy's waiting attempt, then the two regrades
        graded.append(room.grade(2.0))
    assert sorted(a.learner for a in graded) == ["ana", "cy", "dee"]
    again = RegradeStore(room.path).regrades(room.queue)  # a restart of the service loses nothing
    assert [r.id for r in again] == [regrade.id]
    items = {item.learner: item for item in again[0].items}
    assert (items["ana"].old_score, items["ana"].new_score, items["ana"].new_state) == (1.0, 2.0, "graded")
    assert again[0].progress == {"queued": 0, "grading": 0, "graded": 2, "failed": 0, "skipped": 2}
    assert room.queue.submissions_since("ana", LAB, 0) == 1
    assert room.queue.submissions_since("dee", LAB, 0) == 0


def test_an_unchanged_notebook_after_a_regrade_is_answered_with_the_regrade(room):
    room.submit("ana", "2026-12-06T09:00:00", digest="a1")
    room.grade(1.0)
    regrade = RegradeStore(room.path).start(room.queue, LAB, author="teacher")
    room.grade(2.0)
    answer = room.submit("ana", "2026-12-06T09:30:00", digest="a1")  # the same bytes, submitted anew
    assert answer.duplicate and answer.id == regrade.items[0].new_id and answer.score == 2.0
    assert room.queue.submissions_since("ana", LAB, 0) == 1


def test_the_same_attempt_is_requeued_once_per_regrade_and_only_when_finished(room):
    first = room.submit("ana", "2026-12-06T09:00:00")
    with pytest.raises(QueueError, match="only a finished one is regraded"):
        room.queue.requeue(first.id, "regrade-1")
    room.grade(1.0)
    made = room.queue.requeue(first.id, "regrade-1")
    assert not made.duplicate and made.submitted_at > first.submitted_at  # after it, as recollect compares
    assert room.queue.requeue(first.id, "regrade-1").duplicate
    with pytest.raises(QueueError, match="attempt 999 is missing"):
        room.queue.requeue(999, "regrade-1")


def test_a_wrong_regrade_names_the_field_and_queues_nothing(room):
    store = RegradeStore(room.path)
    with pytest.raises(InputError, match="regrade field lab: '../x' is not a lab id"):
        store.start(room.queue, "../x", author="teacher")
    with pytest.raises(InputError, match="nobody has submitted 03-other"):
        store.start(room.queue, "03-other", author="teacher")
    assert store.regrades(room.queue) == [] and room.queue.attempts() == []


def test_the_learners_page_says_a_regrade_costs_no_submission(room):
    from rocmlab.live.service import attempts_table

    room.submit("ana", "2026-12-06T09:00:00")
    room.grade(1.0)
    RegradeStore(room.path).start(room.queue, LAB, author="teacher")
    room.grade(2.0)
    table = attempts_table(room.queue.attempts(learner="ana"), "zh")
    assert table.count('class="regraded"') == 1 and "老师修正评分检查后重新评分" in table
