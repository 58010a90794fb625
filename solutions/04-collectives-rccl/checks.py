"""Lab 04's hidden checks, run by the trusted harness (rocmlab.harness) after the notebook.

The pure functions (init_plan, bandwidth, busbw_vs_peak, debug_env) are called on inputs drawn
from the learner's seed. The ring, guarded, fixed and desync runs are launched again by the checks,
in a fresh kernel that ran none of the learner's cells (``fresh``, rocmlab.harness.Fresh: the
learner's kernel, where a cell may have patched the launcher, subprocess or json, is shut down and
every process it left ended first), with the course's scripts read from lab.py here and the
learner's own files (ring.py, hang_tools.py, init_plan.py) or debug_env answer as the only learner
input; the notebook's runs04/ files and run records are never read. What the ranks wrote and the
launcher's exit codes are checked against references computed here.
"""

import math
import re
import weakref

import torch

from rocmlab.check_compare import is_close, learner_says
from rocmlab.harness import LearnerRaised, NoAnswer, check, mistake, own_work

# ---------------------------------------------------------------- references (instructor only)


def plan_reference(environ, gpu_count, hip_version, timeout_s=60):
    rank = int(environ.get("RANK", 0))
    world_size = int(environ.get("WORLD_SIZE", 1))
    local_rank = int(environ.get("LOCAL_RANK", 0))
    local_world = int(environ.get("LOCAL_WORLD_SIZE", world_size))
    if gpu_count > 0 and gpu_count >= local_world:
        backend, device, label = "nccl", f"cuda:{local_rank}", "rccl" if hip_version is not None else "nccl"
    else:
        backend, device, label = "gloo", "cpu", "gloo"
    return {
        "backend": backend,
        "label": label,
        "device": device,
        "rank": rank,
        "world_size": world_size,
        "local_rank": local_rank,
        "timeout_s": timeout_s,
    }


def random_environment(rng):
    """A torchrun-like environment: nodes x local ranks, one rank of it, a GPU count, a HIP version."""
    nodes, local_world = rng.randint(1, 4), rng.randint(1, 8)
    node, local_rank = rng.randrange(nodes), rng.randrange(local_world)
    environ = {
        "RANK": str(node * local_world + local_rank),
        "WORLD_SIZE": str(nodes * local_world),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(local_world),
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": str(rng.randint(20000, 40000)),
    }
    gpu_count = rng.choice([0, local_world, local_world + rng.randint(1, 4), max(0, local_world - rng.randint(1, 3))])
    hip = rng.choice([None, f"{rng.randint(6, 10)}.{rng.randint(0, 4)}.{rng.randint(0, 60000)}"])
    return environ, gpu_count, hip


def plans(learner, variant, count=12):
    """(got, expected) for random environments plus the fixed edge cases."""
    rng = variant.random
    cases = [random_environment(rng) for _ in range(count)]
    cases += [({}, 1, "7.2.0"), ({}, 0, None), ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}, 1, None)]
    out = []
    for environ, gpu_count, hip in cases:
        timeout = rng.choice([None, rng.randint(5, 600)])
        kwargs = {"gpu_count": gpu_count, "hip_version": hip}
        if timeout is not None:
            kwargs["timeout_s"] = timeout
        got = learner.call("init_plan", environ, **kwargs)
        assert type(got) is dict, f"returned {type(got).__name__}"
        out.append((got, plan_reference(environ, gpu_count, hip, 60 if timeout is None else timeout), environ))
    return out


BUS_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}


