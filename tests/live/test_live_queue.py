"""The live workshop's durable queue: idempotent submit, leases, one result per attempt, several processes."""

import multiprocessing
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rocmlab.live.attempts import CheckOutcome, GradeResult
from rocmlab.live.queue import LeaseLost, LiveQueue, QueueError, RateLimited, worker_ended_here


class Clock:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def result(score: float = 1.0) -> GradeResult:
    failed = CheckOutcome("t-1", "scales", False, 0.0, 1.0, {"en": "f scales by SCALE", "zh": "f 乘以 SCALE"})
    return GradeResult(score=score, max_score=2.0, checks=[failed], flags=["tampered"])


def test_submit_is_durable_and_idempotent(tmp_path):
    queue = LiveQueue(tmp_path / "live.sqlite")
    first = queue.submit("ana", "00-test", "2026-12-02T03:00:00.000001", "/srv/a/1", lang="zh")
    again = queue.submit("ana", "00-test", "2026-12-02T03:00:00.000001", "/srv/a/other")
    assert (first.state, first.duplicate) == ("queued", False)
    assert again.id == first.id and again.duplicate and again.source == "/srv/a/1"
    reopened = LiveQueue(tmp_path / "live.sqlite")  # a restarted service
    assert [a.id for a in reopened.attempts()] == [first.id]
    assert reopened.get(first.id).lang == "zh"
    assert sqlite3.connect(tmp_path / "live.sqlite").execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_duplicate_of_a_graded_attempt_is_not_queued_again(tmp_path):
    queue = LiveQueue(tmp_path / "q.sqlite")
    attempt = queue.submit("ana", "00-test", "t1", "/s")
    queue.complete(queue.claim("w1", 60).id, "w1", result())
    again = queue.submit("ana", "00-test", "t1", "/s")
    assert again.duplicate and again.state == "graded" and again.id == attempt.id
    assert queue.claim("w1", 60) is None


def test_complete_records_the_result_for_the_learner(tmp_path):
    queue = LiveQueue(tmp_path / "q.sqlite")
    queue.submit("ana", "00-test", "t1", "/s")
    claimed = queue.claim("w1", 60)
    assert (claimed.state, claimed.worker, claimed.tries) == ("grading", "w1", 1)
    done = queue.complete(claimed.id, "w1", result(1.5))
    assert (done.state, done.score, done.max_score, done.flags) == ("graded", 1.5, 2.0, ["tampered"])
    assert done.failed_checks[0].message["zh"] == "f 乘以 SCALE"
    assert queue.latest("ana", "00-test").score == 1.5
    public = done.to_json(private=False)
    assert "source" not in public and "worker" not in public and public["checks"][0]["check"] == "scales"


def test_a_worker_that_dies_between_claim_and_complete_loses_its_attempt_to_the_next(tmp_path):
    clock = Clock()
    queue = LiveQueue(tmp_path / "q.sqlite", clock=clock)
    queue.submit("ana", "00-test", "t1", "/s")
    dead = queue.claim("dead", 30)
    assert queue.claim("w2", 30) is None  # held while the lease runs
    clock.now += 31
    again = queue.claim("w2", 30)
    assert again.id == dead.id and again.worker == "w2" and again.tries == 2
    with pytest.raises(LeaseLost):  # the first worker comes back late: its result is dropped
        queue.complete(dead.id, "dead", result(0.0))
    queue.complete(again.id, "w2", result(2.0))
    assert queue.get(dead.id).score == 2.0
    with pytest.raises(LeaseLost):
        queue.complete(again.id, "w2", result(0.0))  # and nobody records it twice


def test_waiting_counts_the_labs_claimable_attempts_only(tmp_path):
    """What a worker asks before it starts a kernel ahead for a lab's next attempt."""
    clock = Clock()
    queue = LiveQueue(tmp_path / "q.sqlite", clock=clock)
    for learner in ("ana", "bo"):
        queue.submit(learner, "00-test", "t1", f"/s/{learner}")
    queue.submit("cy", "01-other", "t1", "/s/cy")
    assert queue.waiting("00-test") == 2 and queue.waiting("01-other") == 1 and queue.waiting("02-none") == 0
    held = queue.claim("w1", 30, labs=["00-test"])
    assert held.lab == "00-test" and queue.waiting("00-test") == 1  # held under a live lease: not waiting
    clock.now += 31
    assert queue.waiting("00-test") == 2  # its lease ran out: another worker may claim it
    queue.complete(queue.claim("w2", 30, labs=["00-test"]).id, "w2", result())
    assert queue.waiting("00-test") == 1


