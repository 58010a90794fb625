"""Lab 06's hidden checks, run by the trusted harness (rocmlab.harness) after the notebook.

Each check runs the learner's coroutine or function in the kernel on the lab's virtual clock
(`run_async`) with inputs drawn here, gets the trace events and results back as plain data, and
decides here. No check starts a process or a server.
"""

import inspect
import json
import math
import random

from rocmlab.harness import check, mistake
from rocmlab.lab import agent_trace, agents
from rocmlab.lab.agent_trace import Trace, TraceEvent, explain_trace_difference

STAGES = ("detect", "localize", "retrieve", "report")
# The course's clock, queue and trace as this process reads them from the course package: sent
# with each request, compiled in the kernel by in_kernel.py (a learner's cell may rebind the
# package's own in the kernel's sys.modules)
COURSE = {name: inspect.getsource(module) for name, module in (("agent_trace", agent_trace), ("agents", agents))}
# The course's virtual clock and trace, and the scaffolding the notebook gives (its stages, items,
# retry policy, delivery schedule, the seeded golden run), are the lab's kernel-side module's
# (in_kernel.py), which runs over a copy of the learner's names: a learner who rebinds `run_async`,
# `Trace`, `toy_stage`, `scripted` or `golden_run` in the notebook (an elapsed time of 0, stages
# that never wait, a golden run that forges its trace) changes nothing a check reads. Only the
# learner's answer functions and classes (run_pipeline, call_with_retries, Runtime, ...) run on
# these inputs, and the trace's rows are put in canonical order here. (What the kernel's packages
# hold is the kernel's: any answer of a kernel can still lie, and every rule below compares it with
# inputs and expectations made here.)

# The lab's data/failure_script.json (a test keeps them equal): the notebook's FAILURES, which a
# learner may rebind or edit, is never read.
FAILURES = {
    "detect": {
        "m002": ["error:传感器离线", "ok"],
        "m009": ["hang", "hang", "hang"],
        "m015": ["error:输入损坏", "error:输入损坏", "error:输入损坏"],
        "m027": ["hang", "error:传感器离线"],
    },
    "localize": {
        "m004": ["hang", "ok"],
        "m011": ["error:内存不足", "hang", "ok"],
        "m036": ["error:内存不足", "error:内存不足", "hang"],
    },
    "retrieve": {"m006": ["hang", "hang", "error:索引不可用"], "m017": ["error:索引重建中"], "m044": ["hang"]},
    "report": {
        "m001": ["error:JSON 无效", "ok"],
        "m013": ["hang", "hang", "hang"],
        "m023": ["error:模型过载", "hang", "ok"],
        "m031": ["hang", "hang", "hang"],
    },
}


def in_flight_peak(events, enter="admit", leave=("done",)):
    inside, peak = set(), 0
    for _, msg_id, _, event, _, _ in events:
        if event == enter:
            inside.add(msg_id)
            peak = max(peak, len(inside))
        elif event in leave:
            inside.discard(msg_id)
    return peak


def left_on_purpose(variant):
    """Names of the tasks the kernel-side run leaves behind on purpose once the learner's coroutine
    has returned (``in_kernel._leaving``): drawn here, from a stream of their own."""
    rng = random.Random(f"{variant.seed}/{variant.name}/left")
    return [f"check-left-{rng.getrandbits(40):010x}" for _ in range(rng.randint(1, 3))]


def assert_nothing_left(leftover, left):
    """The run's leftover tasks are exactly the ones it left on purpose: a "nothing left" that
    does not list them is no reading of the loop's tasks."""
    assert isinstance(leftover, list) and all(isinstance(t, str) for t in leftover), "leftover tasks"
    missing = sorted(set(left) - set(leftover))
    assert not missing, f"the tasks the check left are not listed as left ({len(missing)}): not the loop's tasks"
    assert sorted(leftover) == sorted(left), f"left {sorted(set(leftover) - set(left))}"


def select(events, event=None, msg_id=None, stage=None):
    return [
        e
        for e in events
        if (event is None or e[3] == event) and (msg_id is None or e[1] == msg_id) and (stage is None or e[2] == stage)
    ]


# ---------------------------------------------------------------- exercise 1: run_pipeline


def pipeline_run(learner, n, queue_size, workers, ms, left=()):
    return learner.run("pipeline_run", COURSE, n, queue_size, workers, list(ms), list(left))


def pipeline_cases(variant):
    rng = variant.random
    cases = [(0, rng.randint(1, 4), 1), (1, 1, rng.randint(1, 3))]
    cases.append((rng.randint(20, 60), rng.randint(1, 4), rng.randint(1, 3)))
    return [(n, qs, w, tuple(round(rng.uniform(0.0, 4.0), 1) for _ in STAGES)) for n, qs, w in cases]


