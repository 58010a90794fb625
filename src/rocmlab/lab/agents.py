"""Plumbing for lab 06 (multi-agent pipeline): a virtual-clock event loop, an instrumented
bounded queue, a wait-for graph snapshot and a trace recorder.

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
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


@dataclass(frozen=True)
class TraceEvent:
    seq: int
    t: float
    event: str
    msg_id: str
    stage: str = ""
    attempt: int = 0
    info: str = ""


class Trace:
    """Ordered log of runtime events, stamped with the running loop's clock.

    ``record(event, msg_id, stage, attempt, info)`` from inside the loop. ``rows()`` gives the
    canonical form that golden traces compare: ``[t_ms, msg_id, stage, event, attempt, info]``
    sorted by time then fields, so that events at the same instant compare in a fixed order.
    """

    def __init__(self):
        self.events: list[TraceEvent] = []

    def record(self, event: str, msg_id: str, stage: str = "", attempt: int = 0, info: str = "") -> None:
        t = asyncio.get_running_loop().time()
        self.events.append(
            TraceEvent(len(self.events), t, str(event), str(msg_id), str(stage), int(attempt), str(info))
        )

    def __len__(self) -> int:
        return len(self.events)

    def select(self, event: str | None = None, msg_id: str | None = None, stage: str | None = None) -> list[TraceEvent]:
        return [
            e
            for e in self.events
            if (event is None or e.event == event)
            and (msg_id is None or e.msg_id == msg_id)
            and (stage is None or e.stage == stage)
        ]

    def count(self, event: str, stage: str | None = None) -> int:
        return len(self.select(event=event, stage=stage))

    def max_in_flight(self, enter: str, leave: Iterable[str]) -> int:
        """Largest number of messages between an ``enter`` event and a ``leave`` event."""
        leave = set(leave)
        inside: set[str] = set()
        peak = 0
        for e in self.events:
            if e.event == enter:
                inside.add(e.msg_id)
                peak = max(peak, len(inside))
            elif e.event in leave:
                inside.discard(e.msg_id)
        return peak

    def rows(self, ndigits: int = 3) -> list[list]:
        rows = [[round(e.t * 1000, ndigits), e.msg_id, e.stage, e.event, e.attempt, e.info] for e in self.events]
        return sorted(rows, key=lambda r: (r[0], r[1], r[2], r[3], r[4], r[5]))

    def save(self, path) -> None:
        Path(path).write_text(json.dumps(self.rows(), ensure_ascii=False, indent=0) + "\n", encoding="utf-8")

    @staticmethod
    def load_rows(path) -> list[list]:
        path = Path(path)
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: cannot read a golden trace (JSON list of rows): {exc}") from None
        if not isinstance(rows, list) or not all(isinstance(r, list) and len(r) == 6 for r in rows):
            raise ValueError(
                f"{path}: expected a JSON list of 6-field rows [t_ms, msg_id, stage, event, attempt, info]"
            )
        return rows

    def explain_difference(self, golden: list[list]) -> str | None:
        """None when the trace equals ``golden``; else the rule of lab 06's trace contract it breaks."""
        return explain_trace_difference(self.rows(), golden)

    def first_difference(self, golden: list[list]) -> str | None:
        """None when the trace equals ``golden``; else a short description of the first gap."""
        mine = self.rows()
        for i, (a, b) in enumerate(zip(mine, golden)):
            if list(a) != list(b):
                return f"row {i}: got {a}, expected {b}"
        if len(mine) != len(golden):
            return f"got {len(mine)} rows, expected {len(golden)}"
        return None


# The trace contract of lab 06's Runtime, numbered as in the lab's prose (zh / en).
RUNTIME_TRACE_RULES = {
    1: "第一次到达的 id 在放入第一个队列之后记一次 admit；再次到达（处理中、已完成或关闭后被拒过）记 duplicate，不带 stage "
    "/ the first arrival of an id records admit once, after it is in the first queue; any later arrival "
    "(in flight, finished, or refused at shutdown) records duplicate, with no stage",
    2: "关闭后第一次到达的 id 记 dead，stage=intake、attempt=0、info=shutdown "
    "/ a new id after shutdown records dead with stage=intake, attempt=0, info=shutdown",
    3: "每次尝试记 start（attempt=k），成功记 end，失败记 fail 并写明原因（timeout 或 error: 文本） "
    "/ each attempt records start (attempt=k), then end on success or fail with the reason (timeout or error: text)",
    4: "重试耗尽记 dead（stage=阶段名、attempt=尝试次数、info=最后原因），之后不再进入后续阶段 "
    "/ exhausted retries record dead (stage=name, attempt=attempts made, info=last reason) and the message "
    "goes no further",
    5: "最后一个阶段成功后记一次 done，不带 stage / after the last stage succeeds, done is recorded once, with no stage",
    6: "时间：admit 在 put 返回之后（背压），重试前按 backoff_delay 等待，超时按 policy.timeout_s "
    "/ timing: admit after put returns (backpressure), the backoff_delay wait before a retry, timeouts after "
    "policy.timeout_s",
}


def _rule_for(event: str, stage: str) -> int:
    if event in ("admit", "duplicate"):
        return 1
    if event == "dead":
        return 2 if stage == "intake" else 4
    if event == "done":
        return 5
    return 3


def _by_message(rows: list[list]) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    for t_ms, msg_id, stage, event, attempt, info in rows:
        out.setdefault(msg_id, []).append((t_ms, stage, event, attempt, info))
    return out


def _describe(step: tuple | None) -> str:
    if step is None:
        return "nothing"
    t_ms, stage, event, attempt, info = step
    return f"{event}(stage={stage!r}, attempt={attempt}, info={info!r}) at {t_ms} ms"


def explain_trace_difference(rows: list[list], golden: list[list]) -> str | None:
    """None when ``rows`` equal ``golden``; else which rule of :data:`RUNTIME_TRACE_RULES` broke, for
    which message, and the first differing event of that message (what was expected, what came)."""
    if [list(r) for r in rows] == [list(r) for r in golden]:
        return None
    mine, theirs = _by_message(rows), _by_message(golden)
    first_time = {m: min(s[0] for s in steps) for m, steps in {**mine, **theirs}.items()}
    timing_only = None
    for msg_id in sorted(first_time, key=lambda m: (first_time[m], m)):
        got, want = mine.get(msg_id, []), theirs.get(msg_id, [])
        if got == want:
            continue
        got_events, want_events = Counter(s[1:] for s in got), Counter(s[1:] for s in want)
        if got_events == want_events:
            i = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
            timing_only = timing_only or (msg_id, got[i], want[i])
            continue
        missing = [s for s in want if (want_events - got_events)[s[1:]]]
        extra = [s for s in got if (got_events - want_events)[s[1:]]]
        expected = missing[0] if missing else None
        came = extra[0] if extra else None
        culprit = expected or came
        rule = _rule_for(culprit[2], culprit[1])
        return (
            f"rule {rule} / 规则 {rule} broken for {msg_id}: {RUNTIME_TRACE_RULES[rule]}. "
            f"For {msg_id} expected {_describe(expected)}, got {_describe(came)} instead"
        )
    if timing_only:
        msg_id, came, expected = timing_only
        return (
            f"rule 6 / 规则 6 broken for {msg_id}: {RUNTIME_TRACE_RULES[6]}. "
            f"Right events, wrong time: expected {_describe(expected)}, got {_describe(came)}"
        )
    return "the rows differ only in order / 只有顺序不同: compare Trace.rows() (sorted by time, then fields)"


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
