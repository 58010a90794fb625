"""Lab 06's kernel-side helpers: what a hidden check runs in the learner's kernel (``learner.run``).

Each public function drives the learner's coroutines and classes (``run_pipeline``,
``call_with_retries``, ``Runtime``, ``rpc_pipeline_fixed``, ``find_cycle``) on the course's
virtual clock with inputs the check chose, and returns their results and trace events as plain
data for ``checks.py`` to judge.

The scaffolding the notebook gives (``Stage``, ``toy_stage``, ``scripted``, ``RetryPolicy``,
``deliver``, ``golden_run``) is defined here again, so that it is this module's, not the
notebook's: it runs over a copy of the learner's names, and a learner who rebinds those names
(stages that never wait, a golden run that forges its trace) changes nothing a check reads.
The failure script comes from the check (``FAILURES`` of ``checks.py``), never from the notebook.

The course's clock, queue and trace (``rocmlab.lab.agents`` and ``agent_trace``) are compiled
here from the source the check sends with each request (``course``), never taken from the
package: a learner's cell may rebind ``rocmlab.lab.agents.run_async`` or ``Trace`` in
``sys.modules`` (no virtual time, no leftover task, a trace of its own). While the learner's code
runs, its ``InstrumentedQueue`` is this copy's, and the package's class registers its queues (and
those of any subclass of it) with this copy too, so the queues it makes are the ones the check
sees; their figures are read with this copy's ``stats``, never a subclass's.

After the learner's coroutine returns, the run leaves tasks of its own behind on purpose, named by
the check (``left``): the leftover list must name exactly those beside the learner's. A kernel
whose task list was made to say "nothing left" (``asyncio.all_tasks`` rebound) loses them too.

What this module cannot do: it is compiled and run in the learner's process after the notebook,
so every module, class and builtin it reaches (``asyncio``, ``threading``, ``builtins``) is what
the learner's cells left there. Its checks are answers to inputs the check draws (the names of
the tasks left, the stage times that bound the clock), which a blanket rebinding gets wrong; code
that reads this module's requests and answers them on purpose can still lie.
"""

import asyncio
import builtins
import contextlib
import dataclasses
import sys
import types

STAGES = ("detect", "localize", "retrieve", "report")


def _compiled(name, source, relative):
    """The module ``name`` made from ``source``, its relative imports served from ``relative``."""
    module = types.ModuleType(f"rocmlab_check_{name}_{id(source):x}")

    def importer(what, globals=None, locals=None, fromlist=(), level=0):
        return relative[what] if level else __import__(what, globals, locals, fromlist, level)

    module.__dict__["__builtins__"] = {**vars(builtins), "__import__": importer}
    sys.modules[module.__name__] = module  # where dataclasses look a class's module up, while it is made
    try:
        exec(compile(source, f"<the check's copy of rocmlab/lab/{name}.py>", "exec"), module.__dict__)  # noqa: S102
    finally:
        sys.modules.pop(module.__name__, None)
    return module


def _course(course):
    """The check's copy of the course's ``agents`` module (its clock, queue and ``Trace``)."""
    trace = _compiled("agent_trace", course["agent_trace"], {})
    return _compiled("agents", course["agents"], {"agent_trace": trace})


def _globals_of(owner):
    """Where a learner's function (or the methods of a learner's class) look their names up."""
    if isinstance(owner, type):
        owner = next((v for v in vars(owner).values() if isinstance(v, types.FunctionType)), None)
    return getattr(owner, "__globals__", {})


@contextlib.contextmanager
def _queues_of(agents, *functions):
    """``InstrumentedQueue`` as the learner's ``functions`` find it (their globals, and the
    package's attribute) bound to ``agents``' own while the block runs, and the package's queue
    registry (``_local``, where its class's ``__init__`` registers a queue: a learner's subclass
    of it, or a name bound to it before) made ``agents``' own; all put back after."""
    places = [(g, "InstrumentedQueue", agents.InstrumentedQueue) for g in map(_globals_of, functions)]
    places = [place for place in places if place[1] in place[0]]
    package = sys.modules.get("rocmlab.lab.agents")
    if package is not None:
        places.append((vars(package), "InstrumentedQueue", agents.InstrumentedQueue))
        if hasattr(agents, "_local"):
            places.append((vars(package), "_local", agents._local))
    saved = [(place, name, place.get(name)) for place, name, _ in places]
    try:
        for place, name, value in places:
            place[name] = value
        yield agents
    finally:
        for place, name, value in reversed(saved):
            place[name] = value