@check(
    "06-pipeline-1",
    points=1,
    en="every message passes every stage once, in order, and is returned with exactly one done",
    zh="每条消息按顺序经过每个阶段恰好一次，并带着恰好一次 done 被返回",
)
def pipeline_complete(learner, variant):
    for n, qs, workers, ms in pipeline_cases(variant):
        value, events, _, _, _ = pipeline_run(learner, n, qs, workers, ms)
        ids = [f"m{i:03d}" for i in range(n)]
        assert isinstance(value, dict) and sorted(value) == ids, f"n={n}: {len(value)} results"
        for i in ids:
            assert value[i]["path"] == list(STAGES), f"{i}: path {value[i]['path']}"
            assert len(select(events, "done", i)) == 1, f"{i}: done"
            for s in STAGES:
                assert len(select(events, "start", i, s)) == 1, f"{i}: start at {s}"


@check(
    "06-pipeline-1",
    points=1,
    en="one bounded InstrumentedQueue per stage; messages in flight never exceed capacities + workers",
    zh="每个阶段一个有界的 InstrumentedQueue；在途消息数不超过队列容量之和加 worker 数",
    counts_with="pipeline_complete",  # queues that carry nothing never overflow
)
def pipeline_bounded(learner, variant):
    for n, qs, workers, ms in pipeline_cases(variant)[1:]:
        _, events, queues, _, _ = pipeline_run(learner, n, qs, workers, ms)
        assert len(queues) >= len(STAGES), f"{len(queues)} queues"
        # every message enters each stage through one of them: queues made beside the real ones carry nothing
        assert sum(q["puts"] for q in queues) >= n * len(STAGES), f"{sum(q['puts'] for q in queues)} puts"
        for q in queues:
            assert q["maxsize"] <= qs and 0 < q["maxsize"] and q["max_seen"] <= q["maxsize"], f"queue {q}"
        bound = sum(q["maxsize"] for q in queues) + workers * len(STAGES)
        assert in_flight_peak(events) <= bound, f"in flight {in_flight_peak(events)} > {bound}"


@check(
    "06-pipeline-1",
    points=0.5,
    en="the workers of one stage work in parallel",
    zh="同一阶段的多个 worker 并行处理",
    counts_with="pipeline_complete",
)
def pipeline_parallel(learner, variant):
    n = variant.random.randint(30, 60)
    slow = round(variant.random.uniform(3.0, 6.0), 1)
    ms = (0.5, slow, 0.5, 1.0)
    _, _, _, _, elapsed = pipeline_run(learner, n, 1, 3, ms)
    # no run is shorter than one message's path through the stages' times: a clock that did not run
    # (asyncio.sleep rebound in the kernel) measures no parallel work
    floor = sum(ms) / 1000
    assert isinstance(elapsed, float) and elapsed >= floor - 1e-9, f"took {elapsed} s of virtual time, under {floor}"
    assert elapsed < n * sum(ms) / 1000 / 2, f"took {elapsed} s of virtual time"


@check(
    "06-pipeline-1",
    points=0.5,
    en="no task is left when run_pipeline returns",
    zh="run_pipeline 返回时不留下任何任务",
    counts_with="pipeline_complete",
)
def pipeline_no_leftovers(learner, variant):
    left = left_on_purpose(variant)
    for n, qs, workers, ms in pipeline_cases(variant):
        _, _, _, leftover, _ = pipeline_run(learner, n, qs, workers, ms, left)
        assert_nothing_left(leftover, left)


# ---------------------------------------------------------------- exercise 2: retries


def backoff(seed, base_s, jitter, msg_id, attempt):
    u = random.Random(f"{seed}:{msg_id}:{attempt}").random()
    return base_s * 2 ** (attempt - 1) * (1 + jitter * u)


@mistake(
    en="the exponent counted from the attempt itself, base·2^k: the first backoff is already twice the base",
    zh="指数直接用尝试次数，base·2^k：第一次退避就已是 base 的两倍",
    code="""
def backoff_delay(policy, msg_id, attempt):
    u = random.Random(f"{policy.seed}:{msg_id}:{attempt}").random()
    return policy.base_s * 2**attempt * (1 + policy.jitter * u)
""",
)
@check(
    "06-retry-1",
    points=1,
    en="backoff_delay returns base·2^(k-1)·(1+jitter·u) seconds as a float, u seeded by seed:msg_id:k",
    zh="backoff_delay 以 float 返回 base·2^(k-1)·(1+jitter·u) 秒，u 由 seed:msg_id:k 播种",
)
def retry_backoff(learner, variant):
    rng = variant.random
    for _ in range(6):
        seed, base, jitter = rng.randint(0, 999), rng.choice([0.001, 0.002, 0.004, 0.01]), rng.choice([0.0, 0.25, 1.0])
        msg_id, attempt = f"x{rng.randint(0, 99)}", rng.randint(1, 6)
        got = learner.run("backoff", seed, base, jitter, msg_id, attempt)
        assert type(got) is float and math.isclose(got, backoff(seed, base, jitter, msg_id, attempt)), f"got {got}"


