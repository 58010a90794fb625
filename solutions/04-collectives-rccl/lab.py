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
# # Lab 04 · 集合通信与 RCCL 调试
#
# 版本 1.0.1 · 约 120 分钟 · 前置：Lab 01（能用的环境）、Python、PyTorch 基础
#
# 分布式训练是 ROCm 用户最容易“丢掉几天”的地方：all-reduce 只跑到总线带宽的 60 %、同步超时、rank 掉线、
# 谁也说不清的卡死。本实验让集合通信（collectives）变得具体，并教会你调试。你将：
#
# 1. 写一个可移植的初始化：按环境选 backend 与 device（GPU 上 nccl——ROCm 上即 RCCL；CPU 上 gloo）；
# 2. 用 send/recv 手写环形全归约（ring all-reduce），并测出每个 rank 发送了 2(n−1)/n 的数据；
# 3. 按 nccl-tests / rccl-tests 的定义计算 algbw 与 busbw；
# 4. 跑一个小的 all-reduce 基准，画出 busbw–消息大小曲线；
# 5. 诊断一个卡死（hang）：让它在有限时间内失败并指出缺席的 rank，然后修好它；
# 6. 做一个调试工具箱：针对症状给出该设的 `NCCL_*` / `TORCH_NCCL_*` 环境变量。
#
# 所有脚本用 `%%writefile` 写成文件，再用 `lab.run_torchrun` 在 torchrun 下启动：它有超时，会结束所有 rank，
# 并按 rank 显示输出与退出码。smoke 配置用 CPU 上的 gloo，代码与 GPU 上完全相同。

# %% [markdown] tags=["en"]
# # Lab 04 · Collectives and RCCL debugging
#
# Version 1.0.1 · about 120 minutes · prerequisites: lab 01 (a working environment), Python, PyTorch basics
#
# Distributed training is where ROCm users lose days: all-reduce at 60 % of bus bandwidth, sync timeouts,
# ranks that drop, hangs nobody can explain. This lab makes collectives concrete and teaches debugging. You will:
#
# 1. write a portable init that picks backend and device from the environment (nccl on GPU, which is RCCL
#    on ROCm; gloo on CPU);
# 2. write ring all-reduce by hand with send/recv, and measure that each rank sends 2(n−1)/n of the data;
# 3. compute algbw and busbw as nccl-tests / rccl-tests define them;
# 4. run a small all-reduce benchmark and plot busbw against message size;
# 5. diagnose a hang: make it fail within a bound, naming the missing rank, then fix it;
# 6. build a debugging kit: the `NCCL_*` / `TORCH_NCCL_*` variables to set for a symptom.
#
# Every script is written to a file with `%%writefile` and started under torchrun with `lab.run_torchrun`:
# it has a timeout, ends every rank, and shows each rank's output and exit status. The smoke profile uses
# gloo on the CPU; the code is the same on GPUs.

# %% tags=["parameters"]
PROFILE = "smoke"
DEVICE = "auto"
SEED = 0
WORLD_SIZE = 2                    # ranks for the benchmark and the hang runs; 0 = one per GPU (at least 2)
RING_WORLD_SIZES = [2, 3]         # the ring all-reduce is checked with each of these rank counts
RING_SIZES = [1, 5, 7, 1000, 4099]  # element counts; most do not divide by the rank count
BENCH_MAX_BYTES = 1 << 19         # largest all-reduce message in the benchmark
BENCH_ITERS = 5
HANG_DEMO_TIMEOUT_S = 8           # the launcher ends the unguarded (hanging) run after this
LAUNCH_TIMEOUT_S = 90             # every other launch

# %%
import importlib
import json
import math
import os
import sys
from pathlib import Path

import torch

from rocmlab import lab

lab.seed_everything(SEED)
print(lab.describe_environment(PROFILE))

N_RANKS = WORLD_SIZE or max(2, torch.cuda.device_count())
RUNS = Path("runs04").resolve()
RUNS.mkdir(exist_ok=True)
if os.getcwd() not in sys.path:
    sys.path.insert(0, os.getcwd())   # the modules written below are imported from the working folder


def fresh_import(name):
    """Import (or re-import after %%writefile) a module written in this folder."""
    importlib.invalidate_caches()
    module = sys.modules.get(name)
    return importlib.reload(module) if module else importlib.import_module(name)


def rank_json(prefix, world_size):
    """The JSON files the ranks of one run wrote, in rank order (missing ones are None)."""
    out = []
    for rank in range(world_size):
        path = RUNS / f"{prefix}_ws{world_size}_rank{rank}.json"
        out.append(json.loads(path.read_text()) if path.exists() else None)
    return out


print(f"ranks: {N_RANKS}, runs folder: {RUNS}")

# %% [markdown] tags=["zh"]
# ## 1 · 可移植的初始化
#
# 同一个脚本要在笔记本电脑（CPU）、单卡和多卡 ROCm / CUDA 机器上都能跑。torchrun 为每个 rank 设置 `RANK`、
# `WORLD_SIZE`、`LOCAL_RANK`、`LOCAL_WORLD_SIZE`、`MASTER_ADDR`/`MASTER_PORT`。规则：
#
# - 每个本地 rank 都能分到一块 GPU 时用 `nccl`；在 ROCm 版 PyTorch 上 `backend="nccl"` 调用的就是 **RCCL**
#   （`torch.version.hip` 非 None），报告时写成 `"rccl"`；device 是 `cuda:{LOCAL_RANK}`（ROCm 也沿用 `torch.cuda` API）；
# - 否则用 CPU 上的 `gloo`。两个 rank 共用一块 GPU 时 NCCL/RCCL 会报错，所以 GPU 不够时退回 gloo；
# - 一定要传 `timeout`：默认超时很长（NCCL 为 10 分钟，gloo 为 30 分钟），卡死时会白等。
#
# `init_plan` 只做决定（便于用模拟的环境测试），`portable_init` 照着执行。

# %% [markdown] tags=["en"]
# ## 1 · A portable init
#
# One script should run on a laptop (CPU), on one GPU and on a multi-GPU ROCm or CUDA box. torchrun sets
# `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE` and `MASTER_ADDR`/`MASTER_PORT` for each rank. Rules:
#
# - use `nccl` when every local rank can have a GPU of its own; on a ROCm build of PyTorch `backend="nccl"`
#   is **RCCL** (`torch.version.hip` is not None), reported as `"rccl"`; the device is `cuda:{LOCAL_RANK}`
#   (ROCm reuses the `torch.cuda` API);
# - otherwise `gloo` on the CPU. Two ranks on one GPU make NCCL/RCCL fail, so too few GPUs means gloo;
# - always pass a `timeout`: the defaults are long (10 minutes for NCCL, 30 for gloo), a hang just waits.
#
# `init_plan` only decides (so it can be tested with mocked environments); `portable_init` carries it out.

# %% tags=["solution"] grade_id="04-init-sol-1"
# %%writefile dist_common.py
"""Shared by every script of lab 04: a portable process-group init and deterministic inputs."""
import datetime
import os

import torch
import torch.distributed as dist
import torch.distributed.nn  # before init_process_group: imported later, it keeps the group alive (lab 05)