def test_a_lease_run_out_but_unclaimed_is_still_held_and_renew_keeps_it(tmp_path):
    clock = Clock()
    queue = LiveQueue(tmp_path / "q.sqlite", clock=clock)
    queue.submit("ana", "00-test", "t1", "/s")
    attempt = queue.claim("w1", 10)
    clock.now += 8
    queue.renew(attempt.id, "w1", 10)
    clock.now += 8
    assert queue.claim("w2", 10) is None  # renewed: not free yet
    clock.now += 5
    assert queue.complete(attempt.id, "w1", result()).state == "graded"


def test_an_attempt_that_kills_every_worker_fails_after_max_tries_and_is_not_counted(tmp_path):
    clock = Clock()
    queue = LiveQueue(tmp_path / "q.sqlite", clock=clock, max_tries=2)
    queue.submit("ana", "00-test", "t1", "/s")
    queue.submit("bo", "00-test", "t1", "/s")
    assert queue.claim("w", 5).learner == "ana"
    clock.now += 6
    bo = queue.claim("w", 5)  # ana's lease ran out, but bo has not had a turn yet
    assert bo.learner == "bo"
    queue.complete(bo.id, "w", result())
    assert queue.claim("w", 5).learner == "ana"
    clock.now += 6
    assert queue.claim("w", 5) is None
    ana = queue.latest("ana", "00-test")
    assert ana.state == "failed" and "worker killed" in ana.error
    assert not ana.counted and queue.submissions_since("ana", "00-test", 0) == 0  # the workers died, not ana


def test_fail_records_why(tmp_path):
    queue = LiveQueue(tmp_path / "q.sqlite")
    queue.submit("ana", "00-test", "t1", "/s")
    attempt = queue.claim("w1", 60)
    with pytest.raises(LeaseLost):
        queue.fail(attempt.id, "w2", "not mine")
    failed = queue.fail(attempt.id, "w1", "the sandbox could not start")
    assert failed.state == "failed" and failed.error == "the sandbox could not start"
    assert queue.counts() == {"queued": 0, "grading": 0, "graded": 0, "failed": 1}


def test_rate_count_and_filters_use_the_servers_clock(tmp_path):
    clock = Clock(1000.0)
    queue = LiveQueue(tmp_path / "q.sqlite", clock=clock)
    for n in range(3):
        queue.submit("ana", "00-test", f"t{n}", "/s")
        clock.now += 100
    queue.submit("ana", "00-test", "t0", "/s")  # a duplicate is no new submission
    queue.submit("ana", "01-other", "t9", "/s")
    queue.submit("bo", "00-test", "t9", "/s")
    assert queue.submissions_since("ana", "00-test", 1100.0) == 2
    assert queue.submissions_since("ana", "00-test", 0) == 3
    assert [a.learner for a in queue.attempts(lab="00-test", since=1200.0)] == ["ana", "bo"]
    assert len(queue.attempts(learner="ana")) == 4
    assert queue.latest("ana", "00-test").submitted_at == "t2"
    assert queue.latest("cy", "00-test") is None


def test_seed_is_drawn_once_per_learner_and_lab(tmp_path):
    queue = LiveQueue(tmp_path / "q.sqlite")
    first = queue.submit("ana", "00-test", "t1", "/s")
    second = queue.submit("ana", "00-test", "t2", "/s")
    assert first.seed == second.seed == queue.seed("ana", "00-test")
    assert queue.seeds_summary("00-test") == {"lab": "00-test", "students": [{"student": "ana", "seed": first.seed}]}


def test_bad_input_is_named(tmp_path):
    queue = LiveQueue(tmp_path / "q.sqlite")
    with pytest.raises(ValueError, match="learner"):
        queue.submit("", "00-test", "t", "/s")
    with pytest.raises(ValueError, match="lease_s"):
        queue.claim("w", 0)
    (tmp_path / "junk.sqlite").write_bytes(b"not a database at all" * 100)
    with pytest.raises(QueueError, match="junk.sqlite"):
        LiveQueue(tmp_path / "junk.sqlite")


def _claim_all(path: str, worker: str, found) -> None:
    queue = LiveQueue(path)
    while (attempt := queue.claim(worker, 60)) is not None:
        queue.complete(attempt.id, worker, GradeResult(score=1.0, max_score=1.0))
        found.put((attempt.id, worker))