def retry_run(learner, variant):
    rng = variant.random
    reasons = ["ok", "hang", "error:掉线", "error:超载", "error:timeout?"]
    script = {
        "h": {f"h{i}": [rng.choice(reasons) for _ in range(rng.randint(0, 5))] for i in range(rng.randint(8, 20))}
    }
    policy = {
        "__timeout": rng.choice([0.003, 0.005, 0.01]),
        "__max": rng.randint(2, 5),
        "__base": rng.choice([0.001, 0.002]),
        "__jitter": rng.choice([0.5, 1.0]),
        "__seed": rng.randint(0, 99),
    }
    left = left_on_purpose(variant)
    outcomes, events, leftover = learner.run("retries", COURSE, script, *policy.values(), left)
    return script, policy, outcomes, events, (leftover, left)


def expected_outcome(outcomes, max_attempts):
    for k in range(1, max_attempts + 1):
        o = outcomes[k - 1] if k <= len(outcomes) else "ok"
        if o == "ok":
            return k, None
    last = outcomes[max_attempts - 1]
    return max_attempts, "timeout" if last == "hang" else "error: " + last[len("error:") :]


@mistake(
    en="max_attempts read as the number of retries: one attempt more than the policy allows",
    zh="把 max_attempts 当成重试次数：比策略允许的多尝试一次",
    code="""
async def call_with_retries(fn, payload, msg_id, stage, policy, trace):
    reason = "no attempt"
    for attempt in range(1, policy.max_attempts + 2):
        trace.record("start", msg_id, stage, attempt)
        try:
            result = await asyncio.wait_for(fn(payload), policy.timeout_s)
        except asyncio.TimeoutError:
            reason = "timeout"
        except Exception as exc:
            reason = f"error: {exc}"
        else:
            trace.record("end", msg_id, stage, attempt)
            return result
        trace.record("fail", msg_id, stage, attempt, reason)
        if attempt <= policy.max_attempts:
            await asyncio.sleep(backoff_delay(policy, msg_id, attempt))
    raise DeadLetter(reason, policy.max_attempts + 1)
""",
)
@check(
    "06-retry-1",
    points=1,
    en="attempts, results and DeadLetter(reason, attempts) follow the failures, for any max_attempts",
    zh="尝试次数、结果与 DeadLetter(原因, 次数) 符合失败情况，max_attempts 任意",
)
def retry_outcomes(learner, variant):
    script, policy, outcomes, events, leftover = retry_run(learner, variant)
    assert_nothing_left(*leftover)
    for msg_id, plan in script["h"].items():
        attempts, reason = expected_outcome(plan, policy["__max"])
        assert len(select(events, "start", msg_id)) == attempts, f"{msg_id}: attempts"
        want = None if reason is None else [reason, attempts]
        assert outcomes[msg_id] == want, f"{msg_id}: {outcomes[msg_id]} vs {want}"
        fails = [e[5] for e in select(events, "fail", msg_id)]
        assert len(fails) == attempts - (reason is None), f"{msg_id}: fail events"


@check(
    "06-retry-1",
    points=0.5,
    en="after a failed attempt the next start comes exactly backoff_delay later (virtual clock)",
    zh="失败之后，下一次 start 恰好在 backoff_delay 之后（虚拟时钟）",
)
def retry_gaps(learner, variant):
    _, policy, _, events, _ = retry_run(learner, variant)
    checked = 0
    for f in select(events, "fail"):
        nxt = [e for e in select(events, "start", f[1]) if e[4] == f[4] + 1]
        if nxt:
            want = backoff(policy["__seed"], policy["__base"], policy["__jitter"], f[1], f[4])
            assert math.isclose(nxt[0][0] - f[0], want, abs_tol=1e-9), f"{f[1]} attempt {f[4]}"
            checked += 1
    assert checked, "no retry happened"


@check(
    "06-retry-1",
    points=0.5,
    en="a timeout fails with reason timeout exactly timeout_s after its start; an exception with error: <text>",
    zh="超时恰好在 start 之后 timeout_s 失败，原因为 timeout；异常的原因为 error: <文本>",
    counts_with="retry_outcomes",
)
def retry_timeouts(learner, variant):
    script, policy, _, events, _ = retry_run(learner, variant)
    for f in select(events, "fail"):
        planned = script["h"][f[1]][f[4] - 1]
        if planned == "hang":
            start = [e for e in select(events, "start", f[1]) if e[4] == f[4]][0]
            assert f[5] == "timeout" and math.isclose(f[0] - start[0], policy["__timeout"], abs_tol=1e-9), f"{f}"
        else:
            assert f[5] == "error: " + planned[len("error:") :], f"{f}"