def init_plan(environ, *, gpu_count, hip_version, timeout_s=60):
    """Decide how this rank joins the process group.

    environ: a mapping like os.environ (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE; missing ones
    mean a single process: 0, 1, 0, WORLD_SIZE). gpu_count: GPUs visible to this process.
    hip_version: torch.version.hip (None on CUDA / CPU builds).
    Returns a dict: backend ("nccl" | "gloo"), label ("rccl" | "nccl" | "gloo"), device ("cuda:N" | "cpu"),
    rank, world_size, local_rank (ints) and timeout_s.
    """
    ### BEGIN SOLUTION
    rank = int(environ.get("RANK", 0))
    world_size = int(environ.get("WORLD_SIZE", 1))
    local_rank = int(environ.get("LOCAL_RANK", 0))
    local_world = int(environ.get("LOCAL_WORLD_SIZE", world_size))
    if gpu_count > 0 and gpu_count >= local_world:
        backend, device = "nccl", f"cuda:{local_rank}"
        label = "rccl" if hip_version else "nccl"
    else:
        backend, label, device = "gloo", "gloo", "cpu"
    return {"backend": backend, "label": label, "device": device, "rank": rank,
            "world_size": world_size, "local_rank": local_rank, "timeout_s": timeout_s}
    ### END SOLUTION


def portable_init(timeout_s=60):
    """Join the default process group as init_plan says; returns the plan."""
    plan = init_plan(os.environ, gpu_count=torch.cuda.device_count(),
                     hip_version=getattr(torch.version, "hip", None), timeout_s=timeout_s)
    if plan["backend"] == "nccl":
        torch.cuda.set_device(plan["local_rank"])
    dist.init_process_group(plan["backend"], timeout=datetime.timedelta(seconds=timeout_s))
    return plan