def test_concurrent_claimers_in_several_processes_grade_each_attempt_once(tmp_path):
    path = str(tmp_path / "q.sqlite")
    queue = LiveQueue(path)
    for n in range(120):
        queue.submit(f"learner{n}", "00-test", "t", "/s")
    context = multiprocessing.get_context("spawn")
    found = context.Queue()
    workers = [context.Process(target=_claim_all, args=(path, f"w{k}", found)) for k in range(4)]
    for worker in workers:
        worker.start()
    claimed = [found.get(timeout=120) for _ in range(120)]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    ids = [attempt_id for attempt_id, _ in claimed]
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 120
    assert queue.counts()["graded"] == 120
    assert all(a.tries == 1 for a in queue.attempts())


def test_the_rate_limit_is_checked_with_the_insert(tmp_path):
    clock = Clock(0.0)
    queue = LiveQueue(tmp_path / "q.sqlite", clock=clock)
    for n in range(2):
        queue.submit("ana", "00-test", f"t{n}", "/s", limit=(2, 3600))
        clock.now += 600
    with pytest.raises(RateLimited) as refused:
        queue.submit("ana", "00-test", "t2", "/s", limit=(2, 3600))
    assert refused.value.retry_at == 3600.0 and "at most 2" in str(refused.value)
    assert queue.submit("ana", "00-test", "t0", "/s", limit=(2, 3600)).duplicate  # no new submission: allowed
    assert queue.submit("ana", "01-other", "t2", "/s", limit=(2, 3600)).state == "queued"  # per lab
    clock.now = 3600.0
    assert not queue.submit("ana", "00-test", "t2", "/s", limit=(2, 3600)).duplicate


def test_a_stopping_worker_gives_its_attempt_back_at_once(tmp_path):
    queue = LiveQueue(tmp_path / "q.sqlite")
    queue.submit("ana", "00-test", "t1", "/s")
    attempt = queue.claim("w1", 600)
    queue.release(attempt.id, "w2")  # not w2's: nothing happens
    assert queue.claim("w2", 600) is None
    queue.release(attempt.id, "w1")
    again = queue.claim("w2", 600)
    assert again.id == attempt.id and again.tries == 1
    done = queue.complete(again.id, "w2", GradeResult(0.0, 1.0, notes=["the test cell t-1 was edited"]))
    assert done.notes == ["the test cell t-1 was edited"]


def test_live_seeds_writes_what_rocmlab_grade_seeds_reads(tmp_path, capsys):
    from rocmlab.cli import main
    from rocmlab.grading.command import recorded_seeds

    queue = LiveQueue(tmp_path / "q.sqlite")
    ana = queue.submit("ana", "00-test", "t1", "/s").seed
    queue.submit("bo", "01-other", "t1", "/s")
    out = tmp_path / "seeds.json"
    assert main(["live", "seeds", "00-test", "--queue", str(tmp_path / "q.sqlite"), "--out", str(out)]) == 0
    assert recorded_seeds(out) == {"ana": ana}
    assert main(["live", "status", "--queue", str(tmp_path / "q.sqlite")]) == 0
    assert '"queued": 2' in capsys.readouterr().out


def test_one_attempt_per_learner_in_flight_and_learners_take_turns(tmp_path):
    """A learner who queues many attempts (issue 48: one learner kept a classmate waiting 716 s)
    waits behind everyone else's next one, and never has two graded at once."""
    queue = LiveQueue(tmp_path / "q.sqlite")
    for n in range(3):
        queue.submit("ana", "00-test", f"a{n}", "/s")
    queue.submit("bo", "00-test", "b0", "/s")
    queue.submit("cy", "00-test", "c0", "/s")
    first = queue.claim("w1", 60)
    second = queue.claim("w2", 60)
    third = queue.claim("w3", 60)
    assert [first.learner, second.learner, third.learner] == ["ana", "bo", "cy"]
    assert queue.claim("w4", 60) is None  # ana's next waits while her first is graded
    for attempt, worker in ((first, "w1"), (second, "w2"), (third, "w3")):
        queue.complete(attempt.id, worker, result())
    queue.submit("bo", "00-test", "b1", "/s")  # bo was served after ana: ana's turn comes first
    assert [queue.claim("w1", 60).learner, queue.claim("w2", 60).learner] == ["ana", "bo"]