def _stats(agents, queues):
    """Each queue's figures as ``agents``' own ``InstrumentedQueue.stats`` reads them."""
    return [agents.InstrumentedQueue.stats(q) for q in queues]


def _leaving(main, left):
    """``main``, and when its coroutine has returned, a task per name of ``left`` that waits for
    ever: the run's leftovers must name them (the check knows them; the learner's code does not)."""

    async def run():
        value = await main()
        loop = asyncio.get_running_loop()
        for name in left:
            loop.create_task(_forever(loop.create_future()), name=name)
        return value

    return run


async def _forever(never):
    await never


@dataclasses.dataclass(frozen=True)
class Stage:
    name: str
    fn: object
    workers: int = 1


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    timeout_s: float = 0.010
    max_attempts: int = 3
    base_s: float = 0.002
    jitter: float = 0.5
    seed: int = 0


def _toy_stage(name, ms, workers=1):
    async def fn(payload):
        await asyncio.sleep(ms / 1000)
        return {**payload, "path": payload.get("path", []) + [name]}

    return Stage(name, fn, workers)


def _toy_stages(workers=1, ms=(1.0, 2.0, 1.0, 3.0)):
    return [_toy_stage(n, t, workers) for n, t in zip(STAGES, ms, strict=True)]


def _scripted(stage, script):
    """``stage`` whose attempt k of a message follows ``script[stage.name][msg_id][k-1]``."""
    calls, plan = {}, script.get(stage.name, {})

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


async def _deliver(runtime, schedule):
    loop = asyncio.get_running_loop()
    for t_ms, msg_id in schedule:
        wait = t_ms / 1000 - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
        await runtime.submit(msg_id, {"id": msg_id, "path": []})


def _events(trace):
    return [[e.t, e.msg_id, e.stage, e.event, e.attempt, e.info] for e in trace.events]


# ---------------------------------------------------------------- exercise 1: run_pipeline


def pipeline_run(course, n, queue_size, workers, ms, left):
    """``(results, events, queue stats, leftover tasks, elapsed virtual s)`` of ``run_pipeline``."""
    with _queues_of(_course(course), run_pipeline) as agents:
        trace = agents.Trace()
        stages = _toy_stages(workers, tuple(ms))
        items = [(f"m{i:03d}", {"id": f"m{i:03d}", "path": []}) for i in range(n)]
        main = _leaving(lambda: run_pipeline(items, stages, queue_size=queue_size, trace=trace), left)
        result = agents.run_async(main)
        stats = _stats(agents, result.queues)
        return result.value, _events(trace), stats, result.leftover_tasks, result.elapsed_s


# ---------------------------------------------------------------- exercise 2: retries


def backoff(seed, base_s, jitter, msg_id, attempt):
    """``backoff_delay`` for a policy of these values."""
    return backoff_delay(RetryPolicy(seed=seed, base_s=base_s, jitter=jitter), msg_id, attempt)


def retries(course, script, timeout_s, max_attempts, base_s, jitter, seed, left):
    """``(outcomes, events, leftover tasks)`` of ``call_with_retries`` for every message of the
    scripted stage at once: an outcome is None or ``[reason, attempts]`` of its DeadLetter."""
    with _queues_of(_course(course), call_with_retries) as agents:
        trace, outcomes = agents.Trace(), {}
        policy = RetryPolicy(timeout_s=timeout_s, max_attempts=max_attempts, base_s=base_s, jitter=jitter, seed=seed)

        async def one(stage_name, msg_id):
            stage = _scripted(_toy_stage(stage_name, 1.0), script)
            try:
                await call_with_retries(stage.fn, {"id": msg_id}, msg_id, stage_name, policy, trace)
                outcomes[msg_id] = None
            except DeadLetter as dead:
                outcomes[msg_id] = [dead.reason, dead.attempts]

        async def main():
            await asyncio.gather(*(one(s, m) for s, per in script.items() for m in per))

        result = agents.run_async(_leaving(main, left))
        return outcomes, _events(trace), result.leftover_tasks


