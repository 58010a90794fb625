# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown] tags=["zh"]
# # 实验 06 · 多智能体协作：异步消息队列上的质检流水线
#
# `06-multi-agent` · 版本 {{version}} · 核心部分约 100 分钟，另有约 40 分钟的选做（optional stretch）练习
#
# 一个工业质检项目把系统拆成四个智能体（agent）：**检测**（detect）、**异常定位**（localize）、**知识库检索**
# （retrieve）、**报告生成**（report），它们通过消息队列异步协作。一线工程师反馈：单请求延迟从 4 ms 升到 12 ms，吞吐量
# 却提高到 3 倍；也有人一旦编排变复杂就遇到超时和死锁。本实验把这个系统**正确地**搭起来（不丢消息、不死锁、延迟有界），
# 再用一个公平的基准测试解释那组数字。核心部分（5 个练习）：
#
# 1. 有界队列流水线与背压（backpressure）；
# 2. 带超时与带种子的指数退避重试，重试耗尽进入死信队列（dead-letter queue）；
# 3. 完整的运行时 `Runtime`：幂等去重、死信、优雅关闭，对照黄金 trace 检查；
# 4. 修复一个请求-应答（request–reply）死锁；
# 5. 报告的 schema 校验；报告智能体用实验 03 的 LoRA 适配器（adapter）生成真实的 LLM 输出。
#
# 最后是一个不评分的公平基准测试：单体与流水线在相同并发下比较，用利特尔定律（Little's law）解释“4 ms → 12 ms、吞吐
# ×3”。选做部分（单独计分，grade_id 以 `06-stretch-` 开头，核心内容不依赖它们）：S1 等待图（wait-for graph）找环，
# S2 中文 BM25 检索。另有不计分的延伸：智能体作为独立进程经 Redis Streams 通信。
#
# **先修**：Python `async`/`await`；实验 03 的质检报告格式（不要求完成实验 03：它的适配器由课程自动构建）。

# %% [markdown] tags=["en"]
# # Lab 06 · Multi-agent collaboration: an inspection pipeline over async message queues
#
# `06-multi-agent` · version {{version}} · a core of about 100 minutes, plus about 40 minutes of optional stretch exercises
#
# An industrial inspection project split its system into four agents: **detect**, **localize** (find the anomaly),
# **retrieve** (knowledge base) and **report**, cooperating asynchronously over a message queue. Its engineers saw
# per-request latency go from 4 ms to 12 ms while throughput tripled; others hit timeouts and deadlocks as soon as the
# orchestration grew. This lab builds that system **correctly** (nothing lost, no deadlock, bounded latency), then
# explains those figures with a fair benchmark. The core (5 exercises):
#
# 1. a pipeline over bounded queues, with backpressure;
# 2. timeouts and seeded exponential-backoff retries, with a dead-letter queue for exhausted retries;
# 3. the full `Runtime`: idempotent de-duplication, dead letters, graceful shutdown, checked against golden traces;
# 4. fixing a request–reply deadlock;
# 5. schema validation of reports; the report agent uses lab 03's LoRA adapter, so its LLM output is real.
#
# Last comes a fair benchmark (not graded): monolith and pipeline at equal concurrency, with Little's law explaining
# "4 ms → 12 ms, throughput ×3". Optional stretch (graded separately, grade_id starting `06-stretch-`; the core does not
# depend on it): S1 finds a cycle in a wait-for graph, S2 is BM25 retrieval in Chinese. Going further, not graded: the
# agents as separate processes over Redis Streams.
#
# **Prerequisites**: Python `async`/`await`; the QC report format of lab 03 (finishing lab 03 is not required: the
# course builds its adapter).

# %% [markdown] tags=["zh"]
# **自测与提交**：每个练习后面的测试单元是可见测试，供你自己核对；先保存笔记本，再在它所在的文件夹里打开终端运行
# `rocmlab check 06-multi-agent.ipynb`，它读取保存的文件，一次跑完全部可见测试。完成后，在工作坊 hub 上从 nbgrader 的
# Assignments 标签页提交（或由讲师统一收取）。分数来自隐藏检查：笔记本运行结束后，它们在你的 kernel 之外，按为你生成的
# 输入调用你的函数，对文中写明的每条规则分别检查、分别计分；没通过的检查会告诉你是哪一条规则。

# %% [markdown] tags=["en"]
# **Self-check and submission**: the test cell after each exercise holds visible tests for checking your own work.
# Save the notebook, then run `rocmlab check 06-multi-agent.ipynb` in a terminal in the notebook's folder: it reads
# the saved file and runs them all at once. When you are done, submit from nbgrader's
# Assignments tab on the workshop hub (or let the instructor collect it). Your grade comes from hidden checks: once the
# notebook has run, they call your functions from outside your kernel on inputs generated for you, one check with its
# own points for each rule stated in the text; a check you fail names its rule.

# %% [markdown] tags=["zh"]
# **课程模型。** 下面用到 `MODEL` 的第一个单元格会准备它。`tiny-qwen-zh` 是用课程数据在本机构建的小模型
# （不下载）：这台机器上第一次用到它时，那个单元格要构建它，两个 CPU 核上大约 3–5 分钟，之后从缓存读取。
# 可以提前在终端运行 `rocmlab assets build-model`，或把 `ROCMLAB_CACHE` 指向已有构建好的模型的文件夹。

# %% [markdown] tags=["en"]
# **The course model.** The first cell below that uses `MODEL` prepares it. `tiny-qwen-zh` is a small model built
# on this machine from the course data (nothing is downloaded): the first time a lab needs it here, that cell
# builds it, about 3–5 minutes on two CPU cores; later runs read the cache. Build it ahead of time with `rocmlab
# assets build-model` in a terminal, or point `ROCMLAB_CACHE` at a folder that holds a built one.

# %% tags=["parameters"]
PROFILE = "smoke"
DEVICE = "auto"
SEED = 0
MODEL = "tiny-qwen-zh"
LLM_ENDPOINT = ""  # gpu: an OpenAI-compatible server (e.g. vLLM) "http://host:8000/v1"
N_SIGNALS = 12  # inputs of the end-to-end run
MAX_NEW_TOKENS = 96  # reporter generation budget (a report is about 45 tokens of tiny-qwen-zh)
REPORT_ADAPTER = True  # the reporter loads lab 03's LoRA adapter for MODEL (built and cached when absent)
BENCH_MESSAGES = 60  # messages per point of the latency/throughput sweep
CONCURRENCY = [1, 2, 4, 6, 9, 12]

# %%
import asyncio
import json
import logging
import math
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rocmlab import lab
from rocmlab.lab.agents import Deadlock, InstrumentedQueue, Trace, run_async, wait_for_graph
from rocmlab.lab import agents

lab.seed_everything(SEED)
DATA = Path("data")
print(lab.describe_environment(PROFILE))

# %% [markdown] tags=["zh"]
# ## 0. 运行方式：虚拟时钟
#
# 并发程序的时间戳在每台机器上都不同，无法作为评分依据。`run_async(main)` 在一个**虚拟时钟**
# 的事件循环上运行协程：只有当所有任务都在等待定时器时时钟才前进，并直接跳到下一个定时器。
# 所以 `asyncio.sleep(0.002)` 表示“这一步耗时 2 ms”，但不花真实时间，结果在任何机器上都一样。
# 如果所有任务都在等待而没有任何定时器，程序永远不会再前进：`run_async` 抛出 `Deadlock`，而不是挂起。
# 它在独立线程里运行，所以在 Jupyter 中也能用；`main` 返回时仍未结束的任务列在 `leftover_tasks` 中。

# %% [markdown] tags=["en"]
# ## 0. How code runs here: a virtual clock
#
# Timestamps of concurrent code differ on every machine, so they cannot be graded.
# `run_async(main)` runs a coroutine on an event loop with a **virtual clock**: time moves only
# when every task waits on a timer, and then jumps straight to the next timer. So
# `asyncio.sleep(0.002)` means "this step costs 2 ms" but takes no real time, and results are
# the same on any machine. When every task waits and no timer is set, nothing can ever happen
# again: `run_async` raises `Deadlock` instead of hanging. It runs in its own thread, so it
# works inside Jupyter; tasks still pending when `main` returns are listed in `leftover_tasks`.


# %%
async def demo():
    trace = Trace()

    async def agent(name, ms):
        trace.record("start", name)
        await asyncio.sleep(ms / 1000)
        trace.record("end", name)

    await asyncio.gather(agent("a", 3), agent("b", 1))
    return trace


result = run_async(demo)
print(f"virtual time {result.elapsed_s * 1000:.1f} ms, leftover tasks {result.leftover_tasks}")
for row in result.value.rows():
    print(row)  # [t_ms, msg_id, stage, event, attempt, info]

# %% [markdown] tags=["zh"]
# ## 1. 有界队列流水线 (bounded queues, backpressure)
#
# 每个阶段 (stage) 有一个收件队列和一组 worker。队列**必须有界**：无界队列在下游变慢时会无限增长，
# 直到内存耗尽，延迟也随之无界。有界队列满时 `await put()` 会阻塞上游，这就是背压 (backpressure)。
# 由此得到一个上界：在途消息数 ≤ 各队列容量之和 + worker 数（每个 worker 最多拿着一条）。
#
# 下面的 `toy_stages` 用 `asyncio.sleep` 模拟各智能体的耗时（GPU 推理、RPC 在真实系统中也是“等待”），
# 并把阶段名追加到 `payload["path"]`。

# %% [markdown] tags=["en"]
# ## 1. A pipeline over bounded queues (backpressure)
#
# Each stage has an inbox queue and a pool of workers. Queues **must be bounded**: an unbounded
# queue grows without limit when a downstream stage slows, until memory runs out, and latency
# grows with it. A full bounded queue makes `await put()` wait, which slows the producer: that
# is backpressure. It gives a bound: messages in flight ≤ the sum of queue capacities + the
# number of workers (each worker holds at most one).
#
# `toy_stages` below simulates each agent's cost with `asyncio.sleep` (on a real system GPU
# inference and RPCs are waits too) and appends the stage name to `payload["path"]`.


# %%
@dataclass(frozen=True)
class Stage:
    name: str
    fn: object  # async fn(payload: dict) -> dict
    workers: int = 1


def toy_stage(name, ms, workers=1):
    async def fn(payload):
        await asyncio.sleep(ms / 1000)
        return {**payload, "path": payload.get("path", []) + [name]}

    return Stage(name, fn, workers)


def toy_stages(workers=1, ms=(1.0, 2.0, 1.0, 3.0)):
    names = ("detect", "localize", "retrieve", "report")
    return [toy_stage(n, t, workers) for n, t in zip(names, ms)]


def toy_items(n):
    return [(f"m{i:03d}", {"id": f"m{i:03d}", "path": []}) for i in range(n)]


# %% [markdown] tags=["zh"]
# ### 练习 1：`run_pipeline`
#
# 把 `items`（`(msg_id, payload)` 列表）依次送过所有阶段，返回 `{msg_id: 最终 payload}`。要求：
# - 每个阶段一个 `InstrumentedQueue(queue_size, name)`，每个阶段 `stage.workers` 个 worker 任务；
# - 记录 trace 事件：消息**放入第一个队列之后**记 `"admit"`；每次调用阶段函数前后记 `"start"`/`"end"`
#   （`stage=阶段名`）；结果被收集时记 `"done"`；
# - 所有消息处理完后停止所有 worker（取消并等待它们结束），不留下任何任务。
#
# - `items` 可以为空；同一阶段的 `stage.workers` 个 worker 并行处理不同的消息（隐藏检查要求总耗时明显短于串行）；
# - 返回值必须包含每一个 `msg_id`，每条消息恰好一个 `"done"`，每个阶段对每条消息恰好一个 `"start"`。
#
# 隐藏检查用 0、1 和 20–60 条消息，`queue_size` 为 1–4，每阶段 1–3 个 worker，分别检查：每条消息经过每个阶段恰好一次；
# 队列有界且在途消息数不超过上面的上界；同一阶段的 worker 并行；不留任务。
#
# 提示：`queue.join()` 等待所有已放入的消息被 `task_done()`；按阶段顺序依次 join。

# %% [markdown] tags=["en"]
# ### Exercise 1: `run_pipeline`
#
# Push `items` (a list of `(msg_id, payload)`) through every stage in order and return
# `{msg_id: final payload}`. Requirements:
# - one `InstrumentedQueue(queue_size, name)` per stage, `stage.workers` worker tasks per stage;
# - trace events: `"admit"` **after** a message is in the first queue; `"start"`/`"end"`
#   (`stage=name`) around each call of a stage function; `"done"` when a result is collected;
# - when every message is through, stop the workers (cancel them and wait for them): no task
#   may be left behind.
#
# - `items` may be empty; the `stage.workers` workers of one stage work on different messages in parallel (the hidden
#   checks require the run to take far less than the serial time);
# - the result holds every `msg_id`; each message gets exactly one `"done"` and exactly one `"start"` per stage.
#
# The hidden checks use 0, 1 and 20-60 messages, `queue_size` 1-4 and 1-3 workers per stage, and check separately:
# every message passes every stage exactly once; the queues are bounded and messages in flight never exceed the bound
# above; the workers of a stage work in parallel; no task is left.
#
# Hint: `queue.join()` waits until every item put has been marked `task_done()`; join the
# queues in stage order.


# %% tags=["solution"] grade_id="06-pipeline-sol-1"
async def run_pipeline(items, stages, *, queue_size, trace):
    """把 items 依次送过所有阶段（有界队列），返回 {msg_id: 最终 payload}。
    Run `items` through `stages` over bounded queues; return {msg_id: final payload}."""
    ### BEGIN SOLUTION
    queues = [InstrumentedQueue(queue_size, f"q-{s.name}") for s in stages]
    results = {}

    async def worker(index):
        stage, inbox = stages[index], queues[index]
        while True:
            msg_id, payload = await inbox.get()
            try:
                trace.record("start", msg_id, stage.name)
                payload = await stage.fn(payload)
                trace.record("end", msg_id, stage.name)
                if index + 1 < len(stages):
                    await queues[index + 1].put((msg_id, payload))
                else:
                    results[msg_id] = payload
                    trace.record("done", msg_id)
            finally:
                inbox.task_done()

    workers = [
        asyncio.create_task(worker(i), name=f"{s.name}-{k}") for i, s in enumerate(stages) for k in range(s.workers)
    ]
    try:
        for msg_id, payload in items:
            await queues[0].put((msg_id, payload))
            trace.record("admit", msg_id)
        for q in queues:
            await q.join()
    finally:
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    return results
    ### END SOLUTION