def test_a_byte_identical_notebook_is_answered_with_its_last_attempt(tmp_path):
    queue = LiveQueue(tmp_path / "q.sqlite")
    first = queue.submit("ana", "00-test", "t1", "/s1", content_hash="h1", limit=(2, 3600))
    queue.complete(queue.claim("w", 60).id, "w", result(2.0))
    again = queue.submit("ana", "00-test", "t2", "/s2", content_hash="h1", limit=(2, 3600))
    assert again.duplicate and again.id == first.id and again.state == "graded" and again.score == 2.0
    assert queue.submissions_since("ana", "00-test", 0) == 1 and queue.claim("w", 60) is None
    assert queue.submit("bo", "00-test", "t2", "/s3", content_hash="h1").duplicate is False  # another learner's
    changed = queue.submit("ana", "00-test", "t3", "/s4", content_hash="h2", limit=(2, 3600))
    assert not changed.duplicate and changed.id != first.id
    back = queue.submit("ana", "00-test", "t4", "/s5", content_hash="h1", limit=(3, 3600))
    assert not back.duplicate  # the same bytes as an older attempt, not the last one: a new attempt


def test_an_attempt_failed_by_the_grading_system_is_not_counted_and_regraded_on_resubmit(tmp_path):
    queue = LiveQueue(tmp_path / "q.sqlite")
    first = queue.submit("ana", "00-test", "t1", "/s1", content_hash="h1", limit=(1, 3600))
    queue.fail(queue.claim("w", 60).id, "w", "the offline model is not in the cache", counted=False)
    assert queue.submissions_since("ana", "00-test", 0) == 0
    again = queue.submit("ana", "00-test", "t2", "/s2", content_hash="h1", limit=(1, 3600))  # not rate limited
    assert not again.duplicate and again.id != first.id and again.state == "queued"
    queue.fail(queue.claim("w", 60).id, "w", "a SyntaxError in cell 3")  # the learner's own: counted
    with pytest.raises(RateLimited):
        queue.submit("ana", "00-test", "t3", "/s3", content_hash="h9", limit=(1, 3600))


def test_a_check_that_failed_itself_is_no_broken_rule_and_its_attempt_is_not_counted(tmp_path):
    """Issue 47 with 49: a grading error (the check's own setup raised) withholds its points but is
    never shown as the learner's broken rule, and the attempt costs no submission: the same
    notebook sent again is graded anew, not answered with the faulty result."""
    queue = LiveQueue(tmp_path / "q.sqlite")
    queue.submit("ana", "00-test", "t1", "/s1", content_hash="h1", limit=(1, 3600))
    broken_check = CheckOutcome("t-2", "export", False, 0.0, 1.0, {"en": "export writes files"}, graded=False)
    faulty = GradeResult(score=0.0, max_score=2.0, checks=[*result().checks, broken_check])
    done = queue.complete(queue.claim("w", 60).id, "w", faulty)
    assert [c.check for c in done.failed_checks] == ["scales"] and not done.counted
    assert queue.submissions_since("ana", "00-test", 0) == 0
    again = queue.submit("ana", "00-test", "t2", "/s2", content_hash="h1", limit=(1, 3600))
    assert not again.duplicate and again.state == "queued"
    assert CheckOutcome.from_dict({**vars(broken_check)}).graded is False


def test_an_older_queue_file_gains_the_new_columns(tmp_path):
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE attempts (id INTEGER PRIMARY KEY AUTOINCREMENT, learner TEXT NOT NULL, lab TEXT NOT NULL,"
        " submitted_at TEXT NOT NULL, source TEXT NOT NULL, lang TEXT NOT NULL DEFAULT 'en',"
        " state TEXT NOT NULL DEFAULT 'queued', queued_at REAL NOT NULL, worker TEXT, lease_until REAL,"
        " tries INTEGER NOT NULL DEFAULT 0, started_at REAL, finished_at REAL, score REAL, max_score REAL,"
        " checks TEXT NOT NULL DEFAULT '[]', flags TEXT NOT NULL DEFAULT '[]', notes TEXT NOT NULL DEFAULT '[]',"
        " seed INTEGER, error TEXT NOT NULL DEFAULT '', UNIQUE (learner, lab, submitted_at));"
        "INSERT INTO attempts (learner, lab, submitted_at, source, queued_at) VALUES ('ana', '00-test', 't0', '/s', 1);"
    )
    db.close()
    queue = LiveQueue(path)
    assert queue.get(1).counted and queue.get(1).content_hash == ""
    assert queue.claim("w", 60).id == 1