# ---------------------------------------------------------------- exercise 3: Runtime


@check(
    "06-dedupe-1",
    points=1,
    en="the trace equals the second golden trace (seed 5, 30 messages, one worker per stage, queues of 1)",
    zh="trace 与第二条黄金 trace 一致（种子 5、30 条消息、每阶段 1 个 worker、队列容量 1）",
)
def runtime_golden(learner, variant):
    events, _, _ = learner.run("golden", COURSE, 5, 1, 1, deliveries(30, 5), FAILURES)
    golden = json.loads(HIDDEN_FILES["golden_trace_hidden.json"])  # noqa: F821 (given by the harness)
    diff = explain_trace_difference(canonical_rows(events), golden)
    assert diff is None, diff


def canonical_rows(events):
    """The rows golden traces compare (``Trace.rows``), made here from the kernel's events."""
    trace = Trace()
    trace.events = [
        TraceEvent(i, t, event, msg_id, stage, attempt, info)
        for i, (t, msg_id, stage, event, attempt, info) in enumerate(events)
    ]
    return trace.rows()


def deliveries(n, seed, redeliver_rate=0.3, gap_ms=1.0):
    """The notebook's ``at_least_once_deliveries``: the broker's schedule, made here."""
    rng = random.Random(seed)
    schedule = []
    for i in range(n):
        msg_id = f"m{i:03d}"
        t = i * gap_ms
        schedule.append((t, msg_id))
        if rng.random() < redeliver_rate:
            schedule.append((t + rng.uniform(0.5, 25.0), msg_id))
    return sorted(schedule)


@check(
    "06-dedupe-1",
    points=1,
    en="every redelivery is a duplicate: each id admitted once and ending as one report or one dead letter",
    zh="每次重复投递都记为 duplicate：每个 id 只被接收一次，最终恰好一个报告或一条死信",
)
def runtime_dedupe(learner, variant):
    rng = variant.random
    seed, n, workers, qs = rng.randint(10, 999), rng.randint(10, 30), rng.randint(1, 3), rng.randint(1, 3)
    schedule = deliveries(n, seed)
    events, reports, dead = learner.run("golden", COURSE, seed, workers, qs, schedule, FAILURES)
    ids = sorted({m for _, m in schedule})
    assert len(select(events, "duplicate")) == len(schedule) - len(ids), "duplicates recorded"
    for m in ids:
        assert len(select(events, "admit", m)) == 1, f"{m} admitted"
        assert (m in reports) + dead.count(m) == 1, f"{m}: outcomes"


def duplicate_run(learner, variant):
    ms = round(variant.random.uniform(2.0, 8.0), 1)
    wait = round(variant.random.uniform(0.5, 3.5) * ms / 1000, 4)
    return learner.run("duplicate_run", COURSE, ms, wait)


@check(
    "06-dedupe-1",
    points=0.5,
    en="submit returns True for a new id and False for one seen before, in flight or after shutdown",
    zh="submit 对新 id 返回 True，对见过的 id（处理中或关闭后）返回 False",
)
def runtime_submit(learner, variant):
    said, reports, _, events = duplicate_run(learner, variant)
    assert said[:3] == [True, False, False] and said[4] is False, f"submit said {said}"
    assert reports == ["x"], f"reports {reports}"
    assert len(select(events, "duplicate", "x")) == 2, "duplicates of x"


@check(
    "06-dedupe-1",
    points=0.5,
    en="a new id after shutdown is refused as a dead letter (intake, shutdown, 0) and counts as seen",
    zh="关闭后到达的新 id 作为死信 (intake, shutdown, 0) 拒收，且算作见过",
)
def runtime_intake(learner, variant):
    said, _, dead, events = duplicate_run(learner, variant)
    assert said[3] is False, f"submit said {said[3]}"
    assert dead == [{"id": "y", "stage": "intake", "reason": "shutdown", "attempts": 0}], f"dead letters {dead}"
    assert [(e[2], e[4], e[5]) for e in select(events, "dead", "y")] == [("intake", 0, "shutdown")], "dead event"
    assert len(select(events, "duplicate", "y")) == 1, "a second y is a duplicate"


# ---------------------------------------------------------------- exercise 4: the deadlock


def rpc_run(learner, n, queue_size, left=()):
    return learner.run("rpc_run", COURSE, n, queue_size, list(left))


def rpc_cases(variant):
    rng = variant.random
    return [(0, 2), (1, 1), (rng.randint(30, 80), 1), (rng.randint(100, 200), rng.randint(2, 4))]


