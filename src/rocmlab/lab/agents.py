"""Plumbing for lab 06 (multi-agent pipeline): a virtual-clock event loop, an instrumented
bounded queue, a wait-for graph snapshot and a trace recorder (``Trace`` and the trace contract
live in ``rocmlab.lab.agent_trace``; the lab imports them from here).

The runtime itself (workers, retries, dead letters, shutdown) is written by the learner in
the notebook; this module only makes it observable and deterministic.

Virtual time: ``run_async(main, virtual=True)`` runs ``main`` on an event loop whose clock
only moves when every task is waiting on a timer; it then jumps straight to the next timer.
``asyncio.sleep``, ``wait_for`` and ``asyncio.timeout`` therefore cost no wall time and give
the same timestamps on any machine. When every task waits and no timer is set, nothing can
ever happen again: the loop raises :class:`Deadlock` instead of hanging.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .agent_trace import RUNTIME_TRACE_RULES, Trace, TraceEvent, explain_trace_difference

__all__ = [
    "Deadlock",
    "RunResult",
    "run_async",
    "InstrumentedQueue",
    "wait_for_graph",
    "Trace",
    "TraceEvent",
    "RUNTIME_TRACE_RULES",
    "explain_trace_difference",
    "leftovers",
]

_local = threading.local()
_open_loops: set[int] = set()
_open_loops_lock = threading.Lock()
RUNNER_THREAD_PREFIX = "rocmlab-agents-loop"


class Deadlock(RuntimeError):
    """Every task waits and no timer is pending: the program can never make progress."""

    def __init__(self, virtual_s: float, pending: list[str] | None = None, graph: dict[str, list[str]] | None = None):
        self.virtual_s = virtual_s
        self.pending = pending or []
        self.graph = graph or {}
        super().__init__(virtual_s)

    def __str__(self) -> str:
        shown = ", ".join(self.pending[:8]) + (" ..." if len(self.pending) > 8 else "")
        return (
            f"deadlock at virtual t={self.virtual_s * 1000:.3f} ms: every task waits and "
            f"no timer is set / 死锁: 所有任务都在等待且没有定时器 "
            f"(pending tasks: {shown or 'none'})"
        )


class _VirtualSelector:
    """Wraps the loop's selector: polls real I/O without blocking, then advances virtual time."""

    def __init__(self, real, loop: VirtualTimeLoop, grace_s: float):
        self._real = real
        self._loop = loop
        self._grace_s = grace_s

    def select(self, timeout=None):
        events = self._real.select(0)
        if events:
            return events
        if timeout is None:
            # Work handed to threads (run_in_executor) wakes the loop through its self-pipe:
            # give it a short real grace period before calling the state a deadlock.
            events = self._real.select(self._grace_s)
            if events:
                return events
            raise Deadlock(self._loop.time())
        self._loop._advance(timeout)
        return []

    def __getattr__(self, name):
        return getattr(self._real, name)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose ``time()`` is a virtual clock, starting at 0.0 seconds."""

    def __init__(self, grace_s: float = 0.5):
        super().__init__()
        self._virtual_now = 0.0
        self._selector = _VirtualSelector(self._selector, self, grace_s)

    def time(self) -> float:
        return self._virtual_now

    def _advance(self, seconds: float) -> None:
        if seconds > 0:
            self._virtual_now += seconds


@dataclass
class RunResult:
    """What ``run_async`` returns: the coroutine's value, the clock, and the tasks it left."""

    value: Any
    elapsed_s: float
    leftover_tasks: list[str] = field(default_factory=list)
    queues: list[InstrumentedQueue] = field(default_factory=list)


def _task_name() -> str:
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    return task.get_name() if task is not None else "<callback>"


def _pending(loop, exclude=None) -> list[asyncio.Task]:
    return [t for t in asyncio.all_tasks(loop) if not t.done() and t is not exclude]


def _cancel_all(loop, tasks) -> None:
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


def _run_in_loop(main, virtual: bool, timeout_s: float | None, grace_s: float) -> RunResult:
    loop = VirtualTimeLoop(grace_s) if virtual else asyncio.new_event_loop()
    with _open_loops_lock:
        _open_loops.add(id(loop))
    _local.queues = []
    start = loop.time()
    main_task = None
    try:
        asyncio.set_event_loop(loop)
        coro = main() if callable(main) else main
        if timeout_s is not None:
            coro = asyncio.wait_for(coro, timeout_s)
        main_task = loop.create_task(coro, name="main")
        try:
            value = loop.run_until_complete(main_task)
        except Deadlock as exc:
            pending = _pending(loop)
            exc.pending = sorted(t.get_name() for t in pending)
            exc.graph = wait_for_graph(_local.queues)
            _cancel_all(loop, pending)
            raise
        leftover = _pending(loop, exclude=main_task)
        names = sorted(t.get_name() for t in leftover)
        _cancel_all(loop, leftover)
        return RunResult(value, loop.time() - start, names, list(_local.queues))
    finally:
        try:
            _cancel_all(loop, _pending(loop))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
            _local.queues = []
            with _open_loops_lock:
                _open_loops.discard(id(loop))