def test_the_room_shows_the_queue_and_each_workers_heartbeat(tmp_path):
    """Issue 49: with no worker running, a room looked like "queued, 13 s"."""
    clock = Clock()
    queue = LiveQueue(tmp_path / "q.sqlite", clock=clock)
    queue.submit("ana", "00-test", "t1", "/s")
    clock.now += 13
    queue.submit("bo", "00-test", "t1", "/s")
    room = queue.room()
    assert (room["queued"], room["grading"], room["oldest_wait_s"], room["alive_workers"]) == (2, 0, 13.0, 0)
    held = queue.claim("w1", 60)
    clock.now += 5
    room = queue.room()
    assert (room["queued"], room["grading"], room["oldest_wait_s"]) == (1, 1, 5.0)
    assert room["workers"] == [{"worker": "w1", "seen_s": 5.0, "alive": True, "attempt": held.id}]
    clock.now += 50  # grading: its lease (60 s) still runs, a renewal is due only every 20 s
    assert queue.room()["alive_workers"] == 1
    clock.now += 70  # the worker died: no renewal, its lease ran out, no claim
    assert queue.room()["alive_workers"] == 0 and queue.room()["workers"][0]["seen_s"] == 125.0


def test_a_worker_takes_an_attempt_at_a_lab_it_has_open_before_the_first_in_turn(tmp_path):
    clock = Clock()
    queue = LiveQueue(tmp_path / "q.sqlite", clock=clock)
    queue.submit("ana", "07-triton", "t1", "/s")
    queue.submit("bo", "01-setup", "t1", "/s")
    assert queue.claim("w1", 60, labs=["01-setup"]).learner == "bo"  # ana is first in turn
    assert queue.claim("w2", 60).learner == "ana"  # no lab open: the first in turn


def test_no_attempt_is_passed_over_for_a_lab_once_it_waited_the_affinity_bound(tmp_path):
    clock = Clock()
    queue = LiveQueue(tmp_path / "q.sqlite", clock=clock, affinity_s=30)
    queue.submit("ana", "07-triton", "t1", "/s")  # first in turn, at a lab the worker has not open
    for n in range(3):  # the worker's own lab keeps receiving attempts
        clock.now += 10
        queue.submit(f"l{n}", "01-setup", "t1", "/s")
        claimed = queue.claim("w1", 60, labs=["01-setup"])
        if clock.now - 1_000_000.0 < 30:
            assert claimed.lab == "01-setup"
        else:
            assert claimed.learner == "ana"  # waited 30 s: handed out whatever the worker has open
        queue.complete(claimed.id, "w1", result())
    assert queue.latest("ana", "07-triton").state == "graded"


def test_a_worker_without_the_first_in_turns_lab_takes_a_lab_no_other_worker_has_open(tmp_path):
    clock = Clock()
    queue = LiveQueue(tmp_path / "q.sqlite", clock=clock)
    for learner, lab in (("ana", "07-triton"), ("bo", "07-triton"), ("cy", "01-setup"), ("dee", "09-prof")):
        queue.submit(learner, lab, "t1", "/s")
    ana = queue.claim("w1", 600)
    assert ana.lab == "07-triton"  # w1 will open 07: the queue counts it as open there
    assert queue.claim("w2", 600).learner == "cy"  # bo is first in turn, but 07 is open at w1
    clock.now += 31  # bo has waited past the bound, and w1 is alive with 07 open: w1 takes bo next
    assert queue.claim("w3", 600).learner == "dee"
    queue.complete(ana.id, "w1", result())
    assert queue.claim("w1", 600, labs=["07-triton"]).learner == "bo"


def test_an_attempt_past_the_bound_whose_lab_is_open_only_at_a_dead_worker_goes_to_anyone(tmp_path):
    clock = Clock()
    queue = LiveQueue(tmp_path / "q.sqlite", clock=clock)
    queue.submit("ana", "07-triton", "t1", "/s")
    queue.submit("bo", "07-triton", "t1", "/s")
    queue.submit("cy", "01-setup", "t1", "/s")
    queue.submit("dee", "09-prof", "t1", "/s")
    queue.claim("w1", 30)  # ana, then w1 dies: no renew, not seen again
    clock.now += 29
    assert queue.claim("w2", 600, labs=["01-setup"]).learner == "cy"
    clock.now += 61  # w1's lease ran out and it was not seen for a minute: its 07 is open nowhere
    queue.complete(queue.latest("cy", "01-setup").id, "w2", result())
    assert queue.claim("w2", 600, labs=["01-setup"]).learner == "bo"  # first in turn, not dee