@check(
    "06-deadlock-1",
    points=1.5,
    en="rpc_pipeline_fixed returns every answer for any n and queue_size, without deadlock",
    zh="rpc_pipeline_fixed 对任意 n 与 queue_size 都返回全部应答，不会死锁",
)
def rpc_answers(learner, variant):
    for n, qs in rpc_cases(variant):
        value, _, _ = rpc_run(learner, n, qs)
        assert value == {f"m{i:03d}": f"answer for m{i:03d}" for i in range(n)}, f"n={n}, queue_size={qs}"


@check(
    "06-deadlock-1",
    points=1,
    en="it uses InstrumentedQueues of capacity at most queue_size",
    zh="它使用容量不超过 queue_size 的 InstrumentedQueue",
    counts_with="rpc_answers",  # a queue made and never used is bounded too
)
def rpc_bounded(learner, variant):
    for n, qs in rpc_cases(variant)[1:]:
        _, queues, _ = rpc_run(learner, n, qs)
        assert queues and all(0 < q["maxsize"] <= qs for q in queues), f"queues {queues}"
        assert sum(q["puts"] for q in queues) >= n, f"{sum(q['puts'] for q in queues)} puts for {n} messages"


@check(
    "06-deadlock-1",
    points=0.5,
    en="it cancels and awaits every task it created",
    zh="它取消并等待自己创建的所有任务",
    counts_with="rpc_answers",
)
def rpc_no_leftovers(learner, variant):
    left = left_on_purpose(variant)
    for n, qs in rpc_cases(variant):
        _, _, leftover = rpc_run(learner, n, qs, left)
        assert_nothing_left(leftover, left)


# ---------------------------------------------------------------- section 5: shutdown


def shutdown_run(learner, variant, early=False):
    rng = variant.random
    args = {
        "__n": rng.randint(40, 60) if early else rng.randint(12, 60),
        "__feeders": rng.randint(1, 6),
        "__stop_ms": rng.randint(0, 10) if early else rng.choice([rng.randint(0, 20), rng.randint(20, 400)]),
        "__qs": rng.randint(1, 3),
        "__workers": rng.randint(1, 2),
        "__seed": rng.randint(0, 99),
    }
    left = left_on_purpose(variant)
    reports, dead, events, leftover = learner.run("shutdown_run", COURSE, *args.values(), FAILURES, left)
    return args, (reports, dead, events, (leftover, left))


@check(
    "06-shutdown-1",
    points=1,
    en="after shutdown the books balance: every id has exactly one report or one dead letter",
    zh="关闭后账目平衡：每个 id 恰好一个报告或一条死信",
)
def shutdown_balance(learner, variant):
    args, (reports, dead, _, _) = shutdown_run(learner, variant)
    ids = [f"m{i:03d}" for i in range(args["__n"])]
    assert sorted(reports + [d["id"] for d in dead]) == ids, "outcomes"
    assert all(set(d) >= {"id", "stage", "reason", "attempts"} for d in dead), "dead letter fields"


@check(
    "06-shutdown-1",
    points=1,
    en="every admitted message ends as a report or a dead letter from a stage: shutdown drops nothing accepted",
    zh="每条被接收的消息最终都有报告或来自某个阶段的死信：关闭不丢已接收的消息",
    counts_with="shutdown_balance",
)
def shutdown_drains(learner, variant):
    _, (reports, dead, events, _) = shutdown_run(learner, variant)
    admitted = {e[1] for e in select(events, "admit")}
    finished = set(reports) | {d["id"] for d in dead if d["stage"] != "intake"}
    assert admitted == finished, f"admitted but unfinished: {sorted(admitted - finished)[:5]}"


@check(
    "06-shutdown-1",
    points=0.5,
    en="ids arriving after shutdown began become dead letters with reason shutdown",
    zh="关闭开始后到达的 id 成为原因为 shutdown 的死信",
)
def shutdown_late(learner, variant):
    args, (reports, dead, events, _) = shutdown_run(learner, variant, early=True)
    admitted = {e[1] for e in select(events, "admit")}
    late = [f"m{i:03d}" for i in range(args["__n"]) if f"m{i:03d}" not in admitted]
    assert late, "nothing arrived late"
    by_id = {d["id"]: d for d in dead}
    for m in late:
        assert m in by_id and by_id[m]["stage"] == "intake" and by_id[m]["reason"] == "shutdown", f"{m}: {by_id.get(m)}"


@check(
    "06-shutdown-1",
    points=0.5,
    en="no task is left after shutdown",
    zh="关闭后不留下任何任务",
    counts_with="shutdown_balance",
)
def shutdown_no_leftovers(learner, variant):
    _, (_, _, _, leftover) = shutdown_run(learner, variant)
    assert_nothing_left(*leftover)


