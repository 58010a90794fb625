"""The grading workers as the instructor's page shows them, and a worker the hub runs that cannot
start (issue 49's walk).

**Which workers the page shows.** The queue keeps every worker's last heartbeat for an hour
(rocmlab.live.queue ``room``), so a worker of an earlier run of the hub stayed red on the page as
if today's room had a failing worker. ``worker_states`` gives each one a state:

- ``alive``: a heartbeat within the queue's bound, or an attempt under a live lease;
- ``silent`` (red): no recent heartbeat while its process still runs (hung), or on another host
  (Kubernetes) since this service started: someone should look;
- ``ended`` (grey): its process is gone. A worker id is ``<host>-<pid>-<random>``
  (``queue.new_worker_id``): on this host the process is present only if that pid runs and
  started no later than the worker's last heartbeat (a pid used again later is another process);
  on another host, a worker last seen before this service started has ended;
- left out: a worker that ended and was last seen before this service started (an earlier run).

**A worker that refuses to start.** JupyterHub starts a managed service again whenever it exits
(``Service._proc_stopped``, checked every ``Spawner.poll_interval``, 30 s), so a worker whose
preflight refuses (a lab its sandbox cannot grade, the model cache missing) would be restarted
and refuse again every 30 s, filling the hub's log. A worker the hub runs (JupyterHub sets
``JUPYTERHUB_SERVICE_NAME`` for its managed services only) instead says why and the fix once, in
the hub's log and in the queue's file (``live_worker_refusals``, shown in red on the instructor's
page), and stays up, checking again every ``RECHECK_S`` seconds without a word: once the cause is
gone it says so and starts grading; stopped (the hub stops), its refusal is removed.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import closing
from pathlib import Path

from ..errors import CommandFailed, RocmlabError
from .tables import QueueTables

RECHECK_S = 60.0  # how often a refused worker checks again whether it may start
MANAGED_BY_HUB = "JUPYTERHUB_SERVICE_NAME"  # set by JupyterHub in its managed services' environment
START_SLACK_S = 1.0  # /proc/stat's boot time is whole seconds


def process_started(pid: int, proc: Path = Path("/proc")) -> float | None:
    """When process ``pid`` of this host started (epoch seconds), or None when none runs."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
        boot = next(line for line in (proc / "stat").read_text().splitlines() if line.startswith("btime "))
    except (OSError, StopIteration):
        return None
    ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime: clock ticks after boot
    return int(boot.split()[1]) + ticks / os.sysconf("SC_CLK_TCK")


def host_and_pid(worker_id: str) -> tuple[str, int | None]:
    """(host, pid) of a worker id ``<host>-<pid>-<random>``; pid None when it is not one."""
    parts = worker_id.rsplit("-", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return "", None
    return parts[0], int(parts[1])


def still_running(worker_id: str, seen_at: float, *, host: str, started=process_started) -> bool | None:
    """Whether the worker's process runs on this ``host``; None when it is another host's."""
    worker_host, pid = host_and_pid(worker_id)
    if worker_host != host or pid is None:
        return None
    began = started(pid)
    return began is not None and began <= seen_at + START_SLACK_S


def worker_states(workers: list[dict], *, now: float, since: float, host: str, started=process_started) -> list[dict]:
    """The queue's ``room()["workers"]`` with a ``state`` each, those of an earlier run left out;
    ``since``: when this service started."""
    shown = []
    for worker in workers:
        seen_at = now - worker["seen_s"]
        if worker["alive"]:
            state = "alive"
        else:
            running = still_running(worker["worker"], seen_at, host=host, started=started)
            ended = not running if running is not None else seen_at < since
            state = "ended" if ended else "silent"
        if state == "ended" and seen_at < since:
            continue
        shown.append({**worker, "state": state})
    return shown


def this_service_started() -> float:
    return process_started(os.getpid()) or time.time()


# ------------------------------------------------------------------ a worker that refuses to start


class RefusalStore(QueueTables):
    """The refusals of the workers the hub runs, in the queue's file: one row per hub service."""

    SCHEMA = """
    CREATE TABLE IF NOT EXISTS live_worker_refusals (
        name TEXT PRIMARY KEY,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        refused_at REAL NOT NULL,
        message TEXT NOT NULL
    );
    """

    def record(self, name: str, message: str, *, host: str, pid: int, at: float) -> None:
        with closing(self._connect()) as db, db:
            db.execute(
                "INSERT INTO live_worker_refusals (name, host, pid, refused_at, message) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET host = excluded.host, pid = excluded.pid, "
                "refused_at = excluded.refused_at, message = excluded.message",
                (name, host, pid, at, message),
            )

    def clear(self, name: str) -> None:
        with closing(self._connect()) as db, db:
            db.execute("DELETE FROM live_worker_refusals WHERE name = ?", (name,))

    def current(self, *, host: str, started=process_started) -> list[dict]:
        """The refusals of workers still waiting (their process runs): what the page shows."""
        with closing(self._connect()) as db:
            rows = db.execute("SELECT name, host, pid, refused_at, message FROM live_worker_refusals ORDER BY name")
            refusals = [dict(zip(("name", "host", "pid", "refused_at", "message"), row)) for row in rows]
        return [
            r
            for r in refusals
            if still_running(f"{r['host']}-{r['pid']}-x", r["refused_at"], host=host, started=started) is not False
        ]


def check_may_start(root: Path, labs, profile: str, unsafe: bool) -> None:
    """CommandFailed naming why a worker may not grade here, and the fix: no sandbox at all (unless
    ``unsafe``), or a lab its sandbox or caches cannot grade (``worker.preflight``)."""
    from ..grading.preflight import no_sandbox
    from ..sandbox.limits import choose_backend
    from .worker import preflight

    if not unsafe and choose_backend(None) == "none":
        raise CommandFailed(f"live worker: the worker does not start: {no_sandbox('the queue and every submission')}")
    preflight(root, labs, profile)


def hold_until_it_may_start(name: str, store: RefusalStore, check, *, recheck_s: float = RECHECK_S, out=None) -> None:
    """Run ``check`` (it raises a RocmlabError naming why the worker may not start, and the fix) until
    it passes. A refusal is said once (again only if its reason changes) on ``out`` (the hub's log)
    and kept in ``store`` while this process waits; it is removed when the check passes or the
    process stops."""
    out = out or sys.stderr
    said = ""
    try:
        while True:
            try:
                check()
            except RocmlabError as exc:  # CommandFailed, or a setting (--labs) that names no lab here
                if str(exc) != said:
                    said = str(exc)
                    print(f"{name}: {said} (this worker waits and checks again every {recheck_s:g} s)", file=out)
                    out.flush()
                    store.record(name, said, host=os.uname().nodename, pid=os.getpid(), at=time.time())
                time.sleep(recheck_s)
                continue
            if said:
                print(f"{name}: the cause is gone, the worker starts", file=out, flush=True)
            return
    finally:
        if said:
            store.clear(name)