# ---------------------------------------------------------------- exercise 3: Runtime


def golden(course, seed, workers, queue_size, schedule, failures):
    """``(events, sorted report ids, dead-letter ids)`` of the notebook's golden run, driven here:
    the learner's Runtime on the scripted toy stages, fed ``schedule``."""
    with _queues_of(_course(course), Runtime) as agents:
        stages = [_scripted(s, failures) for s in _toy_stages(workers)]
        trace = agents.Trace()

        async def main():
            runtime = Runtime(stages, queue_size=queue_size, policy=RetryPolicy(seed=seed), trace=trace)
            runtime.start()
            await _deliver(runtime, schedule)
            await runtime.shutdown()
            return runtime

        result = agents.run_async(main)
        return _events(trace), sorted(result.value.reports), [d["id"] for d in result.value.dead_letters]


def duplicate_run(course, ms, wait):
    """``(what submit said, sorted report ids, dead letters, events)``: x twice, then after
    shutdown x again and y twice."""
    with _queues_of(_course(course), Runtime) as agents:
        trace, said = agents.Trace(), []

        async def main():
            runtime = Runtime(
                _toy_stages(1, ms=(ms, ms, ms, ms)), queue_size=2, policy=RetryPolicy(timeout_s=1.0), trace=trace
            )
            runtime.start()
            said.append(await runtime.submit("x", {"id": "x", "path": []}))
            await asyncio.sleep(wait)
            said.append(await runtime.submit("x", {"id": "x", "path": []}))
            await runtime.shutdown()
            for msg_id in ("x", "y", "y"):
                said.append(await runtime.submit(msg_id, {"id": msg_id, "path": []}))
            return runtime

        result = agents.run_async(main)
        return said, sorted(result.value.reports), result.value.dead_letters, _events(trace)


# ---------------------------------------------------------------- exercise 4: the deadlock


def rpc_run(course, n, queue_size, left):
    """``(answers, queue stats, leftover tasks)`` of ``rpc_pipeline_fixed``."""
    with _queues_of(_course(course), rpc_pipeline_fixed) as agents:
        result = agents.run_async(_leaving(lambda: rpc_pipeline_fixed(n, queue_size), left), timeout_s=60.0)
        return result.value, _stats(agents, result.queues), result.leftover_tasks


# ---------------------------------------------------------------- section 5: shutdown


def shutdown_run(course, n, feeders, stop_ms, queue_size, workers, seed, failures, left):
    """``(sorted report ids, dead letters, events, leftover tasks)``: ``feeders`` tasks submit n
    ids while the runtime is shut down after ``stop_ms``."""
    with _queues_of(_course(course), Runtime) as agents:
        trace, ids = agents.Trace(), [f"m{i:03d}" for i in range(n)]

        async def main():
            stages = [_scripted(s, failures) for s in _toy_stages(workers)]
            runtime = Runtime(stages, queue_size=queue_size, policy=RetryPolicy(seed=seed), trace=trace)
            runtime.start()

            async def feeder(k):
                for msg_id in ids[k::feeders]:
                    await runtime.submit(msg_id, {"id": msg_id, "path": []})
                    await asyncio.sleep(0.0005)

            feeding = [asyncio.create_task(feeder(k), name=f"feeder-{k}") for k in range(feeders)]
            await asyncio.sleep(stop_ms / 1000)
            await runtime.shutdown()
            await asyncio.gather(*feeding)
            return runtime

        result = agents.run_async(_leaving(main, left), timeout_s=600.0)
        return sorted(result.value.reports), result.value.dead_letters, _events(trace), result.leftover_tasks


# ---------------------------------------------------------------- stretch S1: find_cycle


def ring_cycle(n):
    """``find_cycle`` of the ring 0 → 1 → … → n-1 → 0."""
    graph = {i: [i + 1] for i in range(n)}
    graph[n - 1] = [0]
    return find_cycle(graph)