# ---------------------------------------------------------------- exercise 5: validate_report

FIELDS = ("defect_type", "location", "severity", "disposition", "root_cause", "action")


def taxonomy_and_report(variant):
    rng = variant.random
    severities = [f"S{i}-{rng.randint(0, 99)}" for i in range(rng.randint(2, 4))]
    dispositions = [f"D{i}-{rng.randint(0, 99)}" for i in range(rng.randint(2, 4))]
    good = {
        "defect_type": rng.choice(["气孔", "虚焊", "划痕"]),
        "location": rng.choice(["焊缝", "边缘", "采样点 3–9"]),
        "severity": rng.choice(severities),
        "disposition": rng.choice(dispositions),
        "root_cause": rng.choice(["保护气不足", "温度偏低"]),
        "action": rng.choice(["返工补焊", "放行"]),
    }
    return {"severities": severities, "dispositions": dispositions}, good


def validate(learner, obj, taxonomy):
    got = learner.call("validate_report", obj, taxonomy)
    assert type(got) is list and all(type(e) is str for e in got), f"returned {type(got).__name__}"
    return got


@check(
    "06-schema-1",
    points=0.5,
    en="a report with all six fields valid gives [] (extra fields are not errors)",
    zh="六个字段都合格的报告返回 []（多余字段不算错）",
    counts_with="schema_fields",
)
def schema_valid(learner, variant):
    taxonomy, good = taxonomy_and_report(variant)
    assert validate(learner, good, taxonomy) == [], "a valid report"
    assert validate(learner, {**good, "extra": variant.random.randint(0, 9)}, taxonomy) == [], "an extra field"


@check(
    "06-schema-1",
    points=0.5,
    en="each missing, non-string or blank field gives one error naming it",
    zh="缺失、非字符串或为空的字段各产生一条写明字段名的错误",
)
def schema_fields(learner, variant):
    taxonomy, good = taxonomy_and_report(variant)
    for field in FIELDS:
        bad = variant.random.choice(["missing", "  ", "", 3, None, ["x"]])
        obj = {k: v for k, v in good.items() if k != field} if bad == "missing" else {**good, field: bad}
        errors = validate(learner, obj, taxonomy)
        assert len(errors) == 1 and field in errors[0], f"{field} = {bad!r}: {errors}"


@check(
    "06-schema-1",
    points=0.5,
    en="severity and disposition outside the taxonomy give one error each, naming the field",
    zh="severity、disposition 不在词表中时各一条错误，写明字段名",
)
def schema_vocabulary(learner, variant):
    taxonomy, good = taxonomy_and_report(variant)
    for field in ("severity", "disposition"):
        errors = validate(learner, {**good, field: "不在词表"}, taxonomy)
        assert len(errors) == 1 and field in errors[0], f"{field}: {errors}"
    errors = validate(learner, {**good, "severity": "x", "disposition": "y"}, taxonomy)
    assert len(errors) == 2, f"both wrong: {errors}"


@check(
    "06-schema-1",
    points=0.5,
    en="a report that is not a dict gives one error starting with report",
    zh="不是 dict 的报告只返回一条以 report 开头的错误",
)
def schema_not_dict(learner, variant):
    taxonomy, good = taxonomy_and_report(variant)
    for obj in ([good], "{}", None, variant.random.randint(0, 9)):
        errors = validate(learner, obj, taxonomy)
        assert len(errors) == 1 and errors[0].startswith("report"), f"{obj!r}: {errors}"


# ---------------------------------------------------------------- section 6: end to end

E2E_FIELDS = "('anomaly', 'region', 'docs', 'report', 'report_source')"


def template_report(p, taxonomy):
    normal = p["anomaly"] == "normal"
    where = "全段" if p["region"] is None else f"采样点 {p['region'][0]}–{p['region'][1]}"
    return {
        "defect_type": "无" if normal else p["anomaly"],
        "location": where,
        "severity": taxonomy["severities"][0 if normal else 1],
        "disposition": taxonomy["dispositions"][0 if normal else 1],
        "root_cause": "未见异常" if normal else f"待查，参考 {', '.join(p['docs']) or '无'}",
        "action": "放行" if normal else "复检并按参考文档处理",
    }


E2E_RUN = (
    f"({{i: {{k: p[k] for k in {E2E_FIELDS}}} for i, p in E2E.value.reports.items()}},"
    " E2E.value.dead_letters, E2E.leftover_tasks)"
)
FINDINGS = ("anomaly", "region", "docs")  # what the course's agents found, the same in every correct run


