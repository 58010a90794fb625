"""The trace of lab 06's runtime: an ordered log of its events on the running loop's clock, the
canonical rows that golden traces compare, and which rule of the lab's trace contract
(``RUNTIME_TRACE_RULES``, numbered as in the lab's prose) a differing trace breaks.

Lab 06 imports these through ``rocmlab.lab.agents``, with the virtual-clock loop whose
timestamps make the rows the same on every machine.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


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