def test_a_worker_with_nothing_else_to_do_still_grades_another_workers_lab(tmp_path):
    queue = LiveQueue(tmp_path / "q.sqlite")
    queue.submit("ana", "07-triton", "t1", "/s")
    queue.submit("bo", "07-triton", "t1", "/s")
    assert queue.claim("w1", 60, labs=["07-triton"]).learner == "ana"
    assert queue.claim("w2", 60, labs=["01-setup"]).learner == "bo"  # never idle while an attempt waits


def test_lab_affinity_keeps_one_attempt_per_learner_at_a_time(tmp_path):
    queue = LiveQueue(tmp_path / "q.sqlite")
    queue.submit("ana", "01-setup", "t1", "/s")
    queue.submit("ana", "07-triton", "t2", "/s")
    assert queue.claim("w1", 60, labs=["01-setup"]).lab == "01-setup"
    assert queue.claim("w2", 60, labs=["07-triton"]) is None  # ana's other attempt is being graded


def test_a_queue_file_of_an_older_rocmlab_gains_the_workers_labs(tmp_path):
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE workers (worker TEXT PRIMARY KEY, seen_at REAL NOT NULL, attempt_id INTEGER)")
    db.execute("INSERT INTO workers VALUES ('w0', 1.0, NULL)")
    db.commit()
    db.close()
    queue = LiveQueue(path)
    queue.submit("ana", "01-setup", "t1", "/s")
    assert queue.claim("w1", 60, labs=["01-setup"]).learner == "ana"
    assert [w["worker"] for w in queue.room()["workers"]] == ["w1"]


def test_a_negative_affinity_bound_is_refused(tmp_path):
    with pytest.raises(QueueError, match="affinity_s"):
        LiveQueue(tmp_path / "q.sqlite", affinity_s=-1)


def ended_pid() -> int:
    """The pid of a process that has ended and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=60)
    return child.pid


def test_an_attempt_held_by_a_worker_of_this_host_that_ended_is_claimable_at_once(tmp_path):
    clock = Clock()
    queue = LiveQueue(tmp_path / "q.sqlite", clock=clock)
    attempt = queue.submit("ana", "00-test", "t1", "/s")
    dead = f"{os.uname().nodename}-{ended_pid()}-0a1b2c"
    assert queue.claim(dead, 600).id == attempt.id
    taken = queue.claim("w2", 60)  # no time passed: its lease of 600 s still runs
    assert (taken.id, taken.worker, taken.tries) == (attempt.id, "w2", 2)
    with pytest.raises(LeaseLost):
        queue.complete(attempt.id, dead, result())


@pytest.mark.parametrize(
    "holder",
    [
        lambda: f"{os.uname().nodename}-{os.getpid()}-0a1b2c",  # alive, this host
        lambda: f"another-host-{ended_pid()}-0a1b2c",  # a pod's worker: its pid means nothing here
        lambda: "w1",  # not a worker id of new_worker_id's form
    ],
    ids=["alive-here", "other-host", "other-form"],
)
def test_an_attempt_held_by_a_live_or_unknown_worker_waits_for_its_lease(tmp_path, holder):
    clock = Clock()
    queue = LiveQueue(tmp_path / "q.sqlite", clock=clock)
    queue.submit("ana", "00-test", "t1", "/s")
    assert queue.claim(holder(), 600) is not None
    assert queue.claim("w2", 60) is None
    clock.now += 601
    assert queue.claim("w2", 60).tries == 2


def test_a_worker_not_yet_reaped_has_ended_once_it_is_a_zombie():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    worker = f"{os.uname().nodename}-{child.pid}-0a1b2c"
    try:
        deadline = time.monotonic() + 60
        while not worker_ended_here(worker):  # running, then a zombie: its parent has not waited for it
            assert time.monotonic() < deadline, "the child never became a zombie"
            time.sleep(0.05)
        assert Path(f"/proc/{child.pid}").exists()  # not reaped: os.kill(pid, 0) alone calls it alive
    finally:
        child.wait(timeout=60)
    assert worker_ended_here(worker)