# %% tags=["test"] grade_id="06-pipeline-1" points=3
def _check_pipeline(n, queue_size, workers, ms=(1.0, 2.0, 1.0, 3.0)):
    stages = toy_stages(workers, ms)
    trace = Trace()
    r = run_async(lambda: run_pipeline(toy_items(n), stages, queue_size=queue_size, trace=trace))
    ids = [i for i, _ in toy_items(n)]
    assert sorted(r.value) == ids, f"结果应含全部 {n} 条消息 / expected all {n} ids, got {len(r.value)}"
    for i in ids:
        assert r.value[i]["path"] == [s.name for s in stages], (
            f"{i}: 应依次经过所有阶段 / should pass every stage in order, got {r.value[i]['path']}"
        )
        assert len(trace.select("done", i)) == 1, f"{i}: 'done' 应恰好一次 / exactly once"
    for s in stages:
        assert trace.count("start", s.name) == n, f"{s.name}: 每条消息处理一次 / once per message"
    assert len(r.queues) >= len(stages), "每个阶段要用 InstrumentedQueue / use an InstrumentedQueue per stage"
    for q in r.queues:
        assert q.maxsize <= queue_size and q.max_seen <= q.maxsize, f"队列越界 / queue over bound: {q.stats()}"
    bound = sum(q.maxsize for q in r.queues) + sum(s.workers for s in stages)
    peak = trace.max_in_flight("admit", ["done"])
    assert peak <= bound, f"在途 {peak} > 上界 {bound} / in flight over the bound"
    assert r.leftover_tasks == [], f"遗留任务 / tasks left pending: {r.leftover_tasks}"
    return r, trace


_r1, _t1 = _check_pipeline(20, 2, 1)
assert any(q.max_seen == q.maxsize for q in _r1.queues), "慢阶段前的队列应被填满 (背压) / backpressure expected"
print("ok: 20 messages, peak in flight", _t1.max_in_flight("admit", ["done"]))
_check_pipeline(0, 2, 1)
_check_pipeline(1, 1, 3)
_r, _t = _check_pipeline(57, 1, 3, ms=(0.5, 4.0, 0.5, 1.0))
_q = {q.name: q for q in _r.queues}
assert max(q.max_seen for q in _r.queues) == 1
# a slow middle stage with 3 workers: 3 work in parallel, so the run is well under the serial time
assert _r.elapsed_s < 57 * 6.0 / 1000 / 2, f"workers should overlap, took {_r.elapsed_s}"
_check_pipeline(33, 4, 2, ms=(2.0, 0.0, 1.0, 0.5))

# %% [markdown] tags=["zh"]
# ## 2. 超时与重试：带种子的指数退避
#
# 下游智能体会失败：抛异常、或者挂住不返回。每次调用都要有**超时**，失败后按**指数退避**重试：
# 第 k 次失败后等待 `base · 2^(k-1) · (1 + jitter · u)` 秒，`u ∈ [0,1)`。抖动 (jitter) 避免所有客户端同时重试
# 造成“惊群”。这里 `u` 来自 `random.Random(f"{seed}:{msg_id}:{k}")`：可复现，且与调度顺序无关。
# 重试耗尽的消息进入**死信队列** (dead-letter queue)，并附带原因，以便人工排查或重放，而不是悄悄丢掉。
#
# 常见错误：`except:` 或 `except BaseException:` 会吞掉 `asyncio.CancelledError`，使任务无法被取消、
# 关闭时挂住。只捕获 `Exception`（Python ≥ 3.8 中 `CancelledError` 不是 `Exception` 的子类）。

# %% [markdown] tags=["en"]
# ## 2. Timeouts and retries with seeded exponential backoff
#
# Downstream agents fail: they raise, or they hang. Every call needs a **timeout**, and a failed
# call is retried with **exponential backoff**: after failure k wait
# `base · 2^(k-1) · (1 + jitter · u)` seconds, `u ∈ [0,1)`. Jitter stops all clients retrying in
# lockstep (a thundering herd). Here `u` comes from `random.Random(f"{seed}:{msg_id}:{k}")`:
# reproducible and independent of scheduling order. A message whose retries are exhausted goes
# to the **dead-letter queue** with its reason, for a person to inspect or replay, instead of
# vanishing.
#
# A common mistake: a bare `except:` or `except BaseException:` swallows
# `asyncio.CancelledError`, so the task cannot be cancelled and shutdown hangs. Catch
# `Exception` only (since Python 3.8 `CancelledError` is not a subclass of `Exception`).


# %%
@dataclass(frozen=True)
class RetryPolicy:
    timeout_s: float = 0.010  # per attempt
    max_attempts: int = 3
    base_s: float = 0.002  # first backoff
    jitter: float = 0.5
    seed: int = 0


class DeadLetter(Exception):
    """Raised when a message cannot be processed; `reason` is the last failure's reason."""

    def __init__(self, reason, attempts):
        super().__init__(f"{reason} after {attempts} attempts")
        self.reason = reason
        self.attempts = attempts


def load_failure_script(path=DATA / "failure_script.json"):
    """{stage: {msg_id: [outcome per attempt]}}; outcome "ok", "hang", "error:<text>"."""
    script = json.loads(Path(path).read_text(encoding="utf-8"))
    for stage, per_id in script.items():
        for msg_id, outcomes in per_id.items():
            for o in outcomes:
                if not (o in ("ok", "hang") or o.startswith("error:")):
                    raise ValueError(
                        f"{path}: {stage}/{msg_id}: unknown outcome {o!r} (expected ok, hang or error:<text>)"
                    )
    return script


def scripted(stage, script):
    """Wrap a stage so that attempt k of a message follows script[stage.name][msg_id][k-1]
    (then "ok" once the list runs out)."""
    calls = {}
    plan = script.get(stage.name, {})

    async def fn(payload):
        msg_id = payload["id"]
        calls[msg_id] = calls.get(msg_id, 0) + 1
        outcomes = plan.get(msg_id, [])
        outcome = outcomes[calls[msg_id] - 1] if calls[msg_id] <= len(outcomes) else "ok"
        if outcome == "hang":
            await asyncio.sleep(3600)
        if outcome.startswith("error:"):
            raise RuntimeError(outcome[len("error:") :])
        return await stage.fn(payload)

    return Stage(stage.name, fn, stage.workers)


FAILURES = load_failure_script()
print({stage: len(per_id) for stage, per_id in FAILURES.items()})

# %% [markdown] tags=["zh"]
# ### 练习 2：`backoff_delay` 与 `call_with_retries`
#
# `call_with_retries(fn, payload, msg_id, stage, policy, trace)`：第 k 次尝试（k 从 1 开始）前记
# `"start"`（`attempt=k`），用 `asyncio.wait_for` 限时 `policy.timeout_s`；成功记 `"end"` 并返回结果；
# 失败记 `"fail"`，`info` 为原因：超时为 `"timeout"`，异常为 `"error: <异常文本>"`；
# 还有尝试次数时先 `await asyncio.sleep(backoff_delay(policy, msg_id, k))` 再重试；
# 否则抛出 `DeadLetter(最后一次原因, 尝试次数)`。
#
# `backoff_delay(policy, msg_id, attempt)` 返回秒数（float），严格按上面的公式，`u` 取自
# `random.Random(f"{policy.seed}:{msg_id}:{attempt}").random()`。隐藏检查用随机的失败脚本和策略，分别检查：公式对其他
# 种子、`base_s`、`jitter` 和次数成立；尝试次数与死信原因符合失败脚本（`max_attempts` 不只是 3）；失败与下一次
# `"start"` 之间恰好隔 `backoff_delay(...)`（虚拟时钟）；超时的 `"fail"` 恰好在 `"start"` 之后 `policy.timeout_s`。

# %% [markdown] tags=["en"]
# ### Exercise 2: `backoff_delay` and `call_with_retries`
#
# `call_with_retries(fn, payload, msg_id, stage, policy, trace)`: before attempt k (from 1)
# record `"start"` (`attempt=k`) and bound the call with `asyncio.wait_for(...,
# policy.timeout_s)`; on success record `"end"` and return the result; on failure record
# `"fail"` with `info` the reason, `"timeout"` for a timeout and `"error: <exception text>"` for
# an exception; if attempts remain `await asyncio.sleep(backoff_delay(policy, msg_id, k))` and
# retry, else raise `DeadLetter(last reason, attempts made)`.
#
# `backoff_delay(policy, msg_id, attempt)` returns seconds (a float), exactly the formula above, with `u` from
# `random.Random(f"{policy.seed}:{msg_id}:{attempt}").random()`. The hidden checks (random failure scripts and policies) check, each on its own: the formula for other seeds,
# `base_s`, `jitter` and attempts; the gap between a failure and the next `"start"` is exactly `backoff_delay(...)`
# (virtual clock); a timeout's `"fail"` comes exactly `policy.timeout_s` after its `"start"`; `max_attempts` other
# than 3; attempts and dead-letter reasons that follow a failure script.


# %% tags=["solution"] grade_id="06-retry-sol-1"
def backoff_delay(policy, msg_id, attempt):
    """第 attempt 次（从 1 开始）失败后等待的秒数。
    Seconds to wait after failed attempt `attempt` (1-based) of `msg_id`."""
    ### BEGIN SOLUTION
    u = random.Random(f"{policy.seed}:{msg_id}:{attempt}").random()
    return policy.base_s * 2 ** (attempt - 1) * (1 + policy.jitter * u)
    ### END SOLUTION


async def call_with_retries(fn, payload, msg_id, stage, policy, trace):
    """调用 `await fn(payload)`：每次尝试限时，两次尝试之间退避；返回结果或抛出 DeadLetter。
    Call `await fn(payload)` with a timeout per attempt and backoff between; return the result or raise DeadLetter."""
    ### BEGIN SOLUTION
    reason = "no attempt"
    for attempt in range(1, policy.max_attempts + 1):
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
        if attempt < policy.max_attempts:
            await asyncio.sleep(backoff_delay(policy, msg_id, attempt))
    raise DeadLetter(reason, policy.max_attempts)
    ### END SOLUTION


# %% tags=["test"] grade_id="06-retry-1" points=3
def _expected_outcome(outcomes, max_attempts):
    """(attempts, None) on success or (attempts, reason) for a dead letter, from a script."""
    for k in range(1, max_attempts + 1):
        o = outcomes[k - 1] if k <= len(outcomes) else "ok"
        if o == "ok":
            return k, None
    last = outcomes[max_attempts - 1]
    return max_attempts, "timeout" if last == "hang" else "error: " + last[len("error:") :]


def _run_retries(script, policy):
    trace = Trace()
    outcomes = {}

    async def one(stage_name, msg_id):
        stage = scripted(toy_stage(stage_name, 1.0), script)
        try:
            await call_with_retries(stage.fn, {"id": msg_id}, msg_id, stage_name, policy, trace)
            outcomes[(stage_name, msg_id)] = None
        except DeadLetter as dl:
            outcomes[(stage_name, msg_id)] = (dl.reason, dl.attempts)

    async def main():
        await asyncio.gather(*(one(s, m) for s, per in script.items() for m in per))

    r = run_async(main)
    assert r.leftover_tasks == [], f"遗留任务 / tasks left pending: {r.leftover_tasks}"
    for s, per in script.items():
        for m, plan in per.items():
            attempts, reason = _expected_outcome(plan, policy.max_attempts)
            got = len([e for e in trace.select("start", m, s)])
            assert got == attempts, f"{s}/{m}: 期望 {attempts} 次尝试 / expected {attempts} attempts, got {got}"
            expected = None if reason is None else (reason, attempts)
            assert outcomes[(s, m)] == expected, f"{s}/{m}: 期望 / expected {expected}, got {outcomes[(s, m)]}"
    return trace


_p = RetryPolicy()
assert 0.002 <= backoff_delay(_p, "m001", 1) < 0.003, "第 1 次退避应在 [base, base·1.5) / first backoff"
assert backoff_delay(_p, "m001", 1) == backoff_delay(_p, "m001", 1), "退避应可复现 / reproducible"
_trace2 = _run_retries(FAILURES, _p)
print("ok: attempts and dead letters match the failure script;", _trace2.count("fail"), "failed attempts")
for _seed, _a in ((0, 1), (0, 3), (7, 2), (7, 5)):
    _pol = RetryPolicy(seed=_seed, base_s=0.004, jitter=0.25)
    _u = random.Random(f"{_seed}:x9:{_a}").random()
    assert math.isclose(backoff_delay(_pol, "x9", _a), 0.004 * 2 ** (_a - 1) * (1 + 0.25 * _u))
_rng = random.Random(123)
_script = {
    "h": {
        f"h{i}": [_rng.choice(["ok", "hang", "error:掉线", "error:超载"]) for _ in range(_rng.randint(0, 5))]
        for i in range(25)
    }
}
_pol = RetryPolicy(timeout_s=0.005, max_attempts=4, base_s=0.001, jitter=1.0, seed=3)
_tr = _run_retries(_script, _pol)
# the gap between a failure and the next attempt is the seeded backoff (virtual clock)
for _f in _tr.select("fail"):
    _next = [e for e in _tr.select("start", _f.msg_id) if e.attempt == _f.attempt + 1]
    if _next:
        assert math.isclose(_next[0].t - _f.t, backoff_delay(_pol, _f.msg_id, _f.attempt), abs_tol=1e-9)
    if _f.info == "timeout":
        _start = [e for e in _tr.select("start", _f.msg_id) if e.attempt == _f.attempt][0]
        assert math.isclose(_f.t - _start.t, _pol.timeout_s, abs_tol=1e-9), "超时应按 policy.timeout_s"

