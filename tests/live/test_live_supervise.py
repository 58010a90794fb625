"""The grading workers as the instructor's page shows them, and a worker the hub runs that cannot
start (rocmlab.live.supervise; issue 49's walk: a dead worker of an earlier hub run stayed red on
the page, and a refused worker would be restarted by JupyterHub every 30 s)."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time

import pytest
from labsource import REPO

from rocmlab.errors import CommandFailed
from rocmlab.live import supervise
from rocmlab.live.page import LiveContext, room_state
from rocmlab.live.queue import LiveQueue
from rocmlab.live.supervise import RefusalStore, hold_until_it_may_start, process_started, worker_states

HOST = "gpu-node"
SINCE = 1000.0  # this service started then
NOW = 1300.0
LOOPBACK_LAB = "04-collectives-rccl"  # needs loopback TCP, which a Landlock kernel does not have


def row(worker_id: str, seen_at: float, alive: bool = False) -> dict:
    return {"worker": worker_id, "seen_s": NOW - seen_at, "alive": alive, "attempt": None}


def test_each_worker_is_alive_silent_or_ended_and_an_earlier_runs_are_left_out():
    started = {11: 900.0, 12: 900.0, 13: 1250.0}.get  # pid -> when it started; absent: None
    workers = [
        row(f"{HOST}-10-aaaaaa", 1290, alive=True),  # heartbeat within the bound
        row(f"{HOST}-11-bbbbbb", 1100),  # no heartbeat since 1100, its process runs: hung
        row(f"{HOST}-12-cccccc", 950),  # an earlier run's pid, still running: hung since before us
        row(f"{HOST}-13-dddddd", 1200),  # pid 13 is another process now (it started after 1200)
        row(f"{HOST}-14-eeeeee", 1150),  # gone, since this service started: ended, shown grey
        row(f"{HOST}-15-ffffff", 400),  # gone, from an earlier run of the hub: left out
        row("other-host-16-gggggg", 500),  # another host's, last seen before this service: left out
        row("other-host-17-hhhhhh", 1100),  # another host's, silent since this service started
    ]
    shown = worker_states(workers, now=NOW, since=SINCE, host=HOST, started=started)
    assert {w["worker"].split("-")[-1]: w["state"] for w in shown} == {
        "aaaaaa": "alive",
        "bbbbbb": "silent",
        "cccccc": "silent",
        "dddddd": "ended",
        "eeeeee": "ended",
        "hhhhhh": "silent",
    }


def test_a_process_is_seen_only_while_it_runs():
    child = subprocess.Popen(["sleep", "30"])
    try:
        began = process_started(child.pid)
        assert began is not None and abs(began - time.time()) < 60
    finally:
        child.kill()
        child.wait(timeout=10)
    assert process_started(child.pid) is None
    assert supervise.host_and_pid("a-b-c-123-abcdef") == ("a-b-c", 123)
    assert supervise.host_and_pid("worker-test") == ("", None)  # a test's id: no process known


def test_the_page_leaves_out_a_dead_worker_of_an_earlier_run(tmp_path):
    """A real queue: a worker of an earlier hub run (its pid gone) is not on today's page, nor
    counted; a worker of this run whose process ended is shown as ended; a live one as alive."""
    host = os.uname().nodename
    dead = subprocess.Popen(["true"])
    dead.wait(timeout=10)
    path = tmp_path / "queue.sqlite"
    now = time.time()
    LiveQueue(path, clock=lambda: now - 1800).claim(f"{host}-{dead.pid}-000000", lease_s=60)  # an earlier run
    LiveQueue(path, clock=lambda: now - 120).claim(f"{host}-{dead.pid}-111111", lease_s=60)  # this run, ended
    LiveQueue(path).claim(f"{host}-{os.getpid()}-222222", lease_s=60)  # this process, alive
    context = LiveContext(hints=None, rule=None, key=b"k", home_of=None, started_at=now - 600)
    room = room_state(context, LiveQueue(path), RefusalStore(path))
    assert sorted((w["worker"].rsplit("-", 1)[1], w["state"]) for w in room["workers"]) == [
        ("111111", "ended"),
        ("222222", "alive"),
    ]
    assert room["alive_workers"] == 1 and room["refused"] == []


def test_a_refused_worker_says_it_once_waits_and_starts_once_the_cause_is_gone(tmp_path):
    store = RefusalStore(tmp_path / "queue.sqlite")
    log, checks, seen = io.StringIO(), iter([1, 2, 3, 4]), []

    def check():
        n = next(checks)
        seen.append([r["message"] for r in store.current(host=os.uname().nodename)])
        if n < 3:
            raise CommandFailed("lab 04 cannot be graded on the landlock sandbox backend: install bubblewrap")
        if n == 3:
            raise CommandFailed("the offline model is not in the cache: set ROCMLAB_CACHE")

    hold_until_it_may_start("rocmlab-live-worker-1", store, check, recheck_s=0, out=log)
    lines = log.getvalue().splitlines()
    assert len(lines) == 3  # each reason once (not once per check), then that it starts
    assert "install bubblewrap" in lines[0] and "ROCMLAB_CACHE" in lines[1] and "the worker starts" in lines[2]
    assert seen[0] == [] and "install bubblewrap" in seen[1][0] and "ROCMLAB_CACHE" in seen[3][0]
    assert store.current(host=os.uname().nodename) == []  # started: the page no longer shows it


def worker_command(queue) -> list[str]:
    return [sys.executable, "-m", "rocmlab", "--root", str(REPO), "live", "worker", "--queue", str(queue)]


@pytest.fixture
def landlock_only(tmp_path):
    """What a worker finds where bubblewrap does not work and Landlock does: the backend forced."""
    from rocmlab.sandbox import landlock

    if landlock.abi() < landlock.SANDBOX_ABI:
        pytest.skip("this kernel has no Landlock ABI 6")
    queue = tmp_path / "live" / "queue.sqlite"
    LiveQueue(queue)
    return queue, {**os.environ, "ROCMLAB_SANDBOX": "landlock"}


@pytest.mark.slow
def test_a_worker_the_hub_runs_refuses_once_and_waits_instead_of_being_restarted(landlock_only):
    """About 5 s: the CLI's worker in a process of its own, as JupyterHub starts it."""
    queue, env = landlock_only
    env[supervise.MANAGED_BY_HUB] = "rocmlab-live-worker-1"
    worker = subprocess.Popen(
        worker_command(queue) + ["--labs", LOOPBACK_LAB],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not RefusalStore(queue).current(host=os.uname().nodename) and time.monotonic() < deadline:
            assert worker.poll() is None, worker.communicate()
            time.sleep(0.2)
        (refusal,) = RefusalStore(queue).current(host=os.uname().nodename)
        assert refusal["name"] == "rocmlab-live-worker-1" and refusal["pid"] == worker.pid
        assert LOOPBACK_LAB in refusal["message"] and "bubblewrap" in refusal["message"]
        time.sleep(2)
        assert worker.poll() is None  # still up: JupyterHub has nothing to restart
    finally:
        os.killpg(worker.pid, signal.SIGTERM)  # how the hub stops its services
        out, err = worker.communicate(timeout=60)
    assert err.count("cannot be graded on the landlock sandbox backend") == 1, err
    assert RefusalStore(queue).current(host=os.uname().nodename) == []  # stopped: no longer shown


@pytest.mark.slow
def test_a_worker_started_by_hand_that_may_not_start_exits_naming_why(landlock_only):
    """About 8 s (loaded machine): the CLI's worker, as an instructor types it."""
    queue, env = landlock_only
    env.pop(supervise.MANAGED_BY_HUB, None)
    done = subprocess.run(
        worker_command(queue) + ["--labs", LOOPBACK_LAB], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0 and LOOPBACK_LAB in done.stderr and "bubblewrap" in done.stderr
    assert RefusalStore(queue).current(host=os.uname().nodename) == []
