"""A failure of the grading system never costs a learner an attempt (issue 49): a worker that
cannot grade a lab refuses to start, naming the lab and the fix; an attempt the grading system
fails is recorded not counted; an attempt that runs past its time budget stops holding the worker
(issue 48) and counts, as the learner's notebook used the time."""

from __future__ import annotations

import time

import pytest
from labsource import REPO

from rocmlab.course.course import Course
from rocmlab.errors import CommandFailed, InputError, LabError
from rocmlab.live import worker as live_worker
from rocmlab.live.attempts import GradeResult
from rocmlab.live.queue import LiveQueue, RateLimited
from rocmlab.live.worker import Worker, preflight
from rocmlab.root import find_root

LAB = "01-rocm-setup"
MODEL_LAB = "02-llm-inference"  # loads the offline course model (solutions/02-llm-inference/lab.toml)


def test_a_worker_without_the_model_cache_refuses_to_start_naming_the_lab_and_the_fix(tmp_path, monkeypatch):
    """The guide's `sudo rocmlab live worker` dropped ROCMLAB_CACHE: a cache folder with nothing in it."""
    monkeypatch.setenv("ROCMLAB_CACHE", str(tmp_path / "empty-cache"))
    root = find_root(None)
    assert preflight(root, [LAB]) == [LAB]  # lab 01 needs no model
    with pytest.raises(CommandFailed) as refused:
        preflight(root, [LAB, MODEL_LAB])
    message = str(refused.value)
    assert f"lab {MODEL_LAB} cannot be graded here" in message and "the offline model is not in the cache" in message
    assert "sudo --preserve-env=ROCMLAB_CACHE" in message


def test_a_worker_on_landlock_refuses_to_start_for_a_lab_whose_ranks_talk_over_loopback(monkeypatch):
    """Every learner's torchrun ranks would fail there (solutions/04-collectives-rccl/lab.toml's needs)."""
    from rocmlab.sandbox import landlock

    if landlock.abi() < landlock.SANDBOX_ABI:
        pytest.skip("the Landlock backend needs Landlock ABI 6 (Linux 6.12 or later)")
    monkeypatch.setenv("ROCMLAB_SANDBOX", "landlock")
    root = find_root(None)
    assert preflight(root, [LAB]) == [LAB]
    with pytest.raises(CommandFailed) as refused:
        preflight(root, [LAB, "04"])
    message = str(refused.value)
    assert message.startswith("live worker: the worker does not start: lab 04-collectives-rccl cannot be graded")
    assert "landlock sandbox backend" in message and "ROCMLAB_SANDBOX=bubblewrap" in message


def test_the_cli_worker_refuses_before_it_claims_anything(tmp_path, monkeypatch, capsys):
    from rocmlab.live import command as live_command

    monkeypatch.setenv("ROCMLAB_CACHE", str(tmp_path / "empty-cache"))
    queue = LiveQueue(tmp_path / "q.sqlite")
    queue.submit("ana", MODEL_LAB, "t1", str(tmp_path / "nb.ipynb"))
    with pytest.raises(CommandFailed, match=MODEL_LAB):
        live_command.main(
            action="worker",
            queue=str(queue.path),
            labs=f"{LAB},{MODEL_LAB}",
            max_attempts=1,
            course=Course(REPO),
        )
    assert queue.get(1).state == "queued" and queue.get(1).tries == 0


def run_one(queue: LiveQueue, grade, **options) -> None:
    worker = Worker(queue, find_root(None), worker_id="w", poll_s=0.05, log=lambda _m: None, **options)
    live_worker_grade = live_worker.grade_attempt
    live_worker.grade_attempt = grade
    try:
        assert worker.run(max_attempts=1, idle_exit_s=5) == 1
    finally:
        live_worker.grade_attempt = live_worker_grade


@pytest.mark.parametrize(
    "error",
    [
        CommandFailed("the offline model is not in the cache (/root/.cache/rocmlab/...)"),
        LabError("unknown lab '01-rocm-setup'"),  # the checkout lacks the lab: ours, though an InputError
        RuntimeError("a bug of the grader"),
    ],
)
def test_a_failure_of_the_grading_system_is_not_counted(tmp_path, error):
    queue = LiveQueue(tmp_path / "q.sqlite")
    queue.submit("ana", LAB, "t1", "/spool/a", content_hash="h1", limit=(1, 3600))

    def crashes(*_args, **_kwargs):
        raise error

    run_one(queue, crashes)
    failed = queue.get(1)
    assert failed.state == "failed" and not failed.counted and "not counted" in failed.error
    again = queue.submit("ana", LAB, "t2", "/spool/b", content_hash="h1", limit=(1, 3600))  # the same notebook
    assert not again.duplicate and again.state == "queued"  # graded anew, and the limit of 1 still allows it


def test_an_attempt_past_its_budget_frees_the_worker_and_counts(tmp_path):
    queue = LiveQueue(tmp_path / "q.sqlite")
    queue.submit("ana", LAB, "t1", "/spool/a", limit=(1, 3600))

    def hangs(*_args, **_kwargs):
        time.sleep(60)
        return GradeResult(1.0, 1.0)

    started = time.monotonic()
    run_one(queue, hangs, budget_s=0.5)
    assert time.monotonic() - started < 30  # not the minute the notebook asked for
    failed = queue.get(1)
    assert failed.state == "failed" and failed.counted and "time budget of 0.5 s" in failed.error
    with pytest.raises(RateLimited):
        queue.submit("ana", LAB, "t2", "/spool/b", limit=(1, 3600))


def test_a_notebook_that_cannot_be_graded_counts(tmp_path):
    queue = LiveQueue(tmp_path / "q.sqlite")
    queue.submit("ana", LAB, "t1", "/spool/a", limit=(1, 3600))

    def unreadable(*_args, **_kwargs):
        raise InputError("/spool/a/01-rocm-setup.ipynb: not a notebook (cell 3: no source)")

    run_one(queue, unreadable)
    assert queue.get(1).state == "failed" and queue.get(1).counted