# %% [markdown] tags=["zh"]
# ## 3. 完整运行时：至少一次投递、幂等、死信、关闭
#
# 消息代理 (broker) 通常只保证**至少一次** (at-least-once) 投递：确认 (ack) 丢失时会重发同一条消息。
# 所以消费者必须**幂等**：同一 `msg_id` 第二次到达时不能再产生一份报告。要在消息**进入**时就记下它，
# 而不是完成时：原消息还在处理中时到达的重复也必须丢弃。
#
# `Runtime` 把前面的部件组合起来：每个阶段一个有界队列和一组 worker，重试、死信、去重和关闭。下面先给出一个按至少一次
# 语义投递的“消息代理”（有些消息会在稍后再投递一次），然后是练习。

# %% [markdown] tags=["en"]
# ## 3. The full runtime: at-least-once delivery, idempotence, dead letters, shutdown
#
# A broker usually guarantees **at-least-once** delivery: when an acknowledgement is lost it
# delivers the same message again. The consumer must therefore be **idempotent**: the second
# arrival of a `msg_id` must not produce a second report. Remember an id when it **enters**,
# not when it finishes: a duplicate that arrives while the original is still in flight must be
# dropped too.
#
# `Runtime` assembles the pieces: a bounded queue and a pool of workers per stage, retries, dead letters,
# de-duplication and shutdown. First a "broker" that delivers at least once (some messages come again later), then the
# exercise.


# %%
def at_least_once_deliveries(n, *, seed, redeliver_rate=0.3, gap_ms=1.0):
    """A broker's delivery schedule: [(t_ms, msg_id)], each id once, some again later."""
    rng = random.Random(seed)
    schedule = []
    for i in range(n):
        msg_id = f"m{i:03d}"
        t = i * gap_ms
        schedule.append((t, msg_id))
        if rng.random() < redeliver_rate:
            schedule.append((t + rng.uniform(0.5, 25.0), msg_id))
    return sorted(schedule)


async def deliver(runtime, schedule):
    """Submit each delivery at its time (later when backpressure holds the feeder back)."""
    loop = asyncio.get_running_loop()
    for t_ms, msg_id in schedule:
        wait = t_ms / 1000 - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
        await runtime.submit(msg_id, {"id": msg_id, "path": []})


# %% [markdown] tags=["zh"]
# ### 练习 3：`Runtime`
#
# **练习 3 的约定**。用法：`rt = Runtime(stages, queue_size=2, policy=RetryPolicy(), trace=Trace())`，在事件循环内
# 调用一次 `rt.start()`，然后任意次 `await rt.submit(msg_id, payload)`，最后调用一次 `await rt.shutdown()`。结果：
# `rt.reports` 是 `{msg_id: 最后阶段返回的 payload}`；`rt.dead_letters` 是字典列表，键为 `"id"`、`"stage"`、
# `"reason"`、`"attempts"`。trace 规则（黄金 trace 按这些规则生成，检查失败时会说出违反了第几条）：
#
# 1. `submit` **先**查 id：见过的 id（已接收、仍在处理、已完成，或在关闭后被拒过）记 `"duplicate"`（不带 stage）并返回
#    `False`；新 id 立即记为见过（在任何 `await` 之前），放入第一个队列（队列满时等待：背压）**之后**记 `"admit"`，返回
#    `True`；
# 2. `shutdown()` 开始之后到达的新 id 不再接收：记 `"dead"`（`stage="intake"`，`attempt=0`，`info="shutdown"`），加入死信
#    `{"id", "stage": "intake", "reason": "shutdown", "attempts": 0}`，返回 `False`；它也算见过，再来一次就按规则 1 记
#    `"duplicate"`；
# 3. worker 通过 `call_with_retries` 调用阶段函数（其 `"start"`/`"end"`/`"fail"` 事件即练习 2 的规则）；
# 4. 重试耗尽时记 `"dead"`（`stage=阶段名`，`attempt=DeadLetter.attempts`，`info=DeadLetter.reason`），加入死信，消息不再
#    进入后续阶段；
# 5. 最后一个阶段成功后，把结果存入 `reports[msg_id]` 并记一次 `"done"`（不带 stage）；
# 6. 时间：`"admit"` 在 `put` 返回之后；重试按 `backoff_delay` 退避。
#
# `shutdown()`：停止接收新 id，等待每一条已接收的消息（包括关闭时正阻塞在 `submit` 里的）都有结果（报告或死信），再取消
# 并等待全部 worker，不留下任何任务。隐藏检查分别检查：换一个种子和配置（30 条、每阶段 1 个 worker、队列容量 1）时与第
# 二条黄金 trace 一致；别的种子和配置下每次重复投递都记为 `"duplicate"`、每个 id 只接收一次并恰好一个结果；处理中和关闭
# 后到达的重复返回 `False`；关闭后到达的新 id 按规则 2 处理。第 5 节的测试检查关闭。

# %% [markdown] tags=["en"]
# ### Exercise 3: `Runtime`
#
# **Exercise 3 contract**. Use: `rt = Runtime(stages, queue_size=2, policy=RetryPolicy(), trace=Trace())`; call
# `rt.start()` once inside the event loop, then `await rt.submit(msg_id, payload)` any number of times, then
# `await rt.shutdown()` once. Results: `rt.reports` is `{msg_id: the payload the last stage returned}`;
# `rt.dead_letters` is a list of dicts with the keys `"id"`, `"stage"`, `"reason"`, `"attempts"`. Trace rules (the
# golden traces were made with them; a failing check names the rule it broke):
#
# 1. `submit` checks the id **first**: an id seen before (accepted, still in flight, finished, or refused at
#    shutdown) records `"duplicate"` (no stage) and returns `False`; a new id is remembered at once (before any
#    `await`), put into the first queue (waiting while it is full: backpressure), and only **then** records `"admit"`
#    and returns `True`;
# 2. a new id arriving once `shutdown()` has begun is not accepted: record `"dead"` (`stage="intake"`, `attempt=0`,
#    `info="shutdown"`), append the dead letter `{"id", "stage": "intake", "reason": "shutdown", "attempts": 0}`,
#    return `False`; it counts as seen, so a later arrival is a `"duplicate"` by rule 1;
# 3. workers call each stage through `call_with_retries` (its `"start"`/`"end"`/`"fail"` events follow exercise 2);
# 4. when retries are exhausted record `"dead"` (`stage=name`, `attempt=DeadLetter.attempts`,
#    `info=DeadLetter.reason`) and append a dead letter; the message goes no further;
# 5. after the last stage succeeds store the result in `reports[msg_id]` and record `"done"` once (no stage);
# 6. timing: `"admit"` comes after `put` returns; retries back off by `backoff_delay`.
#
# `shutdown()`: stop accepting new ids, wait until every accepted message (including one blocked inside `submit` at
# that moment) has an outcome (a report or a dead letter), then cancel and await every worker: no task is left. The
# hidden checks check separately: a second golden trace made with another seed and configuration (30 messages, one
# worker per stage, queues of 1); with other seeds and configurations, every redelivery recorded as `"duplicate"` and
# each id admitted once with exactly one outcome; `False` for a duplicate arriving in flight or after shutdown; a new
# id arriving after shutdown handled by rule 2. Section 5 checks the shutdown.


# %% tags=["solution"] grade_id="06-runtime-sol-1"
class Runtime:
    """有界队列、每阶段一组 worker、重试、死信、去重与优雅关闭（规则 1–6 见上面的约定）。
    Bounded queues, a worker pool per stage, retries, dead letters, dedupe, graceful shutdown (rules 1-6 above).

    rt.reports: {msg_id: payload}; rt.dead_letters: [{"id", "stage", "reason", "attempts"}].
    """

    def __init__(self, stages, *, queue_size, policy, trace):
        self.stages = list(stages)
        self.queue_size = queue_size
        self.policy = policy
        self.trace = trace
        self.reports = {}
        self.dead_letters = []
        ### BEGIN SOLUTION
        self._queues = [InstrumentedQueue(queue_size, f"q-{s.name}") for s in self.stages]
        self._seen = set()
        self._accepting = True
        self._workers = []
        ### END SOLUTION

    def start(self):
        """创建 worker 任务（在运行中的事件循环里调用一次）/ Create the worker tasks (once, inside the loop)."""
        ### BEGIN SOLUTION
        for i, stage in enumerate(self.stages):
            for k in range(stage.workers):
                self._workers.append(asyncio.create_task(self._work(i), name=f"{stage.name}-{k}"))
        ### END SOLUTION

    async def submit(self, msg_id, payload):
        """投递一次；作为新消息被接收时返回 True（规则 1、2）/ Offer one delivery; True when accepted (rules 1, 2)."""
        ### BEGIN SOLUTION
        if msg_id in self._seen:
            self.trace.record("duplicate", msg_id)
            return False
        self._seen.add(msg_id)
        if not self._accepting:
            self._dead(msg_id, "intake", "shutdown", 0)
            return False
        await self._queues[0].put((msg_id, payload))  # may wait: backpressure on the feeder
        self.trace.record("admit", msg_id)
        return True
        ### END SOLUTION

    async def shutdown(self):
        """停止接收，走完已接收的消息，再停掉 worker，不留任务。
        Stop intake, drain everything accepted, stop the workers; leave no task behind."""
        ### BEGIN SOLUTION
        self._accepting = False
        # In stage order: once queue i is joined nothing new can reach it, and a submit that
        # was blocked on the full first queue has put its message before that queue drains.
        for q in self._queues:
            await q.join()
        for w in self._workers:
            w.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers.clear()
        ### END SOLUTION

    def _dead(self, msg_id, stage, reason, attempts):
        """记一条死信和 trace 事件 "dead"（规则 2、4）/ Record a dead letter and the trace event "dead" (rules 2, 4)."""
        ### BEGIN SOLUTION
        self.trace.record("dead", msg_id, stage, attempts, reason)
        self.dead_letters.append({"id": msg_id, "stage": stage, "reason": reason, "attempts": attempts})
        ### END SOLUTION

    async def _work(self, index):
        """阶段 index 的一个 worker：取消息、带重试调用、传给下一阶段或进死信（规则 3–5）。
        One worker of stage `index`: take, call with retries, pass on or dead-letter (rules 3-5)."""
        ### BEGIN SOLUTION
        stage, inbox = self.stages[index], self._queues[index]
        while True:
            msg_id, payload = await inbox.get()
            try:
                result = await call_with_retries(stage.fn, payload, msg_id, stage.name, self.policy, self.trace)
            except DeadLetter as dl:
                self._dead(msg_id, stage.name, dl.reason, dl.attempts)
            else:
                if index + 1 < len(self.stages):
                    await self._queues[index + 1].put((msg_id, result))
                else:
                    self.reports[msg_id] = result
                    self.trace.record("done", msg_id)
            finally:
                inbox.task_done()
        ### END SOLUTION


# %%
def golden_run(seed=SEED, n=20, workers=2, queue_size=2):
    """The seeded run whose trace is stored in data/golden_trace.json."""
    stages = [scripted(s, FAILURES) for s in toy_stages(workers)]
    trace = Trace()
    schedule = at_least_once_deliveries(n, seed=seed)

    async def main():
        rt = Runtime(stages, queue_size=queue_size, policy=RetryPolicy(seed=seed), trace=trace)
        rt.start()
        await deliver(rt, schedule)
        await rt.shutdown()
        return rt

    return run_async(main), trace, schedule


_golden_result, golden_trace, golden_schedule = golden_run()
_rt = _golden_result.value
print(
    f"{len(_rt.reports)} reports, {len(_rt.dead_letters)} dead letters, "
    f"{golden_trace.count('duplicate')} duplicates dropped, "
    f"virtual time {_golden_result.elapsed_s * 1000:.1f} ms"
)
for d in _rt.dead_letters:
    print("  dead letter:", d)

# %% tags=["test"] grade_id="06-dedupe-1" points=3
_ids = sorted({m for _, m in golden_schedule})
_redeliveries = len(golden_schedule) - len(_ids)
assert golden_trace.count("duplicate") == _redeliveries, (
    f"规则 1：应丢弃 {_redeliveries} 条重复 / rule 1: expected {_redeliveries} duplicates, got {golden_trace.count('duplicate')}"
)
for _m in _ids:
    _done = len(golden_trace.select("done", _m))
    _dead = len(golden_trace.select("dead", _m))
    assert _done + _dead == 1, (
        f"规则 4、5：{_m} 应恰好一个结果 / rules 4, 5: {_m} needs one outcome, got done={_done} dead={_dead}"
    )
    assert len(golden_trace.select("admit", _m)) == 1, f"规则 1：{_m} 只能被接收一次 / rule 1: {_m} is admitted once"
_diff = golden_trace.explain_difference(Trace.load_rows(DATA / "golden_trace.json"))
assert _diff is None, f"trace 与黄金 trace 不一致 / trace differs from the golden trace: {_diff}"
print("ok: no duplicate reports; trace matches data/golden_trace.json")
# a second seeded configuration, stored when the lab was written
# A duplicate in flight, one after shutdown, and a new id after shutdown (rules 1, 2, 5).
_tr = Trace()


async def _dup_in_flight():
    rt = Runtime(toy_stages(1, ms=(5.0, 5.0, 5.0, 5.0)), queue_size=2, policy=RetryPolicy(timeout_s=1.0), trace=_tr)
    rt.start()
    assert await rt.submit("x", {"id": "x", "path": []}) is True
    await asyncio.sleep(0.007)
    assert await rt.submit("x", {"id": "x", "path": []}) is False, (
        "规则 1：处理中到达的重复 / rule 1: a duplicate in flight"
    )
    await rt.shutdown()
    assert await rt.submit("x", {"id": "x", "path": []}) is False, (
        "规则 1：关闭后到达的重复 / rule 1: a duplicate after shutdown"
    )
    assert await rt.submit("y", {"id": "y", "path": []}) is False, (
        "规则 2：关闭后的新 id / rule 2: a new id after shutdown"
    )
    assert await rt.submit("y", {"id": "y", "path": []}) is False, "规则 2：它也算见过 / rule 2: it counts as seen"
    return rt