def e2e(learner, reference):
    """The end-to-end run's reports, dead letters and leftover tasks from the learner's kernel, and
    the reference kernel's (the solution's run of the same signals); the signal ids, their count and
    the taxonomy as the lab makes them, here (the kernel may rebind them). ``E2E`` is the notebook's
    own run: a learner's kernel could set it to anything, so its outcome per signal and the agents'
    findings must be the reference run's."""
    from rocmlab.assets.loaders import qc_signals, qc_taxonomy

    reports, dead, leftover = learner.eval(E2E_RUN)
    theirs, their_dead, _ = reference.eval(E2E_RUN)
    n, seed = PARAMETERS["N_SIGNALS"], PARAMETERS["SEED"]  # noqa: F821 (the run's, from the harness)
    ids = [s["id"] for s in qc_signals(n, seed=seed, kind="trace")]
    want = {"reports": {i: {k: p[k] for k in FINDINGS} for i, p in theirs.items()}}
    want["dead"] = sorted(d["id"] for d in their_dead)
    return reports, dead, leftover, ids, n, qc_taxonomy(), want


@check(
    "06-e2e-1",
    points=0.5,
    en="every input signal ends as exactly one report or dead letter, with no task left, "
    "and the agents' findings are the course pipeline's",
    zh="每个输入信号最终恰好成为一个报告或一条死信，且不留任务；各智能体的结论与课程流水线的一致",
)
def e2e_balance(learner, variant, reference):
    reports, dead, leftover, ids, n, _, want = e2e(learner, reference)
    assert len(ids) == n and n > 0, "signals"
    assert sorted(list(reports) + [d["id"] for d in dead]) == sorted(ids), "outcomes"
    assert leftover == [], f"left {leftover}"
    assert sorted(d["id"] for d in dead) == want["dead"], "not the reference run's dead letters"
    for i, p in reports.items():
        assert {k: p[k] for k in FINDINGS} == want["reports"].get(i), f"{i}: not the course agents' findings"


@check(
    "06-e2e-1",
    points=0.5,
    en="every report passes the schema: a valid LLM report or else the template report",
    zh="每份报告都符合 schema：合格的 LLM 报告，否则是模板报告",
    counts_with="e2e_balance",
)
def e2e_reports(learner, variant, reference):
    reports, _, _, _, _, taxonomy, _ = e2e(learner, reference)
    for i, p in reports.items():
        r = p["report"]
        assert p["report_source"] in ("llm", "template"), f"{i}: source {p['report_source']}"
        if p["report_source"] == "template":
            assert r == template_report(p, taxonomy), f"{i}: not the template report"
        assert isinstance(r, dict), f"{i}: report"
        for field in FIELDS:
            assert isinstance(r.get(field), str) and r[field].strip(), f"{i}: {field}"
        assert r["severity"] in taxonomy["severities"] and r["disposition"] in taxonomy["dispositions"], f"{i}"


# ---------------------------------------------------------------- stretch S1: find_cycle


def is_cycle(graph, cycle):
    return (
        isinstance(cycle, list)
        and len(cycle) >= 1
        and len(set(cycle)) == len(cycle)
        and all(cycle[(i + 1) % len(cycle)] in graph.get(v, ()) for i, v in enumerate(cycle))
    )


def random_dag(rng, n):
    order = list(range(n))
    rng.shuffle(order)
    names = [f"t{i}" for i in order]
    return {
        names[i]: [names[j] for j in rng.sample(range(i + 1, n), min(n - i - 1, rng.randint(0, 3)))] for i in range(n)
    }


@check(
    "06-stretch-cycle-1",
    points=1,
    en="find_cycle returns a cycle (distinct nodes, each with an edge to the next) when the graph has one",
    zh="图中有环时 find_cycle 返回一个环（节点各不相同，每个节点都有指向下一个的边）",
)
def cycle_found(learner, variant):
    rng = variant.random
    dag = random_dag(rng, rng.randint(5, 40))
    nodes = list(dag)
    a, b = sorted(rng.sample(range(len(nodes)), 2))
    with_back = {**dag, nodes[b]: dag[nodes[b]] + [nodes[a]]}
    # make sure a reaches b: add a path a -> b
    with_back[nodes[a]] = dag[nodes[a]] + [nodes[b]]
    for graph in ({"a": ["a"]}, with_back):
        assert is_cycle(graph, learner.call("find_cycle", graph)), f"no valid cycle in a graph of {len(graph)} nodes"
    # a long cycle, built in the kernel
    n = rng.randint(2000, 20000)
    got = learner.run("ring_cycle", n)
    assert isinstance(got, list) and len(got) == n and sorted(got) == list(range(n)), "the long cycle"
    assert all(got[(i + 1) % n] == (got[i] + 1) % n for i in range(n)), "the long cycle's order"


