"""rocmlab.lab.agents: the virtual-clock loop, the instrumented queue, the wait-for graph, the trace."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from rocmlab.lab import agents
from rocmlab.lab.agents import Deadlock, InstrumentedQueue, Trace, run_async, wait_for_graph


def test_virtual_clock_jumps_timers_without_waiting():
    async def main():
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await asyncio.sleep(3600)
        return loop.time() - t0

    start = time.perf_counter()
    result = run_async(main)
    assert result.value == pytest.approx(3600)
    assert result.elapsed_s == pytest.approx(3600)
    assert time.perf_counter() - start < 60  # an hour of virtual time costs no hour


def test_virtual_timestamps_are_deterministic_and_ordered_by_timer():
    async def main():
        trace = Trace()

        async def agent(name, ms):
            trace.record("start", name)
            await asyncio.sleep(ms / 1000)
            trace.record("end", name)

        await asyncio.gather(agent("slow", 3), agent("fast", 1), agent("mid", 2))
        return trace.rows()

    first = run_async(main).value
    assert first == run_async(main).value
    ends = [(row[0], row[1]) for row in first if row[3] == "end"]
    assert ends == [(1.0, "fast"), (2.0, "mid"), (3.0, "slow")]


def test_wait_for_timeout_fires_in_virtual_time():
    async def main():
        try:
            await asyncio.wait_for(asyncio.sleep(10), 0.25)
        except TimeoutError:
            return asyncio.get_running_loop().time()

    assert run_async(main).value == pytest.approx(0.25)


def test_run_async_timeout_bounds_main_in_virtual_time():
    with pytest.raises(TimeoutError):
        run_async(lambda: asyncio.sleep(100), timeout_s=1.0)


def test_deadlock_is_raised_with_pending_tasks_and_wait_for_graph():
    async def main():
        a = InstrumentedQueue(1, "a", consumers=["right"])
        b = InstrumentedQueue(1, "b", consumers=["left"])

        async def left():
            await a.put(1)
            await a.put(2)  # a is full until right reads it
            await b.get()

        async def right():
            await b.put(1)
            await b.put(2)  # b is full until left reads it
            await a.get()

        await asyncio.gather(asyncio.create_task(left(), name="left"), asyncio.create_task(right(), name="right"))

    with pytest.raises(Deadlock) as info:
        run_async(main, grace_s=0.05)
    assert {"left", "right"} <= set(info.value.pending)
    assert "deadlock" in str(info.value)
    assert info.value.graph == {"left": ["right"], "right": ["left"]}


def test_request_reply_deadlock_graph_has_the_cycle():
    async def main():
        inbox = InstrumentedQueue(1, "inbox")
        replies = InstrumentedQueue(1, "replies", producers=["server"])

        async def server():
            while True:
                await inbox.get()
                await asyncio.sleep(0.001)

        async def client():
            await inbox.put("ask")
            await replies.get()  # nobody will ever answer

        tasks = [asyncio.create_task(server(), name="server"), asyncio.create_task(client(), name="client")]
        await tasks[1]

    with pytest.raises(Deadlock) as info:
        run_async(main, grace_s=0.05)
    assert info.value.graph["client"] == ["server"]


def test_leftover_tasks_are_reported_then_cancelled():
    cancelled = []

    async def orphan():
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main():
        asyncio.create_task(orphan(), name="orphan")
        await asyncio.sleep(0)
        return "done"

    result = run_async(main)
    assert result.value == "done"
    assert result.leftover_tasks == ["orphan"]
    assert cancelled == [True]
    assert agents.leftovers()["open_loops"] == 0


def test_exceptions_come_back_to_the_caller():
    async def main():
        raise ValueError("boom")

    before = agents.leftovers()  # the worker's children that other tests started are not this one's
    with pytest.raises(ValueError, match="boom"):
        run_async(main)
    after = agents.leftovers()
    assert (after["open_loops"], after["runner_threads"]) == (0, [])
    assert set(after["child_processes"]) <= set(before["child_processes"])


def test_run_async_works_while_another_loop_runs_in_this_thread():
    async def outer():
        return run_async(lambda: asyncio.sleep(1, result=7)).value

    assert asyncio.run(outer()) == 7


def test_real_clock_mode_measures_wall_time():
    result = run_async(lambda: asyncio.sleep(0.01), virtual=False)
    assert result.elapsed_s >= 0.009


def test_instrumented_queue_records_bound_traffic_and_roles():
    async def main():
        q = InstrumentedQueue(2, "q")

        async def producer():
            for i in range(5):
                await q.put(i)

        async def consumer():
            for _ in range(5):
                await q.get()
                await asyncio.sleep(0.001)
                q.task_done()

        await asyncio.gather(asyncio.create_task(producer(), name="p"), asyncio.create_task(consumer(), name="c"))
        return q

    q = run_async(main).value
    assert (q.max_seen, q.puts, q.gets, q.unfinished) == (2, 5, 5, 0)
    assert q.producers == {"p"} and q.consumers == {"c"}
    assert q.stats()["maxsize"] == 2


@pytest.mark.parametrize("maxsize", [0, -1, 1.5, None])
def test_instrumented_queue_must_be_bounded(maxsize):
    with pytest.raises(ValueError, match="bounded"):
        InstrumentedQueue(maxsize, "q")


def test_run_result_lists_the_queues_made_inside_the_run():
    async def main():
        InstrumentedQueue(3, "one")
        InstrumentedQueue(4, "two")

    assert [q.name for q in run_async(main).queues] == ["one", "two"]


def test_wait_for_graph_edges():
    class Fake:
        def __init__(self, producers, consumers, blocked_put=(), blocked_get=()):
            self.producers, self.consumers = set(producers), set(consumers)
            self.blocked_put, self.blocked_get = set(blocked_put), set(blocked_get)

    graph = wait_for_graph([Fake({"a"}, {"b", "c"}, blocked_put={"a"}), Fake({"b"}, {"a"}, blocked_get={"a"})])
    assert graph == {"a": ["b", "c"]}


def test_trace_rows_in_flight_and_golden_comparison(tmp_path):
    async def main():
        trace = Trace()
        trace.record("admit", "m1")
        trace.record("admit", "m2")
        await asyncio.sleep(0.0015)
        trace.record("done", "m1", info="ok")
        trace.record("admit", "m3")
        trace.record("dead", "m2", "detect", 3, "timeout")
        return trace

    trace = run_async(main).value
    assert trace.max_in_flight("admit", ["done", "dead"]) == 2
    assert trace.count("admit") == 3 and len(trace) == 5
    assert trace.rows()[-1] == [1.5, "m3", "", "admit", 0, ""]
    path = tmp_path / "golden.json"
    trace.save(path)
    golden = Trace.load_rows(path)
    assert trace.first_difference(golden) is None
    assert "rows" in trace.first_difference(golden[:-1])
    golden[2][3] = "other"
    assert "row 2" in trace.first_difference(golden)


def test_bad_golden_file_names_the_file(tmp_path):
    path = tmp_path / "g.json"
    path.write_text(json.dumps([[1, 2]]))
    with pytest.raises(ValueError, match="g.json"):
        Trace.load_rows(path)
    path.write_text("not json")
    with pytest.raises(ValueError, match="g.json"):
        Trace.load_rows(path)


GOLDEN_ROWS = [
    [0.0, "m1", "", "admit", 0, ""],
    [0.0, "m1", "detect", "start", 1, ""],
    [1.0, "m1", "detect", "end", 1, ""],
    [1.0, "m1", "", "done", 0, ""],
    [2.0, "m1", "", "duplicate", 0, ""],
    [3.0, "m2", "", "admit", 0, ""],
    [3.0, "m2", "detect", "start", 1, ""],
    [13.0, "m2", "detect", "fail", 1, "timeout"],
    [13.0, "m2", "detect", "dead", 1, "timeout"],
    [20.0, "m3", "intake", "dead", 0, "shutdown"],
]
GOLDEN_ROWS.sort()  # the canonical order of Trace.rows(): time, then the other fields


@pytest.mark.parametrize(
    "rows,rule,msg_id",
    [
        ([r for r in GOLDEN_ROWS if r[3] != "duplicate"], 1, "m1"),
        ([r for r in GOLDEN_ROWS if r[3] != "done"], 5, "m1"),
        ([r for r in GOLDEN_ROWS if r[2] != "intake"], 2, "m3"),  # no shutdown dead letter
        ([r for r in GOLDEN_ROWS if r[3] != "dead" or r[2] == "intake"], 4, "m2"),  # exhausted, no dead letter
        ([r if r[3] != "fail" else [*r[:5], "timed out"] for r in GOLDEN_ROWS], 3, "m2"),  # wrong reason
        ([r if r[3] != "fail" else [12.0, *r[1:]] for r in GOLDEN_ROWS], 6, "m2"),  # right events, wrong time
    ],
)
def test_trace_differences_name_the_broken_rule(rows, rule, msg_id):
    from rocmlab.lab.agents import RUNTIME_TRACE_RULES, explain_trace_difference

    message = explain_trace_difference(sorted(rows), GOLDEN_ROWS)
    assert message.startswith(f"rule {rule} / 规则 {rule} broken for {msg_id}: {RUNTIME_TRACE_RULES[rule]}"), message
    assert explain_trace_difference(GOLDEN_ROWS, GOLDEN_ROWS) is None