_rt_h = run_async(_dup_in_flight).value
assert list(_rt_h.reports) == ["x"], f"规则 5 / rule 5: reports {list(_rt_h.reports)}"
assert _rt_h.dead_letters == [{"id": "y", "stage": "intake", "reason": "shutdown", "attempts": 0}], (
    f"规则 2 / rule 2: dead letters {_rt_h.dead_letters}"
)
assert _tr.count("duplicate") == 3, f"规则 1 / rule 1: {_tr.count('duplicate')} duplicates recorded, expected 3"
assert [(e.stage, e.attempt, e.info) for e in _tr.select("dead", "y")] == [("intake", 0, "shutdown")], "规则 2 / rule 2"

# %% [markdown] tags=["zh"]
# ## 4. 死锁：请求-应答穿过满队列
#
# 报告智能体写报告时需要再向检索智能体追问一次（请求-应答，request–reply）。下面的 `rpc_pipeline`
# 让请求走**同一个**检索收件队列。负载一高：请求排在一串数据消息后面；检索者阻塞在“放进报告者的满队列”，
# 而报告者在等那个永远轮不到的应答，不再取自己的队列——互相等待，谁也不会前进。虚拟时钟发现没有任何定时器时抛出 `Deadlock`，
# 并附上等待图 (wait-for graph)：边 `T → U` 表示任务 T 在等 U。图中的环就是死锁；选做 S1 写一个找环的函数。

# %% [markdown] tags=["en"]
# ## 4. Deadlock: a request–reply through full queues
#
# While writing a report the reporter asks the retriever one follow-up question
# (request–reply). `rpc_pipeline` below sends the request through the retriever's **own** inbox.
# Under load the request queues up behind data messages; the retriever blocks putting into the
# reporter's full queue, while the reporter waits for an answer that never comes and stops
# draining its queue: each waits for the other and
# neither ever moves. The virtual clock sees no timer left and raises `Deadlock` with the
# wait-for graph: an edge `T → U` means task T waits for U. A cycle in that graph is the deadlock;
# stretch S1 writes a function that finds one.


# %%
async def rpc_pipeline(n, queue_size=2):
    """The broken design: requests share the retriever's data inbox. Returns the replies."""
    retr_in = InstrumentedQueue(queue_size, "retriever-inbox")
    rep_in = InstrumentedQueue(queue_size, "reporter-inbox")
    # only the retriever ever answers: declared, so that the wait-for graph knows it
    answers = InstrumentedQueue(queue_size, "answers", producers=["retriever"])
    replies = {}

    async def retriever():
        while True:
            kind, msg_id = await retr_in.get()
            await asyncio.sleep(0.001)
            if kind == "ask":
                await answers.put(f"answer for {msg_id}")
            else:
                await rep_in.put(msg_id)

    async def reporter():
        for _ in range(n):
            msg_id = await rep_in.get()
            await retr_in.put(("ask", msg_id))
            replies[msg_id] = await answers.get()

    workers = [asyncio.create_task(retriever(), name="retriever"), asyncio.create_task(reporter(), name="reporter")]
    for i in range(n):
        await retr_in.put(("data", f"m{i:03d}"))
    await workers[1]
    workers[0].cancel()
    await asyncio.gather(*workers, return_exceptions=True)
    return replies


print("light load:", len(run_async(lambda: rpc_pipeline(1)).value), "reply")
DEADLOCK_GRAPH = {}
try:
    run_async(lambda: rpc_pipeline(10))
except Deadlock as exc:
    DEADLOCK_GRAPH = exc.graph
    print(exc)
print("wait-for graph:", DEADLOCK_GRAPH)

# %% [markdown] tags=["zh"]
# ### 练习 4：修复 `rpc_pipeline_fixed`
#
# 写出同样功能、但在任何负载下都不会死锁的版本：返回 `{msg_id: "answer for <msg_id>"}`，覆盖全部 n 条。
# 所有队列仍须是容量为 `queue_size` 的 `InstrumentedQueue`（不能靠无界队列“解决”）。
# 思路：打破环中的一条边，例如请求走独立的请求队列，由一个**专门**服务请求的检索任务处理——它从不
# 往报告者的队列里放东西，所以不会被报告者卡住。
#
# **练习 4 的约定**：`rpc_pipeline_fixed(n, queue_size=2)` 是协程，返回 `{f"m{i:03d}": f"answer for m{i:03d}"}`，
# i = 0…n−1，n 可以为 0；至少用一个 `InstrumentedQueue`，且每个的容量都不超过 `queue_size`；返回前取消并等待自己创建的
# 所有任务（不留任务）。可见测试用 (n, queue_size) = (10, 2)、(1, 1)、(50, 1)、(200, 3)、(0, 2)；隐藏检查用 n = 0、1、
# 30–80、100–200 和 1–4 的 `queue_size`，分别检查全部应答、队列有界、不留任务；一旦死锁，虚拟时钟会报告，而不是挂住。

# %% [markdown] tags=["en"]
# ### Exercise 4: `rpc_pipeline_fixed`
#
# Write the same function so that it cannot deadlock under any load: return
# `{msg_id: "answer for <msg_id>"}` for all n messages. Every queue must still be an
# `InstrumentedQueue` of capacity `queue_size` (an unbounded queue is not a fix). Idea: break
# one edge of the cycle, e.g. send requests through their own queue, served by a retriever task
# **dedicated** to requests: it never puts into the reporter's queue, so the reporter cannot
# block it.
#
# **Exercise 4 contract**: `rpc_pipeline_fixed(n, queue_size=2)` is a coroutine returning
# `{f"m{i:03d}": f"answer for m{i:03d}"}` for i = 0…n−1, n may be 0; it uses at least one `InstrumentedQueue`, each
# of capacity at most `queue_size`; before returning it cancels and awaits every task it created (none is left). The
# visible tests use (n, queue_size) = (10, 2), (1, 1), (50, 1), (200, 3), (0, 2); the hidden checks use n = 0, 1, 30-80
# and 100-200 with `queue_size` 1-4, and check all the answers, bounded queues and no task left separately; a deadlock
# is reported by the virtual clock instead of hanging.


# %% tags=["solution"] grade_id="06-deadlock-sol-1"
async def rpc_pipeline_fixed(n, queue_size=2):
    """与 rpc_pipeline 相同的应答，但等待图里没有环 / Same replies as rpc_pipeline, without the wait-for cycle."""
    ### BEGIN SOLUTION
    retr_in = InstrumentedQueue(queue_size, "retriever-inbox")
    ask_in = InstrumentedQueue(queue_size, "retriever-requests")
    rep_in = InstrumentedQueue(queue_size, "reporter-inbox")
    replies = {}

    async def retriever():
        while True:
            item = await retr_in.get()
            await asyncio.sleep(0.001)
            await rep_in.put(item)

    async def answerer():
        while True:
            msg_id, reply = await ask_in.get()
            await asyncio.sleep(0.001)
            reply.set_result(f"answer for {msg_id}")

    async def reporter():
        for _ in range(n):
            msg_id = await rep_in.get()
            future = asyncio.get_running_loop().create_future()
            await ask_in.put((msg_id, future))
            replies[msg_id] = await future

    tasks = [asyncio.create_task(job(), name=job.__name__) for job in (retriever, answerer, reporter)]
    try:
        for i in range(n):
            await retr_in.put(f"m{i:03d}")
        await tasks[2]
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return replies
    ### END SOLUTION


# %% tags=["test"] grade_id="06-deadlock-1" points=3
def _check_rpc(n, queue_size):
    try:
        r = run_async(lambda: rpc_pipeline_fixed(n, queue_size), timeout_s=60.0)
    except (Deadlock, asyncio.TimeoutError) as exc:
        raise AssertionError(f"n={n}, queue_size={queue_size}: 仍然挂住 / still hangs: {exc!r}")
    assert r.value == {f"m{i:03d}": f"answer for m{i:03d}" for i in range(n)}, (
        f"n={n}: 应得到全部 {n} 个应答 / expected all {n} replies, got {len(r.value)}"
    )
    assert r.queues and all(q.maxsize <= queue_size for q in r.queues), (
        "队列须有界 (≤ queue_size) / queues must stay bounded"
    )
    assert r.leftover_tasks == [], f"遗留任务 / tasks left pending: {r.leftover_tasks}"
    return r


try:
    run_async(lambda: rpc_pipeline(10), timeout_s=60.0)  # bounded: 60 s of virtual time
    raise AssertionError("原设计在 n=10 时应死锁 / the broken design should deadlock at n=10")
except (Deadlock, asyncio.TimeoutError):
    pass
_check_rpc(10, 2)
print("ok: the fixed request–reply pipeline finishes")
for _n, _qs in ((1, 1), (50, 1), (200, 3), (0, 2)):
    _check_rpc(_n, _qs)

# %% [markdown] tags=["zh"]
# ## 5. 优雅关闭：什么都不丢（练习 3 的第二项检查）
#
# 生产系统随时会被要求停止（发布、扩缩容）。优雅关闭意味着：停止接收新消息，把已接收的走完，
# 再停掉 worker。检验标准是**账目平衡**：输入数 = 报告数 + 死信数，每个 id 恰好一个结果，且没有任务残留。
# 最容易丢的消息：停 worker 时还在后面某个阶段队列里的（要按阶段顺序逐个 join 每个队列，而不只是第一个），
# 以及关闭那一刻**正阻塞在 `submit` 里**的（它已被接收，同样要有结果）。
# 下面的测试在投递进行中途调用 `shutdown()`，并用多个并发投递者制造背压；隐藏检查换消息数、投递者数（1–6）、停止时刻
# （0–400 ms）、队列容量和 worker 数，分别检查：账目平衡；每条被 `"admit"` 的消息最终都有报告或非 intake 的死信；关闭后
# 到达的 id 成为原因为 `"shutdown"` 的死信；不留任务。这里不需要写新代码：检查的是练习 3 的 `shutdown()`。

# %% [markdown] tags=["en"]
# ## 5. Graceful shutdown with nothing lost (exercise 3, second check)
#
# A production system is told to stop at any moment (a deploy, a scale-down). A graceful
# shutdown stops intake, lets everything accepted finish, then stops the workers. The check is
# that **the books balance**: inputs = reports + dead letters, each id has exactly one outcome,
# and no task is left. The messages most easily lost: those still in a later stage's queue
# when the workers are cancelled (join every queue in stage order, not just the first), and a
# `submit` blocked on a full queue at that moment (it was accepted: it needs an outcome too).
# The test below calls `shutdown()` in the middle of the deliveries, with several concurrent feeders to create
# backpressure; the hidden checks vary the messages, the feeders (1-6), the stop time (0-400 ms), the queue capacity
# and the workers, and check separately: the books balance; every message that was `"admit"`-ted ends as a report or a
# dead letter from a stage (not from intake); ids arriving after shutdown become dead letters with reason
# `"shutdown"`; no task is left. No new code here: this checks the `shutdown()` of exercise 3.


# %% tags=["test"] grade_id="06-shutdown-1" points=3
def _shutdown_run(n, feeders, stop_ms, queue_size, workers, seed):
    stages = [scripted(s, FAILURES) for s in toy_stages(workers)]
    trace = Trace()
    ids = [f"m{i:03d}" for i in range(n)]

    async def main():
        rt = Runtime(stages, queue_size=queue_size, policy=RetryPolicy(seed=seed), trace=trace)
        rt.start()

        async def feeder(k):
            for msg_id in ids[k::feeders]:
                await rt.submit(msg_id, {"id": msg_id, "path": []})
                await asyncio.sleep(0.0005)

        feeding = [asyncio.create_task(feeder(k), name=f"feeder-{k}") for k in range(feeders)]
        await asyncio.sleep(stop_ms / 1000)
        await rt.shutdown()
        await asyncio.gather(*feeding)
        return rt

    r = run_async(main, timeout_s=600.0)
    rt = r.value
    dead_ids = [d["id"] for d in rt.dead_letters]
    assert len(ids) == len(rt.reports) + len(rt.dead_letters), (
        f"账目不平: 输入 {len(ids)} ≠ 报告 {len(rt.reports)} + 死信 {len(rt.dead_letters)} / counts do not balance"
    )
    assert sorted(list(rt.reports) + dead_ids) == ids, "每个 id 恰好一个结果 / exactly one outcome per id"
    assert r.leftover_tasks == [], f"关闭后仍有任务 / tasks left after shutdown: {r.leftover_tasks}"
    for d in rt.dead_letters:
        assert set(d) >= {"id", "stage", "reason", "attempts"}, f"死信字段不全 / dead letter fields: {d}"
    return rt, trace


_rt5, _t5 = _shutdown_run(40, feeders=1, stop_ms=15, queue_size=2, workers=1, seed=SEED)
assert any(d["reason"] == "shutdown" for d in _rt5.dead_letters), (
    "关闭后到达的应进入死信 / late arrivals → dead letters"
)
print(f"ok: {len(_rt5.reports)} reports + {len(_rt5.dead_letters)} dead letters = 40 inputs")
for _args in ((60, 4, 9, 1, 1, 1), (25, 3, 2, 1, 2, 2), (30, 2, 400, 3, 2, 3), (12, 6, 0, 1, 1, 4)):
    _rt, _tr = _shutdown_run(*_args)
    # anything admitted before the stop reached an outcome: no accepted message was dropped
    _admitted = {e.msg_id for e in _tr.select("admit")}
    _finished = set(_rt.reports) | {d["id"] for d in _rt.dead_letters if d["stage"] != "intake"}
    assert _admitted == _finished, f"admitted but unfinished: {sorted(_admitted - _finished)}"

# %% [markdown] tags=["zh"]
# ## 6. 报告智能体：LLM + schema 校验 + 模板兜底
#
# 报告者让 LLM 输出 JSON 质检报告。LLM 的输出**不可信**：可能不是 JSON、缺字段、严重度不在词表里。
# 所以每份输出都先校验；不合格就用模板兜底 (fallback)，并计数——兜底率本身就是一个要监控的指标。
# 报告者用实验 03 训练的 LoRA 适配器（第 7 节）：没有适配器时，冒烟（smoke）配置的 tiny-qwen-zh 写不出合格的 JSON，每份
# 报告都会走兜底；有了适配器，大多数输出能通过校验（第 7 节的运行会打印数量）。注意：校验只保证格式，不保证内容正确——4M 参数的小模型写出的字段
# 往往与信号无关。