def rank_input(rank, size, seed):
    """The given dist_common.rank_input, recomputed here."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + rank * 7_919 + size)
    return torch.randn(size, generator=generator, dtype=torch.float32)


def ring_world_sizes():
    sizes = PARAMETERS["RING_WORLD_SIZES"]  # noqa: F821 (the run's, from the harness: not the kernel's)
    assert type(sizes) is list and sizes and 2 in sizes, f"RING_WORLD_SIZES {sizes}"
    assert all(type(n) is int and 2 <= n <= 16 for n in sizes), f"RING_WORLD_SIZES {sizes}"
    assert len(sizes) <= LAUNCHES - 3, f"RING_WORLD_SIZES {sizes}: more ring runs than LAUNCHES allows"
    return sizes


# The ring runs, launched again in the fresh kernel with the course's run_ring.py and dist_common.py
# and the learner's ring.py and init_plan.py: one launch per world size and learner, shared by the rules.
# Each launch is a ``fresh.launch``, with its own allowance outside a request's 60 s and the answer
# budget (``harness.launch_allowance``): one ring run per RING_WORLD_SIZES entry (at most 3), the
# guarded, fixed and desync runs. A ring run took 8-10 s on 2 busy cores
# (benchmarks/lab04_ring_launches.py); torchrun stops the ranks at LAUNCH_TIMEOUT_S, inside the allowance.
LAUNCHES = 6
LAUNCH_LIMIT_S = 90
LAUNCH_TIMEOUT_S = LAUNCH_LIMIT_S - 30
RING_SCRIPTS = ("run_ring.py", "dist_common.py")
RING_TIMEOUT_S = LAUNCH_TIMEOUT_S
_RING_RUNS = weakref.WeakKeyDictionary()


def ring_run(fresh, n):
    """The ring run on ``n`` ranks (launched once per learner; ``recall``ed by the later rules)."""
    runs = _RING_RUNS.setdefault(fresh, {})
    if n not in runs:
        with own_work("the course's ring scripts"):
            scripts = {name: course_script(name) for name in RING_SCRIPTS}
        seed, sizes = ring_parameters()
        return launched_once(runs, n, lambda: fresh.launch("ring_run", scripts, n, seed, sizes, RING_TIMEOUT_S))
    return recalled(fresh, runs[n])


def launched_once(runs, key, launch):
    """``launch()``'s answer, kept in ``runs[key]`` for the later rules; what it raised too (a launch
    that raised or hung is not launched again: one answer per learner, whatever it was)."""
    try:
        runs[key] = launch()
    except (LearnerRaised, NoAnswer) as exc:
        runs[key] = exc
        raise
    return runs[key]


def recalled(asked, kept):
    """An answer of ``launched_once`` used again by a later rule of the kernel ``asked`` (the
    learner's, the fresh one): the learner's answer to that rule too."""
    if isinstance(kept, Exception):
        raise kept
    return asked.recall(kept)


def ring_parameters():
    seed, sizes = PARAMETERS["SEED"], PARAMETERS["RING_SIZES"]  # noqa: F821 (the run's, from the harness)
    assert type(seed) is int, f"SEED {seed!r}"
    assert type(sizes) is list and len(sizes) >= 3 and any(s % 2 for s in sizes), f"RING_SIZES {sizes}"
    return seed, sizes


def rank_files(fresh, world_size):
    """The JSON each rank of the ring run on ``world_size`` ranks wrote (None where it wrote none)."""
    run = ring_run(fresh, world_size)
    assert not run.get("missing"), f"no {run.get('missing')} in the work folder: nothing to launch"
    records = run["records"]
    assert type(records) is list and len(records) == world_size, f"{world_size} ranks: {len(records)} records"
    return records


def ring_records(fresh):
    """{n: [rank JSON...]} for every ring run, after checking every rank wrote a complete record."""
    seed, sizes = ring_parameters()
    records = {}
    for n in ring_world_sizes():
        ranks = rank_files(fresh, n)
        for rank, data in enumerate(ranks):
            assert data is not None, f"{n} ranks: rank {rank} wrote no JSON"
            assert sorted(r["size"] for r in data["results"]) == sorted(sizes), f"{n} ranks, rank {rank}: sizes"
        records[n] = ranks
    return seed, sizes, records


def machine_gpus():
    """The GPUs the ranks of a learner's run see, counted here: the grader's torch on the same
    machine, whose GPU devices and ``*_VISIBLE_DEVICES`` the sandbox hands every kernel as they
    are (``sandbox.paths.GPU_DEVICES``, ``sandbox.runs.SYSTEM_VARIABLES``). Never the learner's
    kernel, whose torch a cell may patch."""
    return torch.cuda.device_count()


def expected_missing(n_ranks, items=7):
    return {r for r in range(n_ranks) if len(range(r, items, n_ranks)) < len(range(0, items, n_ranks))}


# ---------------------------------------------------------------- 04-init-1: init_plan


@check(
    "04-init-1",
    points=1,
    en="init_plan: rank, world_size, local_rank are the int values of RANK, WORLD_SIZE, LOCAL_RANK (0, 1, 0 when missing)",
    zh="init_plan：rank、world_size、local_rank 为 RANK、WORLD_SIZE、LOCAL_RANK 的 int 值（缺少时为 0、1、0）",
)
def init_plan_ranks(learner, variant):
    for got, want, environ in plans(learner, variant):
        for key in ("rank", "world_size", "local_rank"):
            assert type(got.get(key)) is int and got[key] == want[key], f"{environ}: {key} {got.get(key)!r}"


@check(
    "04-init-1",
    points=1,
    en="init_plan: nccl on cuda:{local_rank} only when every local rank has its own GPU, else gloo on cpu",
    zh="init_plan：每个本地 rank 都有自己的 GPU 时才用 nccl 与 cuda:{local_rank}，否则 gloo 与 cpu",
)
def init_plan_backend(learner, variant):
    for got, want, environ in plans(learner, variant):
        assert (got.get("backend"), got.get("device")) == (want["backend"], want["device"]), f"{environ}: {got}"


@check(
    "04-init-1",
    points=0.5,
    en='init_plan: label is "rccl" for nccl on a HIP build, "nccl" for nccl otherwise, "gloo" for gloo',
    zh='init_plan：label 在 HIP 版上用 nccl 时为 "rccl"，否则 nccl 时为 "nccl"，gloo 时为 "gloo"',
)
def init_plan_label(learner, variant):
    for got, want, environ in plans(learner, variant):
        assert got.get("label") == want["label"], f"{environ}: {got}"


@check(
    "04-init-1",
    points=0.5,
    en="init_plan: timeout_s comes back unchanged (60 by default)",
    zh="init_plan：timeout_s 原样返回（默认 60）",
)
def init_plan_timeout(learner, variant):
    for got, want, environ in plans(learner, variant):
        assert got.get("timeout_s") == want["timeout_s"], f"{environ}: {got}"


# ---------------------------------------------------------------- 04-init-2: the ring runs joined as planned


@check(
    "04-init-2",
    points=0.5,
    en="every rank of every ring run exits 0 and writes its JSON",
    zh="每次 ring 运行的每个 rank 都以 0 退出并写出 JSON",
)
def ring_runs_complete(learner, variant, fresh):
    for n in ring_world_sizes():
        run = ring_run(fresh, n)
        assert not run.get("missing"), f"no {run.get('missing')} in the work folder: nothing to launch"
        assert run["timed_out"] is False, f"{n} ranks: timed out"
        assert run["returncodes"] == [0] * n, f"{n} ranks: exit codes {run['returncodes']}"
        assert all(data is not None for data in rank_files(fresh, n)), f"{n} ranks: a JSON is missing"


@check(
    "04-init-2",
    points=0.5,
    en="every rank joined as init_plan says (rank, world size, backend) and the hello all-reduce gives n(n+1)/2",
    zh="每个 rank 按 init_plan 加入进程组（rank、world size、backend），打招呼的 all-reduce 得到 n(n+1)/2",
)
def ring_runs_joined_as_planned(learner, variant, fresh):
    gpus = machine_gpus()
    for n in ring_world_sizes():
        for rank, data in enumerate(rank_files(fresh, n)):
            assert data is not None, f"{n} ranks: rank {rank} wrote no JSON"
            environ = {"RANK": str(rank), "WORLD_SIZE": str(n), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(n)}
            want = plan_reference(environ, gpus, None, 60)  # the backend does not depend on the HIP version
            plan = data["plan"]
            assert (plan["rank"], plan["world_size"], plan["backend"]) == (rank, n, want["backend"]), f"{n}: {plan}"
            assert data["hello_sum"] == n * (n + 1) / 2, f"{n} ranks, rank {rank}: hello {data['hello_sum']}"


# ---------------------------------------------------------------- 04-ring-1: the recorded ring all-reduce


@check(
    "04-ring-1",
    points=1.5,
    en="ring_all_reduce leaves every rank with the sum over all ranks (float32, within 1e-5), for every size",
    zh="ring_all_reduce 之后每个 rank 都得到所有 rank 之和（float32，误差 1e-5 以内），每个长度都如此",
)
def ring_sums(learner, variant, fresh):
    seed, sizes, records = ring_records(fresh)
    for n, ranks in records.items():
        for size in sizes:
            expected = sum(rank_input(r, size, seed) for r in range(n))
            for rank, data in enumerate(ranks):
                case = next(c for c in data["results"] if c["size"] == size)
                got = torch.tensor(case["ring"], dtype=torch.float32).reshape(-1)
                assert got.shape == expected.shape, f"{n} ranks, N={size}, rank {rank}: shape"
                assert torch.allclose(got, expected, rtol=1e-5, atol=1e-5), f"{n} ranks, N={size}, rank {rank}"


@check(
    "04-ring-1",
    points=0.5,
    en="ring_all_reduce reports 2(n-1) exchange steps, steps with an empty chunk included",
    zh="ring_all_reduce 报告 2(n-1) 个交换步，包括空块的那一步",
)
def ring_steps(learner, variant, fresh):
    _, sizes, records = ring_records(fresh)
    for n, ranks in records.items():
        for rank, data in enumerate(ranks):
            for case in data["results"]:
                assert case["steps"] == 2 * (n - 1), f"{n} ranks, N={case['size']}, rank {rank}: {case['steps']}"


@check(
    "04-ring-1",
    points=1,
    en="each rank sends about 2(n-1)/n x N elements, and all ranks together exactly 2(n-1) x N",
    zh="每个 rank 发送约 2(n-1)/n × N 个元素，所有 rank 合计恰好 2(n-1) × N 个",
)
def ring_traffic(learner, variant, fresh):
    _, sizes, records = ring_records(fresh)
    for n, ranks in records.items():
        for size in sizes:
            total = 0
            for rank, data in enumerate(ranks):
                sent = next(c for c in data["results"] if c["size"] == size)["sent_elements"]
                assert type(sent) is int, f"sent_elements {sent!r}"
                assert abs(sent - 2 * (n - 1) / n * size) <= 2 * (n - 1), f"{n} ranks, N={size}, rank {rank}: {sent}"
                total += sent
            assert total == 2 * (n - 1) * size, f"{n} ranks, N={size}: all ranks sent {total}"


# ---------------------------------------------------------------- 04-busbw-1: bandwidth


def bandwidth_cases(rng):
    cases = []
    for op in BUS_FACTORS:
        for _ in range(3):
            size = float(rng.choice([rng.randint(8, 4096), rng.randint(1, 64) * 2**20, rng.randint(1, 16) * 2**30]))
            seconds = rng.uniform(1e-6, 2.0)
            cases.append((op, size, seconds, rng.randint(2, 64)))
    cases += [("all_reduce", 1e9, 1.0, 1), ("broadcast", 4096.0, 1e-5, 1)]
    return cases


@check(
    "04-busbw-1",
    points=0.5,
    en="bandwidth returns a tuple of two floats with algbw = size_bytes / seconds / 1e9 (GB/s)",
    zh="bandwidth 返回两个 float 组成的元组，algbw = size_bytes / seconds / 1e9（GB/s）",
)
def bandwidth_algbw(learner, variant):
    for op, size, seconds, n in bandwidth_cases(variant.random):
        got = learner.call("bandwidth", op, size, seconds, n)
        assert type(got) is tuple and len(got) == 2, f"returned {type(got).__name__}"
        assert type(got[0]) is float and type(got[1]) is float, f"{op}: {[type(x).__name__ for x in got]}"
        assert math.isclose(got[0], size / seconds / 1e9, rel_tol=1e-9), f"{op}, S={size}, t={seconds}: {got[0]}"


@mistake(
    en="busbw reported as algbw: the bus factor of the collective left out",
    zh="把 algbw 当作 busbw 报告：漏掉了集合通信的总线因子",
    code="""
def bandwidth(op, size_bytes, seconds, world_size):
    if op not in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce"):
        raise ValueError(f"unknown collective {op!r}")
    if seconds <= 0:
        raise ValueError(f"time must be positive, got {seconds}")
    algbw = size_bytes / seconds / 1e9
    return algbw, algbw
""",
)
@mistake(
    en="all_reduce's factor 2(n-1)/n used for all_gather, reduce_scatter and all_to_all, whose factor is (n-1)/n",
    zh="把 all_reduce 的因子 2(n-1)/n 用在 all_gather、reduce_scatter 和 all_to_all 上，它们的因子是 (n-1)/n",
    code="""
def bandwidth(op, size_bytes, seconds, world_size):
    ring = 2 * (world_size - 1) / world_size
    factors = {"all_reduce": ring, "reduce_scatter": ring, "all_gather": ring, "all_to_all": ring,
               "broadcast": 1.0, "reduce": 1.0}
    if op not in factors:
        raise ValueError(f"unknown collective {op!r}")
    if seconds <= 0:
        raise ValueError(f"time must be positive, got {seconds}")
    algbw = size_bytes / seconds / 1e9
    return algbw, algbw * factors[op]
""",
)
@check(
    "04-busbw-1",
    points=1,
    en="busbw = algbw x the op's factor: 2(n-1)/n all_reduce; (n-1)/n reduce_scatter, all_gather, all_to_all; 1 broadcast, reduce",
    zh="busbw = algbw × 该操作的因子：all_reduce 为 2(n-1)/n；reduce_scatter、all_gather、all_to_all 为 (n-1)/n；broadcast、reduce 为 1",
)
def bandwidth_busbw(learner, variant):
    for op, size, seconds, n in bandwidth_cases(variant.random):
        got = learner.call("bandwidth", op, size, seconds, n)
        want = size / seconds / 1e9 * BUS_FACTORS[op](n)
        assert math.isclose(float(got[1]), want, rel_tol=1e-9, abs_tol=1e-12), f"{op}, n={n}: {got[1]} vs {want}"


@check(
    "04-busbw-1",
    points=0.5,
    en="bandwidth raises ValueError for an unknown op or seconds <= 0",
    zh="op 未知或 seconds <= 0 时 bandwidth 抛出 ValueError",
)
def bandwidth_errors(learner, variant):
    rng = variant.random
    bad_op = rng.choice(["allreduce", "all-reduce", "AllReduce", "gather", "scatter", "send"])
    bad_time = rng.choice([0, 0.0, -rng.uniform(1e-6, 5.0)])
    for args in [(bad_op, 1e6, 0.1, 4), ("all_reduce", 1e6, bad_time, 4), ("broadcast", 8.0, 0.0, 2)]:
        raised = learner.raised("bandwidth(*a)", a=args)
        assert raised is not None and raised.is_a("ValueError"), f"bandwidth{args}: {raised}"


# ---------------------------------------------------------------- 04-peak-1: busbw_vs_peak


def link_fields(topology, gpus, link_gbs, usable):
    return [f"test {topology}", "MI300X", "test fabric", topology, gpus, link_gbs, usable, ()]


def peak_reference(busbw, topology, link_gbs, usable, n):
    links = n - 1 if topology == "mesh" else 1
    theoretical = links * link_gbs
    achievable = None if usable is None else links * usable
    return {
        "theoretical_gbs": theoretical,
        "achievable_gbs": achievable,
        "pct_of_theoretical": 100 * busbw / theoretical,
        "pct_of_achievable": None if achievable is None else 100 * busbw / achievable,
    }


def peak_cases(learner, variant):
    """(got, expected, case) for the real MI300X / H100 rows and random fabrics of both topologies."""
    from rocmlab.lab import datasheets

    rng, out = variant.random, []
    for key in ("MI300X", "H100 SXM"):
        row = datasheets.interconnect(key)
        for n in sorted({2, row.gpus, rng.randint(2, row.gpus)}):
            busbw = round(rng.uniform(0, 1.3 * row.link_gbs * (n - 1 if row.topology == "mesh" else 1)), 2)
            got = learner.run("peak_of_row", busbw, key, n)
            out.append((got, peak_reference(busbw, row.topology, row.link_gbs, row.usable_link_gbs, n), (key, n)))
    for topology in ("mesh", "switch", "mesh", "switch"):
        gpus = rng.randint(2, 16)
        link = float(rng.randint(10, 500))
        usable = rng.choice([None, round(link * rng.uniform(0.5, 0.95), 1)])
        n = rng.randint(2, gpus)
        busbw = round(rng.uniform(0, 1.5 * link * (n - 1 if topology == "mesh" else 1)), 2)
        fields = link_fields(topology, gpus, link, usable)
        got = learner.run("peak_of_fabric", busbw, fields, n)
        out.append((got, peak_reference(busbw, topology, link, usable, n), (topology, gpus, link, usable, n)))
    return out


@check(
    "04-peak-1",
    points=0.5,
    en="busbw_vs_peak: theoretical_gbs is (n_gpus - 1) x link_gbs on a mesh, link_gbs on a switch",
    zh="busbw_vs_peak：theoretical_gbs 在 mesh 上为 (n_gpus - 1) × link_gbs，在 switch 上为 link_gbs",
)
def peak_theoretical(learner, variant):
    for got, want, case in peak_cases(learner, variant):
        assert type(got) is dict and is_close(got.get("theoretical_gbs"), want["theoretical_gbs"], rtol=1e-9), (
            f"{case}: {got}"
        )


@check(
    "04-peak-1",
    points=0.5,
    en="busbw_vs_peak: achievable_gbs uses usable_link_gbs the same way, None when that is None",
    zh="busbw_vs_peak：achievable_gbs 用 usable_link_gbs 按同样的公式计算，它为 None 时结果为 None",
)
def peak_achievable(learner, variant):
    for got, want, case in peak_cases(learner, variant):
        assert type(got) is dict and is_close(got.get("achievable_gbs"), want["achievable_gbs"], rtol=1e-9), (
            f"{case}: {got}"
        )


@check(
    "04-peak-1",
    points=0.5,
    en="busbw_vs_peak: each percentage is 100 x busbw / that peak (may exceed 100), None when the peak is None",
    zh="busbw_vs_peak：百分数为 100 × busbw / 对应峰值（可以超过 100），峰值为 None 时为 None",
)
def peak_percentages(learner, variant):
    for got, want, case in peak_cases(learner, variant):
        assert type(got) is dict, f"{case}: {got}"
        for key in ("pct_of_theoretical", "pct_of_achievable"):
            assert is_close(got.get(key), want[key], rtol=1e-9), f"{case}: {key} {got.get(key)} vs {want[key]}"


@check(
    "04-peak-1",
    points=0.5,
    en="busbw_vs_peak raises ValueError for n_gpus outside 2..link.gpus, a negative busbw or an unknown topology",
    zh="n_gpus 不在 2…link.gpus 之间、busbw 为负或 topology 未知时 busbw_vs_peak 抛出 ValueError",
)
def peak_errors(learner, variant):
    rng = variant.random
    gpus = rng.randint(2, 16)
    mesh = link_fields("mesh", gpus, 64.0, 48.0)
    cases = [
        (100.0, mesh, rng.choice([0, 1])),
        (100.0, mesh, gpus + rng.randint(1, 8)),
        (-rng.uniform(0.1, 100.0), mesh, rng.randint(2, gpus)),
        (1.0, link_fields(rng.choice(["torus", "ring", "Mesh"]), gpus, 64.0, None), rng.randint(2, gpus)),
    ]
    for busbw, fields, n in cases:
        try:
            learner.run("peak_of_fabric", busbw, fields, n)
            raised = None
        except LearnerRaised as exc:
            raised = exc.raised
        assert raised is not None and raised.is_a("ValueError"), f"{busbw}, {fields[3]}, gpus {gpus}, n={n}: {raised}"


# ---------------------------------------------------------------- 04-hang-1: fail fast, name the missing ranks


# The notebook's N_RANKS is WORLD_SIZE, or, on a profile that leaves it 0, the grading machine's
# ``max(2, torch.cuda.device_count())``: the reference kernel's N_RANKS then (the solution, on the
# same machine in the same sandbox), never the learner's kernel, whose torch a cell may patch.
SIZED_BY_DEVICES = not PARAMETERS.get("WORLD_SIZE")  # noqa: F821 (the run's; none given: ask the reference)


# asked once per reference: ``rocmlab run``'s reference is its own kernel, shut down for the fresh one
_N_RANKS = weakref.WeakKeyDictionary()


def n_ranks(reference):
    if SIZED_BY_DEVICES and reference not in _N_RANKS:
        _N_RANKS[reference] = reference.get("N_RANKS")
    n = _N_RANKS[reference] if SIZED_BY_DEVICES else PARAMETERS["WORLD_SIZE"]  # noqa: F821
    assert type(n) is int and n >= 2, f"N_RANKS {n!r}"
    return n


def ranks_check(grade_id, **rule):
    """``@check`` for a rule about the hang runs' ``n`` ranks, launched in the fresh kernel (the
    rule's function takes it and ``n``). Only where the machine sizes the runs does the check take
    the reference kernel: elsewhere the lab starts none."""

    def mark(function):
        if SIZED_BY_DEVICES:

            def ranks_rule(learner, variant, reference, fresh):
                return function(fresh, n_ranks(reference))
        else:

            def ranks_rule(learner, variant, fresh):
                return function(fresh, n_ranks(None))

        ranks_rule.__name__ = ranks_rule.__qualname__ = function.__name__
        return check(grade_id, **rule)(ranks_rule)

    return mark


# The guarded and fixed runs are launched again by the check, with the course's own scripts (read
# from lab.py here) and the learner's hang_tools.py and init_plan.py as the only learner input: the
# notebook's ``guarded`` and ``fixed`` records and its runs04/ files are things any later cell may
# rebind or write. One launch of each per learner, shared by the rules that read it.
GUARDED_RUN = ("guarded", ("--guard",))
FIXED_RUN = ("fixed", ("--guard", "--fix"))
HANG_TIMEOUT_S = LAUNCH_TIMEOUT_S  # the guard (5 s barrier, 20 s group timeout) ends a run sooner
_HANG_RUNS = weakref.WeakKeyDictionary()


def hang_run(fresh, n, run):
    """The course's uneven script on ``n`` ranks with the learner's hang_tools.py, tagged and
    flagged as ``run`` (``GUARDED_RUN`` or ``FIXED_RUN``), in the fresh kernel; launched once per learner."""
    tag, flags = run
    runs = _HANG_RUNS.setdefault(fresh, {})
    if (tag, n) in runs:
        got = recalled(fresh, runs[tag, n])
    else:
        with own_work("the course's uneven scripts"):
            scripts = {name: course_script(name) for name in UNEVEN_SCRIPTS}
        got = launched_once(
            runs, (tag, n), lambda: fresh.launch("uneven_run", scripts, {}, n, HANG_TIMEOUT_S, tag, flags)
        )
    assert not got.get("missing"), f"no {got['missing']} in the work folder: nothing to launch"
    return got


def monitored_barrier_line(run):
    """Rank 0's "failed to pass monitoredBarrier" line: the guard, not something else, ended the run."""
    output = run["outputs"][0] if run["outputs"] else None
    assert type(output) is str, "no output from rank 0"
    line = next((x for x in output.splitlines() if "monitoredBarrier" in x and "failed to pass" in x), None)
    assert line is not None, "no 'failed to pass monitoredBarrier' line from rank 0"
    return line


@ranks_check(
    "04-hang-1",
    points=1,
    en="the guarded run fails by itself at the monitored barrier, before the launcher's timeout",
    zh="加了保护的运行在 monitored barrier 处自行失败，早于启动器的超时",
)
def guarded_fails_fast(fresh, n):
    run = hang_run(fresh, n, GUARDED_RUN)
    assert len(run["returncodes"]) == n, f"{len(run['returncodes'])} ranks ran, expected {n}"
    assert run["timed_out"] is False, "timed out"
    code = run["returncode"]
    assert type(code) is int and code != 0, f"exit status {code!r}"
    monitored_barrier_line(run)


@ranks_check(
    "04-hang-1",
    points=1,
    en="rank 0's monitoredBarrier line names exactly the ranks with fewer items (wait_all_ranks=True)",
    zh="rank 0 的 monitoredBarrier 那一行恰好列出数据较少的那些 rank（wait_all_ranks=True）",
)
def guarded_names_missing(fresh, n):
    line = monitored_barrier_line(hang_run(fresh, n, GUARDED_RUN))
    missing = {int(x) for x in re.findall(r"\d+", line.split("failed to pass")[0].split("]:")[-1])}
    assert missing == expected_missing(n), f"reported {missing}, expected {expected_missing(n)}: {line}"


@ranks_check(
    "04-hang-1",
    points=1,
    en="after the monitored barrier fails, every rank of the guarded run ends with a non-zero exit status",
    zh="monitored barrier 失败后，加了保护的运行中每个 rank 都以非零退出码结束",
)
def guarded_every_rank_fails(fresh, n):
    run = hang_run(fresh, n, GUARDED_RUN)
    monitored_barrier_line(run)
    codes = run["returncodes"]
    assert run["timed_out"] is False, "timed out"
    assert len(codes) == n and all(type(c) is int and c != 0 for c in codes), f"exit codes {codes}"


# ---------------------------------------------------------------- 04-hang-2: the fix


@ranks_check(
    "04-hang-2",
    points=1,
    en="after the fix every rank exits 0 and all ranks take the same number of steps",
    zh="修好后每个 rank 以 0 退出，所有 rank 的步数相同",
)
def fixed_runs(fresh, n):
    run = hang_run(fresh, n, FIXED_RUN)
    assert run["timed_out"] is False, "timed out"
    assert run["returncodes"] == [0] * n, f"exit codes {run['returncodes']}"
    out = run["records"]
    assert len(out) == n and all(type(o) is dict for o in out), "a rank wrote no JSON"
    assert len({o.get("steps") for o in out}) == 1, f"steps {[o.get('steps') for o in out]}"


@ranks_check(
    "04-hang-2",
    points=1,
    en="agree_on_steps gives the minimum step count, and the summed gradients match a step-by-step sum",
    zh="agree_on_steps 得到最小的步数，累加的梯度与逐步相加的结果一致",
)
def fixed_minimum(fresh, n):
    run = hang_run(fresh, n, FIXED_RUN)
    steps = min(len(range(r, 7, n)) for r in range(n))
    total = float(sum(r + s * n for s in range(steps) for r in range(n)))
    assert len(run["records"]) == n, f"{len(run['records'])} rank records, expected {n}"
    for rank, o in enumerate(run["records"]):
        assert type(o) is dict, f"rank {rank} wrote no JSON"
        assert (o.get("rank"), o.get("steps"), o.get("total")) == (rank, steps, total), f"rank {rank}: {o}"


# ---------------------------------------------------------------- 04-stretch-debug-1: debug_env


def env_of(learner, symptom, **kwargs):
    got = learner.call("debug_env", symptom, **kwargs)
    return env_checked(symptom, got)


def env_checked(symptom, got):
    assert type(got) is dict, f"{symptom}: returned {type(got).__name__}"
    assert all(type(k) is str and type(v) is str for k, v in got.items()), f"{symptom}: keys and values must be str"
    return got


def subsystems(env):
    return set(env.get("NCCL_DEBUG_SUBSYS", "").split(","))


@check(
    "04-stretch-debug-1",
    points=0.25,
    en="debug_env need_logs: NCCL_DEBUG INFO or TRACE, NCCL_DEBUG_SUBSYS with INIT (str to str)",
    zh="debug_env need_logs 行：NCCL_DEBUG 为 INFO 或 TRACE，NCCL_DEBUG_SUBSYS 含 INIT（键值都是 str）",
)
def debug_need_logs(learner, variant):
    env = env_of(learner, "need_logs")
    assert env.get("NCCL_DEBUG") in ("INFO", "TRACE") and "INIT" in subsystems(env), env


@check(
    "04-stretch-debug-1",
    points=0.75,
    en="debug_env wrong_interface: NCCL_DEBUG, INIT and NET; =iface and GLOO_SOCKET_IFNAME with iface, ^...docker without",
    zh="debug_env wrong_interface 行：NCCL_DEBUG、INIT 与 NET；给了 iface 时为 =iface 与 GLOO_SOCKET_IFNAME，没给时以 ^ 开头并排除 docker",
)
def debug_wrong_interface(learner, variant):
    rng = variant.random
    iface = rng.choice(["ens", "eth", "enp", "ib", "bond"]) + str(rng.randint(0, 9)) + rng.choice(["", "f0", "s1"])
    env = env_of(learner, "wrong_interface", iface=iface)
    assert env.get("NCCL_SOCKET_IFNAME") in (iface, f"={iface}") and env.get("GLOO_SOCKET_IFNAME") == iface, env
    assert env.get("NCCL_DEBUG") in ("INFO", "TRACE") and {"INIT", "NET"} <= subsystems(env), env
    env = env_of(learner, "wrong_interface")
    assert env.get("NCCL_SOCKET_IFNAME", "").startswith("^") and "docker" in env["NCCL_SOCKET_IFNAME"], env
    assert env.get("NCCL_DEBUG") in ("INFO", "TRACE") and {"INIT", "NET"} <= subsystems(env), env


@check(
    "04-stretch-debug-1",
    points=0.25,
    en="debug_env p2p_failure: NCCL_P2P_DISABLE=1, NCCL_DEBUG INFO or TRACE, NCCL_DEBUG_SUBSYS with INIT and P2P",
    zh="debug_env p2p_failure 行：NCCL_P2P_DISABLE=1，NCCL_DEBUG 为 INFO 或 TRACE，NCCL_DEBUG_SUBSYS 含 INIT 与 P2P",
)
def debug_p2p(learner, variant):
    env = env_of(learner, "p2p_failure")
    assert env.get("NCCL_P2P_DISABLE") == "1", env
    assert env.get("NCCL_DEBUG") in ("INFO", "TRACE") and {"INIT", "P2P"} <= subsystems(env), env


@check(
    "04-stretch-debug-1",
    points=0.75,
    en="debug_env hang: both buffer names the same positive integer, DUMP_ON_TIMEOUT=1, both dump prefixes the same, starting with dump_dir",
    zh="debug_env hang 行：新旧两个缓冲区变量为同一个正整数，DUMP_ON_TIMEOUT=1，两个转储前缀相同且以 dump_dir 开头",
)
def debug_hang(learner, variant):
    rng = variant.random
    dump_dir = rng.choice(["/tmp", "/scratch", "/var/tmp", "."]) + f"/fr{rng.randint(0, 999)}"
    env = env_of(learner, "hang", dump_dir=dump_dir)
    size = env.get("TORCH_FR_BUFFER_SIZE", "")
    assert size.isdigit() and int(size) > 0 and env.get("TORCH_NCCL_TRACE_BUFFER_SIZE") == size, env
    assert env.get("TORCH_NCCL_DUMP_ON_TIMEOUT") == "1", env
    prefix = env.get("TORCH_FR_DUMP_TEMP_FILE", "")
    assert prefix.startswith(dump_dir) and env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") == prefix, env


@check(
    "04-stretch-debug-1",
    points=0.25,
    en="debug_env desync: TORCH_NCCL_DESYNC_DEBUG=1 and TORCH_DISTRIBUTED_DEBUG=DETAIL",
    zh="debug_env desync 行：TORCH_NCCL_DESYNC_DEBUG=1 且 TORCH_DISTRIBUTED_DEBUG=DETAIL",
)
def debug_desync(learner, variant):
    env = env_of(learner, "desync")
    assert env.get("TORCH_NCCL_DESYNC_DEBUG") == "1" and env.get("TORCH_DISTRIBUTED_DEBUG") == "DETAIL", env


@check(
    "04-stretch-debug-1",
    points=0.25,
    en="debug_env no_exit_after_error: TORCH_NCCL_ASYNC_ERROR_HANDLING 1 or 3",
    zh="debug_env no_exit_after_error 行：TORCH_NCCL_ASYNC_ERROR_HANDLING 为 1 或 3",
)
def debug_no_exit(learner, variant):
    assert env_of(learner, "no_exit_after_error").get("TORCH_NCCL_ASYNC_ERROR_HANDLING") in ("1", "3")


@check(
    "04-stretch-debug-1",
    points=0.25,
    en="debug_env slow_collectives: NCCL_DEBUG INFO or TRACE, NCCL_DEBUG_SUBSYS with GRAPH and TUNING",
    zh="debug_env slow_collectives 行：NCCL_DEBUG 为 INFO 或 TRACE，NCCL_DEBUG_SUBSYS 含 GRAPH 与 TUNING",
)
def debug_slow(learner, variant):
    env = env_of(learner, "slow_collectives")
    assert env.get("NCCL_DEBUG") in ("INFO", "TRACE") and {"GRAPH", "TUNING"} <= subsystems(env), env


@check(
    "04-stretch-debug-1",
    points=0.25,
    en="debug_env raises ValueError for an unknown symptom",
    zh="症状未知时 debug_env 抛出 ValueError",
)
def debug_unknown(learner, variant):
    symptom = variant.random.choice(["it is slow", "timeout", "Hang", "oom", "need logs", ""])
    raised = learner.raised("debug_env(s)", s=symptom)
    assert raised is not None and raised.is_a("ValueError"), f"{symptom!r}: {raised}"


# ---------------------------------------------------------------- 04-stretch-debug-2: the desync run


# The desync run is launched again by the check, with the course's own scripts and the variables
# the learner's debug_env("desync") answers: the notebook's ``desync`` record and ``desync_env`` are
# names any later cell may rebind. Without DETAIL the uneven run hangs (no mismatch check before
# the collectives, torch.distributed's TORCH_DISTRIBUTED_DEBUG), so it is not launched to wait out
# its timeout. One launch per learner, for both rules.
DESYNC_NAME = re.compile(r"(TORCH|NCCL|GLOO)_[A-Z0-9_]+")  # the run is given only these
UNEVEN_SCRIPTS = ("train_uneven.py", "dist_common.py")
UNEVEN_TIMEOUT_S = LAUNCH_TIMEOUT_S  # DETAIL fails the run at the first mismatched step
_UNEVEN_RUNS = weakref.WeakKeyDictionary()


def course_script(name):
    """The text of lab.py's given ``%%writefile <name>`` cell (the harness's ``LAB_SOURCE``)."""
    marker = f"# %%writefile {name}\n"
    source = LAB_SOURCE  # noqa: F821 (given by the harness)
    (cell,) = [c for c in re.split(r"^(?=# %%)", source, flags=re.M) if c.startswith(marker)]
    return cell[len(marker) :]


_DESYNC_ENV = weakref.WeakKeyDictionary()


def desync_variables(learner):
    """The learner's ``debug_env("desync")``, the two variables of the kit's row checked. Asked once
    (``desync_used_the_kit`` runs before the fresh kernel's checks) and recalled by ``uneven_run``."""
    if learner in _DESYNC_ENV:
        got = recalled(learner, _DESYNC_ENV[learner])
    else:
        got = launched_once(_DESYNC_ENV, learner, lambda: learner.call("debug_env", "desync"))
    env = env_checked("desync", got)
    assert env.get("TORCH_DISTRIBUTED_DEBUG") == "DETAIL", (
        learner_says(
            "without TORCH_DISTRIBUTED_DEBUG=DETAIL nothing compares the ranks' collectives: the uneven run hangs",
            "没有 TORCH_DISTRIBUTED_DEBUG=DETAIL，就没有人比较各 rank 的集合操作：不均匀的运行会卡住",
        )
        + f"{env}"
    )
    assert env.get("TORCH_NCCL_DESYNC_DEBUG") == "1", f"TORCH_NCCL_DESYNC_DEBUG: {env}"
    return env


def uneven_run(learner, fresh):
    """The uneven run under the learner's desync variables, in the fresh kernel (launched once per learner)."""
    if fresh in _UNEVEN_RUNS:
        return recalled(fresh, _UNEVEN_RUNS[fresh])
    env = {k: v for k, v in desync_variables(learner).items() if DESYNC_NAME.fullmatch(k)}
    with own_work("the course's uneven scripts"):
        scripts = {name: course_script(name) for name in UNEVEN_SCRIPTS}
    return launched_once(_UNEVEN_RUNS, fresh, lambda: fresh.launch("uneven_run", scripts, env, 2, UNEVEN_TIMEOUT_S))


@check(
    "04-stretch-debug-2",
    points=0.5,
    en="with the desync variables the uneven run fails at once with a mismatch report instead of hanging",
    zh="设置 desync 的变量后，不均匀的运行立即报出不一致并失败，而不是卡死",
)
def desync_reports(learner, variant, fresh):
    run = uneven_run(learner, fresh)
    assert run["timed_out"] is False, "timed out"
    assert type(run["returncode"]) is int and run["returncode"] != 0, f"exit status {run['returncode']!r}"
    assert any("mismatch" in o.lower() for o in run["outputs"]), "no mismatch report"


@check(
    "04-stretch-debug-2",
    points=0.5,
    en="the desync run uses debug_env('desync'), with TORCH_DISTRIBUTED_DEBUG=DETAIL",
    zh="desync 运行用的是 debug_env('desync')，其中 TORCH_DISTRIBUTED_DEBUG=DETAIL",
    counts_with="desync_reports",  # the variables alone are debug_env's row, graded in 04-stretch-debug-1
)
def desync_used_the_kit(learner, variant):
    desync_variables(learner)