def run_async(
    main: Callable[[], Any] | Any,
    *,
    virtual: bool = True,
    timeout_s: float | None = None,
    grace_s: float = 0.5,
    wall_timeout_s: float = 300.0,
) -> RunResult:
    """Run ``main`` (a coroutine function or coroutine) on a fresh loop in its own thread.

    ``virtual=True`` uses the virtual clock (deterministic timestamps, no waiting);
    ``virtual=False`` a normal loop and wall time (for measurements). ``timeout_s`` bounds
    ``main`` in that clock (``TimeoutError`` past it). Tasks still pending when ``main``
    returns are listed in ``leftover_tasks`` and then cancelled, so nothing outlives the call.
    Works inside Jupyter, whose own loop is already running in the main thread.
    """
    box: dict[str, Any] = {}

    def target():
        try:
            box["result"] = _run_in_loop(main, virtual, timeout_s, grace_s)
        except BaseException as exc:  # noqa: BLE001 (handed back to the caller's thread)
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"{RUNNER_THREAD_PREFIX}", daemon=True)
    thread.start()
    thread.join(wall_timeout_s)
    if thread.is_alive():
        raise TimeoutError(
            f"run_async: the loop did not finish within {wall_timeout_s} s of "
            "wall time (a task blocks the loop without awaiting?)"
        )
    if "error" in box:
        raise box["error"]
    return box["result"]


class InstrumentedQueue(asyncio.Queue):
    """A bounded ``asyncio.Queue`` that records its high-water mark, traffic and waiters.

    ``max_seen`` is the largest size ever held; ``puts``/``gets`` count items; ``producers``
    and ``consumers`` are the names of the tasks that ever put or got; ``blocked_put`` and
    ``blocked_get`` name the tasks waiting right now (used by :func:`wait_for_graph`).
    ``producers=``/``consumers=`` declare task names ahead of time, for a task that will use
    the queue but has not yet (e.g. the only task that will ever answer on a reply queue).
    """

    def __init__(
        self, maxsize: int, name: str = "queue", *, producers: Iterable[str] = (), consumers: Iterable[str] = ()
    ):
        if not isinstance(maxsize, int) or maxsize <= 0:
            raise ValueError(
                f"InstrumentedQueue {name!r}: maxsize must be a positive int (a bounded queue), got {maxsize!r}"
            )
        super().__init__(maxsize)
        self.name = name
        self.max_seen = 0
        self.puts = 0
        self.gets = 0
        self.producers: set[str] = set(producers)
        self.consumers: set[str] = set(consumers)
        self.blocked_put: set[str] = set()
        self.blocked_get: set[str] = set()
        registry = getattr(_local, "queues", None)
        if registry is not None:
            registry.append(self)

    async def put(self, item) -> None:
        me = _task_name()
        self.blocked_put.add(me)
        try:
            await super().put(item)
        finally:
            self.blocked_put.discard(me)

    def put_nowait(self, item) -> None:
        super().put_nowait(item)
        self.producers.add(_task_name())
        self.puts += 1
        self.max_seen = max(self.max_seen, self.qsize())

    async def get(self):
        me = _task_name()
        self.blocked_get.add(me)
        try:
            return await super().get()
        finally:
            self.blocked_get.discard(me)

    def get_nowait(self):
        item = super().get_nowait()
        self.consumers.add(_task_name())
        self.gets += 1
        return item

    @property
    def unfinished(self) -> int:
        """Items put and not yet marked ``task_done()`` (what ``join()`` waits for)."""
        return self._unfinished_tasks

    def stats(self) -> dict:
        return {
            "name": self.name,
            "maxsize": self.maxsize,
            "max_seen": self.max_seen,
            "puts": self.puts,
            "gets": self.gets,
            "size": self.qsize(),
        }

    def __repr__(self) -> str:
        return f"InstrumentedQueue({self.name!r}, {self.qsize()}/{self.maxsize}, max_seen={self.max_seen})"


def wait_for_graph(queues: Iterable[InstrumentedQueue]) -> dict[str, list[str]]:
    """Snapshot of who waits for whom: an edge T -> U when task T is blocked on a queue
    that only task U can unblock (U consumes what T wants to put, or produces what T wants
    to get). With several candidate U, T waits for any one of them."""
    graph: dict[str, set[str]] = {}
    for q in queues:
        for waiter in q.blocked_put:
            graph.setdefault(waiter, set()).update(q.consumers - {waiter})
        for waiter in q.blocked_get:
            graph.setdefault(waiter, set()).update(q.producers - {waiter})
    return {node: sorted(targets) for node, targets in sorted(graph.items())}


def leftovers() -> dict:
    """What lab code may have left running: open loops, runner threads, child processes."""
    threads = [t.name for t in threading.enumerate() if t.name.startswith(RUNNER_THREAD_PREFIX) and t.is_alive()]
    try:
        import psutil

        children = [f"{p.pid} {p.name()}" for p in psutil.Process().children(recursive=True)]
    except Exception:  # noqa: BLE001 (psutil missing or a child vanished mid-listing)
        children = []
    with _open_loops_lock:
        loops = len(_open_loops)
    return {"open_loops": loops, "runner_threads": threads, "child_processes": children}