# %% [markdown] tags=["en"]
# ## 6. The report agent: an LLM, schema validation, a template fallback
#
# The reporter asks an LLM for a JSON QC report. LLM output is **untrusted**: it may not be
# JSON, may miss fields, may use a severity outside the vocabulary. So every output is
# validated first; when it fails, a template fills in (the fallback), and it is counted: the
# fallback rate is itself a metric to watch. The reporter uses the LoRA adapter trained in lab 03
# (section 7): without it the smoke profile's tiny-qwen-zh writes no valid JSON and every report
# falls back; with it most outputs pass (the run in section 7 prints how many). Mind that validation checks the form, not the content: a
# 4M-parameter model's fields often have nothing to do with the signal.

# %%
TAXONOMY = lab.qc_taxonomy()
REPORT_FIELDS = ("defect_type", "location", "severity", "disposition", "root_cause", "action")
print({k: TAXONOMY[k] for k in ("severities", "dispositions")})

# %% [markdown] tags=["zh"]
# ### 练习 5：`validate_report`
#
# **练习 5 的约定**：`validate_report(obj, taxonomy)` 返回错误列表（字符串），空列表表示合格。规则：
#
# 1. `obj` 不是 dict（例如 list、字符串 `"{}"`、`None`）时只返回**一条**错误，以 `report` 开头并写明实际类型，不再检查字段；
# 2. 六个字段（`REPORT_FIELDS`）都必须存在且是非空字符串；只含空白的字符串（如 `"  "`）算空；缺失、类型不对或为空的字段
#    各产生一条错误，写明字段名；
# 3. `severity` 必须属于 `taxonomy["severities"]`，`disposition` 必须属于 `taxonomy["dispositions"]`；不在词表中时各一条
#    错误，写明字段名（已按规则 2 报错的字段不再重复报）；
# 4. 多余字段不算错。
#
# 隐藏检查用随机的词表和报告，分别检查规则 1、规则 2（逐个删掉、清空或改成非字符串每个字段：恰好一条写明该字段的错误）、
# 规则 3（两个词表字段同时错时恰好两条错误）和规则 4（合格报告返回 `[]`）。

# %% [markdown] tags=["en"]
# ### Exercise 5: `validate_report`
#
# **Exercise 5 contract**: `validate_report(obj, taxonomy)` returns a list of error strings; an empty list means valid.
# Rules:
#
# 1. when `obj` is not a dict (a list, the string `"{}"`, `None`) return **one** error that starts with `report` and
#    names the type it got, and check no field;
# 2. all six fields (`REPORT_FIELDS`) must be present and non-empty strings; a string of only whitespace (`"  "`) is
#    empty; each missing, mistyped or empty field gives one error naming the field;
# 3. `severity` must be in `taxonomy["severities"]` and `disposition` in `taxonomy["dispositions"]`; each one outside
#    its vocabulary gives one error naming the field (a field already reported by rule 2 is not reported again);
# 4. extra fields are not errors.
#
# The hidden checks use random vocabularies and reports and check rule 1, rule 2 (each field in turn removed, blanked
# or made a non-string: exactly one error, naming that field), rule 3 (both vocabulary fields wrong: exactly two
# errors) and rule 4 (a valid report gives `[]`) separately.


# %% tags=["solution"] grade_id="06-schema-sol-1"
def validate_report(obj, taxonomy):
    """质检报告对照 schema 的错误列表，合格时为 []（规则 1–4）/ Errors against the schema; [] when valid (rules 1-4)."""
    ### BEGIN SOLUTION
    if not isinstance(obj, dict):
        return [f"report: expected a JSON object, got {type(obj).__name__}"]
    errors = []
    for field in REPORT_FIELDS:
        value = obj.get(field)
        if not isinstance(value, str) or not value.strip():
            errors.append(f"{field}: expected a non-empty string, got {value!r}")
    for field, vocabulary in (("severity", taxonomy["severities"]), ("disposition", taxonomy["dispositions"])):
        value = obj.get(field)
        if isinstance(value, str) and value.strip() and value not in vocabulary:  # rule 2 reported the others
            errors.append(f"{field}: {value!r} not in {vocabulary}")
    return errors
    ### END SOLUTION


# %% tags=["test"] grade_id="06-schema-1" points=2
_good = {
    "defect_type": "气孔",
    "location": "焊缝",
    "severity": TAXONOMY["severities"][1],
    "disposition": TAXONOMY["dispositions"][1],
    "root_cause": "保护气不足",
    "action": "返工补焊",
}
assert validate_report(_good, TAXONOMY) == [], f"合格报告不应报错 / a valid report: {validate_report(_good, TAXONOMY)}"
_bad = validate_report({**_good, "severity": "很严重"}, TAXONOMY)
assert len(_bad) == 1 and "severity" in _bad[0], f"应指出 severity / should name severity: {_bad}"
print("ok: schema validation")
assert validate_report({**_good, "extra": 1}, TAXONOMY) == []
assert validate_report([_good], TAXONOMY) != []
assert validate_report("{}", TAXONOMY) != []
for _f in REPORT_FIELDS:
    _missing = {k: v for k, v in _good.items() if k != _f}
    _errs = validate_report(_missing, TAXONOMY)
    assert _errs and any(_f in e for e in _errs), (_f, _errs)
    assert any(_f in e for e in validate_report({**_good, _f: "  "}, TAXONOMY)), _f
    assert any(_f in e for e in validate_report({**_good, _f: 3}, TAXONOMY)), _f
_two = validate_report({**_good, "severity": "x", "disposition": "y"}, TAXONOMY)
assert len(_two) == 2, _two
assert len(validate_report({**_good, "severity": "  "}, TAXONOMY)) == 1, (
    "规则 2、3：空白字段只报一次 / rules 2, 3: a blank field is reported once"
)

# %% [markdown] tags=["zh"]
# ## 7. 四个智能体上线
#
# 检测与定位用简单、可解释的信号处理（本实验的重点是运行时，不是模型）：先稳健地拟合正弦基线，
# 对残差算稳健 z 分数 (median/MAD)，超过阈值即异常，并取最长的超阈值区间作为位置；异常类型用一个
# 在另一批种子数据上拟合的最近质心 (nearest centroid) 分类器。检索和报告见下文。四个函数都接入你的 `Runtime`。

# %% [markdown] tags=["en"]
# ## 7. The four agents go live
#
# Detection and localization use plain, explainable signal processing (this lab is about the
# runtime, not the models): a robust fit of the sinusoidal baseline, then a robust z-score
# (median/MAD) of the residual flags an anomaly and its longest run over the threshold is the
# location; the anomaly type comes from a nearest-centroid classifier fitted on another seeded
# batch. Retrieval and reporting follow below. All four plug into
# your `Runtime`.

# %%
Z_THRESHOLD = 6.0
PERIODS = np.linspace(25, 90, 66)


def baseline(x):
    """Robust fit of an offset plus one sinusoid (period searched on a grid)."""
    t = np.arange(x.size)
    best = None
    for p in PERIODS:
        A = np.stack([np.ones(x.size), np.sin(2 * np.pi * t / p), np.cos(2 * np.pi * t / p)], 1)
        keep = np.ones(x.size, bool)
        for _ in range(3):  # refit without the points that look anomalous
            coef, *_ = np.linalg.lstsq(A[keep], x[keep], rcond=None)
            res = x - A @ coef
            keep = np.abs(res) < 4 * 1.4826 * (np.median(np.abs(res[keep])) + 1e-9)
        score = np.median(np.abs(res))
        if best is None or score < best[0]:
            best = (score, A @ coef)
    return best[1]


def residual_z(x):
    """Robust z-score (median/MAD) of what the baseline does not explain."""
    x = np.asarray(x, dtype=np.float64).ravel()
    r = x - baseline(x)
    return r / (np.median(np.abs(r - np.median(r))) * 1.4826 + 1e-9)


def longest_run(mask, max_gap=3):
    """(start, end) of the longest run of True, bridging gaps up to max_gap; None if none."""
    idx = np.flatnonzero(mask)
    if idx.size == 0:
        return None
    best, start, prev = None, idx[0], idx[0]
    for i in list(idx[1:]) + [None]:
        if i is not None and i - prev <= max_gap + 1:
            prev = i
            continue
        if best is None or prev + 1 - start > best[1] - best[0]:
            best = (int(start), int(prev) + 1)
        if i is not None:
            start = prev = i
    return best


def signal_features(x, z):
    run = longest_run(np.abs(z) > Z_THRESHOLD)
    lo, hi = run if run else (0, 1)
    seg, raw = z[lo:hi], np.asarray(x, dtype=np.float64)[lo:hi]
    slope = float(np.polyfit(np.arange(seg.size), seg, 1)[0]) if seg.size > 2 else 0.0
    flips = float(np.mean(np.diff(np.sign(seg)) != 0)) if seg.size > 2 else 0.0
    return np.array([np.log1p(hi - lo), np.abs(seg).mean() / 10, seg.std() / 10, abs(slope), flips, np.abs(raw).mean()])


def fit_centroids(signals):
    feats = {}
    for s in signals:
        if s["label"] != "normal":
            feats.setdefault(s["label"], []).append(signal_features(s["data"], residual_z(s["data"])))
    mats = {k: np.stack(v) for k, v in feats.items()}
    scale = np.concatenate(list(mats.values())).std(axis=0) + 1e-9
    return {k: m.mean(axis=0) / scale for k, m in mats.items()}, scale


CENTROIDS, FEATURE_SCALE = fit_centroids(lab.qc_signals(60, seed=SEED + 1000, kind="trace"))
print("anomaly types:", sorted(CENTROIDS))

# %% [markdown] tags=["zh"]
# 检索者先用 jieba 给中文分词（中文没有空格），再在质检知识库 `qc_kb` 中找相关文档。这里给出最简单的检索：文档里每出现
# 一个查询词得一分。选做 S2 会把它换成 BM25，并比较两者的命中率；核心部分只用这个给定的版本。

# %% [markdown] tags=["en"]
# The retriever segments Chinese with jieba (Chinese has no spaces), then looks for documents in the QC knowledge base
# `qc_kb`. Given here is the simplest retriever: a document scores one point per query term it contains. Stretch S2
# replaces it with BM25 and compares their hit rates; the core uses only this given version.

# %%
import jieba

jieba.setLogLevel(logging.WARNING)
KB = lab.load_qc_kb()
_PUNCT = set(" \t\r\n，。、；：？！「」『』（）()《》“”‘’-—·,.;:?!/[]{}%")


def tokenize_zh(text):
    """jieba 分词，转小写，去掉标点和空白 / jieba words, lower-cased, punctuation and blanks dropped."""
    return [w.lower() for w in jieba.lcut(text) if w.strip() and not set(w) <= _PUNCT]


def kb_text(doc):
    return f"{doc['title']} {doc['title']} {doc['text']}"  # the title counts twice


class KeywordIndex:
    """每个出现在文档里的查询词得一分 / One point per query term the document contains."""

    def __init__(self, docs):
        self.docs = [set(d) for d in docs]

    def scores(self, query_tokens):
        return [float(sum(q in d for q in query_tokens)) for d in self.docs]


def retrieve(index, query, k=3):
    """中文查询的前 k 个文档 id（同分按文档顺序）/ Ids of the k best documents (ties keep document order)."""
    scores = index.scores(tokenize_zh(query))
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    return [KB[i]["id"] for i in order[:k]]


KB_TOKENS = [tokenize_zh(kb_text(d)) for d in KB]
KB_INDEX = KeywordIndex(KB_TOKENS)
print(f"{len(KB)} documents, {sum(map(len, KB_TOKENS))} terms; e.g. {KB_TOKENS[0][:8]}")

# %% [markdown] tags=["zh"]
# 检索者需要中文查询。下表把信号异常映射到知识库中可能的缺陷（为演示编写；在真实工厂中由工艺工程师维护）。

# %% [markdown] tags=["en"]
# The retriever needs a Chinese query. This table maps a signal anomaly to the likely defects of
# the knowledge base (written for the demo; in a real plant the process engineer owns it).

# %%
ANOMALY_QUERY = {
    "spike": "上电短路 连锡 锡桥",
    "step": "漏件 缺件 功能测试不通过",
    "drift": "虚焊 焊点润湿不良 冷焊",
    "dropout": "虚焊 开路 功能测试不通过",
    "oscillation": "虚焊 焊点不饱满 接触不良",
}


async def detect(payload):
    z = residual_z(payload["signal"])
    kind = "normal"
    if np.abs(z).max() > Z_THRESHOLD:
        f = signal_features(payload["signal"], z) / FEATURE_SCALE
        kind = min(CENTROIDS, key=lambda k: float(np.sum((CENTROIDS[k] - f) ** 2)))
    await asyncio.sleep(0.001)
    return {**payload, "anomaly": kind, "z": z}


async def localize(payload):
    region = None
    if payload["anomaly"] != "normal":
        region = longest_run(np.abs(payload["z"]) > Z_THRESHOLD)
    await asyncio.sleep(0.001)
    return {**payload, "region": region}


async def retrieve_agent(payload):
    docs = []
    if payload["anomaly"] != "normal":
        docs = retrieve(KB_INDEX, ANOMALY_QUERY.get(payload["anomaly"], payload["anomaly"]), k=3)
    await asyncio.sleep(0.001)
    return {**payload, "docs": docs}