@check(
    "06-stretch-cycle-1",
    points=1,
    en="find_cycle returns None for a graph without a cycle (empty, diamonds, 20,000 nodes)",
    zh="无环图（空图、菱形、两万个节点）时 find_cycle 返回 None",
)
def cycle_none(learner, variant):
    rng = variant.random
    for graph in ({}, {"a": ["b", "c"], "b": ["d"], "c": ["d"], "d": []}, random_dag(rng, rng.randint(5, 60))):
        # wrapped in a list: a bare None answer reads as "no answer" on the channel
        got = learner.eval("[find_cycle(__g)]", __g=graph)
        assert got == [None], f"a cycle in an acyclic graph of {len(graph)} nodes"
    # 20,000 nodes, built in the kernel
    got = learner.eval("[find_cycle({i: [i + 1, i + 2] for i in range(__n)})]", __n=20000 - rng.randint(0, 99))
    assert got == [None], "a cycle in an acyclic graph of 20,000 nodes"


# ---------------------------------------------------------------- stretch S2: BM25


def bm25_reference(docs, query, k1=1.5, b=0.75):
    n = len(docs)
    avgdl = sum(len(d) for d in docs) / n
    out = []
    for d in docs:
        s = 0.0
        for q in query:
            nq = sum(1 for e in docs if q in e)
            f = d.count(q)
            idf = math.log(1 + (n - nq + 0.5) / (nq + 0.5))
            s += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * len(d) / avgdl))
        out.append(s)
    return out


def bm25_case(variant):
    rng = variant.random
    vocab = [f"词{i}" for i in range(rng.randint(5, 15))]
    docs = [[rng.choice(vocab) for _ in range(rng.randint(1, 15))] for _ in range(rng.randint(3, 12))]
    queries = [[rng.choice(vocab)], [rng.choice(vocab) for _ in range(3)] + [vocab[0]], ["不存在"], []]
    return docs, queries


def bm25_scores(learner, docs, query, **params):
    got = learner.eval("BM25(__d, **__p).scores(__q)", __d=docs, __p=params, __q=query)
    assert isinstance(got, list) and len(got) == len(docs), "one score per document"
    return [float(v) for v in got]


@check(
    "06-stretch-bm25-1",
    points=1,
    en="BM25 scores follow the formula (default k1=1.5, b=0.75), one per document in order",
    zh="BM25 得分符合公式（默认 k1=1.5、b=0.75），按文档顺序每个文档一个",
)
def bm25_default(learner, variant):
    docs, queries = bm25_case(variant)
    for q in queries:
        got = bm25_scores(learner, docs, q)
        assert all(math.isclose(g, w, rel_tol=1e-9, abs_tol=1e-12) for g, w in zip(got, bm25_reference(docs, q))), q


@check(
    "06-stretch-bm25-1",
    points=1,
    en="BM25 uses the k1 and b it is given",
    zh="BM25 使用传入的 k1 与 b",
)
def bm25_params(learner, variant):
    docs, queries = bm25_case(variant)
    k1, b = variant.random.choice([0.5, 0.9, 1.2, 2.0]), variant.random.choice([0.0, 0.3, 0.5, 1.0])
    for q in queries[:2]:
        got = bm25_scores(learner, docs, q, k1=k1, b=b)
        want = bm25_reference(docs, q, k1=k1, b=b)
        assert all(math.isclose(g, w, rel_tol=1e-9, abs_tol=1e-12) for g, w in zip(got, want)), (k1, b)


@check(
    "06-stretch-bm25-1",
    points=1,
    en="with BM25 the relevant document of other queries ranks in the top 3",
    zh="用 BM25 时，另一组查询的相关文档排在前 3 名",
    counts_with="bm25_default",
)
def bm25_retrieval(learner, variant):
    queries = json.loads(HIDDEN_FILES["retrieval_queries_hidden.json"])  # noqa: F821 (given by the harness)
    kb, kb_tokens = knowledge_base()
    for q in queries:  # the learner's BM25 scores the documents; the harness ranks them (not retrieve)
        scores = bm25_scores(learner, kb_tokens, tokenize_zh(q["query"]))
        top = [kb[i]["id"] for i in sorted(range(len(scores)), key=lambda i: -scores[i])[:3]]
        assert q["relevant"] in top, q["query"]


_PUNCT = set(" \t\r\n，。、；：？！「」『』（）()《》“”‘’-—·,.;:?!/[]{}%")


def tokenize_zh(text):
    """The lab's own tokenizer (lab.py's given tokenize_zh), here: a learner cannot change it."""
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)
    return [w.lower() for w in jieba.lcut(text) if w.strip() and not set(w) <= _PUNCT]


def knowledge_base():
    """The lab's knowledge base and its documents as lab.py tokenizes them (title twice)."""
    from rocmlab.assets.loaders import load_qc_kb

    kb = load_qc_kb()
    return kb, [tokenize_zh(f"{d['title']} {d['title']} {d['text']}") for d in kb]
