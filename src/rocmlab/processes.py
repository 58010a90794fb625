"""Ending process trees: the one place rocmlab ends, tracks and sweeps processes.

Ending is always the same three steps: SIGTERM, a grace period, then SIGKILL for what is left.
What to end is found in one of four ways, because a process can leave its parent's tree:

- a ``Tree``: a process and every descendant seen while it ran. torchrun starts each rank in a
  session of its own, and a rank's helper may daemonize; a tree tracked while it runs still
  knows them after their parent is gone;
- a marker: an environment variable set for a run (``ROCMLAB_RUN_TAG``, ``ROCMLAB_HUB_ID``).
  Every process started under it inherits it, whatever its parent or session became;
- a process group: ``stop`` ends a process started with ``start_new_session=True`` and its group;
- a Unix user: ``kill_user`` sweeps every process of a grader account.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable

import psutil

GRACE_S = 5.0


def alive(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    """The processes of ``procs`` still running (zombies count as gone), each once."""
    living: dict[int, psutil.Process] = {}
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                living.setdefault(proc.pid, proc)
        except psutil.Error:
            continue
    return list(living.values())


def send(procs: Iterable[psutil.Process], sig: int) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.Error):  # gone meanwhile
            proc.send_signal(sig)


def end(
    procs: Iterable[psutil.Process],
    grace_s: float = GRACE_S,
    *,
    found_later: Callable[[], Iterable[psutil.Process]] | None = None,
) -> None:
    """SIGTERM ``procs``, wait up to ``grace_s`` for them, then SIGKILL the survivors.

    ``found_later()`` is asked once more before the SIGKILL, for processes that appeared while
    the others shut down (a child forked by a SIGTERM handler)."""
    procs = alive(procs)
    send(procs, signal.SIGTERM)
    _, survivors = psutil.wait_procs(procs, timeout=grace_s)
    if found_later is not None:
        survivors = alive([*survivors, *found_later()])
    send(survivors, signal.SIGKILL)
    psutil.wait_procs(survivors, timeout=grace_s)


def descendants(pid: int, *, include_self: bool = True) -> list[psutil.Process]:
    """``pid``'s process (unless ``include_self`` is false) and its descendants now."""
    try:
        root = psutil.Process(pid)
        return [*root.children(recursive=True), *([root] if include_self else [])]
    except psutil.Error:
        return []


def marked(variable: str, value: str) -> list[psutil.Process]:
    """Every live process but this one whose environment holds ``variable=value``.

    Reading another user's environment needs root; without it only this user's processes are found."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == os.getpid():
            continue
        try:
            if proc.environ().get(variable) == value:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def end_marked(variable: str, value: str, grace_s: float = GRACE_S) -> None:
    end(marked(variable, value), grace_s)


class Tree:
    """A process and every descendant seen while ``track()`` was called, by pid."""

    def __init__(self, pid: int):
        self.pid = pid
        self.seen: dict[int, psutil.Process] = {}

    def track(self) -> None:
        """Remember the process and its descendants as they are now."""
        for proc in descendants(self.pid):
            self.seen.setdefault(proc.pid, proc)

    def alive(self) -> list[psutil.Process]:
        return alive(self.seen.values())

    def end(self, grace_s: float = GRACE_S) -> None:
        """End every process of the tree that is still running, children forked meanwhile too."""
        self.track()

        def found_later():
            for proc in self.alive():
                for child in descendants(proc.pid):
                    self.seen.setdefault(child.pid, child)
            return self.alive()

        end(self.alive(), grace_s, found_later=found_later)


def stop(popen: subprocess.Popen, grace_s: float = GRACE_S) -> int | None:
    """End a process that leads its own process group (``start_new_session=True``): SIGTERM to it,
    up to ``grace_s`` for it to exit, then SIGKILL to its whole group. Returns its exit status."""
    if popen.poll() is None:
        popen.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, signal.SIGKILL)
    try:
        return popen.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:  # not our group leader after all: the process itself
        popen.kill()
        return popen.wait()


def kill_user(uid: int, rounds: int = 3) -> None:
    """SIGKILL every process of the Unix user ``uid``; again, up to ``rounds`` times, for what a
    fork bomb started meanwhile."""
    for _ in range(rounds):
        procs = [p for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == uid]
        if not procs:
            return
        send(procs, signal.SIGKILL)
        psutil.wait_procs(procs, timeout=GRACE_S)


def succeeds(argv: list[str], timeout_s: float = 20) -> bool:
    """True when ``argv`` runs and exits 0 within ``timeout_s`` (a probe of what this machine allows)."""
    try:
        return subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def die_with_parent(sig: int = signal.SIGTERM, parent: int | None = None) -> None:
    """Ask Linux to send ``sig`` to this process when its parent ends (PR_SET_PDEATHSIG).

    A worker in a session of its own otherwise outlives a parent that was killed outright.
    ``parent``: the pid it was started by, where that one may have ended before this call."""
    parent = os.getppid() if parent is None else parent
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent ended before the request took effect
        os.kill(os.getpid(), sig)


def exit_on_sigterm():
    """Turn SIGTERM into ``SystemExit(143)`` so that ``finally`` blocks end what this process started.
    Returns the handler it replaced (None off the main thread, where handlers cannot be set)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