# %% [markdown] tags=["zh"]
# 报告者用实验 03 的 LoRA 适配器：同一个底座模型（`MODEL`）、同样的系统提示和用户轮（产品线 + 缺陷描述），回答是一行
# JSON。`rocmlab.lab.qc_adapter.load_qc_reporter` 加载它：实验 03 在 CPU 上评测的就是这同一个适配器，每台机器只构建一次。缓存里
# 没有时，先运行的那个实验按实验 03 的配方训练一次（tiny-qwen-zh 在单线程 CPU 上约一到两分钟）并缓存，以后直接加载。缺陷描述按实验 03 数据里现场记录的写法，由前三个智能体的结果写成：
# 可能的缺陷（与 `ANOMALY_QUERY` 相同的对应关系）、信号异常的类型和区间。
# 正常信号不调用 LLM：放行报告用模板写（适配器只学过缺陷报告，也不必为规则能写的东西占用 GPU）。设置了
# `LLM_ENDPOINT`（如 vLLM 的 OpenAI 兼容接口）时改为 HTTP 调用，发送同样的对话。
#
# 这里为简单起见同步调用：在虚拟时钟上它不占虚拟时间；真实服务中应改用异步 HTTP 客户端或 `asyncio.to_thread`，否则一次
# 生成会卡住整个事件循环。

# %% [markdown] tags=["en"]
# The reporter uses lab 03's LoRA adapter: the same base model (`MODEL`), the same system prompt and user turn (product
# line + defect description), an answer that is one line of JSON. `rocmlab.lab.qc_adapter.load_qc_reporter` loads it:
# the very adapter lab 03 evaluates on a CPU, one build per machine. When the cache has none, whichever lab runs first
# trains it once with lab 03's recipe (a minute or two for tiny-qwen-zh on one CPU thread) and caches it. The defect description is written in the style of the shop-floor notes of lab 03's data, from
# what the first three agents found: the likely defect (the mapping of `ANOMALY_QUERY`), the anomaly type and its
# region. Normal signals do not call the LLM: a template writes the
# release report (the adapter only learned defect reports, and what a rule can write needs no GPU). With
# `LLM_ENDPOINT` set (e.g. vLLM's OpenAI-compatible API) the same conversation goes over HTTP instead.
#
# For simplicity the call here is synchronous: on the virtual clock it costs no virtual time; in a real service use
# an async HTTP client or `asyncio.to_thread`, or one generation stalls the whole event loop.

# %%
from rocmlab.lab.qc_adapter import load_qc_reporter, qc_messages

PRODUCT_LINE = "PCB 组装"  # the in-circuit test traces come from board assembly
ANOMALY_ZH = {"spike": "尖峰", "step": "阶跃", "drift": "漂移", "dropout": "信号丢失", "oscillation": "振荡"}
LIKELY_DEFECT = {
    "spike": "连锡",
    "step": "漏件",
    "drift": "虚焊",
    "dropout": "虚焊",
    "oscillation": "虚焊",
}  # as ANOMALY_QUERY