def rank_input(rank, size, seed=0):
    """This rank's deterministic float32 input of `size` elements (the same on every machine)."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + rank * 7_919 + size)
    return torch.randn(size, generator=generator, dtype=torch.float32)

# %%
dist_common = fresh_import("dist_common")
init_plan = dist_common.init_plan
print(init_plan({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"},
                gpu_count=torch.cuda.device_count(), hip_version=torch.version.hip))

# %% tags=["test"] grade_id="04-init-1" points=3
_env = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "8"}
_p = init_plan(_env, gpu_count=8, hip_version="6.4.43482", timeout_s=30)
assert (_p["backend"], _p["label"], _p["device"]) == ("nccl", "rccl", "cuda:3"), \
    f"ROCm 上 8 卡 8 rank 应为 nccl/rccl/cuda:3 / 8 ranks on 8 ROCm GPUs: expected nccl, rccl, cuda:3; got {_p}"
assert (_p["rank"], _p["world_size"], _p["local_rank"], _p["timeout_s"]) == (3, 8, 3, 30), f"got {_p}"
_p = init_plan({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"},
               gpu_count=0, hip_version=None)
assert (_p["backend"], _p["label"], _p["device"]) == ("gloo", "gloo", "cpu"), \
    f"没有 GPU 时应为 gloo/cpu / no GPU: expected gloo on cpu, got {_p}"
### BEGIN HIDDEN TESTS
_p = init_plan({"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"},
               gpu_count=4, hip_version=None, timeout_s=12)
assert (_p["backend"], _p["label"], _p["device"], _p["rank"], _p["local_rank"]) == \
    ("nccl", "nccl", "cuda:1", 5, 1), f"CUDA build, 2 nodes x 4: got {_p}"
_p = init_plan({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"},
               gpu_count=1, hip_version="7.2.0")
assert (_p["backend"], _p["device"]) == ("gloo", "cpu"), f"2 ranks, 1 GPU must fall back to gloo: {_p}"
_p = init_plan({}, gpu_count=1, hip_version="7.2.0")
assert (_p["backend"], _p["label"], _p["device"], _p["rank"], _p["world_size"], _p["local_rank"]) == \
    ("nccl", "rccl", "cuda:0", 0, 1, 0), f"a single process with one GPU: {_p}"
assert _p["timeout_s"] == 60
### END HIDDEN TESTS

# %% [markdown] tags=["zh"]
# ## 2 · 手写环形全归约（ring all-reduce）
#
# 把长度为 N 的张量切成 n 块（n = rank 数；N 不一定能被 n 整除，块大小可以相差 1，甚至为 0）。
# rank r 只和右邻 (r+1) mod n 发送、从左邻 (r−1) mod n 接收：
#
# - **reduce-scatter**（n−1 步）：第 s 步发送块 (r−s) mod n，接收块 (r−s−1) mod n 并**累加**到本地。
#   结束时 rank r 拥有块 (r+1) mod n 的完整和；
# - **all-gather**（n−1 步）：第 s 步发送块 (r+1−s) mod n，接收块 (r−s) mod n 并**覆盖**本地。
#
# 每步的发送和接收要**一起**提交：`dist.batch_isend_irecv([dist.P2POp(dist.isend, ...), dist.P2POp(dist.irecv, ...)])`，
# 再对返回的请求 `wait()`。若所有 rank 都先阻塞地 send 再 recv，在 NCCL/RCCL 上会互相等死；空块（0 个元素）直接跳过。
# 每个 rank 共发送 2(n−1) 块，约 2(n−1)/n · N 个元素——与 n 几乎无关，这就是 ring 适合大消息的原因，
# 也正是 busbw 里 2(n−1)/n 因子的来源（第 3 节）。返回值统计发送与接收的元素数和步数，用来验证这一点。

# %% [markdown] tags=["en"]
# ## 2 · Ring all-reduce by hand
#
# Split the N-element tensor into n chunks (n = number of ranks; N need not divide by n, so chunk sizes may
# differ by one, or be zero). Rank r only sends to its right neighbour (r+1) mod n and receives from its
# left neighbour (r−1) mod n:
#
# - **reduce-scatter** (n−1 steps): at step s send chunk (r−s) mod n, receive chunk (r−s−1) mod n and
#   **add** it into the local copy. Afterwards rank r holds the full sum of chunk (r+1) mod n;
# - **all-gather** (n−1 steps): at step s send chunk (r+1−s) mod n, receive chunk (r−s) mod n and
#   **overwrite** the local copy.
#
# Post each step's send and receive **together**:
# `dist.batch_isend_irecv([dist.P2POp(dist.isend, ...), dist.P2POp(dist.irecv, ...)])`, then `wait()` on the
# returned requests. If every rank did a blocking send before its receive, they could wait on each other
# forever on NCCL/RCCL; skip empty (0-element) chunks. Each rank sends 2(n−1) chunks, about 2(n−1)/n · N
# elements, almost independent of n: that is why a ring suits large messages, and where the 2(n−1)/n factor
# of busbw comes from (section 3). The returned counts of elements sent and received, and of steps, show it.

# %% tags=["solution"] grade_id="04-ring-sol-1"
# %%writefile ring.py
"""Ring all-reduce (sum) from point-to-point send/recv."""
import torch
import torch.distributed as dist


def ring_all_reduce(tensor):
    """Sum `tensor` (1-D) over all ranks in place, as a ring: reduce-scatter, then all-gather.

    Returns {"sent_elements": int, "received_elements": int, "steps": int} for this rank, where steps
    counts the send/recv exchanges (2(n-1) for n ranks).
    """
    ### BEGIN SOLUTION
    rank, n = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % n, (rank - 1) % n
    chunks = list(torch.tensor_split(tensor, n))
    stats = {"sent_elements": 0, "received_elements": 0, "steps": 0}

    def exchange(send_index, recv_index, reduce):
        outgoing = chunks[send_index].contiguous()
        incoming = torch.empty_like(chunks[recv_index])
        ops = []
        if outgoing.numel():
            ops.append(dist.P2POp(dist.isend, outgoing, right))
        if incoming.numel():
            ops.append(dist.P2POp(dist.irecv, incoming, left))
        for request in dist.batch_isend_irecv(ops) if ops else []:
            request.wait()
        if reduce:
            chunks[recv_index].add_(incoming)
        else:
            chunks[recv_index].copy_(incoming)
        stats["sent_elements"] += outgoing.numel()
        stats["received_elements"] += incoming.numel()
        stats["steps"] += 1

    for step in range(n - 1):
        exchange((rank - step) % n, (rank - step - 1) % n, reduce=True)
    for step in range(n - 1):
        exchange((rank + 1 - step) % n, (rank - step) % n, reduce=False)
    return stats
    ### END SOLUTION

# %% [markdown] tags=["zh"]
# 驱动脚本（已给出）：用你的 `portable_init` 初始化，先做一次 all-reduce 打招呼（各 rank 贡献 rank+1）；
# 然后对每个大小，各 rank 生成确定性的输入，分别用你的 ring 和 `dist.all_reduce` 求和，写出 JSON。
# 注意 `lab.run_torchrun` 按 rank 显示的输出与退出码。

# %% [markdown] tags=["en"]
# The driver (given) initialises with your `portable_init` and says hello with one all-reduce (each rank
# contributes rank+1); then for each size each rank builds its deterministic input, sums it with your ring and
# with `dist.all_reduce`, and writes JSON. Note the per-rank output and exit status `lab.run_torchrun` shows.

# %%
# %%writefile run_ring.py
import json
import sys

import torch
import torch.distributed as dist

from dist_common import portable_init, rank_input
from ring import ring_all_reduce

runs, seed, sizes = sys.argv[1], int(sys.argv[2]), [int(s) for s in sys.argv[3:]]
plan = portable_init(timeout_s=60)
rank, n = plan["rank"], plan["world_size"]
hello = torch.tensor([float(rank + 1)], device=plan["device"])
dist.all_reduce(hello)                       # a first collective: every rank contributes rank + 1
print(f"rank {rank}/{n} on {plan['device']} via {plan['label']}: hello sum = {hello.item()}")
results = []
for size in sizes:
    x = rank_input(rank, size, seed).to(plan["device"])
    ring, reference = x.clone(), x.clone()
    stats = ring_all_reduce(ring)
    dist.all_reduce(reference)
    results.append({"size": size, "ring": ring.cpu().tolist(), "reference": reference.cpu().tolist(), **stats})
    print(f"rank {rank}: N={size:5d} sent {stats['sent_elements']:5d} elements "
          f"= {stats['sent_elements'] / size:.3f} N (2(n-1)/n = {2 * (n - 1) / n:.3f})")
with open(f"{runs}/ring_ws{n}_rank{rank}.json", "w") as f:
    json.dump({"plan": plan, "hello_sum": hello.item(), "results": results}, f)
dist.destroy_process_group()

# %%
ring_runs = {}
for n in RING_WORLD_SIZES:
    ring_runs[n] = lab.run_torchrun("run_ring.py", nproc=n, args=[RUNS, SEED, *RING_SIZES],
                                    timeout_s=LAUNCH_TIMEOUT_S, show=(n == RING_WORLD_SIZES[0]))
    print(f"{n} ranks:", ring_runs[n].summary())

# %% tags=["test"] grade_id="04-init-2" points=1
_n = RING_WORLD_SIZES[0]
assert ring_runs[_n].ok and all(_r.returncode == 0 for _r in ring_runs[_n].ranks), \
    f"每个 rank 都应退出码 0 / every rank should exit 0: {ring_runs[_n].summary()}"
_got = rank_json("ring", _n)
assert all(_g is not None for _g in _got), "每个 rank 都应写出 JSON / every rank should write its JSON"
### BEGIN HIDDEN TESTS
for _n in RING_WORLD_SIZES:
    _expected_backend = "nccl" if _n <= torch.cuda.device_count() else "gloo"
    for _rank, _g in enumerate(rank_json("ring", _n)):
        assert _g["hello_sum"] == _n * (_n + 1) / 2, f"rank {_rank}: all-reduce sum {_g['hello_sum']}"
        assert _g["plan"]["rank"] == _rank and _g["plan"]["world_size"] == _n
        assert _g["plan"]["backend"] == _expected_backend, f"rank {_rank}: backend {_g['plan']['backend']}"
### END HIDDEN TESTS

# %% tags=["test"] grade_id="04-ring-1" points=3
_n = RING_WORLD_SIZES[0]
assert ring_runs[_n].ok, f"ring 运行失败 / the ring run failed: {ring_runs[_n].summary()}"
_ranks = rank_json("ring", _n)
_r0 = {_x["size"]: _x for _x in _ranks[0]["results"]}
_case = _r0[7]
assert torch.allclose(torch.tensor(_case["ring"]), torch.tensor(_case["reference"]), rtol=1e-5, atol=1e-5), \
    f"N=7, {_n} ranks: ring 结果应与 dist.all_reduce 一致 / ring must match dist.all_reduce: " \
    f"{_case['ring']} vs {_case['reference']}"
assert _case["steps"] == 2 * (_n - 1), f"应有 2(n-1) 步 / expected 2(n-1) = {2 * (_n - 1)} steps, got {_case['steps']}"
### BEGIN HIDDEN TESTS
for _n in RING_WORLD_SIZES:
    assert ring_runs[_n].ok and all(_r.returncode == 0 for _r in ring_runs[_n].ranks), ring_runs[_n].summary()
    _ranks = rank_json("ring", _n)
    for _size in RING_SIZES:
        _expected = sum(dist_common.rank_input(_r, _size, SEED) for _r in range(_n))
        _sent_total = 0
        for _rank, _data in enumerate(_ranks):
            _x = next(_c for _c in _data["results"] if _c["size"] == _size)
            assert torch.allclose(torch.tensor(_x["ring"]).reshape(-1), _expected, rtol=1e-5, atol=1e-5), \
                f"{_n} ranks, N={_size}, rank {_rank}: wrong sum"
            assert torch.allclose(torch.tensor(_x["reference"]).reshape(-1), _expected, rtol=1e-5, atol=1e-5)
            assert _x["steps"] == 2 * (_n - 1), f"{_n} ranks: steps {_x['steps']}"
            assert abs(_x["sent_elements"] - 2 * (_n - 1) / _n * _size) <= 2 * (_n - 1), \
                f"{_n} ranks, N={_size}, rank {_rank}: sent {_x['sent_elements']}, expected about 2(n-1)/n*N"
            _sent_total += _x["sent_elements"]
        assert _sent_total == 2 * (_n - 1) * _size, \
            f"{_n} ranks, N={_size}: all ranks together must send 2(n-1)N = {2 * (_n - 1) * _size}, got {_sent_total}"
### END HIDDEN TESTS

# %% [markdown] tags=["zh"]
# 结果的含义：每个 rank 发送的数据量约为 2(n−1)/n · N，n=2 时为 1·N，n 很大时趋近 2·N。单个 rank 的发送量
# 不随 n 增长，所以只要链路带宽够，大消息的 ring all-reduce 时间几乎与 GPU 数无关；但步数 2(n−1) 随 n 增长，
# 每步都有固定延迟，所以小消息时 RCCL/NCCL 会改用 tree 等其他算法。

# %% [markdown] tags=["en"]
# What it means: each rank sends about 2(n−1)/n · N: 1·N for n=2, approaching 2·N for large n. The bytes a
# rank sends do not grow with n, so with enough link bandwidth a large ring all-reduce takes about the same
# time on 2 or 8 GPUs; but the 2(n−1) steps do grow with n, each with a fixed latency, which is why RCCL/NCCL
# switch to other algorithms (trees, for instance) for small messages.

# %% [markdown] tags=["zh"]
# ## 3 · algbw 与 busbw
#
# nccl-tests（rccl-tests 沿用同样的定义）报告两种带宽（NVIDIA/nccl-tests `doc/PERFORMANCE.md`）：
#
# - **algbw = S / t**：S 是操作的字节数，t 是时间；
# - **busbw = algbw × 因子**，因子让结果与 rank 数无关，可直接与硬件链路峰值比较：
#   all-reduce 为 2(n−1)/n；reduce-scatter、all-gather、all-to-all 为 (n−1)/n；broadcast 与 reduce 为 1。
#
# 注意：reduce-scatter 与 all-gather 的 S 是**整个数组**的字节数（每 rank 的块大小 × n），不是每 rank 的块。
# 常见错误：拿 algbw 和链路峰值比；或把 all-reduce 的 busbw 当成“每条链路实际传输速率”的两倍去解读。
# 这里 1 GB/s = 1e9 字节/秒（nccl-tests 的单位）。

# %% [markdown] tags=["en"]
# ## 3 · algbw and busbw
#
# nccl-tests (and rccl-tests, which keeps the same definitions) report two bandwidths (NVIDIA/nccl-tests,
# `doc/PERFORMANCE.md`):
#
# - **algbw = S / t**: S is the operation's size in bytes, t its time;
# - **busbw = algbw × factor**, a factor that makes the number independent of the rank count, so it can be
#   compared with the hardware link peak: 2(n−1)/n for all-reduce; (n−1)/n for reduce-scatter, all-gather and
#   all-to-all; 1 for broadcast and reduce.
#
# Careful: for reduce-scatter and all-gather S is the size of the **whole array** (the per-rank chunk × n), not
# the per-rank chunk. Common mistakes: comparing algbw with the link peak; reading all-reduce busbw as twice
# what a link actually moved. Here 1 GB/s = 1e9 bytes per second (the nccl-tests unit).

# %% tags=["solution"] grade_id="04-busbw-sol-1"
def bandwidth(op, size_bytes, seconds, world_size):
    """(algbw, busbw) in GB/s (1e9 B/s) for one collective, as nccl-tests defines them.

    op: "all_reduce" | "reduce_scatter" | "all_gather" | "all_to_all" | "broadcast" | "reduce".
    size_bytes: S, the operation's size (for reduce_scatter / all_gather: the whole array).
    Raises ValueError for an unknown op or a non-positive time.
    """
    ### BEGIN SOLUTION
    factors = {
        "all_reduce": 2 * (world_size - 1) / world_size,
        "reduce_scatter": (world_size - 1) / world_size,
        "all_gather": (world_size - 1) / world_size,
        "all_to_all": (world_size - 1) / world_size,
        "broadcast": 1.0,
        "reduce": 1.0,
    }
    if op not in factors:
        raise ValueError(f"unknown collective {op!r}; expected one of {sorted(factors)}")
    if seconds <= 0:
        raise ValueError(f"time must be positive, got {seconds}")
    algbw = size_bytes / seconds / 1e9
    return algbw, algbw * factors[op]
    ### END SOLUTION

# %% tags=["test"] grade_id="04-busbw-1" points=2
_alg, _bus = bandwidth("all_reduce", 1e9, 0.1, 8)
assert math.isclose(_alg, 10.0) and math.isclose(_bus, 17.5), \
    f"1 GB 用 0.1 s，8 rank：algbw 10、busbw 17.5 GB/s / expected (10, 17.5), got {(_alg, _bus)}"
_alg, _bus = bandwidth("broadcast", 4e9, 2.0, 4)
assert math.isclose(_alg, 2.0) and math.isclose(_bus, 2.0), f"broadcast: factor 1, got {(_alg, _bus)}"
### BEGIN HIDDEN TESTS
_table = [  # op, S, t, n, expected busbw factor
    ("reduce_scatter", 3.2e9, 0.5, 4, 3 / 4),
    ("all_gather", 1e6, 1e-3, 2, 1 / 2),
    ("all_to_all", 8e8, 0.2, 16, 15 / 16),
    ("reduce", 1e8, 0.01, 8, 1.0),
    ("all_reduce", 2.5e8, 0.05, 2, 1.0),
    ("all_reduce", 1e9, 1.0, 1, 0.0),
]
for _op, _s, _t, _n, _f in _table:
    _alg, _bus = bandwidth(_op, _s, _t, _n)
    assert math.isclose(_alg, _s / _t / 1e9, rel_tol=1e-12), f"{_op}: algbw {_alg}"
    assert math.isclose(_bus, _s / _t / 1e9 * _f, rel_tol=1e-12, abs_tol=1e-15), f"{_op} n={_n}: busbw {_bus}"
for _bad in [("allreduce", 1, 1, 2), ("all_reduce", 1, 0, 2)]:
    try:
        bandwidth(*_bad)
    except ValueError:
        pass
    else:
        raise AssertionError(f"bandwidth{_bad} should raise ValueError")
### END HIDDEN TESTS

# %% [markdown] tags=["zh"]
# ## 4 · all-reduce 基准：busbw 与消息大小
#
# 下面的脚本（已给出）对一系列消息大小各做几次预热和计时，取各 rank 中最慢的平均时间（集合操作以最慢的 rank 为准），
# 由 rank 0 写出 JSON。GPU 上计时前后必须同步（`torch.cuda.synchronize()`），否则只量到了“提交”时间。

# %% [markdown] tags=["en"]
# ## 4 · An all-reduce benchmark: busbw against message size
#
# The script below (given) warms up and times a few iterations per message size, takes the slowest rank's
# mean time (a collective is as slow as its slowest rank) and has rank 0 write JSON. On a GPU the clock must be
# read after a synchronize (`torch.cuda.synchronize()`), or it measures only the launch.

# %%
# %%writefile bench_allreduce.py
import json
import sys
import time

import torch
import torch.distributed as dist

from dist_common import portable_init

runs, max_bytes, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
plan = portable_init(timeout_s=120)
device = torch.device(plan["device"])


def sync():
    if device.type == "cuda":
        torch.cuda.synchronize(device)


results = []
size = 8
while size <= max_bytes:
    x = torch.ones(size // 4, dtype=torch.float32, device=device)
    for _ in range(2):
        dist.all_reduce(x)
    sync()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    sync()
    elapsed = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64, device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    results.append({"bytes": size, "seconds": elapsed.item()})
    size *= 4
if plan["rank"] == 0:
    with open(f"{runs}/bench_ws{plan['world_size']}.json", "w") as f:
        json.dump({"world_size": plan["world_size"], "label": plan["label"], "device": plan["device"],
                   "results": results}, f, indent=1)
dist.destroy_process_group()

# %%
bench = lab.run_torchrun("bench_allreduce.py", nproc=N_RANKS, args=[RUNS, BENCH_MAX_BYTES, BENCH_ITERS],
                         timeout_s=LAUNCH_TIMEOUT_S, show=False)
print(bench.summary())
bench_path = RUNS / f"bench_ws{N_RANKS}.json"
if bench.ok and bench_path.exists():
    bench_data = json.loads(bench_path.read_text())
    assert {"world_size", "label", "results"} <= set(bench_data)
    rows = []
    for row in bench_data["results"]:
        assert row["seconds"] > 0 and math.isfinite(row["seconds"])
        try:
            rows.append((row["bytes"], *bandwidth("all_reduce", row["bytes"], row["seconds"], N_RANKS)))
        except NotImplementedError:
            break
    for size_b, alg, bus in rows:
        print(f"{size_b:>9d} B  algbw {alg:8.4f} GB/s  busbw {bus:8.4f} GB/s")
    if rows:
        lab.plot_lines({f"{bench_data['label']}, {N_RANKS} ranks": ([r[0] for r in rows], [r[2] for r in rows])},
                       title="all-reduce busbw", xlabel="message size (bytes)", ylabel="busbw (GB/s)",
                       logx=True, logy=True)

# %% [markdown] tags=["zh"]
# 怎么读这条曲线：小消息处时间几乎是常数（启动与同步的固定延迟），busbw 随大小线性上升——**延迟受限区**；
# 大消息处时间与大小成正比，busbw 趋于平台——**带宽受限区**，平台高度才可与链路峰值比较。在 CPU/gloo 上
# 平台是内存拷贝与回环网络的速度，不代表 GPU。在多卡（multi-gpu 配置）上，把平台与链路峰值比较：
# 例如 MI250 的 GPU 间 Infinity Fabric（xGMI）链路最高 25 GT/s，16 位宽时峰值 50 GB/s（ROCm 文档
# “AMD Instinct MI250 microarchitecture”）；MI300X 等型号的链路数与峰值请查 AMD 官方数据手册（amd.com），
# 并用 `amd-smi topology` 看你的机器上 GPU 之间走 xGMI 还是 PCIe。实践者报告 RCCL 8 卡 all-reduce 只到 busbw
# 峰值的 ~60 %，而 NCCL 可到 90 % 以上：测出来，别猜。rccl-tests 的 `all_reduce_perf -b 8 -e 1G -f 2 -g 8` 给出同定义的参考值。

# %% [markdown] tags=["en"]
# Reading the curve: for small messages the time is nearly constant (the fixed cost of launch and
# synchronisation) and busbw grows linearly with size: the **latency-bound region**. For large messages the
# time grows with size and busbw reaches a plateau: the **bandwidth-bound region**, the only place where
# busbw can be compared with a link peak. On CPU/gloo the plateau is memory copies and loopback networking,
# not a GPU. On several GPUs (the multi-gpu profile) compare the plateau with the link peak: on an MI250, for
# instance, an Infinity Fabric (xGMI) link between GPUs runs at up to 25 GT/s, a 50 GB/s peak for a 16-wide
# link (ROCm docs, "AMD Instinct MI250 microarchitecture"); for an MI300X or another part take the link count
# and peak from AMD's data sheet (amd.com), and let `amd-smi topology` tell whether your GPUs talk over xGMI
# or PCIe. Practitioners report RCCL at ~60 % of busbw peak on 8 GPUs where NCCL reaches 90 %+:
# measure it, don't guess. rccl-tests' `all_reduce_perf -b 8 -e 1G -f 2 -g 8` gives reference numbers with the
# same definitions.

# %% [markdown] tags=["zh"]
# ## 5 · 诊断卡死（hang）
#
# 下面的训练脚本有一个真实世界里很常见的 bug：数据按 rank 轮流分片（rank r 取第 r, r+n, r+2n… 条），7 条数据
# 分给 2 个 rank 是 4 条和 3 条。rank 1 跑完 3 步就去了训练结束的 `barrier`，rank 0 却在第 4 步的 all-reduce 里
# 等一个永远不会来的伙伴。没有任何报错，进程只是不动——直到 `lab.run_torchrun` 的超时把它们全部结束。

# %% [markdown] tags=["en"]
# ## 5 · Diagnosing a hang
#
# The training script below has a bug that is common in real life: data is sharded round-robin (rank r takes
# items r, r+n, r+2n…), and 7 items on 2 ranks are 4 and 3. Rank 1 finishes its 3 steps and goes to the
# end-of-training `barrier`, while rank 0 waits in the all-reduce of step 4 for a partner that never comes.
# No error, the processes just stop moving, until `lab.run_torchrun`'s timeout ends them all.

# %%
# %%writefile train_uneven.py
import argparse
import json

import torch
import torch.distributed as dist

from dist_common import portable_init

parser = argparse.ArgumentParser()
parser.add_argument("--runs", required=True)
parser.add_argument("--tag", default="train")
parser.add_argument("--items", type=int, default=7)
parser.add_argument("--guard", action="store_true", help="fail fast: group timeout + monitored barrier")
parser.add_argument("--fix", action="store_true", help="all ranks agree on the number of steps")
parser.add_argument("--group-timeout", type=float, default=20.0)
parser.add_argument("--barrier-timeout", type=float, default=5.0)
args = parser.parse_args()

if args.guard or args.fix:
    from hang_tools import agree_on_steps, all_here, init_guarded
plan = init_guarded(args.group_timeout) if args.guard else portable_init(timeout_s=1800)
rank, world = plan["rank"], plan["world_size"]
dist.barrier()                                       # all ranks started: later timeouts measure the steps only
my_items = list(range(rank, args.items, world))      # uneven when items % world != 0
steps = agree_on_steps(len(my_items)) if args.fix else len(my_items)
total = 0.0
for step in range(steps):
    if args.guard:
        all_here(args.barrier_timeout)
    grad = torch.tensor([float(my_items[step])], device=plan["device"])
    dist.all_reduce(grad)                            # every rank must reach this, every step
    total += grad.item()
print(f"rank {rank}: {steps} steps done, waiting for the others", flush=True)
dist.barrier()                                       # e.g. everyone done before saving a checkpoint
with open(f"{args.runs}/{args.tag}_ws{world}_rank{rank}.json", "w") as f:
    json.dump({"rank": rank, "steps": steps, "total": total}, f)
dist.destroy_process_group()

# %%
hung = lab.run_torchrun("train_uneven.py", nproc=N_RANKS, args=["--runs", RUNS, "--tag", "hung"],
                        timeout_s=HANG_DEMO_TIMEOUT_S)
print("timed out:", hung.timed_out, "| leftover processes:", lab.leftover_processes())

# %% [markdown] tags=["zh"]
# 练习分两步。**第一步，让它快速失败并指出是谁**：
#
# - `init_guarded(timeout_s)`：带超时加入进程组（用 `portable_init`）。NCCL/RCCL 上集合操作超时后，看门狗按
#   `TORCH_NCCL_ASYNC_ERROR_HANDLING`（默认 3：结束进程）处理；gloo 上超时的操作抛出异常。
# - `all_here(timeout_s)`：每一步开头调用的检查点，用 `dist.monitored_barrier(timeout=..., wait_all_ranks=True)`：
#   rank 0 在超时后报出**所有**没到的 rank（“Ranks 1 failed to pass monitoredBarrier…”）。
#   `monitored_barrier` 只支持 gloo；在 nccl 作业里，`init_guarded` 里先用 `dist.new_group(backend="gloo")` 建一个
#   gloo 侧组，`all_here` 在它上面做 monitored barrier（所有 rank 都要以相同顺序调用 `new_group`）。
#
# **第二步，修 bug**：`agree_on_steps(local_steps)` 让所有 rank 对步数达成一致（取最小值：all-reduce MIN），
# 多出的数据留到下个 epoch（相当于 `DistributedSampler(drop_last=True)`）。

# %% [markdown] tags=["en"]
# The exercise has two steps. **First, make it fail fast and name the culprit**:
#
# - `init_guarded(timeout_s)`: join the group with a timeout (use `portable_init`). On NCCL/RCCL a timed-out
#   collective is handled by the watchdog as `TORCH_NCCL_ASYNC_ERROR_HANDLING` says (default 3: end the
#   process); on gloo the timed-out operation raises.
# - `all_here(timeout_s)`: a checkpoint called at the start of each step, with
#   `dist.monitored_barrier(timeout=..., wait_all_ranks=True)`: after the timeout rank 0 reports **every** rank
#   that did not arrive ("Ranks 1 failed to pass monitoredBarrier…"). `monitored_barrier` is gloo-only; in an
#   nccl job, have `init_guarded` create a gloo side group with `dist.new_group(backend="gloo")` and run the
#   monitored barrier on it (every rank must call `new_group`, in the same order).
#
# **Second, fix the bug**: `agree_on_steps(local_steps)` makes all ranks agree on the step count (the minimum:
# an all-reduce with MIN); the leftover items wait for the next epoch (like `DistributedSampler(drop_last=True)`).

# %% tags=["solution"] grade_id="04-hang-sol-1"
# %%writefile hang_tools.py
"""Fail-fast guards for a distributed job, and the fix for uneven shards."""
import datetime

import torch
import torch.distributed as dist

from dist_common import portable_init

_side_group = None   # a gloo group for monitored_barrier when the main backend is nccl


def init_guarded(timeout_s):
    """Join the default group with a collective timeout of `timeout_s` seconds; returns the plan.

    On nccl, also create the gloo side group that all_here needs (every rank calls this)."""
    ### BEGIN SOLUTION
    global _side_group
    plan = portable_init(timeout_s=timeout_s)
    if plan["backend"] != "gloo":
        _side_group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))
    return plan
    ### END SOLUTION


def all_here(timeout_s):
    """Wait until every rank arrives; after `timeout_s` seconds fail, naming every missing rank."""
    ### BEGIN SOLUTION
    limit = datetime.timedelta(seconds=timeout_s)
    dist.monitored_barrier(group=_side_group, timeout=limit, wait_all_ranks=True)
    ### END SOLUTION


def agree_on_steps(local_steps):
    """The number of steps every rank can take: the minimum of local_steps over all ranks."""
    ### BEGIN SOLUTION
    device = f"cuda:{torch.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"
    steps = torch.tensor([local_steps], dtype=torch.int64, device=device)
    dist.all_reduce(steps, op=dist.ReduceOp.MIN)
    return int(steps.item())
    ### END SOLUTION

# %%
guarded = lab.run_torchrun("train_uneven.py", nproc=N_RANKS, args=["--runs", RUNS, "--tag", "guarded", "--guard"],
                           timeout_s=LAUNCH_TIMEOUT_S)
fixed = lab.run_torchrun("train_uneven.py", nproc=N_RANKS,
                         args=["--runs", RUNS, "--tag", "fixed", "--guard", "--fix"], timeout_s=LAUNCH_TIMEOUT_S)

# %% tags=["test"] grade_id="04-hang-1" points=3
assert not guarded.timed_out and guarded.returncode != 0, \
    f"加了保护的脚本应在超时前自行失败 / the guarded script must fail by itself, before the launcher's timeout: " \
    f"{guarded.summary()}"
assert "monitoredBarrier" in guarded.rank(0).output and "1" in guarded.rank(0).output, \
    "rank 0 的输出应由 monitored_barrier 指出缺席的 rank / rank 0 should name the missing rank via monitored_barrier"
### BEGIN HIDDEN TESTS
import re as _re
_line = next(_l for _l in guarded.rank(0).output.splitlines() if "monitoredBarrier" in _l)
_missing = {int(_x) for _x in _re.findall(r"\d+", _line.split("failed to pass")[0].split("]:")[-1])}
_short = {_r for _r in range(N_RANKS) if len(range(_r, 7, N_RANKS)) < len(range(0, 7, N_RANKS))}
assert _missing == _short, f"missing ranks reported {_missing}, expected {_short}: {_line}"
assert all(_r.returncode != 0 for _r in guarded.ranks), f"every rank should end non-zero: {guarded.summary()}"
### END HIDDEN TESTS

# %% tags=["test"] grade_id="04-hang-2" points=2
assert fixed.ok and all(_r.returncode == 0 for _r in fixed.ranks), \
    f"修好后应正常结束 / after the fix the run must succeed: {fixed.summary()}"
_out = rank_json("fixed", N_RANKS)
assert all(_o is not None for _o in _out) and len({_o["steps"] for _o in _out}) == 1, \
    f"所有 rank 的步数应相同 / all ranks must take the same number of steps: {_out}"
### BEGIN HIDDEN TESTS
_steps = min(len(range(_r, 7, N_RANKS)) for _r in range(N_RANKS))
_total = float(sum(_r + _s * N_RANKS for _s in range(_steps) for _r in range(N_RANKS)))
for _o in _out:
    assert _o["steps"] == _steps and _o["total"] == _total, f"expected {_steps} steps, total {_total}: {_o}"
### END HIDDEN TESTS

# %% [markdown] tags=["zh"]
# 在 GPU 上：NCCL/RCCL 的集合操作是异步的，卡死时 Python 里看不到任何异常；`init_process_group(timeout=...)`
# 加上看门狗（`TORCH_NCCL_ASYNC_ERROR_HANDLING`）才能让进程退出，torchrun 才能重启或报错。超时要比最慢的一步
# （包括保存检查点）长，否则会误杀。monitored barrier 不是免费的（每次都要与 rank 0 往返），放在每 N 步或每个 epoch。

# %% [markdown] tags=["en"]
# On GPUs: NCCL/RCCL collectives are asynchronous, so a hang shows no Python exception at all; only
# `init_process_group(timeout=...)` plus the watchdog (`TORCH_NCCL_ASYNC_ERROR_HANDLING`) end the process so
# that torchrun can restart or report. The timeout must exceed the slowest step (checkpoint saving included),
# or healthy jobs get killed. A monitored barrier is not free (a round trip through rank 0 each time): place it
# every N steps or once per epoch.

# %% [markdown] tags=["zh"]
# ## 6 · 调试工具箱
#
# RCCL 读取与 NCCL 同名的 `NCCL_*` 变量；PyTorch 的 ProcessGroupNCCL 另有 `TORCH_NCCL_*`。按症状：
#
# | 症状 `symptom` | 变量 |
# | --- | --- |
# | `need_logs` 需要看 RCCL 在做什么 | `NCCL_DEBUG=INFO`（VERSION/WARN/INFO/TRACE），`NCCL_DEBUG_SUBSYS=INIT,COLL` |
# | `wrong_interface` 初始化卡住/连错网卡（docker 网桥！） | `NCCL_SOCKET_IFNAME`：给定网卡写 `=ens5`（精确匹配），否则排除 `^docker,lo`；gloo 用 `GLOO_SOCKET_IFNAME`；日志 `INIT,NET` |
# | `p2p_failure` GPU 直连出错或卡住（常与 IOMMU 有关，`iommu=pt`） | `NCCL_P2P_DISABLE=1`，日志 `INIT,P2P` |
# | `hang` 某个集合操作不返回 | flight recorder：缓冲区 2000 条 + `TORCH_NCCL_DUMP_ON_TIMEOUT=1` + 转储文件前缀 |
# | `desync` 各 rank 调用的集合操作不一致 | `TORCH_NCCL_DESYNC_DEBUG=1`，`TORCH_DISTRIBUTED_DEBUG=DETAIL` |
# | `no_exit_after_error` 出错后作业不退出 | `TORCH_NCCL_ASYNC_ERROR_HANDLING=1`（中止通信器并结束进程） |
# | `slow_collectives` 带宽低 | `NCCL_DEBUG=INFO`，`NCCL_DEBUG_SUBSYS=INIT,GRAPH,TUNING`（看拓扑、通道与算法） |
#
# flight recorder 的变量改过名：缓冲区大小 `TORCH_NCCL_TRACE_BUFFER_SIZE` → `TORCH_FR_BUFFER_SIZE`，转储文件
# `TORCH_NCCL_DEBUG_INFO_TEMP_FILE` → `TORCH_FR_DUMP_TEMP_FILE`，发生在 PyTorch 2.8–2.9 前后；新版本仍把旧名当作
# 后备读取（torch 2.13 的 `distributed_c10d.py` 先读 `TORCH_FR_BUFFER_SIZE` 再读旧名）。本实验约定：
# torch ≥ 2.10 用新名，更早的版本用旧名。来源：PyTorch 文档 “PYTORCH ProcessGroupNCCL Environment Variables”、
# NCCL 文档 “Environment Variables”、pytorch/torchtitan PR #1748。

# %% [markdown] tags=["en"]
# ## 6 · A debugging kit
#
# RCCL reads the same `NCCL_*` variables as NCCL; PyTorch's ProcessGroupNCCL adds `TORCH_NCCL_*`. By symptom:
#
# | `symptom` | variables |
# | --- | --- |
# | `need_logs`: see what RCCL is doing | `NCCL_DEBUG=INFO` (VERSION/WARN/INFO/TRACE), `NCCL_DEBUG_SUBSYS=INIT,COLL` |
# | `wrong_interface`: init hangs / wrong NIC (a docker bridge!) | `NCCL_SOCKET_IFNAME`: `=ens5` for a given NIC (exact match), else exclude `^docker,lo`; gloo reads `GLOO_SOCKET_IFNAME`; logs `INIT,NET` |
# | `p2p_failure`: GPU peer-to-peer errors or hangs (often IOMMU: `iommu=pt`) | `NCCL_P2P_DISABLE=1`, logs `INIT,P2P` |
# | `hang`: a collective never returns | flight recorder: a 2000-entry buffer + `TORCH_NCCL_DUMP_ON_TIMEOUT=1` + a dump file prefix |
# | `desync`: ranks call different collectives | `TORCH_NCCL_DESYNC_DEBUG=1`, `TORCH_DISTRIBUTED_DEBUG=DETAIL` |
# | `no_exit_after_error`: the job does not exit after an error | `TORCH_NCCL_ASYNC_ERROR_HANDLING=1` (abort the communicator, end the process) |
# | `slow_collectives`: low bandwidth | `NCCL_DEBUG=INFO`, `NCCL_DEBUG_SUBSYS=INIT,GRAPH,TUNING` (topology, channels, algorithms) |
#
# The flight recorder variables were renamed: buffer size `TORCH_NCCL_TRACE_BUFFER_SIZE` → `TORCH_FR_BUFFER_SIZE`,
# dump file `TORCH_NCCL_DEBUG_INFO_TEMP_FILE` → `TORCH_FR_DUMP_TEMP_FILE`, around PyTorch 2.8–2.9; newer
# releases still read the old names as a fallback (torch 2.13's `distributed_c10d.py` reads
# `TORCH_FR_BUFFER_SIZE`, then the old name). This lab's rule: new names for torch ≥ 2.10, old names before.
# Sources: PyTorch docs "PYTORCH ProcessGroupNCCL Environment Variables", NCCL docs "Environment Variables",
# pytorch/torchtitan PR #1748.

# %% tags=["solution"] grade_id="04-debug-sol-1"
def debug_env(symptom, *, torch_version=torch.__version__, iface=None, dump_dir="fr_dumps"):
    """Environment variables (str -> str) to set for a distributed-job symptom (see the table above).

    symptom: "need_logs" | "wrong_interface" | "p2p_failure" | "hang" | "desync" | "no_exit_after_error"
    | "slow_collectives". torch_version: e.g. "2.13.0+rocm7.14" (picks the flight-recorder names).
    iface: the network interface to use, if known. dump_dir: folder for flight-recorder dumps.
    Raises ValueError naming the known symptoms for an unknown one.
    """
    ### BEGIN SOLUTION
    major, minor = (int(part) for part in torch_version.split("+")[0].split(".")[:2])
    new_names = (major, minor) >= (2, 10)
    buffer_var = "TORCH_FR_BUFFER_SIZE" if new_names else "TORCH_NCCL_TRACE_BUFFER_SIZE"
    dump_var = "TORCH_FR_DUMP_TEMP_FILE" if new_names else "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
    if symptom == "wrong_interface":
        socket = {"NCCL_SOCKET_IFNAME": f"={iface}", "GLOO_SOCKET_IFNAME": iface} if iface \
            else {"NCCL_SOCKET_IFNAME": "^docker,lo"}
    kits = {
        "need_logs": lambda: {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,COLL"},
        "wrong_interface": lambda: {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", **socket},
        "p2p_failure": lambda: {"NCCL_P2P_DISABLE": "1", "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,P2P"},
        "hang": lambda: {buffer_var: "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
                         dump_var: f"{dump_dir}/rank_"},
        "desync": lambda: {"TORCH_NCCL_DESYNC_DEBUG": "1", "TORCH_DISTRIBUTED_DEBUG": "DETAIL"},
        "no_exit_after_error": lambda: {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"},
        "slow_collectives": lambda: {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,GRAPH,TUNING"},
    }
    if symptom not in kits:
        raise ValueError(f"unknown symptom {symptom!r}; known: {sorted(kits)}")
    return kits[symptom]()
    ### END SOLUTION

# %% tags=["test"] grade_id="04-debug-1" points=3
_e = debug_env("p2p_failure")
assert _e.get("NCCL_P2P_DISABLE") == "1", f"P2P 故障应关闭 P2P / p2p_failure must set NCCL_P2P_DISABLE=1: {_e}"
_e = debug_env("hang", torch_version="2.13.0+rocm7.14.0", dump_dir="/tmp/fr")
assert _e.get("TORCH_FR_BUFFER_SIZE", "0") not in ("", "0") and _e.get("TORCH_NCCL_DUMP_ON_TIMEOUT") == "1", \
    f"torch 2.13 的 hang：新名字的缓冲区 + DUMP_ON_TIMEOUT / hang on 2.13: TORCH_FR_BUFFER_SIZE > 0 and dump on timeout: {_e}"
assert all(isinstance(_k, str) and isinstance(_v, str) for _k, _v in _e.items()), "环境变量的值必须是 str / values must be str"
### BEGIN HIDDEN TESTS
_e = debug_env("hang", torch_version="2.7.1+rocm6.3", dump_dir="/tmp/fr")
assert int(_e.get("TORCH_NCCL_TRACE_BUFFER_SIZE", "0")) > 0 and "TORCH_FR_BUFFER_SIZE" not in _e, _e
assert _e.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "").startswith("/tmp/fr"), _e
assert debug_env("hang", torch_version="2.13.0", dump_dir="/x")["TORCH_FR_DUMP_TEMP_FILE"].startswith("/x")
_e = debug_env("wrong_interface", iface="ens5")
assert _e.get("NCCL_SOCKET_IFNAME") in ("ens5", "=ens5") and _e.get("NCCL_DEBUG") in ("INFO", "TRACE"), _e
_e = debug_env("wrong_interface")
assert _e.get("NCCL_SOCKET_IFNAME", "").startswith("^") and "docker" in _e["NCCL_SOCKET_IFNAME"], _e
_e = debug_env("need_logs")
assert _e.get("NCCL_DEBUG") in ("INFO", "TRACE") and "INIT" in _e.get("NCCL_DEBUG_SUBSYS", ""), _e
_e = debug_env("desync")
assert _e.get("TORCH_NCCL_DESYNC_DEBUG") == "1" and _e.get("TORCH_DISTRIBUTED_DEBUG") == "DETAIL", _e
assert debug_env("no_exit_after_error").get("TORCH_NCCL_ASYNC_ERROR_HANDLING") in ("1", "3"), "async error handling"
_e = debug_env("slow_collectives")
assert _e.get("NCCL_DEBUG") in ("INFO", "TRACE") and {"GRAPH", "TUNING"} <= set(_e.get("NCCL_DEBUG_SUBSYS", "").split(",")), _e
try:
    debug_env("it is slow")
except ValueError:
    pass
else:
    raise AssertionError("an unknown symptom must raise ValueError")
### END HIDDEN TESTS

# %% [markdown] tags=["zh"]
# 用工具箱看一次：第 5 节那个会卡死的脚本，配上 `desync` 的变量再跑。`TORCH_DISTRIBUTED_DEBUG=DETAIL` 在 gloo
# 上也生效：每个集合操作前先核对各 rank 的“指纹”（序号、操作类型、形状），不一致时立即报出哪两个 rank 在做什么，
# 而不是卡死。它有开销，只在调试时打开。

# %% [markdown] tags=["en"]
# Try the kit once: the hanging script of section 5, run again with the `desync` variables.
# `TORCH_DISTRIBUTED_DEBUG=DETAIL` works on gloo too: before each collective the ranks compare fingerprints
# (sequence number, op type, shapes), and a mismatch is reported at once, naming what each rank was doing,
# instead of hanging. It costs time: switch it on for debugging only.

# %%
desync = lab.run_torchrun("train_uneven.py", nproc=N_RANKS, args=["--runs", RUNS, "--tag", "desync"],
                          env=debug_env("desync"), timeout_s=LAUNCH_TIMEOUT_S, show=False)
print(desync.summary())
for line in desync.rank(0).output.splitlines():
    if "mismatch" in line.lower():
        print(line[:400])
        break

# %% tags=["test"] grade_id="04-debug-2" points=1
assert not desync.timed_out and desync.returncode != 0, \
    f"DETAIL 模式应立即报错而不是卡死 / DETAIL should fail at once, not hang: {desync.summary()}"
assert any("mismatch" in _r.output.lower() for _r in desync.ranks), "应报告集合操作不一致 / expected a mismatch report"

# %% [markdown] tags=["zh"]
# ## 小结
#
# 你写了可移植的初始化、手写的 ring all-reduce（并量出 2(n−1)/n）、nccl-tests 的 algbw/busbw、一个基准曲线、
# 让卡死变成有界失败的保护与修复，以及一个按症状设变量的工具箱。在更大的 GPU 机器上：用 multi-gpu 配置
# 跑基准并与 xGMI/PCIe 峰值比较；用 rccl-tests 对照；把 `debug_env("hang")` 的转储交给 PyTorch 的 flight recorder
# 分析脚本（`torchfrtrace`）。文档：PyTorch `torch.distributed`、RCCL（rocm.docs.amd.com）、NCCL 环境变量、
# nccl-tests `doc/PERFORMANCE.md`。最后一个单元确认没有任何 rank 进程残留。

# %% [markdown] tags=["en"]
# ## Wrap-up
#
# You built a portable init, a hand-written ring all-reduce (and measured 2(n−1)/n), nccl-tests' algbw/busbw,
# a benchmark curve, guards that turn a hang into a bounded failure plus the fix, and a kit of variables per
# symptom. On a bigger GPU box: run the benchmark in the multi-gpu profile and compare with the xGMI/PCIe
# peak; cross-check with rccl-tests; feed the dumps of `debug_env("hang")` to PyTorch's flight recorder
# analyser (`torchfrtrace`). Docs: PyTorch `torch.distributed`, RCCL (rocm.docs.amd.com), NCCL environment
# variables, nccl-tests `doc/PERFORMANCE.md`. The last cell checks that no rank process survived.

# %%
survivors = lab.leftover_processes()
assert survivors == [], f"rank processes still alive: {[p.pid for p in survivors]}"
print("no rank process survived")