def make_generator():
    """generate(messages) -> text, from a server (LLM_ENDPOINT) or in-process with lab 03's adapter."""
    if LLM_ENDPOINT:
        import urllib.request

        def generate(messages):
            body = json.dumps(
                {"model": MODEL, "max_tokens": MAX_NEW_TOKENS, "temperature": 0, "messages": messages}
            ).encode()
            req = urllib.request.Request(
                LLM_ENDPOINT.rstrip("/") + "/chat/completions", body, {"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.loads(resp.read())["choices"][0]["message"]["content"]

        return generate

    import torch

    device = lab.pick_device(DEVICE)
    if device.type == "cpu":
        torch.set_num_threads(1)  # a model of a few M parameters is dispatch-bound: threads only add overhead
    if REPORT_ADAPTER:
        model, tok = load_qc_reporter(MODEL, device=device, seed=SEED)
    else:
        model, tok = lab.load_model(MODEL, device=device)
    end_of_turn = tok.convert_tokens_to_ids("<|im_end|>")  # the chat template's end of turn, as in lab 03

    def generate(messages):
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tok(text, return_tensors="pt", add_special_tokens=False).to(device)
        with torch.no_grad():
            out = model.generate(
                **ids,
                max_new_tokens=MAX_NEW_TOKENS,
                do_sample=False,
                eos_token_id=end_of_turn,
                pad_token_id=tok.pad_token_id,
            )
        return tok.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)

    return generate


GENERATE = make_generator()


def describe_anomaly(p):
    """The defect description of lab 03's user turn, in the style of its shop-floor notes, from what the agents found."""
    where = "全段" if p["region"] is None else f"采样点 {p['region'][0]}–{p['region'][1]}"
    defect = LIKELY_DEFECT.get(p["anomaly"], "异常")
    return f"ICT 测试：主控板{defect}，测试信号{ANOMALY_ZH.get(p['anomaly'], p['anomaly'])}（{where}）。请工艺确认。"


def parse_json_object(text):
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        return json.loads(text[start : end + 1])
    except ValueError:
        return None


def template_report(p):
    normal = p["anomaly"] == "normal"
    return {
        "defect_type": "无" if normal else p["anomaly"],
        "location": "全段" if p["region"] is None else f"采样点 {p['region'][0]}–{p['region'][1]}",
        "severity": TAXONOMY["severities"][0 if normal else 1],
        "disposition": TAXONOMY["dispositions"][0 if normal else 1],
        "root_cause": "未见异常" if normal else f"待查，参考 {', '.join(p['docs']) or '无'}",
        "action": "放行" if normal else "复检并按参考文档处理",
    }


async def report(payload):
    obj, errors = None, []
    if payload["anomaly"] != "normal":
        obj = parse_json_object(GENERATE(qc_messages(PRODUCT_LINE, describe_anomaly(payload))))
        errors = validate_report(obj, TAXONOMY)
    source = "llm" if obj is not None and not errors else "template"
    await asyncio.sleep(0.001)
    return {
        **payload,
        "report": obj if source == "llm" else template_report(payload),
        "report_source": source,
        "llm_asked": payload["anomaly"] != "normal",
        "report_errors": errors[:3],
    }


# %%
AGENTS = [
    Stage("detect", detect, 2),
    Stage("localize", localize, 2),
    Stage("retrieve", retrieve_agent, 2),
    Stage("report", report, 1),
]
SIGNALS = lab.qc_signals(N_SIGNALS, seed=SEED, kind="trace")


async def inspect_all():
    rt = Runtime(AGENTS, queue_size=4, policy=RetryPolicy(timeout_s=5.0), trace=Trace())
    rt.start()
    for s in SIGNALS:
        await rt.submit(s["id"], {"id": s["id"], "signal": s["data"]})
    await rt.shutdown()
    return rt


E2E = run_async(inspect_all)
_reports = E2E.value.reports
_truth = {s["id"]: s for s in SIGNALS}
_correct = sum((p["anomaly"] == "normal") == (_truth[i]["label"] == "normal") for i, p in _reports.items())
_typed = sum(p["anomaly"] == _truth[i]["label"] for i, p in _reports.items())
_asked = [p for p in _reports.values() if p["llm_asked"]]
_from_llm = [p for p in _asked if p["report_source"] == "llm"]
print(
    f"{len(_reports)} reports, {len(E2E.value.dead_letters)} dead letters; "
    f"anomaly/normal right {_correct}/{len(_reports)}, type right {_typed}/{len(_reports)}"
)
print(
    f"LLM asked for {len(_asked)} anomalies: {len(_from_llm)} schema-valid LLM reports, "
    f"{len(_asked) - len(_from_llm)} template fallbacks"
)
for _p in _asked[:3]:
    print(" ", _p["report_source"], json.dumps(_p["report"], ensure_ascii=False)[:150], _p["report_errors"][:1])
# Not graded: the point of the adapter is that the reporter's output is the LLM's, not the template's.
assert not (_asked and REPORT_ADAPTER and not LLM_ENDPOINT) or _from_llm, (
    "有适配器时应至少有一份 LLM 报告通过校验 / with the adapter at least one LLM report should pass the schema"
)

# %% tags=["test"] grade_id="06-e2e-1" points=1
assert len(_reports) + len(E2E.value.dead_letters) == N_SIGNALS, "账目不平 / counts do not balance"
for _i, _p in _reports.items():
    assert validate_report(_p["report"], TAXONOMY) == [], f"{_i}: 报告不合 schema / report fails the schema"
assert E2E.leftover_tasks == [], E2E.leftover_tasks
print("ok: every input ended as a schema-valid report or a dead letter")
assert all(_p["report_source"] in ("llm", "template") for _p in _reports.values())
assert all(_p["report_source"] == "llm" or _p["report"] == template_report(_p) for _p in _reports.values())

# %% [markdown] tags=["zh"]
# ## 8. 可信的基准测试：相同并发下的单体与流水线（不评分）
#
# 旧版的比较不公平：单体一次只处理一条，流水线却有 `C` 个客户端；而且每个阶段只是 `asyncio.sleep`，等待不占用任何资
# 源，所以“加速”是白送的——给单体 `C` 个 worker，它同样会变快。公平的比较要求**相同的并发、相同的工作量、相同的预热**：
#
# - 每个智能体在自己的**设备**上工作（一个 `asyncio.Lock`：同一时刻只做一件事，就像一个模型实例），服务时间约 1 ms，
#   按消息带种子地浮动 ±25 %，两种设计对同一条消息花同样的时间；
# - **单体**：`C` 个 worker，每个依次做完四步；**流水线**：每个智能体一个 worker，`C` 个客户端各自提交一条、等它完成、
#   再提交下一条（闭环负载）；
# - 在虚拟时钟上运行：没有预热效应，也没有噪声，每个数字都可以复现（一次运行，离散度为 0）。
#
# 利特尔定律（Little's law，Little 1961）：在途数 L = 吞吐 X × 延迟 W，所以闭环时 W = C / X。操作分析（Denning & Buzen
# 1978）给出两条渐近界：X(C) ≤ C / ΣD 与 X(C) ≤ 1 / D_max，其中 D 是每个设备上每条消息的工作量；两条线交于拐点
# C* = ΣD / D_max（这里为 4）。拐点之后吞吐不再增加，多出来的请求只是在队列里等：W − ΣD 就是排队时间。

# %% [markdown] tags=["en"]
# ## 8. A fair benchmark: monolith and pipeline at equal concurrency (not graded)
#
# The old comparison was unfair: the monolith handled one message at a time while the pipeline had `C` clients, and
# every stage was an `asyncio.sleep`, a wait that holds no resource, so the "speed-up" came for free: give the monolith
# `C` workers and it speeds up just the same. A fair comparison has **equal concurrency, equal work and equal warm-up**:
#
# - each agent works on its own **device** (an `asyncio.Lock`: one piece of work at a time, like one model instance),
#   about 1 ms per message, varied ±25 % per message with a seed, the same for a given message in both designs;
# - the **monolith** has `C` workers, each running the four steps in turn; the **pipeline** has one worker per agent
#   and `C` clients that each submit a message, wait for it, then submit the next (closed-loop load);
# - both run on the virtual clock: no warm-up effects and no noise, every figure is reproducible (one run, zero
#   spread).
#
# Little's law (Little 1961): in flight L = throughput X × latency W, so in a closed loop W = C / X. Operational analysis
# (Denning & Buzen 1978) gives two asymptotic bounds, X(C) ≤ C / ΣD and X(C) ≤ 1 / D_max, where D is the work per
# message on each device; they cross at the knee C* = ΣD / D_max (4 here). Past the knee throughput stops growing and
# the extra requests only wait in queues: W − ΣD is the queueing time.

# %%
BENCH_MS = (1.0, 1.0, 1.0, 1.0)  # mean service time of each agent on its device
BENCH_JITTER = 0.25  # each message's service time varies by up to ±25 %, seeded
STAGE_NAMES = ("detect", "localize", "retrieve", "report")


def service_s(stage_index, msg_id):
    u = random.Random(f"{SEED}:{stage_index}:{msg_id}").uniform(-BENCH_JITTER, BENCH_JITTER)
    return BENCH_MS[stage_index] / 1000 * (1 + u)


def device_stages(devices):
    """Four agents; agent i works on a message while it holds devices[i]."""

    def make(i):
        async def fn(payload):
            async with devices[i]:
                await asyncio.sleep(service_s(i, payload["id"]))
            return payload

        return Stage(STAGE_NAMES[i], fn, 1)

    return [make(i) for i in range(len(STAGE_NAMES))]


def own_devices():
    return [asyncio.Lock() for _ in STAGE_NAMES]


def one_shared_gpu():
    gpu = asyncio.Lock()
    return [gpu] * len(STAGE_NAMES)


async def closed_loop(clients, n, serve):
    """`clients` clients share n messages; each awaits serve(msg_id) before its next. (latencies, msg/s)"""
    loop = asyncio.get_running_loop()
    ids, latencies = iter(range(n)), []

    async def client():
        for i in ids:
            t0 = loop.time()
            await serve(f"b{i:04d}")
            latencies.append(loop.time() - t0)

    t0 = loop.time()
    await asyncio.gather(*(client() for _ in range(clients)))
    return latencies, n / (loop.time() - t0)


async def bench_monolith(clients, n, devices=own_devices):
    stages = device_stages(devices())

    async def serve(msg_id):
        payload = {"id": msg_id}
        for stage in stages:
            payload = await stage.fn(payload)

    latencies, throughput = await closed_loop(clients, n, serve)
    return {"latency_ms": 1000 * float(np.median(latencies)), "throughput": throughput}


async def bench_pipeline(clients, n, devices=own_devices, cap=None):
    """Your Runtime with one worker per agent; `cap` admits at most that many messages at once."""
    loop = asyncio.get_running_loop()
    finished = {}
    stages = device_stages(devices())
    last = stages[-1]

    async def last_and_ack(payload):
        out = await last.fn(payload)
        finished[payload["id"]].set_result(loop.time())
        return out

    stages[-1] = Stage(last.name, last_and_ack, 1)
    rt = Runtime(stages, queue_size=clients, policy=RetryPolicy(timeout_s=60.0), trace=Trace())
    rt.start()
    gate, inside = asyncio.Semaphore(cap or clients), []

    async def serve(msg_id):
        async with gate:  # admission: wait here, outside the pipeline, when `cap` messages are in it
            finished[msg_id] = loop.create_future()
            t0 = loop.time()
            await rt.submit(msg_id, {"id": msg_id})
            inside.append(await finished[msg_id] - t0)

    latencies, throughput = await closed_loop(clients, n, serve)
    await rt.shutdown()
    return {
        "latency_ms": 1000 * float(np.median(latencies)),
        "throughput": throughput,
        "in_pipeline_ms": 1000 * float(np.median(inside)),
    }


def bench(fn, *args, **kwargs):
    return run_async(lambda: fn(*args, **kwargs)).value


WORK_MS = sum(BENCH_MS)
MONO = {c: bench(bench_monolith, c, BENCH_MESSAGES) for c in CONCURRENCY}
PIPE = {c: bench(bench_pipeline, c, BENCH_MESSAGES) for c in CONCURRENCY}
base = MONO[1]["throughput"]
print(
    f"work per message ΣD = {WORK_MS:.1f} ms, bottleneck D_max = {max(BENCH_MS):.1f} ms, knee C* = "
    f"{WORK_MS / max(BENCH_MS):.0f}; bounds: X ≤ C/ΣD and X ≤ {1000 / max(BENCH_MS):.0f} msg/s"
)
print(" C | monolith, C workers  | pipeline, C clients  | Little C/X | queueing W−ΣD")
for c in CONCURRENCY:
    m, p = MONO[c], PIPE[c]
    print(
        f"{c:2d} | {m['latency_ms']:5.2f} ms {m['throughput']:4.0f}/s ×{m['throughput'] / base:3.1f} "
        f"| {p['latency_ms']:5.2f} ms {p['throughput']:4.0f}/s ×{p['throughput'] / base:3.1f} "
        f"| {1000 * c / p['throughput']:6.2f} ms | {p['latency_ms'] - WORK_MS:5.2f} ms"
    )

# %%
import matplotlib.pyplot as plt

_fig, (_ax1, _ax2) = plt.subplots(1, 2, figsize=(11, 3.5))
_cs = list(CONCURRENCY)
lab.plot_lines(
    {
        "pipeline": (_cs, [PIPE[c]["latency_ms"] for c in _cs]),
        "monolith, C workers": (_cs, [MONO[c]["latency_ms"] for c in _cs]),
    },
    title="median latency",
    xlabel="clients C",
    ylabel="ms",
    ax=_ax1,
)
lab.plot_lines(
    {
        "pipeline": (_cs, [PIPE[c]["throughput"] for c in _cs]),
        "monolith, C workers": (_cs, [MONO[c]["throughput"] for c in _cs]),
        "bound min(C/ΣD, 1/D_max)": (_cs, [min(c / WORK_MS, 1 / max(BENCH_MS)) * 1000 for c in _cs]),
    },
    title="throughput",
    xlabel="clients C",
    ylabel="messages / s",
    ax=_ax2,
)
plt.tight_layout()
plt.show()

# %% [markdown] tags=["zh"]
# **读图。** 在相同并发下，单体（`C` 个 worker）与流水线的延迟和吞吐相同（同样的设备、同样的消息，数字逐位一致）：吞吐
# 的提升来自**并发**，不是来自“拆成智能体”。两者都沿着 C/ΣD 上升，在拐点 C* = 4 附近碰到上限（服务时间有浮动，实测的
# 平台略低于 1/D_max），之后吞吐持平、延迟随 C 线性增长（C = 12 时的延迟与吞吐倍数见上表）。
#
# 现在读那组数字：12 ms × 3 倍吞吐（3 × 250 = 750 条/秒）按利特尔定律意味着约 9 条消息在途，而四个设备同时只能服务 4
# 条——另外 5 条在队列里等。“4 ms → 12 ms、吞吐 ×3”是**越过拐点后的排队**，不是流水线的代价。下面两个实验说明怎么拿回
# 延迟，以及一块 GPU 的上限。

# %% [markdown] tags=["en"]
# **Reading the plot.** At equal concurrency the monolith (`C` workers) and the pipeline have the same latency and
# throughput (the same devices and messages; the figures agree to the digit): the gain in throughput comes from
# **concurrency**, not from splitting into agents. Both climb along C/ΣD and flatten near the knee C* = 4 (with
# varying service times the plateau sits a little below 1/D_max); past it throughput stays flat and latency grows
# linearly with C (the table above gives the latency and the throughput multiple at C = 12).
#
# Now the seed's figures: 12 ms at 3× throughput (3 × 250 = 750 messages/s) means, by Little's law, about 9 messages in
# flight, while the four devices can serve only 4 at once: the other 5 wait in queues. "4 ms → 12 ms, throughput ×3"
# is **queueing past the knee**, not a cost of the pipeline. The two experiments below show how to get the latency
# back, and the limit of one GPU.

# %%
C_SEED = 9  # about the seed's load: 750 msg/s × 12 ms
CAPS = [None, 2, 4, 6]
CAPPED = {k: bench(bench_pipeline, C_SEED, BENCH_MESSAGES, cap=k) for k in CAPS}
print(f"pipeline with {C_SEED} clients and an admission cap:")
for k, r in CAPPED.items():
    print(
        f"  cap {str(k or 'none'):>4}: {r['throughput']:4.0f} msg/s, in the pipeline {r['in_pipeline_ms']:5.2f} ms, "
        f"client sees {r['latency_ms']:5.2f} ms"
    )
SHARED = {
    "monolith": bench(bench_monolith, C_SEED, BENCH_MESSAGES, devices=one_shared_gpu),
    "pipeline": bench(bench_pipeline, C_SEED, BENCH_MESSAGES, devices=one_shared_gpu),
}
print(f"four agents on one shared GPU, {C_SEED} clients (bound 1/ΣD = {1000 / WORK_MS:.0f} msg/s):")
for name, r in SHARED.items():
    print(f"  {name}: {r['throughput']:4.0f} msg/s, latency {r['latency_ms']:5.2f} ms")

# %%
# The prose of this section states these; the run checks them (deterministic on the virtual clock).
_x_max = 1000 / max(BENCH_MS)
for _c in CONCURRENCY:
    assert abs(PIPE[_c]["throughput"] / MONO[_c]["throughput"] - 1) < 0.01, (_c, PIPE[_c], MONO[_c])
    assert PIPE[_c]["throughput"] <= min(_c / WORK_MS * 1000, _x_max) * 1.25, (_c, PIPE[_c])
assert PIPE[max(CONCURRENCY)]["latency_ms"] > 2.5 * WORK_MS
assert CAPPED[4]["in_pipeline_ms"] < 1.5 * WORK_MS < CAPPED[None]["in_pipeline_ms"]
assert CAPPED[4]["throughput"] > 0.8 * CAPPED[None]["throughput"]
assert all(r["throughput"] <= 1000 / WORK_MS * 1.01 for r in SHARED.values())
print("ok: the statements of this section hold for this run")

# %% [markdown] tags=["zh"]
# **准入上限。** 限制流水线里同时最多 `cap` 条消息（一个信号量，`asyncio.Semaphore`）。cap 接近阶段数（4）时，吞吐几乎
# 不变，而消息**在流水线里**的延迟回到约 ΣD：多出来的请求在门外等，而不是堵在各个队列里。客户端看到的总延迟仍是
# C / X（利特尔定律对整个系统成立）；区别在于门外的请求可以立即得到“忙”（HTTP 429 Too Many Requests，RFC 6585；或 503，
# RFC 9110）、被限流或超时放弃，而不是悄悄地在队列里变老。cap 太小（2）则浪费设备，吞吐下降。
#
# **一块 GPU 上的四个智能体。** 如果四个智能体共享一块 GPU，每条消息的总工作量 ΣD 都落在同一个设备上：无论单体还是流水
# 线，吞吐都不超过 1/ΣD（这里 250 条/秒）。拆分成智能体不会创造算力；它能带来的是隔离、独立扩缩容和容错。要更高的吞吐，
# 就要减少每条消息的 GPU 工作（批处理 batching、更小的模型）或增加设备。
#
# 在真实 GPU 上，把 `asyncio.sleep` 换成真实的推理调用，形状相同，但 D 由你测得的每个智能体的 GPU 时间决定（通常 LLM
# 报告者最大）。用 `run_async(..., virtual=False)` 在真实时钟上重跑时，每个点跑几次，报告中位数和离散度。

# %% [markdown] tags=["en"]
# **An admission cap.** Admit at most `cap` messages into the pipeline at once (a semaphore, `asyncio.Semaphore`). With
# the cap near the number of stages (4) throughput hardly changes, while a message's latency **inside the pipeline**
# drops back to about ΣD: the extra requests wait at the door instead of in every queue. The latency a client sees is
# still C / X (Little's law holds for the whole system); the difference is that a request at the door can be told
# "busy" at once (HTTP 429 Too Many Requests, RFC 6585; or 503, RFC 9110), rate-limited or dropped on a timeout,
# instead of quietly ageing in queues. A cap too small (2) leaves devices idle and throughput falls.
#
# **Four agents on one GPU.** When the four agents share one GPU, all the work of a message, ΣD, lands on the same
# device: monolith or pipeline, throughput cannot exceed 1/ΣD (250 messages/s here). Splitting into agents creates no
# compute; what it buys is isolation, independent scaling and fault containment. For more throughput, cut the GPU work
# per message (batching, a smaller model) or add devices.
#
# On a real GPU, with real inference in place of `asyncio.sleep`, the shape is the same but D is the GPU time you
# measure for each agent (usually the LLM reporter's is largest). On the real clock (`run_async(..., virtual=False)`)
# run each point several times and report the median and the spread.

# %% [markdown] tags=["zh"]
# ## 选做 S1 · 在等待图中找环：`find_cycle`
#
# 在等待图中找一个环：返回节点列表 `[v0, v1, ..., vk]`，其中每条 `vi → vi+1` 和 `vk → v0` 都是图中的边；
# 无环返回 `None`。图是 `{节点: [后继...]}`，后继可能不作为键出现。要能处理上万个节点（别用递归）。
# 注意：一个 worker 池时，任务等的是“任意一个”消费者 (OR 模型)，有环只说明可能死锁；
# 这里每个阶段一个任务，环就是死锁。
#
# **选做 S1 的约定**：`find_cycle(graph)` 返回一个环（节点列表，各不相同，从环上任一节点开始）或 `None`。可见测试与隐藏检查：空图、
# 自环（`{"a": ["a"]}` → `["a"]`）、多个连通分量、菱形（不是环）、两万个节点的无环图和两万个节点的长环。核心部分不依赖本练习。

# %% [markdown] tags=["en"]
# ## Stretch S1 · A cycle in a wait-for graph: `find_cycle`
#
# Find one cycle in a wait-for graph: return the nodes `[v0, v1, ..., vk]` where every
# `vi → vi+1` and `vk → v0` is an edge; return `None` when there is none. The graph is
# `{node: [successors...]}`; a successor need not be a key. It must handle tens of thousands
# of nodes (no recursion). Note: with a worker pool a task waits for *any one* consumer (the
# OR model), so a cycle only warns of a deadlock; here each stage is one task, and a cycle is
# a deadlock.
#
# **Stretch S1 contract**: `find_cycle(graph)` returns one cycle (a list of distinct nodes, starting at any node of
# the cycle) or `None`. The visible tests and hidden checks: an empty graph, a self-loop (`{"a": ["a"]}` → `["a"]`), several components, a
# diamond (not a cycle), an acyclic graph of 20,000 nodes and a cycle of 20,000 nodes. The core does not depend on it.


# %% tags=["solution"] grade_id="06-stretch-cycle-sol-1"
def find_cycle(graph):
    """graph 中的一个环（节点列表），无环时为 None / One cycle of `graph` as a list of nodes, or None."""
    ### BEGIN SOLUTION
    WHITE, GREY, BLACK = 0, 1, 2
    color = {}
    for root in graph:
        if color.get(root, WHITE) != WHITE:
            continue
        path, stack = [root], [iter(graph.get(root, ()))]
        color[root] = GREY
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                color[path.pop()] = BLACK
                stack.pop()
            elif color.get(nxt, WHITE) == GREY:
                return path[path.index(nxt) :]
            elif color.get(nxt, WHITE) == WHITE:
                color[nxt] = GREY
                path.append(nxt)
                stack.append(iter(graph.get(nxt, ())))
    return None
    ### END SOLUTION


# %% tags=["test"] grade_id="06-stretch-cycle-1" points=2
def _is_cycle(graph, cycle):
    return (
        isinstance(cycle, list)
        and len(cycle) >= 1
        and len(set(cycle)) == len(cycle)
        and all(cycle[(i + 1) % len(cycle)] in graph.get(v, ()) for i, v in enumerate(cycle))
    )


assert find_cycle({"a": ["b"], "b": ["c"], "c": []}) is None, "无环图应返回 None / acyclic → None"
_c = find_cycle({"a": ["b"], "b": ["c"], "c": ["a"]})
assert _is_cycle({"a": ["b"], "b": ["c"], "c": ["a"]}, _c), f"应找到 a→b→c→a / expected the cycle, got {_c}"
assert _is_cycle(DEADLOCK_GRAPH, find_cycle(DEADLOCK_GRAPH)), "死锁的等待图里应有环 / the deadlock graph has a cycle"
print("ok: cycles found")
assert find_cycle({}) is None
assert find_cycle({"a": ["a"]}) == ["a"]
_g = {"x": ["y", "z"], "y": ["z"], "z": ["w"], "p": ["q"], "q": ["r"], "r": ["p"]}
assert _is_cycle(_g, find_cycle(_g))
_dag = {i: [i + 1, i + 2] for i in range(20000)}
assert find_cycle(_dag) is None
_long = {i: [i + 1] for i in range(20000)}
_long[19999] = [0]
assert _is_cycle(_long, find_cycle(_long)) and len(find_cycle(_long)) == 20000
_diamond = {"a": ["b", "c"], "b": ["d"], "c": ["d"], "d": []}
assert find_cycle(_diamond) is None, "菱形不是环 / a diamond is not a cycle"

# %% [markdown] tags=["zh"]
# ## 选做 S2 · 检索智能体：中文 BM25
#
# 第 7 节给定的检索只数查询词出现了几个：常见词和罕见词一样重，长文档占便宜。BM25 同时考虑词的稀有程度（idf）、词频的
# 饱和和文档长度。对查询词 q，文档 d 的得分为
# `Σ_q idf(q) · f(q,d)·(k1+1) / (f(q,d) + k1·(1 − b + b·|d|/avgdl))`，
# 其中 `idf(q) = ln(1 + (N − n(q) + 0.5)/(n(q) + 0.5))`（Lucene 的形式，恒为正），`f(q,d)` 为词频，`|d|` 为文档词数，
# `avgdl` 为平均文档长度，`N` 为文档数，`n(q)` 为含 q 的文档数（Robertson & Zaragoza 2009）。
#
# **选做 S2 的约定**：`BM25(docs, k1=1.5, b=0.75)`，`docs` 是已分词的文档（词列表的列表）；`scores(query_tokens)` 按文档
# 顺序返回每个文档的得分（float 列表）。查询中重复的词按出现次数重复计分；不在任何文档中的词得 0；空查询全为 0。隐藏检查
# 在随机小语料上用默认的和其他的 `k1`、`b` 与独立实现对照，并检查另一组查询的相关文档在前 3 名。核心部分不依赖本练习。

# %% [markdown] tags=["en"]
# ## Stretch S2 · The retrieval agent: BM25 in Chinese
#
# The retriever given in section 7 only counts how many query terms occur: a common term weighs as much as a rare one,
# and long documents win. BM25 accounts for how rare a term is (idf), saturates the term count and normalises the
# document length. For query terms q the score of document d is
# `Σ_q idf(q) · f(q,d)·(k1+1) / (f(q,d) + k1·(1 − b + b·|d|/avgdl))`,
# with `idf(q) = ln(1 + (N − n(q) + 0.5)/(n(q) + 0.5))` (Lucene's form, always positive), `f(q,d)` the term count,
# `|d|` the document length in terms, `avgdl` the mean length, `N` the number of documents and `n(q)` how many contain
# q (Robertson & Zaragoza 2009).
#
# **Stretch S2 contract**: `BM25(docs, k1=1.5, b=0.75)`, where `docs` are tokenized documents (a list of term lists);
# `scores(query_tokens)` returns one float score per document, in document order. A term repeated in the query counts
# once per occurrence; a term in no document scores 0; an empty query gives all zeros. The hidden checks compare the
# default and other `k1` and `b` on a random small corpus with an independent implementation, and checks that the relevant document of
# another set of queries ranks in the top 3. The core does not depend on this exercise.


# %% tags=["solution"] grade_id="06-stretch-bm25-sol-1"
class BM25:
    """已分词文档上的 BM25 / BM25 over pre-tokenized documents."""

    def __init__(self, docs, k1=1.5, b=0.75):
        self.k1, self.b = k1, b
        ### BEGIN SOLUTION
        from collections import Counter

        self.tf = [Counter(d) for d in docs]
        self.lengths = [len(d) for d in docs]
        self.avgdl = sum(self.lengths) / len(docs) if docs else 0.0
        df = Counter(term for d in docs for term in set(d))
        n = len(docs)
        self.idf = {t: math.log(1 + (n - c + 0.5) / (c + 0.5)) for t, c in df.items()}
        ### END SOLUTION

    def scores(self, query_tokens):
        """每个文档一个得分，按文档顺序 / One score per document, in document order."""
        ### BEGIN SOLUTION
        out = []
        for tf, length in zip(self.tf, self.lengths):
            norm = self.k1 * (1 - self.b + self.b * length / self.avgdl) if self.avgdl else self.k1
            s = 0.0
            for q in query_tokens:
                f = tf.get(q, 0)
                if f:
                    s += self.idf[q] * f * (self.k1 + 1) / (f + norm)
            out.append(s)
        return out
        ### END SOLUTION


# %%
RETRIEVAL_QUERIES = json.loads((DATA / "retrieval_queries.json").read_text(encoding="utf-8"))
BM25_INDEX = BM25(KB_TOKENS)
for _name, _index in (("keyword", KB_INDEX), ("BM25", BM25_INDEX)):
    _hits = sum(q["relevant"] in retrieve(_index, q["query"], k=3) for q in RETRIEVAL_QUERIES)
    print(f"{_name:7s}: relevant document in the top 3 for {_hits}/{len(RETRIEVAL_QUERIES)} queries")
for q in RETRIEVAL_QUERIES[:3]:
    print(q["query"], "->", retrieve(BM25_INDEX, q["query"]))


# %% tags=["test"] grade_id="06-stretch-bm25-1" points=3
def _bm25_reference(docs, query, k1=1.5, b=0.75):
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


_docs = [["焊缝", "气孔", "气孔"], ["划痕", "返工"], ["气孔", "返工", "报废", "批次"]]
assert np.allclose(BM25(_docs).scores(["气孔"]), _bm25_reference(_docs, ["气孔"])), (
    f"BM25 分数不对 / wrong scores: {BM25(_docs).scores(['气孔'])}"
)
for _q in RETRIEVAL_QUERIES:
    _top = retrieve(BM25(KB_TOKENS), _q["query"], k=3)
    assert _q["relevant"] in _top, f"{_q['query']!r}: {_q['relevant']} 应在前 3 / should be in the top 3, got {_top}"
print("ok: BM25 scores and top-3 retrieval")
_rng = np.random.default_rng(1)
_vocab = [f"词{i}" for i in range(12)]
_docs = [list(_rng.choice(_vocab, size=int(_rng.integers(1, 15)))) for _ in range(9)]
for _query in (["词1"], ["词2", "词3", "词2"], ["不存在"], []):
    assert np.allclose(BM25(_docs).scores(_query), _bm25_reference(_docs, _query)), _query
assert np.allclose(
    BM25(_docs, k1=0.9, b=0.3).scores(["词4", "词5"]), _bm25_reference(_docs, ["词4", "词5"], k1=0.9, b=0.3)
)

# %% [markdown] tags=["zh"]
# ## 延伸（不评分）：独立进程 + Redis Streams
#
# 真实部署中，四个智能体是独立进程（甚至在不同机器上），通过消息代理通信。Redis Streams 的消费组
# (consumer group) 提供的正是至少一次投递：`XREADGROUP` 取到的消息在 `XACK` 之前一直处于待确认 (pending) 状态，
# 进程崩溃后可被重新认领。每个智能体先 `XADD` 到下一个流、再 `XACK`：崩溃只会造成重复，而不会丢失——
# 所以终点仍要按 id 去重。本节在本机有 `redis-server`（Debian 包 redis-server）和 Python 包 `redis` 时运行，
# 启动并停止它自己的服务器和进程；否则跳过。

# %% [markdown] tags=["en"]
# ## Going further (not graded): separate processes over Redis Streams
#
# In a real deployment the four agents are separate processes (often on separate machines)
# talking through a broker. Redis Streams consumer groups give exactly at-least-once delivery: a
# message read with `XREADGROUP` stays pending until `XACK`, and can be claimed again after a
# crash. Each agent `XADD`s to the next stream and only then `XACK`s: a crash can duplicate but
# never lose a message, so the end still de-duplicates by id. This section runs when the machine
# has `redis-server` (Debian package redis-server) and the Python package `redis`; it starts and
# stops its own server and processes, and is skipped otherwise.

# %%
# %%writefile redis_agent.py
"""One agent as its own process: read its stream in a consumer group, work, pass on, then ack."""
import argparse
import json
import time

import redis

STAGES = ["detect", "localize", "retrieve", "report"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stage", choices=STAGES, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ms", type=float, default=1.0)
    parser.add_argument("--max-s", type=float, default=60.0)
    args = parser.parse_args()
    r = redis.Redis(port=args.port, decode_responses=True)
    i = STAGES.index(args.stage)
    inbox, outbox = f"in:{args.stage}", (f"in:{STAGES[i + 1]}" if i + 1 < len(STAGES) else "out")
    try:
        r.xgroup_create(inbox, "agents", id="0", mkstream=True)
    except redis.ResponseError:
        pass  # the group exists already
    deadline = time.monotonic() + args.max_s
    while time.monotonic() < deadline:
        batch = r.xreadgroup("agents", args.stage, {inbox: ">"}, count=8, block=100)
        if not batch and r.get("stop"):
            break
        for _, entries in batch:
            for entry_id, fields in entries:
                time.sleep(args.ms / 1000)
                path = json.loads(fields["path"]) + [args.stage]
                r.xadd(outbox, {"id": fields["id"], "path": json.dumps(path)})
                r.xack(inbox, "agents", entry_id)  # after the hand-off: at-least-once


if __name__ == "__main__":
    main()

# %%
import shutil
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop_process(proc, timeout_s=5.0):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout_s)


def redis_pipeline(n, timeout_s=60.0):
    """Run n messages through four agent processes over Redis Streams; returns {id: path}."""
    import redis

    port = free_port()
    server = subprocess.Popen(
        [shutil.which("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    agents_procs = []
    try:
        r = redis.Redis(port=port, decode_responses=True)
        for _ in range(100):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        agents_procs = [
            subprocess.Popen(
                [sys.executable, "redis_agent.py", "--stage", s, "--port", str(port), "--max-s", str(timeout_s)]
            )
            for s in ("detect", "localize", "retrieve", "report")
        ]
        for i in range(n):
            r.xadd("in:detect", {"id": f"r{i:03d}", "path": "[]"})
        results, last, deadline = {}, "0", time.monotonic() + timeout_s
        while len(results) < n and time.monotonic() < deadline:
            for _, entries in r.xread({"out": last}, count=64, block=200) or []:
                for entry_id, fields in entries:
                    last = entry_id
                    results.setdefault(fields["id"], json.loads(fields["path"]))  # dedupe by id
        r.set("stop", 1)
        for proc in agents_procs:
            proc.wait(10)
        return results
    finally:
        for proc in agents_procs:
            stop_process(proc)
        stop_process(server)


try:
    import redis as _redis_py
except ImportError:
    _redis_py = None
if shutil.which("redis-server") and _redis_py is not None:
    REDIS_RESULTS = redis_pipeline(20)
    assert sorted(REDIS_RESULTS) == [f"r{i:03d}" for i in range(20)], sorted(REDIS_RESULTS)
    assert all(p == ["detect", "localize", "retrieve", "report"] for p in REDIS_RESULTS.values())
    print(f"redis streams: {len(REDIS_RESULTS)} messages through 4 agent processes; server and agents stopped")
else:
    REDIS_RESULTS = None
    print("skipped: needs redis-server (apt install redis-server) and the redis package (pip install redis)")

# %% [markdown] tags=["zh"]
# ## 总结
#
# 你搭建了一个正确的多智能体运行时：有界队列与背压、超时与带种子的指数退避重试、带原因的死信队列、幂等去重、账目平衡的
# 优雅关闭、请求-应答死锁的修复，以及带 schema 校验与模板兜底、使用实验 03 适配器的 LLM 报告者。公平的基准测试表明：
# 吞吐来自并发而不是拆分；“4 ms → 12 ms、吞吐 ×3”是越过拐点后的排队，接近阶段数的准入上限能把延迟拿回来；共享一块 GPU
# 的智能体受这块 GPU 的总工作量限制。
#
# 在更大的 GPU 上：gpu 配置用 Qwen2.5-0.5B-Instruct 并为它训练实验 03 的适配器；或者用 vLLM 起一个 OpenAI 兼容服务并设置
# `LLM_ENDPOINT`，测出每个智能体的 GPU 时间 D，再算拐点 ΣD / D_max。延伸：在 Redis 一节中途杀掉一个智能体进程，再用
# `XAUTOCLAIM` 认领它未确认的消息，验证账目依然平衡。
#
# 参考：Python `asyncio` 文档（Queue、Semaphore、wait_for）；Little, *A Proof for the Queuing Formula L = λW*,
# Operations Research 9(3), 1961；Denning & Buzen, *The Operational Analysis of Queueing Network Models*, ACM Computing
# Surveys 10(3), 1978；RFC 6585 §4（429）与 RFC 9110 §15.6.4（503）；Robertson & Zaragoza, *The Probabilistic Relevance
# Framework: BM25 and Beyond* (2009)；Redis Streams 文档（XREADGROUP、XACK、XAUTOCLAIM）。

# %% [markdown] tags=["en"]
# ## Wrap-up
#
# You built a correct multi-agent runtime: bounded queues and backpressure, timeouts and seeded exponential-backoff
# retries, a dead-letter queue with reasons, idempotent de-duplication, a graceful shutdown whose books balance, a
# request–reply deadlock fixed, and an LLM reporter with schema validation and a template fallback that uses lab 03's
# adapter. The fair benchmark showed that throughput comes from concurrency, not from splitting; that "4 ms → 12 ms,
# throughput ×3" is queueing past the knee, which an admission cap near the number of stages takes back; and that
# agents sharing one GPU are bounded by that GPU's total work.
#
# On a bigger GPU: the gpu profile uses Qwen2.5-0.5B-Instruct and trains lab 03's adapter for it; or serve a model with
# vLLM's OpenAI-compatible server and set `LLM_ENDPOINT`, measure each agent's GPU time D, and compute the knee
# ΣD / D_max. Going further: in the Redis section, kill an agent process mid-run, reclaim its unacknowledged messages
# with `XAUTOCLAIM`, and check that the books still balance.
#
# References: the Python `asyncio` docs (Queue, Semaphore, wait_for); Little, *A Proof for the Queuing Formula
# L = λW*, Operations Research 9(3), 1961; Denning & Buzen, *The Operational Analysis of Queueing Network Models*, ACM
# Computing Surveys 10(3), 1978; RFC 6585 §4 (429) and RFC 9110 §15.6.4 (503); Robertson & Zaragoza, *The
# Probabilistic Relevance Framework: BM25 and Beyond* (2009); the Redis Streams docs (XREADGROUP, XACK, XAUTOCLAIM).

# %%
# Nothing outlives the lab: no event loop, runner thread, child process or task.
_left = agents.leftovers()
assert _left == {"open_loops": 0, "runner_threads": [], "child_processes": []}, (
    f"实验结束时仍有残留 / left running at the end: {_left}"
)
print("clean: no loop, thread, process or task left")
