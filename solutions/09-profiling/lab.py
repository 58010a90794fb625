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
# # Lab 09 · 性能剖析与调优
#
# **版本** {{version}} · **时长** 约 {{minutes}} 分钟 · **前置**：Lab 01（诚实计时）、Lab 02（推理与 roofline）、PyTorch 基础
#
# Lab 02 告诉你一个数字离上界有多远，这个实验回答**为什么**，以及**哪个杠杆 (lever)** 能修好它。
# "AMD 很慢"和"一个调好的系统"之间的差别，往往就在这里。你将为质检系统的报告模型：
#
# 1. 用 `torch.profiler` 剖析，算出各类算子占自身时间 (self time) 的比例，导出 Perfetto 轨迹；再自己写剖析调用，决定测什么（schedule、形状、内存）；
# 2. 从轨迹事件算出设备空闲时间，判断瓶颈在主机 (host)、设备 (device) 还是数据加载 (data)；
# 3. 拉动杠杆——批处理、`torch.compile`、HIP/CUDA Graph——并用"中位数 + 离散度"诚实地比较；
# 4. 读懂 TunableOp 的 GEMM 调优结果文件，判断它能否随部署一起发布；
# 5. 读懂 `rocprofv3`（kernel trace；硬件计数器是选做拓展）与 `rocprof-compute` 的录制输出，用数字回答问题；
# 6. 找到训练步的显存峰值，用激活检查点 (activation checkpointing) 降下来并量出省了多少；
# 7. 拿到两份剖析，说出该拉哪个杠杆、哪个指标能证明它起了作用。
#
# smoke 配置在 CPU 上用离线的 tiny-qwen-zh 运行，分析代码与 gpu 配置完全相同；ROCm 工具的输出以录制文件的形式提供
#（见 `data/README.md`：**这些文件是示意数据，不是实测**）。

# %% [markdown] tags=["en"]
# # Lab 09 · Profiling and the performance levers of ROCm
#
# **Version** {{version}} · **Time** about {{minutes}} minutes · **Prerequisites**: lab 01 (honest timing), lab 02 (inference
# and the roofline), PyTorch basics
#
# Lab 02 tells you how far a number is from its bound; this lab answers **why**, and **which lever** fixes it.
# That is often the whole difference between "AMD is slow" and a tuned system. For the report model of our
# quality-inspection system you will:
#
# 1. profile with `torch.profiler`, compute each operator category's share of self time, export a Perfetto trace;
#    then write the profiler call yourself and decide what it measures (a schedule, shapes, memory);
# 2. compute the device's idle time from trace events and name the bound: host, device or data loading;
# 3. pull levers (batching, `torch.compile`, HIP/CUDA graphs) and compare them honestly, medians with spread;
# 4. read a TunableOp GEMM tuning file and decide whether it can ship with a deployment;
# 5. read recorded `rocprofv3` (kernel trace; the hardware counters are an optional stretch) and `rocprof-compute`
#    outputs, and answer with numbers;
# 6. find the peak memory of a training step, lower it with activation checkpointing and measure the saving;
# 7. given two profiles, say which lever to pull and which metric proves that it worked.
#
# The smoke profile runs on a CPU with the offline tiny-qwen-zh; the analysis code is the same as in the gpu
# profile. The ROCm tools' outputs come as recorded files (see `data/README.md`: **they are illustrative, not
# measured**).

# %% [markdown] tags=["zh"]
# **自测与提交。** 每个练习下面的测试单元格是可见的自测：随时运行它们，或在终端运行 `rocmlab check <本笔记本>.ipynb`
#（它执行所有可见测试）。做完后在 Jupyter 的 nbgrader **Assignments** 标签页提交（工作坊 hub 上由讲师统一收取）。
# 成绩来自隐藏检查：它们逐条检查练习说明中写明的每条规则，输入由你自己的种子生成（其他尺寸、其他数值、边界情况），
# 不会检查说明之外的要求。可见测试全部通过、又满足说明中的每条规则，就能得到满分。

# %% [markdown] tags=["en"]
# **Self-check and submit.** The test cell under each exercise is your visible self-check: run it any time, or run
# `rocmlab check <this notebook>.ipynb` in a terminal (it runs all visible tests). When done, submit from the nbgrader
# **Assignments** tab in Jupyter (on the workshop hub the instructor collects it). The grade comes from hidden checks
# that test each rule stated in an exercise's text, one by one, on inputs drawn from your own seed (other sizes,
# other values, edge cases); they check nothing the text does not state. Pass the visible tests and follow every
# stated rule, and you get full marks.

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
DTYPE = "float32"          # gpu profile: "bfloat16"
BATCH = 16                 # sequences in the batching lever
REPEATS = 7                # timed samples per measurement (median and spread)
CALLS = 3                  # calls of the model between two synchronizations in one sample
REGION_CALLS = 200         # calls of the small fused region between two synchronizations
COMPILE = True             # compile the region with torch.compile (inductor; g++ on a CPU)
TRAIN_BATCH = 8            # sequences in the profiled training step
TRAIN_TOKENS = 128         # tokens per sequence in the training step

# %%
import csv
import inspect
import json
import math
import pathlib
import statistics
import time

import matplotlib.pyplot as plt
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from rocmlab import lab

lab.seed_everything(SEED)
device = lab.pick_device(DEVICE)
dtype = getattr(torch, DTYPE)
if device.type == "cpu":
    # A small model on a CPU is bound by operator dispatch: extra threads only add synchronisation,
    # and oversubscribe the cores when a grader runs several notebooks at once.
    torch.set_num_threads(1)
DATA = pathlib.Path("data")
GPU = device.type == "cuda"
ACTIVITIES = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if GPU else [])
print(lab.describe_environment(PROFILE, device))

model, tok = lab.load_model(MODEL, device=device, dtype=dtype)
model.eval()
reports = lab.load_qc_reports("eval")
CACHE_ARG = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def forward(ids, cache=None):
    """One forward pass with the KV cache on; returns (logits, cache). transformers 5 renamed the argument."""
    out = model(input_ids=ids, use_cache=True, **{CACHE_ARG: cache})
    return out.logits, getattr(out, "cache", None) or out.past_key_values


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


print(f"{type(model).__name__}: {sum(p.numel() for p in model.parameters()):,} parameters, {dtype}")

# %% [markdown] tags=["zh"]
# ## 1 · 用 torch.profiler 剖析
#
# `torch.profiler.profile` 记录每个算子 (operator) 的调用，`key_averages()` 按名字汇总：**自身时间 (self time)** 是算子自己花的时间，
# 不含它调用的子算子；**总时间 (total)** 包含子算子。找瓶颈要看自身时间，否则 `aten::linear` 和它内部的 `aten::addmm`
# 会被重复计算。在 GPU 上，算子的自身设备时间 (`self_device_time_total`) 是它发射的 kernel 在 GPU 上运行的时间；在 CPU 上
# 用 `self_cpu_time_total`。`record_function("decode_step")` 给一段代码打上标注，它不是算子，下面的 `profile_rows` 把它排除。
# GPU 上 kernel 本身也是 `key_averages()` 的行（`device_type` 不是 CPU），它们的时间已经算在发射它们的算子的自身设备时间里，
# 所以 `profile_rows` 只保留算子行，否则设备时间会被算两次。PyTorch 自己的表也让每个 kernel 只算一次：表底的设备时间总和只加 kernel 行
#（PyTorch 源码 [`torch/autograd/profiler_util.py`](https://github.com/pytorch/pytorch/blob/main/torch/autograd/profiler_util.py) 的 `_build_table`）；
# 我们反过来保留算子行，因为类别按算子名匹配。
# 参考：[PyTorch profiler recipe](https://docs.pytorch.org/tutorials/recipes/recipes/profiler_recipe.html)。
#
# 我们剖析批大小为 1 的逐 token 解码 (decode)：这正是在线服务里最常见、也最容易被开销拖慢的形态。

# %% [markdown] tags=["en"]
# ## 1 · Profile with torch.profiler
#
# `torch.profiler.profile` records every operator call, and `key_averages()` groups them by name: **self time** is
# the time an operator spends itself, without the operators it calls; **total** includes them. Look for the
# bottleneck in self time, or `aten::linear` and the `aten::addmm` inside it are counted twice. On a GPU an
# operator's self device time (`self_device_time_total`) is the time its kernels ran on the GPU; on a CPU use
# `self_cpu_time_total`. `record_function("decode_step")` labels a range of code; it is not an operator, and
# `profile_rows` below leaves it out. On a GPU the kernels are rows of `key_averages()` too (their `device_type` is
# not the CPU) and their time is already in the self device time of the operators that launched them, so
# `profile_rows` keeps operator rows only; otherwise device time is counted twice. PyTorch's own table counts each
# kernel once too: its total of device time adds the kernel rows only (`_build_table` in PyTorch's
# [`torch/autograd/profiler_util.py`](https://github.com/pytorch/pytorch/blob/main/torch/autograd/profiler_util.py));
# we keep the operator rows instead, because the categories match operator names. See the [PyTorch profiler recipe](https://docs.pytorch.org/tutorials/recipes/recipes/profiler_recipe.html).
#
# We profile token-by-token decoding at batch 1: the most common shape in online serving, and the one most
# easily slowed down by overheads.

# %%
DECODE_STEPS = 4
TOKEN_STREAM = tok("\n".join(r["description"] for r in reports[:20]))["input_ids"]
PROMPT = TOKEN_STREAM[:32]


def start_decode(batch=1):
    """Prefill the prompt; the decoding state: {"next": the next token ids, "cache": the KV cache}."""
    with torch.no_grad():
        logits, cache = forward(torch.tensor([PROMPT] * batch, device=device))
    return {"next": logits[:, -1:].argmax(-1), "cache": cache}


def next_token(state):
    """One single-token decode step; updates `state` (the device may still be running it)."""
    with torch.no_grad():
        logits, state["cache"] = forward(state["next"], state["cache"])
        state["next"] = logits[:, -1:].argmax(-1)


def decode(n_steps, batch=1):
    """Prefill the prompt, then `n_steps` single-token decode steps, each labelled decode_step."""
    state = start_decode(batch)
    for _ in range(n_steps):
        with record_function("decode_step"):
            next_token(state)
    lab.synchronize(device)


def profile_rows(prof):
    """key_averages() as plain rows {name, self_us, calls}: self time on the device that did the work."""
    rows = []
    for r in prof.key_averages():
        if getattr(r, "is_user_annotation", False):
            continue
        if r.device_type != DeviceType.CPU:  # a kernel's row: its time is already in its operator's self device time
            continue
        self_us = r.self_device_time_total if GPU else r.self_cpu_time_total
        rows.append({"name": r.key, "self_us": float(self_us), "calls": int(r.count)})
    return rows


decode(1)  # warm-up: first calls allocate and pick kernels
with profile(activities=ACTIVITIES) as decode_prof:
    decode(DECODE_STEPS)
PROFILE_ROWS = profile_rows(decode_prof)
decode_prof.export_chrome_trace("decode_trace.json")
print(decode_prof.key_averages().table(sort_by="self_device_time_total" if GPU else "self_cpu_time_total",
                                       row_limit=8))

# %% [markdown] tags=["zh"]
# **练习 1：按类别汇总自身时间。** 实现 `self_time_shares(rows, categories)`。
#
# - `rows`：`profile_rows` 的输出，每行 `{"name", "self_us", "calls"}`，`self_us` 是微秒；
# - `categories`：有序字典 `{类别名: [模式字符串, ...]}`；一个算子属于**第一个**有模式出现在其名字中（子串匹配，区分大小写）的类别；
#   都不匹配的归入 `"other"`；
# - 返回字典：`categories` 的每个类别加上 `"other"` 都是键（没有算子的类别为 0.0），值是该类别自身时间占全部行自身时间的比例
#  （0 到 1 之间，总和为 1）；
# - 所有行的自身时间之和为 0（或没有行）时抛出 `ValueError`。

# %% [markdown] tags=["en"]
# **Exercise 1: self time by category.** Implement `self_time_shares(rows, categories)`.
#
# - `rows`: the output of `profile_rows`, each row `{"name", "self_us", "calls"}`, `self_us` in microseconds;
# - `categories`: an ordered dict `{category: [pattern, ...]}`; an operator belongs to the **first** category
#   with a pattern that occurs in its name (substring, case-sensitive); an operator that matches none goes to
#   `"other"`;
# - returns a dict: every category of `categories` plus `"other"` is a key (0.0 when it has no operator), the
#   value is that category's share of the self time of all rows (between 0 and 1; they sum to 1);
# - raises `ValueError` when the rows' self times sum to 0 (or there are no rows).

# %%
CATEGORIES = {
    "matmul": ["aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear"],
    "attention": ["attention"],
    "norm": ["aten::pow", "aten::mean", "aten::rsqrt"],
    "elementwise": ["aten::mul", "aten::add", "aten::silu", "aten::neg", "aten::sub", "aten::div"],
    "data movement": ["aten::copy_", "aten::cat", "aten::_to_copy", "aten::to", "aten::contiguous", "aten::index"],
}

# %% tags=["solution"] grade_id="09-shares-sol-1"
def self_time_shares(rows, categories):
    """{category: share of total self time} with "other" for unmatched operators; see the contract above."""
    ### BEGIN SOLUTION
    total = sum(row["self_us"] for row in rows)
    if not total > 0:
        raise ValueError("the rows' self time sums to 0: nothing was profiled")
    shares = {name: 0.0 for name in categories} | {"other": 0.0}
    for row in rows:
        category = next((name for name, patterns in categories.items()
                         if any(p in row["name"] for p in patterns)), "other")
        shares[category] += row["self_us"] / total
    return shares
    ### END SOLUTION


DECODE_SHARES = self_time_shares(PROFILE_ROWS, CATEGORIES)
lab.plot_bars({k: 100 * v for k, v in DECODE_SHARES.items()}, title="decode step: share of self time",
              ylabel="%")
plt.xticks(fontsize=8, rotation=20)
plt.show()

# %% tags=["test"] grade_id="09-shares-1" points=2
_rows = [{"name": "aten::addmm", "self_us": 30.0, "calls": 3}, {"name": "aten::mul", "self_us": 10.0, "calls": 5},
         {"name": "aten::flip", "self_us": 10.0, "calls": 1}]
_got = self_time_shares(_rows, {"matmul": ["aten::addmm"], "elementwise": ["aten::mul", "aten::add"]})
assert _got == {"matmul": 0.6, "elementwise": 0.2, "other": 0.2}, \
    f"期望 / expected matmul 0.6, elementwise 0.2, other 0.2, got {_got}"
_got = self_time_shares(_rows, {"add": ["aten::add"], "matmul": ["mm"], "none": ["xyz"]})
assert _got == {"add": 0.6, "matmul": 0.0, "none": 0.0, "other": 0.4}, \
    f"第一个匹配的类别胜出：aten::addmm 含 'aten::add' / the first matching category wins, got {_got}"
try:
    self_time_shares([{"name": "aten::mm", "self_us": 0.0, "calls": 1}], CATEGORIES)
except ValueError:
    pass
else:
    raise AssertionError("自身时间之和为 0 应抛出 ValueError / self times summing to 0 must raise ValueError")

# %% [markdown] tags=["zh"]
# **看轨迹。** `decode_trace.json` 是 Chrome 轨迹格式 (JSON)：打开 <https://ui.perfetto.dev>，把文件拖进去
#（或在 Chrome 中打开 `chrome://tracing` 再加载）。CPU 行上是算子，GPU 上还有一行行 kernel；`decode_step` 标注框出每一步。
# 缩放到一步之内：在 GPU 上，如果 kernel 之间是大片空白，而 CPU 行上挤满了算子，说明设备在等主机发射 kernel。

# %% [markdown] tags=["en"]
# **Look at the trace.** `decode_trace.json` is in the Chrome trace format (JSON): open <https://ui.perfetto.dev> and
# drop the file in (or load it in Chrome's `chrome://tracing`). CPU rows show operators; on a GPU there are rows of
# kernels too; the `decode_step` annotations frame each step. Zoom into one step: on a GPU, wide gaps between
# kernels while the CPU row is packed with operators mean the device is waiting for the host to launch work.

# %% [markdown] tags=["zh"]
# **练习 1b：自己写剖析调用。** 上面的剖析是现成的。现在由你决定测什么：实现 `profile_decode(n_steps, trace_path)`，
# 让它产生的轨迹能回答三个问题——每个解码步用了多久？矩阵乘的输入形状是什么？每个算子分配了多少内存？
#
# - 用 `start_decode()` 开始解码，然后调用 `next_token(state)` 共 `n_steps + 1` 次，每次都包在 `record_function("decode_step")` 里，每次之后调用 `prof.step()`；
# - `profile(...)` 的 `activities` 用 `ACTIVITIES`（CPU，GPU 上加上 CUDA/HIP）；
# - 第一步是预热，运行但不记录——这是 `schedule` 的工作，参数由你定。所以轨迹里恰好有 `n_steps` 个 `decode_step` 区间，
#   步标记是 `ProfilerStep#1` … `ProfilerStep#n_steps`（第 0 步是预热）；
# - 每个算子事件 (`"cat": "cpu_op"`) 的 `args` 里有输入形状 `"Input Dims"`；
# - 轨迹里有内存事件（名为 `"[memory]"`）；
# - 后两条各由 `profile(...)` 的哪个参数打开？从下面的文档里找：这就是"决定测什么"；
# - 用 `export_chrome_trace(trace_path)` 写出 Chrome 轨迹（有 schedule 时在 `on_trace_ready` 里写，或在 `with` 块之后写），返回 `trace_path`；
# - `n_steps` 小于 1 时在剖析之前抛出 `ValueError`。
#
# 参考：[PyTorch profiler recipe](https://docs.pytorch.org/tutorials/recipes/recipes/profiler_recipe.html) 的
# "Using profiler to analyze memory consumption"、"Using tracing functionality" 和 "Using profiler to analyze long-running jobs"（schedule）三节，
# 以及 [`torch.profiler` API](https://docs.pytorch.org/docs/stable/profiler.html)。

# %% [markdown] tags=["en"]
# **Exercise 1b: write the profiler call yourself.** The profile above was written for you. Now you decide what to
# measure: implement `profile_decode(n_steps, trace_path)` so that its trace answers three questions: how long did
# each decode step take? what input shapes did the matmuls have? how much memory did each operator allocate?
#
# - Start decoding with `start_decode()`, then call `next_token(state)` `n_steps + 1` times, each call inside
#   `record_function("decode_step")`, with `prof.step()` after each;
# - `profile(...)` gets `activities=ACTIVITIES` (the CPU, plus CUDA/HIP on a GPU);
# - the first step is a warm-up that runs but is not recorded: that is a `schedule`'s job, with arguments you choose.
#   So the trace holds exactly `n_steps` `decode_step` ranges, and its step marks are `ProfilerStep#1` …
#   `ProfilerStep#n_steps` (step 0 is the warm-up);
# - every operator event (`"cat": "cpu_op"`) has its input shapes, `"Input Dims"`, in its `args`;
# - the trace holds memory events (named `"[memory]"`);
# - which `profile(...)` argument turns on each of the last two? Find it in the documents below: that is the
#   "deciding what to measure";
# - write the Chrome trace with `export_chrome_trace(trace_path)` (with a schedule, in `on_trace_ready` or after the
#   `with` block) and return `trace_path`;
# - raise `ValueError` before profiling when `n_steps` is below 1.
#
# See the sections "Using profiler to analyze memory consumption", "Using tracing functionality" and "Using profiler
# to analyze long-running jobs" (the schedule) of the [PyTorch profiler recipe](https://docs.pytorch.org/tutorials/recipes/recipes/profiler_recipe.html),
# and the [`torch.profiler` API](https://docs.pytorch.org/docs/stable/profiler.html).

# %% tags=["solution"] grade_id="09-record-sol-1"
def profile_decode(n_steps, trace_path):
    """Profile n_steps decode steps after one warm-up step; write a Chrome trace with shapes and memory; see above."""
    ### BEGIN SOLUTION
    if not isinstance(n_steps, int) or n_steps < 1:
        raise ValueError(f"n_steps must be a positive integer, got {n_steps!r}")
    state = start_decode()
    with profile(activities=ACTIVITIES, schedule=schedule(wait=0, warmup=1, active=n_steps),
                 record_shapes=True, profile_memory=True,
                 on_trace_ready=lambda prof: prof.export_chrome_trace(str(trace_path))) as prof:
        for _ in range(n_steps + 1):
            with record_function("decode_step"):
                next_token(state)
            prof.step()
    return trace_path
    ### END SOLUTION


def trace_events(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)["traceEvents"]


RECORDED = trace_events(profile_decode(3, "decode_profile.json"))
_mm_dims = sorted({json.dumps(e["args"]["Input Dims"]) for e in RECORDED
                   if e.get("cat") == "cpu_op" and e["name"] in ("aten::mm", "aten::addmm", "aten::linear")})
_allocated = [e["args"]["Total Allocated"] for e in RECORDED if e.get("name") == "[memory]"]
print("matmul input shapes:", *_mm_dims[:6], sep="\n  ")
print(f"{len(_allocated)} memory events; peak allocated while profiling: {max(_allocated, default=0) / 2**20:.1f} MiB")

# %% tags=["test"] grade_id="09-record-1" points=3
_marks = sorted(e["name"] for e in RECORDED if e.get("name", "").startswith("ProfilerStep#"))
assert _marks == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"], \
    f"预热的第 0 步不该被记录 / step 0 is the warm-up and is not recorded: {_marks}"
_steps = [e for e in RECORDED if e.get("name") == "decode_step" and e.get("cat") == "user_annotation"]
assert len(_steps) == 3, f"3 个记录的步应有 3 个 decode_step 区间 / 3 recorded steps, 3 decode_step ranges: {len(_steps)}"
_ops = [e for e in RECORDED if e.get("cat") == "cpu_op"]
assert _ops and all("Input Dims" in e.get("args", {}) for e in _ops), \
    "算子事件要带输入形状：record_shapes=True / operator events need input shapes: record_shapes=True"
assert _allocated, "轨迹里没有内存事件：profile_memory=True / no memory events in the trace: profile_memory=True"
try:
    profile_decode(0, "never_written.json")
except ValueError:
    pass
else:
    raise AssertionError("n_steps=0 应抛出 ValueError / n_steps=0 must raise ValueError")

# %% [markdown] tags=["zh"]
# ## 2 · 设备在等谁？主机、设备还是数据
#
# GPU 调用是异步的：主机把 kernel 放进队列就返回。主机**领先**设备时，队列里总有活，设备忙——瓶颈在设备；主机**落后**时
#（每个 kernel 只要几微秒，而 Python 和调度器发射它要更久），设备一次次空等——瓶颈在主机，也叫"发射开销受限"
# (launch-overhead-bound)。从轨迹上看：在一个时间窗口内把设备工作区间取并集，窗口减去并集就是设备空闲时间。
# 在 GPU 上设备工作是 kernel 事件；在 CPU 上（smoke）"设备"就是 CPU 自己，工作是算子事件，空隙是 Python 与框架开销——同一个计算。
#
# **练习 2：忙碌与空闲。** 实现 `busy_and_idle(intervals, start, end)`：
#
# - `intervals`：`(开始, 结束)` 区间列表，与窗口 `[start, end]` 使用同一时间单位（结果也是这个单位）；区间可以重叠、嵌套、
#   顺序任意，也可以部分或全部落在窗口外——只计算窗口内的部分；长度为 0 的区间（结束 ≤ 开始）不含工作；
# - 返回 `{"busy", "idle", "idle_fraction", "largest_gap"}`：`busy` 是窗口内区间并集的长度，`idle = (end − start) − busy`，
#   `idle_fraction = idle / (end − start)`，`largest_gap` 是窗口内最长的一段无工作时间（包括第一个区间之前和最后一个之后）；
# - `end <= start` 时抛出 `ValueError`。

# %% [markdown] tags=["en"]
# ## 2 · Who is the device waiting for? Host, device or data
#
# GPU calls are asynchronous: the host queues a kernel and returns. When the host runs **ahead** of the device, the
# queue always holds work and the device is busy: the bound is the device. When it falls **behind** (each kernel
# runs for a few microseconds, and Python and the dispatcher take longer to launch it), the device waits again and
# again: the bound is the host, "launch-overhead-bound". In a trace: take the union of the device's work intervals
# in a time window; the window minus the union is the device's idle time. On a GPU the work is the kernel events;
# on a CPU (smoke) the "device" is the CPU itself, the work is the operator events, and the gaps are Python and
# framework overhead: the same computation.
#
# **Exercise 2: busy and idle.** Implement `busy_and_idle(intervals, start, end)`:
#
# - `intervals`: a list of `(start, end)` pairs in the same time unit as the window `[start, end]` (the results
#   are in that unit too); intervals may overlap, nest, come in any order, and lie partly or wholly outside the
#   window: only the part inside the window counts; an empty interval (end ≤ start) holds no work;
# - returns `{"busy", "idle", "idle_fraction", "largest_gap"}`: `busy` is the length of the union of the
#   intervals inside the window, `idle = (end − start) − busy`, `idle_fraction = idle / (end − start)`,
#   `largest_gap` is the longest stretch without work inside the window (before the first interval and after the
#   last one count too);
# - raises `ValueError` when `end <= start`.

# %% tags=["solution"] grade_id="09-idle-sol-1"
def busy_and_idle(intervals, start, end):
    """Union of the work intervals inside [start, end] and the idle time around it; see the contract above."""
    ### BEGIN SOLUTION
    if not end > start:
        raise ValueError(f"the window must have end > start, got [{start}, {end}]")
    clipped = sorted((max(a, start), min(b, end)) for a, b in intervals if b > a and b > start and a < end)
    busy, largest_gap, cursor = 0, 0, start
    for a, b in clipped:
        if a > cursor:
            largest_gap = max(largest_gap, a - cursor)
        if b > cursor:
            busy += b - max(a, cursor)
            cursor = b
    largest_gap = max(largest_gap, end - cursor)
    idle = (end - start) - busy
    return {"busy": busy, "idle": idle, "idle_fraction": idle / (end - start), "largest_gap": largest_gap}
    ### END SOLUTION


def trace_work(path, step="decode_step"):
    """(windows, work intervals) in µs from an exported trace: on a GPU the kernels inside the step's
    GPU-side annotation (or their whole span), on a CPU the operators inside the step's annotation."""
    events = [e for e in json.load(open(path, encoding="utf-8"))["traceEvents"] if e.get("ph") == "X"]
    span = lambda e: (e["ts"], e["ts"] + e["dur"])  # noqa: E731
    if GPU:
        work = [span(e) for e in events if e.get("cat") == "kernel"]
        windows = [span(e) for e in events if e.get("cat") == "gpu_user_annotation" and e["name"] == step]
        windows = windows or [(min(a for a, _ in work), max(b for _, b in work))]
    else:
        work = [span(e) for e in events if e.get("cat") == "cpu_op"]
        windows = [span(e) for e in events if e.get("cat") == "user_annotation" and e["name"] == step]
    return windows, work


def idle_over(windows, work):
    """busy_and_idle summed over several windows."""
    parts = [busy_and_idle(work, a, b) for a, b in windows]
    span = sum(b - a for a, b in windows)
    idle = sum(p["idle"] for p in parts)
    return {"busy": span - idle, "idle": idle, "idle_fraction": idle / span,
            "largest_gap": max(p["largest_gap"] for p in parts)}


DECODE_IDLE = idle_over(*trace_work("decode_trace.json"))
print(f"decode steps: device idle {DECODE_IDLE['idle_fraction']:.0%} of the time, "
      f"longest gap {DECODE_IDLE['largest_gap']:.0f} µs")

# %% tags=["test"] grade_id="09-idle-1" points=3
_got = busy_and_idle([(2, 4), (3, 6), (8, 9)], 0, 10)
assert _got == {"busy": 5, "idle": 5, "idle_fraction": 0.5, "largest_gap": 2}, \
    f"并集 [2,6]∪[8,9]，期望 / union [2,6]+[8,9], expected busy 5, idle 5, largest gap 2, got {_got}"
_got = busy_and_idle([(-5, 1), (9, 20)], 0, 10)
assert _got["busy"] == 2 and _got["largest_gap"] == 8, f"只计窗口内部分 / only the part inside the window counts: {_got}"
_got = busy_and_idle([(5, 6), (3, 3), (1, 2)], 0, 10)
assert _got["busy"] == 2 and _got["largest_gap"] == 4, \
    f"顺序任意、空区间不含工作、最后之后的空隙也算 / any order, (3, 3) holds no work, the gap after the last counts: {_got}"
try:
    busy_and_idle([(0, 1)], 5, 5)
except ValueError:
    pass
else:
    raise AssertionError("end <= start 应抛出 ValueError / end <= start must raise ValueError")

# %% [markdown] tags=["zh"]
# 同一个函数也能读 ROCm 的 `rocprofv3 --kernel-trace` 输出（时间戳单位是纳秒）。`data/rocprofv3/` 中有三份**示意**录制：
# Qwen2.5-0.5B 在 MI300X 上 bf16 的一个 decode 步（逐个发射，eager）、同一步从 HIP Graph 重放 (graph)，以及 8×512 token 的 prefill。
# 同样的 kernel，eager 时设备大部分时间在空等；graph 重放时主机只发射一次，空隙几乎消失。

# %% [markdown] tags=["en"]
# The same function reads ROCm's `rocprofv3 --kernel-trace` output (timestamps in nanoseconds). `data/rocprofv3/`
# holds three **illustrative** recordings: one bf16 decode step of Qwen2.5-0.5B on an MI300X launched kernel by
# kernel (eager), the same step replayed from a HIP graph (graph), and a prefill of 8×512 tokens. With the same
# kernels, the eager device waits most of the time; in graph replay the host launches once and the gaps almost vanish.

# %%
ROCPROF = DATA / "rocprofv3"
TRACES = {name: read_csv(next((ROCPROF / name).glob("*_kernel_trace.csv")))
          for name in ("decode_eager", "decode_graph", "prefill")}


def recorded_idle(rows):
    spans = [(int(r["Start_Timestamp"]), int(r["End_Timestamp"])) for r in rows]
    return busy_and_idle(spans, min(a for a, _ in spans), max(b for _, b in spans))


RECORDED_IDLE = {name: recorded_idle(rows) for name, rows in TRACES.items()}
for name, idle in RECORDED_IDLE.items():
    print(f"{name:>13}: {len(TRACES[name]):4d} kernels, {(idle['busy'] + idle['idle']) / 1e3:8.1f} µs, "
          f"device idle {idle['idle_fraction']:.0%}")

# %% [markdown] tags=["zh"]
# 数据加载也会让设备空等。下面剖析三个训练步：每步先在 `data` 标注内把一批质检描述分词、填充成张量，再在 `train_step` 标注内
# 做前向和反向。设备工作只算 `train_step` 内的算子（GPU 上是 kernel），窗口是整个循环。
#
# **3：说出瓶颈**（已给出，不计分）。`name_the_bound(device_busy_fraction, data_fraction)` 按顺序判断：数据加载占窗口的 30% 或更多是
# `"data"`（先修数据管线），否则设备忙 80% 以上是 `"device"`（让 kernel 本身更快），否则是 `"host"`（设备空等主机发射）。
# 阈值是经验值；真正的判断在第 7 节：拿两份剖析，说出该拉哪个杠杆、哪个指标能证明它起了作用。

# %% [markdown] tags=["en"]
# Data loading can leave the device waiting too. Below we profile three training steps: each first tokenizes and
# pads a batch of QC descriptions into tensors inside a `data` annotation, then runs forward and backward inside a
# `train_step` annotation. Device work is the operators (kernels on a GPU) inside `train_step`; the window is the
# whole loop.
#
# **3: name the bound** (given, not graded). `name_the_bound(device_busy_fraction, data_fraction)` decides in order:
# data loading for 30 % of the window or more is `"data"` (fix the input pipeline first), else a device busy 80 % of the
# time or more is `"device"` (make the kernels faster), else `"host"` (the device waits for the host to launch work).
# The thresholds are rules of thumb; the real judgement comes in section 7: given two profiles, say which lever to
# pull and which metric proves that it worked.

# %%
def name_the_bound(device_busy_fraction, data_fraction, *, busy_threshold=0.8, data_threshold=0.3):
    """"data", "device" or "host": data loading first, then a busy device, else the host."""
    for name, value in (("device_busy_fraction", device_busy_fraction), ("data_fraction", data_fraction)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be within [0, 1], got {value}")
    if data_fraction >= data_threshold:
        return "data"
    if device_busy_fraction >= busy_threshold:
        return "device"
    return "host"


TEXTS = [r["description"] for r in lab.load_qc_reports("train")]


def make_batch(step):
    """Tokenize and pad TRAIN_BATCH descriptions: the lab's "data loader"."""
    texts = [TEXTS[(step * TRAIN_BATCH + i) % len(TEXTS)] for i in range(TRAIN_BATCH)]
    enc = tok(texts, padding="max_length", truncation=True, max_length=TRAIN_TOKENS, return_tensors="pt")
    return enc["input_ids"].to(device)


def train_step(ids):
    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()
    model.zero_grad(set_to_none=True)


model.train()
train_step(make_batch(0))  # warm-up
with profile(activities=ACTIVITIES) as loop_prof:
    for step in range(3):
        with record_function("data"):
            batch = make_batch(step)
        with record_function("train_step"):
            train_step(batch)
    lab.synchronize(device)
loop_prof.export_chrome_trace("train_trace.json")
model.eval()

_events = [e for e in json.load(open("train_trace.json", encoding="utf-8"))["traceEvents"] if e.get("ph") == "X"]
_marks = {n: [(e["ts"], e["ts"] + e["dur"]) for e in _events if e.get("cat") == "user_annotation" and e["name"] == n]
          for n in ("data", "train_step")}
LOOP_WINDOW = (min(a for a, _ in _marks["data"]), max(b for _, b in _marks["train_step"]))
_step_windows, _work = trace_work("train_trace.json", step="train_step")
if not GPU:  # on a CPU the tokenizer's few tensor operators would count as device work: keep train_step's only
    _work = [(a, b) for a, b in _work if any(s <= a and b <= e for s, e in _step_windows)]
TRAIN_IDLE = busy_and_idle(_work, *LOOP_WINDOW)
LOOP_SPAN = LOOP_WINDOW[1] - LOOP_WINDOW[0]
DATA_FRACTION = sum(b - a for a, b in _marks["data"]) / LOOP_SPAN
TRAIN_BUSY = TRAIN_IDLE["busy"] / LOOP_SPAN
DECODE_BUSY = 1 - DECODE_IDLE["idle_fraction"]
BOUNDS = {"decode (yours)": name_the_bound(DECODE_BUSY, 0.0),
          "training step (yours)": name_the_bound(TRAIN_BUSY, DATA_FRACTION)}
BOUNDS |= {f"{name} (recorded)": name_the_bound(1 - idle["idle_fraction"], 0.0) for name, idle in RECORDED_IDLE.items()}
print(f"training loop: device busy {TRAIN_BUSY:.0%}, data loading {DATA_FRACTION:.0%} of the time")
for name, bound in BOUNDS.items():
    print(f"{name:>26}: {bound}-bound")

# %% [markdown] tags=["zh"]
# ## 3 · 拉动杠杆，诚实地测量
#
# 每个杠杆都与基线比较，条件相同：同样的工作量、同样的预热。每次采样在两次同步之间连续调用 N 次（单次调用后同步计时会把同步本身算进去），
# 重复 `REPEATS` 次，报告**中位数**和**离散度**。只有差值超过噪声时才算"更快"。
#
# **练习 4：比较两组采样。** 实现 `compare_runs(baseline, lever)`：
#
# - 两个参数都是每次调用的秒数列表（每组至少 3 个，否则抛出 `ValueError`）；
# - 离散度 (spread) = 该组的四分位距 (IQR)：`statistics.quantiles(samples, n=4, method="inclusive")` 给出 Q1、Q2、Q3，
#   离散度 = Q3 − Q1（不用最大值 − 最小值：别的进程造成的一个离群值不应掩盖真实的效果）；噪声 `noise_s` = 两组离散度中较大的那个；
# - 返回 `{"baseline_median_s", "lever_median_s", "speedup", "noise_s", "verdict"}`，`speedup` = 基线中位数 / 杠杆中位数；
# - `verdict`：基线中位数 − 杠杆中位数 > `noise_s` 时为 `"faster"`，杠杆中位数 − 基线中位数 > `noise_s` 时为 `"slower"`，
#   否则为 `"no difference"`。

# %% [markdown] tags=["en"]
# ## 3 · Pull a lever, measure honestly
#
# Every lever is compared with the baseline on equal terms: the same work, the same warm-up. Each sample times N
# calls between two synchronizations (timing one call after a sync counts the sync itself), `REPEATS` samples in
# all; report the **median** and the **spread**. A lever counts as "faster" only when the difference exceeds the noise.
#
# **Exercise 4: compare two sets of samples.** Implement `compare_runs(baseline, lever)`:
#
# - both arguments are lists of seconds per call (at least 3 each, else `ValueError`);
# - the spread of a set is its interquartile range: `statistics.quantiles(samples, n=4, method="inclusive")` gives
#   Q1, Q2, Q3 and the spread is Q3 − Q1 (not max − min: one outlier caused by another process must not hide a
#   real effect); the noise `noise_s` = the larger of the two spreads;
# - returns `{"baseline_median_s", "lever_median_s", "speedup", "noise_s", "verdict"}`, `speedup` = baseline median
#   / lever median;
# - `verdict`: `"faster"` when baseline median − lever median > `noise_s`, `"slower"` when lever median − baseline
#   median > `noise_s`, else `"no difference"`.

# %% tags=["solution"] grade_id="09-noise-sol-1"
def compare_runs(baseline, lever):
    """Medians, noise floor and verdict of a lever against its baseline; see the contract above."""
    ### BEGIN SOLUTION
    for name, samples in (("baseline", baseline), ("lever", lever)):
        if len(samples) < 3:
            raise ValueError(f"{name} needs at least 3 samples for a median and a spread, got {len(samples)}")
    base, new = statistics.median(baseline), statistics.median(lever)
    def spread(samples):
        q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
        return q3 - q1

    noise = max(spread(baseline), spread(lever))
    verdict = "faster" if base - new > noise else ("slower" if new - base > noise else "no difference")
    return {"baseline_median_s": base, "lever_median_s": new, "speedup": base / new, "noise_s": noise,
            "verdict": verdict}
    ### END SOLUTION

# %% tags=["test"] grade_id="09-noise-1" points=3
_got = compare_runs([10.0, 11.0, 10.5], [5.0, 5.5, 5.2])
assert _got["verdict"] == "faster" and _got["baseline_median_s"] == 10.5 and _got["lever_median_s"] == 5.2, _got
assert math.isclose(_got["noise_s"], 0.5), f"噪声 = 较大的四分位距 / noise = the larger IQR (Q3 - Q1), got {_got['noise_s']}"
_got = compare_runs([10.0, 12.0, 11.0], [10.5, 10.4, 10.6])
assert _got["verdict"] == "no difference", f"差值 0.5 不超过噪声 1.0 / a 0.5 difference under a noise of 1.0: {_got}"
_got = compare_runs([1.0, 1.1, 1.05, 1.02, 9.0], [2.0, 2.1, 2.05])
assert math.isclose(_got["noise_s"], 0.08) and _got["verdict"] == "slower", \
    f"四分位距而非最大-最小，离群值不掩盖差异 / IQR, not max - min: one outlier hides nothing: {_got}"
assert math.isclose(_got["speedup"], 1.05 / 2.05), f"speedup = 基线中位数 / 杠杆中位数 / baseline / lever median: {_got}"
try:
    compare_runs([1.0, 2.0], [1.0, 1.0, 1.0])
except ValueError:
    pass
else:
    raise AssertionError("少于 3 个样本应抛出 ValueError / fewer than 3 samples must raise ValueError")

# %% [markdown] tags=["zh"]
# **杠杆 a：批处理。** decode 受主机开销限制时，一次前向处理 `BATCH` 条序列，和逐条处理 `BATCH` 次，发射的算子数一样多，
# 做的有用功却是 `BATCH` 倍。下面比较同样的工作量：`BATCH` 条 16 token 的序列，逐条前向 vs 一次批量前向。
#
# **杠杆 b：`torch.compile`。** 它把一串小的逐元素算子融合成一个 kernel（inductor 在 GPU 上生成 Triton，在 CPU 上生成 C++）。
# 我们编译一个小区域：RMSNorm 加上 SwiGLU 的 `silu(gate) * up`——eager 下是七八个小算子。第一次调用要编译（在 CPU 上用 g++，
# 2 个空闲核心上约 15 秒），所以先编译、计时编译，再比较稳态速度。注意：在 CPU 上张量很小时，编译后的调用还要检查 guard，
# 未必更快——测出来是什么就是什么。在 GPU 上 `mode="reduce-overhead"` 还会用 CUDA/HIP Graph 重放。
# 参考：[torch.compile 教程](https://docs.pytorch.org/tutorials/intermediate/torch_compile_tutorial.html)。
#
# **杠杆 c：HIP/CUDA Graph（仅 gpu 配置）。** 把一段固定形状的 kernel 序列捕获一次，之后一次提交重放，主机不再逐个发射。
# ROCm 版 PyTorch 中 `torch.cuda.graph` 捕获的是 HIP Graph（[PyTorch PR #88202](https://github.com/pytorch/pytorch/pull/88202)，
# [CUDA Graphs 说明](https://docs.pytorch.org/docs/stable/notes/cuda.html#cuda-graphs)）。CPU 上没有这个杠杆；上面录制的
# eager 与 graph 轨迹展示了它在 MI300X 上的效果。

# %% [markdown] tags=["en"]
# **Lever a: batching.** When decode is bound by host overhead, one forward pass over `BATCH` sequences launches as
# many operators as one over a single sequence, and does `BATCH` times the useful work. We compare equal work:
# `BATCH` sequences of 16 tokens, one forward pass each vs one batched pass.
#
# **Lever b: `torch.compile`.** It fuses a chain of small elementwise operators into one kernel (inductor generates
# Triton on a GPU, C++ on a CPU). We compile a small region: RMSNorm plus SwiGLU's `silu(gate) * up`, seven or eight
# small operators in eager mode. The first call compiles (with g++ on a CPU, about 15 s on 2 idle cores), so we
# compile first, time the compilation, then compare steady-state speed. On a CPU with tiny tensors the compiled call
# still checks its guards and need not be faster: the measurement decides. On a GPU `mode="reduce-overhead"` also
# replays CUDA/HIP graphs. See the [torch.compile tutorial](https://docs.pytorch.org/tutorials/intermediate/torch_compile_tutorial.html).
#
# **Lever c: HIP/CUDA graphs (gpu profile only).** Capture a fixed-shape sequence of kernels once, then replay it
# with one submission: the host no longer launches kernel by kernel. On a ROCm build `torch.cuda.graph` captures a
# HIP graph ([PyTorch PR #88202](https://github.com/pytorch/pytorch/pull/88202),
# [CUDA graphs notes](https://docs.pytorch.org/docs/stable/notes/cuda.html#cuda-graphs)). A CPU has no such lever;
# the recorded eager and graph traces above show its effect on an MI300X.

# %%
def per_call_samples(fn, calls):
    """REPEATS samples of seconds per call: `calls` calls between two synchronizations, after one warm-up."""
    timing = lab.time_it(lambda: [fn() for _ in range(calls)], repeats=REPEATS, warmup=1, device=device)
    return [s / calls for s in timing["samples"]]


LEVER_SAMPLES, LEVERS = {}, {}
_prompts = torch.tensor([TOKEN_STREAM[16 * i:16 * i + 16] for i in range(BATCH)], device=device)
with torch.no_grad():
    LEVER_SAMPLES["batching"] = (
        per_call_samples(lambda: [model(input_ids=p[None], use_cache=False) for p in _prompts], CALLS),
        per_call_samples(lambda: model(input_ids=_prompts, use_cache=False), CALLS))

_layer = model.model.layers[0]
_eps = _layer.post_attention_layernorm.variance_epsilon


def fused_region(x, weight, gate, up):
    """RMSNorm (as Qwen2 computes it) and SwiGLU's activation: a chain of small elementwise operators."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + _eps)
    return weight * h.to(x.dtype), torch.nn.functional.silu(gate) * up


_hidden, _inter = model.config.hidden_size, model.config.intermediate_size
_args = (torch.randn(BATCH, 1, _hidden, device=device, dtype=dtype), _layer.post_attention_layernorm.weight.detach(),
         torch.randn(BATCH, 1, _inter, device=device, dtype=dtype),
         torch.randn(BATCH, 1, _inter, device=device, dtype=dtype))
COMPILE_SECONDS = None
with torch.no_grad():
    if COMPILE:
        compiled_region = torch.compile(fused_region, dynamic=False)
        with lab.Timer(device) as _t:
            compiled_region(*_args)
        COMPILE_SECONDS = _t.seconds
        LEVER_SAMPLES["torch.compile"] = (per_call_samples(lambda: fused_region(*_args), REGION_CALLS),
                                          per_call_samples(lambda: compiled_region(*_args), REGION_CALLS))
    if GPU:
        _static = [a.clone() for a in _args]
        _side = torch.cuda.Stream()  # warm up on a side stream before capture, as the CUDA graphs notes say
        _side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(_side):
            fused_region(*_static)
        torch.cuda.current_stream().wait_stream(_side)
        _graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(_graph):
            _static_out = fused_region(*_static)
        LEVER_SAMPLES["graphs"] = (per_call_samples(lambda: fused_region(*_static), REGION_CALLS),
                                   per_call_samples(_graph.replay, REGION_CALLS))

for name, (base, new) in LEVER_SAMPLES.items():
    LEVERS[name] = compare_runs(base, new)
    r = LEVERS[name]
    print(f"{name:>14}: {r['baseline_median_s'] * 1e6:9.1f} µs -> {r['lever_median_s'] * 1e6:9.1f} µs "
          f"(x{r['speedup']:.2f}, noise {r['noise_s'] * 1e6:.1f} µs): {r['verdict']}")
if COMPILE_SECONDS is not None:
    print(f"torch.compile paid {COMPILE_SECONDS:.1f} s once to compile the region")
if not GPU:
    print("graphs: skipped, a CPU has no HIP/CUDA graphs (see the recorded decode_eager vs decode_graph traces)")

_fig, _axes = plt.subplots(1, len(LEVER_SAMPLES), figsize=(4 * len(LEVER_SAMPLES), 3), squeeze=False)
for _ax, (name, (base, new)) in zip(_axes[0], LEVER_SAMPLES.items()):
    _ax.boxplot([[s * 1e6 for s in base], [s * 1e6 for s in new]])
    _ax.set_xticks([1, 2], ["baseline", name])
    _ax.set_title(f"{name}: {LEVERS[name]['verdict']}")
    _ax.set_ylabel("µs per call")
plt.tight_layout()
plt.show()

# %% [markdown] tags=["zh"]
# 在真实 GPU 上，批大小 1 的 decode 几乎总是主机受限：0.5B 模型一步要发射数百个几微秒的 kernel（上面的录制轨迹有九百多个）。
# 批处理和 Graph 是最有效的杠杆。`torch.compile` 融合逐元素算子、减少 kernel 数，配合 `mode="reduce-overhead"` 再减少发射。

# %% [markdown] tags=["en"]
# On a real GPU, batch-1 decode is almost always host-bound: a 0.5B model launches hundreds of kernels of a few
# microseconds per step (over nine hundred in the recorded trace above). Batching and graphs are the strongest levers.
# `torch.compile` fuses elementwise operators into fewer kernels, and with `mode="reduce-overhead"` also launches less.

# %% [markdown] tags=["zh"]
# ## 4 · ROCm 上的 GEMM 调优：TunableOp
#
# 同一个 GEMM 在 ROCm 上有许多实现：rocBLAS 和 hipBLASLt 各有很多解 (solution)。PyTorch 的 **TunableOp** 在运行时对每个新的
# GEMM 形状把所有注册的实现各跑一遍（默认每个解最多 100 次或 30 ms），选最快的，并把结果写进 CSV 文件。
# 出处：[torch.cuda.tunable 文档](https://docs.pytorch.org/docs/stable/cuda.tunable.html)、
# [ROCm 博客：用 PyTorch TunableOp 加速模型](https://rocm.blogs.amd.com/artificial-intelligence/pytorch-tunableop/README.html)。
#
# - `PYTORCH_TUNABLEOP_ENABLED=1` 打开 TunableOp；`PYTORCH_TUNABLEOP_TUNING`（默认 1）控制是否对没见过的形状调优；
#   `PYTORCH_TUNABLEOP_FILENAME` 指定结果文件（默认 `tunableop_results.csv`；PyTorch 会在文件名中插入设备序号，如 `tunableop_results0.csv`，
#   以免多个 GPU 上的进程互相覆盖）；
#   `PYTORCH_TUNABLEOP_VERBOSE` 打开日志。环境变量在第一次读取后固定，并优先于 Python API（`torch.cuda.tunable.enable()` 等）。
# - 文件以 `Validator` 行开头（PyTorch、ROCm、rocBLAS、hipBLASLt 版本和 GPU 架构等）；任何一个变了，PyTorch 拒绝整个文件，
#   因为旧的调优结果可能已不再最优。之后每行四个字段：算子名（数据类型与转置 `T`/`N`）、参数（BLAS 的 m、n、k 与 leading dimension）、
#   选中的解（`Default` 表示回退到未调优的默认实现）、平均耗时（毫秒，可选）。
# - CUDA 版 PyTorch 上只有 `Default` 一个解（本版本文档所述），TunableOp 主要是 ROCm 的杠杆。
#
# **何时随部署发布文件**：在与生产环境相同的 GPU 架构、相同的 PyTorch/ROCm/库版本上，用生产中真实出现的形状调优一次，把文件和
# 镜像一起发布，生产中设 `PYTORCH_TUNABLEOP_TUNING=0` 只读不调——省掉每台机器启动时的调优时间，也让性能可复现。
#
# **5：解析结果文件**（已给出，不计分；格式值得读一遍）。`parse_tunableop(text)` 返回 `{"validators": {键: 值}, "gemms": [...]}`：
#
# - `Validator,KEY,VALUE` 行进入 `validators`；空行跳过；其他行的字段是 算子名、参数、解、[耗时]；少于 3 个字段时抛出
#   `ValueError`，消息中写明行号（从 1 开始）；
# - 每个 GEMM 是字典 `{"op", "dtype", "layout", "m", "n", "k", "batch", "solution", "library", "ms"}`：算子名按 `_` 拆分，
#   `op` 是第一段（如 `GemmTunableOp`），`layout` 是最后一段（如 `TN`），`dtype` 是中间各段用 `_` 连接（如 `BFloat16`）；
# - 参数按 `_` 拆分：第一段是小写的转置标记，紧接着的三段是整数 `m`、`n`、`k`；若某一段等于 `B`，其后一段是整数 `batch`，否则 `batch` 为 1；
# - `library`：解以 `Gemm_Hipblaslt` 开头为 `"hipBLASLt"`，以 `Gemm_Rocblas` 开头为 `"rocBLAS"`，等于 `Default` 为 `"default"`，其余为 `"unknown"`；
# - `ms` 是第 4 个字段的浮点数，没有第 4 个字段时为 `None`。

# %% [markdown] tags=["en"]
# ## 4 · GEMM tuning on ROCm: TunableOp
#
# One GEMM has many implementations on ROCm: rocBLAS and hipBLASLt each offer many solutions. PyTorch's
# **TunableOp** runs every registered implementation once per new GEMM shape at run time (by default up to 100
# iterations or 30 ms per solution), picks the fastest and writes the result to a CSV file. Sources: the
# [torch.cuda.tunable docs](https://docs.pytorch.org/docs/stable/cuda.tunable.html) and the
# [ROCm blog on PyTorch TunableOp](https://rocm.blogs.amd.com/artificial-intelligence/pytorch-tunableop/README.html).
#
# - `PYTORCH_TUNABLEOP_ENABLED=1` turns TunableOp on; `PYTORCH_TUNABLEOP_TUNING` (default 1) decides whether unseen
#   shapes are tuned; `PYTORCH_TUNABLEOP_FILENAME` names the results file (default `tunableop_results.csv`; PyTorch inserts
#   the device ordinal, e.g. `tunableop_results0.csv`, so that processes on several GPUs do not overwrite each other); `PYTORCH_TUNABLEOP_VERBOSE` turns on
#   logging. Environment variables are fixed once read and take precedence over the Python API
#   (`torch.cuda.tunable.enable()` and friends).
# - The file opens with `Validator` lines (PyTorch, ROCm, rocBLAS and hipBLASLt versions, the GPU arch, ...); if any
#   changes, PyTorch rejects the whole file, since old tunings may no longer be the best. Then each line has four
#   fields: operator name (data type and transposes `T`/`N`), parameters (BLAS m, n, k and leading dimensions), the
#   chosen solution (`Default` falls back to the untuned default) and the average time (milliseconds, optional).
# - On CUDA builds the only solution is `Default` (as this version's docs say): TunableOp is mainly a ROCm lever.
#
# **When to ship the file with a deployment**: tune once on the production GPU arch, with the production PyTorch /
# ROCm / library versions and the shapes production really sees; ship the file with the image and run production
# with `PYTORCH_TUNABLEOP_TUNING=0`, reading without tuning: no tuning time at every start, reproducible performance.
#
# **5: parse the results file** (given, not graded; the format is worth a read). `parse_tunableop(text)` returns
# `{"validators": {key: value}, "gemms": [...]}`:
#
# - `Validator,KEY,VALUE` lines go into `validators`; blank lines are skipped; other lines hold operator name,
#   parameters, solution, [time]; a line with fewer than 3 fields raises `ValueError` naming its line number (from 1);
# - each GEMM is a dict `{"op", "dtype", "layout", "m", "n", "k", "batch", "solution", "library", "ms"}`: split the
#   operator name on `_`; `op` is the first part (e.g. `GemmTunableOp`), `layout` the last (e.g. `TN`), `dtype` the
#   parts between joined with `_` (e.g. `BFloat16`);
# - split the parameters on `_`: the first part is the lower-case transposes, the next three are the integers `m`,
#   `n`, `k`; if a part equals `B`, the part after it is the integer `batch`, else `batch` is 1;
# - `library`: `"hipBLASLt"` for a solution starting with `Gemm_Hipblaslt`, `"rocBLAS"` for `Gemm_Rocblas`,
#   `"default"` for `Default`, else `"unknown"`;
# - `ms` is the 4th field as a float, `None` when there is no 4th field.

# %%
def parse_tunableop(text):
    """{"validators": {...}, "gemms": [...]} from a TunableOp results CSV, as described above."""
    libraries = (("Gemm_Hipblaslt", "hipBLASLt"), ("Gemm_Rocblas", "rocBLAS"))
    validators, gemms = {}, []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.strip().split(",")
        if fields[0] == "Validator" and len(fields) >= 3:
            validators[fields[1]] = ",".join(fields[2:])
            continue
        if len(fields) < 3:
            raise ValueError(f"line {number}: expected 'operator,parameters,solution[,ms]', got {line!r}")
        op_parts, params = fields[0].split("_"), fields[1].split("_")
        solution = fields[2]
        library = "default" if solution == "Default" else next(
            (lib for prefix, lib in libraries if solution.startswith(prefix)), "unknown")
        batch = int(params[params.index("B") + 1]) if "B" in params else 1
        gemms.append({"op": op_parts[0], "dtype": "_".join(op_parts[1:-1]), "layout": op_parts[-1],
                      "m": int(params[1]), "n": int(params[2]), "k": int(params[3]), "batch": batch,
                      "solution": solution, "library": library,
                      "ms": float(fields[3]) if len(fields) > 3 and fields[3] else None})
    return {"validators": validators, "gemms": gemms}


TUNED = parse_tunableop((DATA / "tunableop" / "tunableop_results0.csv").read_text(encoding="utf-8"))
print(TUNED["validators"])
for g in TUNED["gemms"][:3]:
    print(g)

# %% [markdown] tags=["zh"]
# 用解析结果推理：每个 GEMM 的浮点运算数是 `2·m·n·k·batch`，除以耗时得到吞吐，再除以 MI300X 的数据手册峰值——
# **分母：稠密 (dense) BF16 1307.4 TFLOPS**（[AMD MI300X](https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html)，不含稀疏）。
# 注意这份文件是示意数据（见 `data/README.md`），形状是 Qwen2.5-0.5B 的线性层：`n = 1` 是 decode（一个 token），`n = 4096` 是 prefill。
# TunableOp 的 `n` 是 BLAS 列主序的 n：对 `y = x·Wᵀ`，m 是输出特征数，n 是 token 数。

# %% [markdown] tags=["en"]
# Reason over the parsed file: a GEMM does `2·m·n·k·batch` floating-point operations; divide by its time for the
# throughput, then by the MI300X datasheet peak. **Denominator: dense BF16, 1307.4 TFLOPS**
# ([AMD MI300X](https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html), no sparsity). This file is
# illustrative (see `data/README.md`); its shapes are Qwen2.5-0.5B's linear layers: `n = 1` is decode (one token),
# `n = 4096` is prefill. TunableOp's `n` is column-major BLAS n: for `y = x·Wᵀ`, m is the output features and n the tokens.

# %%
MI300X_BF16_DENSE_TFLOPS = 1307.4
for g in TUNED["gemms"]:
    tflops = 2 * g["m"] * g["n"] * g["k"] * g["batch"] / (g["ms"] * 1e-3) / 1e12
    print(f"m={g['m']:>6} n={g['n']:>4} k={g['k']:>4} {g['library']:>9}: {tflops:7.1f} TFLOPS = "
          f"{tflops / MI300X_BF16_DENSE_TFLOPS:6.1%} of dense BF16 peak")

# %% [markdown] tags=["zh"]
# decode 的 GEMM（`n = 1`）只用到峰值的零头：它们受带宽限制（Lab 02 的 roofline），调优换不来数量级的提升；prefill 的大 GEMM 才是
# TunableOp 的主场。
#
# **6：这个文件能随部署发布吗？**（已给出，不计分）`validator_mismatches(file_validators, runtime_validators)` 返回按字母排序的键列表，
# 包括值不同的键和只出现在一侧的键。列表为空才说明文件可用；否则 PyTorch 会拒绝它，你需要在目标环境上重新调优。
# 下面的"部署目标"是一台把 PyTorch 升级了的机器（示意）；在 gpu 配置的 ROCm 机器上则用 `torch.cuda.tunable.get_validators()` 读出本机的值。

# %% [markdown] tags=["en"]
# The decode GEMMs (`n = 1`) reach a sliver of the peak: they are bandwidth-bound (lab 02's roofline) and tuning
# cannot buy an order of magnitude; the large prefill GEMMs are where TunableOp pays.
#
# **6: can this file ship with a deployment?** (given, not graded) `validator_mismatches(file_validators,
# runtime_validators)` returns the alphabetically sorted list of keys whose values differ or that appear on one side
# only. Only an empty list means the file is usable; otherwise PyTorch
# rejects it and you tune again on the target. The "deployment target" below is a machine with an upgraded PyTorch
# (illustrative); on a ROCm machine in the gpu profile, `torch.cuda.tunable.get_validators()` gives this machine's values.

# %%
def validator_mismatches(file_validators, runtime_validators):
    """Sorted keys that differ between the two validator dicts or exist on one side only."""
    keys = set(file_validators) | set(runtime_validators)
    return sorted(k for k in keys if file_validators.get(k) != runtime_validators.get(k))


TARGET = dict(TUNED["validators"], PT_VERSION="2.10.0")
if GPU and getattr(torch.version, "hip", None):
    try:
        TARGET = {k: v for k, v in torch.cuda.tunable.get_validators()}
    except (RuntimeError, ValueError) as err:
        print(f"get_validators() failed ({err}); keeping the illustrative target")
SHIP = validator_mismatches(TUNED["validators"], TARGET)
print("ship the file as is" if not SHIP else f"do not ship: re-tune on the target, mismatched validators {SHIP}")

# %% [markdown] tags=["zh"]
# 在 gpu 配置（ROCm）下，下面的单元格真的调优：对 Qwen 的 MLP 形状先测未调优的 GEMM，再打开 TunableOp 调优、关掉调优后重测，
# 用练习 4 判断是否更快，并把结果文件写到工作目录、用你的解析器读回。smoke 配置跳过它。

# %% [markdown] tags=["en"]
# In the gpu profile (ROCm), the cell below tunes for real: it times the untuned GEMMs of Qwen's MLP shapes, turns
# TunableOp on and tunes, turns tuning off and times again, judges the difference with exercise 4, and writes the
# results file to the working folder and reads it back with your parser. The smoke profile skips it.

# %%
TUNING = None
if GPU:
    import torch.cuda.tunable as tunable

    _x = torch.randn(4096, model.config.hidden_size, device=device, dtype=dtype)
    _w = torch.randn(model.config.intermediate_size, model.config.hidden_size, device=device, dtype=dtype)
    _untuned = per_call_samples(lambda: _x @ _w.T, CALLS)
    tunable.enable(True)
    tunable.tuning_enable(True)
    _x @ _w.T  # the first call of a new shape tunes it
    tunable.tuning_enable(False)
    _tuned = per_call_samples(lambda: _x @ _w.T, CALLS)
    _text = "".join(f"Validator,{k},{v}\n" for k, v in tunable.get_validators())
    _text += "".join(",".join(str(f) for f in r) + "\n" for r in tunable.get_results())
    tunable.enable(False)
    pathlib.Path("lab09_tunableop_results0.csv").write_text(_text, encoding="utf-8")
    TUNING = compare_runs(_untuned, _tuned)
    print(TUNING, parse_tunableop(_text)["gemms"])
else:
    print("TunableOp tuning: skipped in the smoke profile (it needs a ROCm or CUDA GPU)")

# %% [markdown] tags=["zh"]
# ## 5 · ROCm 的剖析工具：rocprofv3、rocprof-compute、rocprof-sys
#
# - **rocprofv3**（ROCprofiler-SDK）记录 API 与 kernel 轨迹、硬件计数器：
#   `rocprofv3 --kernel-trace --stats --output-format csv -d out -o run -- python serve.py` 写出 `*_kernel_trace.csv` 和 `*_kernel_stats.csv`；
#   从 ROCm 7.0 起 rocprofv3 默认写 rocpd（一个 SQLite `.db` 文件），不写 CSV，所以命令里要有 `--output-format csv`
#  （[rocpd 输出格式](https://rocm.docs.amd.com/projects/rocprofiler-sdk/en/docs-7.0.1/how-to/using-rocpd-output-format.html)；
#   较新的文档建议先按默认格式采集，再用 `rocpd convert -i <文件>_results.db --output-format csv` 转换，
#   见 [I/O 选项](https://rocm.docs.amd.com/projects/rocprofiler-sdk/en/develop/how-to/rocprofv3-io-options.html)）；
#   `--output-format pftrace` 生成可在 Perfetto 中打开的轨迹。计数器用输入文件，每个 job 一遍 (pass)，分别写入 `pass_N/` 目录，
#   还可以按名字过滤 kernel、只采前几次调用（`kernel_iteration_range`）：
#   ```yaml
#   jobs:
#     - pmc: [FETCH_SIZE, WRITE_SIZE, SQ_INSTS_VALU_MFMA_MOPS_BF16]
#       kernel_iteration_range: "[1-2]"
#     - pmc: [SQ_LDS_IDX_ACTIVE, SQ_LDS_BANK_CONFLICT]
#       kernel_iteration_range: "[1-2]"
#   ```
#   然后 `rocprofv3 -i input.yaml --output-format csv -- python prefill.py`。列名见 [rocprofv3 文档](https://rocm.docs.amd.com/projects/rocprofiler-sdk/en/latest/how-to/using-rocprofv3.html)。
# - **rocprof-compute**（原 Omniperf）多次重跑程序、收集数百个计数器，算出"光速"(Speed-of-Light) 等指标：
#   `rocprof-compute profile -n prefill -- python prefill.py`，再 `rocprof-compute analyze -p workloads/prefill/<SoC> -b 2`。
#   剖析时同一 GPU 上不同 stream 的 kernel 会被串行化（[profile mode 文档](https://rocm.docs.amd.com/projects/rocprofiler-compute/en/latest/how-to/profile/mode.html)）。
# - **rocprof-sys**（原 Omnitrace）看整个系统的时间线：CPU 调用栈采样、GPU、通信，例如 `rocprof-sys-sample -- ./app`；
#   Python 脚本用 `rocprof-sys-python`（[文档](https://rocm.docs.amd.com/projects/rocprofiler-systems/en/latest/)）。
#
# 下面读录制好的 prefill 与 decode 轨迹（**示意数据**，格式与 rocprofv3 输出一致）。
#
# **练习 7：哪个 kernel 占主导？** 实现 `kernel_summary(rows)`：`rows` 是 `csv.DictReader` 读出的 kernel trace 行（值都是字符串）。
# 按 `Kernel_Name` 汇总，返回列表，每项 `{"name", "calls", "total_ns", "share"}`：`total_ns` 是该 kernel 各次
# `End_Timestamp − Start_Timestamp` 之和（整数纳秒），`share` 是它占所有 kernel 总时间的比例；按 `total_ns` 从大到小排序，
# 相同时按名字排序。某行结束早于开始时抛出 `ValueError`，消息中写明该行的 `Dispatch_Id`。

# %% [markdown] tags=["en"]
# ## 5 · The ROCm profilers: rocprofv3, rocprof-compute, rocprof-sys
#
# - **rocprofv3** (ROCprofiler-SDK) records API and kernel traces and hardware counters:
#   `rocprofv3 --kernel-trace --stats --output-format csv -d out -o run -- python serve.py` writes `*_kernel_trace.csv` and
#   `*_kernel_stats.csv`. Since ROCm 7.0 rocprofv3 writes rocpd (one SQLite `.db` file) by default, not CSV, hence
#   `--output-format csv` in the command ([rocpd output format](https://rocm.docs.amd.com/projects/rocprofiler-sdk/en/docs-7.0.1/how-to/using-rocpd-output-format.html);
#   newer docs advise collecting in the default format and converting with
#   `rocpd convert -i <file>_results.db --output-format csv`, see the
#   [I/O options](https://rocm.docs.amd.com/projects/rocprofiler-sdk/en/develop/how-to/rocprofv3-io-options.html));
#   `--output-format pftrace` writes a trace that opens in Perfetto. Counters come from an
#   input file, one pass per job, each written to its own `pass_N/` folder; kernels can be filtered by name and
#   limited to their first calls (`kernel_iteration_range`):
#   ```yaml
#   jobs:
#     - pmc: [FETCH_SIZE, WRITE_SIZE, SQ_INSTS_VALU_MFMA_MOPS_BF16]
#       kernel_iteration_range: "[1-2]"
#     - pmc: [SQ_LDS_IDX_ACTIVE, SQ_LDS_BANK_CONFLICT]
#       kernel_iteration_range: "[1-2]"
#   ```
#   then `rocprofv3 -i input.yaml --output-format csv -- python prefill.py`. The columns are in the
#   [rocprofv3 docs](https://rocm.docs.amd.com/projects/rocprofiler-sdk/en/latest/how-to/using-rocprofv3.html).
# - **rocprof-compute** (formerly Omniperf) reruns the program to collect hundreds of counters and derives
#   Speed-of-Light and other metrics: `rocprof-compute profile -n prefill -- python prefill.py`, then
#   `rocprof-compute analyze -p workloads/prefill/<SoC> -b 2`. While profiling, kernels on different streams of one
#   GPU are serialized ([profile mode docs](https://rocm.docs.amd.com/projects/rocprofiler-compute/en/latest/how-to/profile/mode.html)).
# - **rocprof-sys** (formerly Omnitrace) shows the whole system's timeline: CPU call-stack samples, GPU,
#   communication, e.g. `rocprof-sys-sample -- ./app`; Python scripts use `rocprof-sys-python`
#   ([docs](https://rocm.docs.amd.com/projects/rocprofiler-systems/en/latest/)).
#
# Below we read the recorded prefill and decode traces (**illustrative data** in rocprofv3's output format).
#
# **Exercise 7: which kernel dominates?** Implement `kernel_summary(rows)`: `rows` are kernel-trace rows from
# `csv.DictReader` (all values are strings). Group by `Kernel_Name` and return a list of
# `{"name", "calls", "total_ns", "share"}`: `total_ns` is the sum of the kernel's `End_Timestamp − Start_Timestamp`
# (integer nanoseconds), `share` its fraction of all kernels' total time; sorted by `total_ns` descending, ties by
# name. A row that ends before it starts raises `ValueError` naming its `Dispatch_Id`.

# %% tags=["solution"] grade_id="09-rocprof-sol-1"
def kernel_summary(rows):
    """Per-kernel calls, total time (ns) and share, largest first; see the contract above."""
    ### BEGIN SOLUTION
    totals, calls = {}, {}
    for row in rows:
        duration = int(row["End_Timestamp"]) - int(row["Start_Timestamp"])
        if duration < 0:
            raise ValueError(f"dispatch {row['Dispatch_Id']}: End_Timestamp is before Start_Timestamp")
        name = row["Kernel_Name"]
        totals[name] = totals.get(name, 0) + duration
        calls[name] = calls.get(name, 0) + 1
    grand = sum(totals.values())
    out = [{"name": n, "calls": calls[n], "total_ns": t, "share": t / grand if grand else 0.0}
           for n, t in totals.items()]
    return sorted(out, key=lambda r: (-r["total_ns"], r["name"]))
    ### END SOLUTION


SUMMARIES = {name: kernel_summary(rows) for name, rows in TRACES.items()}
for name in ("decode_eager", "prefill"):
    top = SUMMARIES[name][0]
    print(f"{name}: {len(SUMMARIES[name])} kernels; top {top['share']:.0%} ({top['calls']} calls) {top['name'][:70]}")

# %% tags=["test"] grade_id="09-rocprof-1" points=2
_rows = [{"Kernel_Name": "a", "Start_Timestamp": "0", "End_Timestamp": "10", "Dispatch_Id": "1"},
         {"Kernel_Name": "b", "Start_Timestamp": "10", "End_Timestamp": "40", "Dispatch_Id": "2"},
         {"Kernel_Name": "a", "Start_Timestamp": "40", "End_Timestamp": "50", "Dispatch_Id": "3"}]
_got = kernel_summary(_rows)
assert _got == [{"name": "b", "calls": 1, "total_ns": 30, "share": 0.6},
                {"name": "a", "calls": 2, "total_ns": 20, "share": 0.4}], f"期望 / expected b then a, got {_got}"
_got = kernel_summary([{"Kernel_Name": n, "Start_Timestamp": "0", "End_Timestamp": "5", "Dispatch_Id": "1"}
                       for n in ("z", "y")])
assert [r["name"] for r in _got] == ["y", "z"], f"时间相同时按名字排序 / ties sorted by name: {_got}"
try:
    kernel_summary([{"Kernel_Name": "k", "Start_Timestamp": "9", "End_Timestamp": "5", "Dispatch_Id": "77"}])
except ValueError as _err:
    assert "77" in str(_err), f"错误消息应写明 dispatch 77 / the error must name dispatch 77: {_err}"
else:
    raise AssertionError("结束早于开始应抛出 ValueError / End before Start must raise ValueError")

# %% [markdown] tags=["zh"]
# **练习 8（选做拓展 optional stretch，单独计分，后面的内容不依赖它）：从计数器到指标。** rocprofv3 的 `counter_collection.csv` 每行是"一次 dispatch 的一个计数器"。实现
# `counter_metrics(rows)`：按 `Kernel_Name` 汇总，返回 `{kernel 名: 指标字典}`。每个 kernel：
#
# - `dispatches`：不同 `Dispatch_Id` 的个数；`duration_ns`：每个 dispatch 的 `End_Timestamp − Start_Timestamp` 只计一次，求和；
# - 每个计数器在该 kernel 所有行上的 `Counter_Value` 之和（浮点数），记为 C[名字]；
# - `dram_gbs` = (C[FETCH_SIZE] + C[WRITE_SIZE]) × 1024 / `duration_ns`——这两个是派生计数器，单位 KB，结果是 GB/s（字节/纳秒）；
# - `mfma_bf16_tflops` = C[SQ_INSTS_VALU_MFMA_MOPS_BF16] × 512 / `duration_ns` / 1000（该计数器是 MFMA 运算数除以 512）；
# - `lds_conflicts_per_access` = C[SQ_LDS_BANK_CONFLICT] / (C[SQ_LDS_IDX_ACTIVE] − C[SQ_LDS_BANK_CONFLICT])，分母为 0 时为 `None`；
# - 某个指标需要的计数器不在该 kernel 的行里时，这个指标为 `None`。
#
# 这些正是 rocprof-compute 在 gfx942 上的定义（"MFMA FLOPs (BF16)"、"LDS Bank Conflicts/Access"、"L2-Fabric Read/Write BW"，
# 见其 [System Speed-of-Light 配置](https://github.com/ROCm/rocm-systems/blob/develop/projects/rocprofiler-compute/src/rocprof_compute_soc/analysis_configs/gfx942/0200_system_speed_of_light.yaml)
# 和 rocprofv3 计数器定义 `counter_defs.yaml`）。两遍 (pass) 的计数器分开读，每遍算各自的指标。

# %% [markdown] tags=["en"]
# **Exercise 8 (optional stretch, graded separately; nothing after this section depends on it): from counters to
# metrics.** Each row of rocprofv3's `counter_collection.csv` is "one counter of one
# dispatch". Implement `counter_metrics(rows)`: group by `Kernel_Name` and return `{kernel name: metrics dict}`.
# For each kernel:
#
# - `dispatches`: the number of distinct `Dispatch_Id`s; `duration_ns`: each dispatch's
#   `End_Timestamp − Start_Timestamp` counted once, summed;
# - each counter's `Counter_Value` summed over the kernel's rows (as floats), call it C[name];
# - `dram_gbs` = (C[FETCH_SIZE] + C[WRITE_SIZE]) × 1024 / `duration_ns`: both are derived counters in kilobytes,
#   the result is in GB/s (bytes per nanosecond);
# - `mfma_bf16_tflops` = C[SQ_INSTS_VALU_MFMA_MOPS_BF16] × 512 / `duration_ns` / 1000 (the counter is MFMA
#   operations divided by 512);
# - `lds_conflicts_per_access` = C[SQ_LDS_BANK_CONFLICT] / (C[SQ_LDS_IDX_ACTIVE] − C[SQ_LDS_BANK_CONFLICT]),
#   `None` when the denominator is 0;
# - a metric whose counters are not in the kernel's rows is `None`.
#
# These are rocprof-compute's gfx942 definitions ("MFMA FLOPs (BF16)", "LDS Bank Conflicts/Access",
# "L2-Fabric Read/Write BW", see its [System Speed-of-Light config](https://github.com/ROCm/rocm-systems/blob/develop/projects/rocprofiler-compute/src/rocprof_compute_soc/analysis_configs/gfx942/0200_system_speed_of_light.yaml)
# and rocprofv3's counter definitions, `counter_defs.yaml`). The two passes are read separately, each giving its own metrics.

# %% tags=["solution"] grade_id="09-stretch-counters-sol-1"
def counter_metrics(rows):
    """{kernel: {dispatches, duration_ns, dram_gbs, mfma_bf16_tflops, lds_conflicts_per_access}}; see above."""
    ### BEGIN SOLUTION
    kernels = {}
    for row in rows:
        k = kernels.setdefault(row["Kernel_Name"], {"durations": {}, "counters": {}})
        k["durations"][row["Dispatch_Id"]] = int(row["End_Timestamp"]) - int(row["Start_Timestamp"])
        k["counters"][row["Counter_Name"]] = k["counters"].get(row["Counter_Name"], 0.0) + float(row["Counter_Value"])
    out = {}
    for name, k in kernels.items():
        ns, c = sum(k["durations"].values()), k["counters"]
        dram = (c["FETCH_SIZE"] + c["WRITE_SIZE"]) * 1024 / ns if {"FETCH_SIZE", "WRITE_SIZE"} <= set(c) else None
        mfma = c["SQ_INSTS_VALU_MFMA_MOPS_BF16"] * 512 / ns / 1000 if "SQ_INSTS_VALU_MFMA_MOPS_BF16" in c else None
        lds = None
        if {"SQ_LDS_BANK_CONFLICT", "SQ_LDS_IDX_ACTIVE"} <= set(c):
            base = c["SQ_LDS_IDX_ACTIVE"] - c["SQ_LDS_BANK_CONFLICT"]
            lds = c["SQ_LDS_BANK_CONFLICT"] / base if base else None
        out[name] = {"dispatches": len(k["durations"]), "duration_ns": ns, "dram_gbs": dram,
                     "mfma_bf16_tflops": mfma, "lds_conflicts_per_access": lds}
    return out
    ### END SOLUTION


PASSES = {p.parent.name: read_csv(p) for p in sorted((ROCPROF / "prefill").glob("pass_*/*_counter_collection.csv"))}
METRICS = {name: counter_metrics(rows) for name, rows in PASSES.items()}
TOP_KERNEL = SUMMARIES["prefill"][0]["name"]
MI300X_HBM_GBS = 5300.0  # datasheet peak, 5.3 TB/s
_m1, _m2 = METRICS["pass_1"][TOP_KERNEL], METRICS["pass_2"][TOP_KERNEL]
print(f"top prefill kernel: {TOP_KERNEL}")
print(f"  MFMA {_m1['mfma_bf16_tflops']:.0f} TFLOPS = {_m1['mfma_bf16_tflops'] / MI300X_BF16_DENSE_TFLOPS:.0%} "
      f"of dense BF16 peak (1307.4); DRAM {_m1['dram_gbs']:.0f} GB/s = {_m1['dram_gbs'] / MI300X_HBM_GBS:.0%} of "
      f"5.3 TB/s; LDS conflicts/access {_m2['lds_conflicts_per_access']:.3f}")
_worst = max((m for m in METRICS["pass_2"].items() if m[1]["lds_conflicts_per_access"] is not None),
             key=lambda m: m[1]["lds_conflicts_per_access"])
print(f"most LDS bank conflicts: {_worst[0]} ({_worst[1]['lds_conflicts_per_access']:.2f} per access)")

# %% tags=["test"] grade_id="09-stretch-counters-1" points=3
def _row(d, counter, value, start=0, end=1000, name="k"):
    return {"Kernel_Name": name, "Dispatch_Id": str(d), "Counter_Name": counter, "Counter_Value": str(value),
            "Start_Timestamp": str(start), "End_Timestamp": str(end)}


_got = counter_metrics([_row(1, "FETCH_SIZE", 1000), _row(1, "WRITE_SIZE", 1000),
                        _row(1, "SQ_INSTS_VALU_MFMA_MOPS_BF16", 2000), _row(2, "FETCH_SIZE", 48, 0, 1000),
                        _row(2, "WRITE_SIZE", 0, 0, 1000), _row(2, "SQ_INSTS_VALU_MFMA_MOPS_BF16", 0, 0, 1000)])["k"]
assert _got["dispatches"] == 2 and _got["duration_ns"] == 2000, f"两次 dispatch、各计一次时长 / two dispatches, each duration once: {_got}"
assert math.isclose(_got["dram_gbs"], 2048 * 1024 / 2000), f"(KB × 1024) / ns = GB/s, got {_got['dram_gbs']}"
assert math.isclose(_got["mfma_bf16_tflops"], 2000 * 512 / 2000 / 1000) and _got["lds_conflicts_per_access"] is None
_lds = counter_metrics([_row(5, "SQ_LDS_IDX_ACTIVE", 140), _row(5, "SQ_LDS_BANK_CONFLICT", 40),
                        _row(6, "SQ_LDS_IDX_ACTIVE", 0, name="e"), _row(6, "SQ_LDS_BANK_CONFLICT", 0, name="e")])
assert math.isclose(_lds["k"]["lds_conflicts_per_access"], 0.4) and _lds["k"]["dram_gbs"] is None, \
    f"40 / (140 − 40) = 0.4；缺计数器的指标为 None / a metric without its counters is None: {_lds['k']}"
assert _lds["e"]["lds_conflicts_per_access"] is None, f"分母为 0 时为 None / None when the denominator is 0: {_lds['e']}"

# %% [markdown] tags=["zh"]
# 用数字回答（示意数据）：prefill 中占时间最多的是 MLP 的 hipBLASLt GEMM kernel，它达到稠密 BF16 峰值的约六成（分母：
# 1307.4 TFLOPS，数据手册，不含稀疏），DRAM 流量远低于 5.3 TB/s——计算受限，调优 (TunableOp) 或更低精度 (Lab 08) 才是杠杆；
# 注意力 kernel 每次 LDS 访问有约 0.4 次 bank 冲突，优化方向是数据在 LDS 中的布局 (swizzle/padding)。
# rocprof-compute 的 Speed-of-Light 表对同一 kernel 给出同样的数（`data/rocprof-compute/`）。在 ROCm GPU 上，对你自己的程序运行
# 上面的命令，用同样的函数读它的输出。

# %% [markdown] tags=["en"]
# Answer with numbers (illustrative data): in prefill, the MLP's hipBLASLt GEMM kernel takes the most time and
# reaches about 60 % of the dense BF16 peak (denominator: 1307.4 TFLOPS, datasheet, no sparsity) while its DRAM
# traffic stays far below 5.3 TB/s: compute-bound, so tuning (TunableOp) or lower precision (lab 08) are the
# levers; the attention kernel has about 0.4 LDS bank conflicts per access, to be fixed by the data layout in LDS
# (swizzle or padding). rocprof-compute's Speed-of-Light table gives the same numbers for that kernel
# (`data/rocprof-compute/`). On a ROCm GPU, run the commands above on your own program and read its output with the
# same functions.

# %%
print(open(DATA / "rocprof-compute" / "prefill_gemm_speed_of_light.csv", encoding="utf-8").read())
if GPU:
    print("your own run:\n  rocprofv3 --kernel-trace --stats --output-format csv -d rocprof_out -o lab09 -- python your_script.py\n"
          "  rocprof-compute profile -n lab09 -- python your_script.py")

# %% [markdown] tags=["zh"]
# ## 6 · 显存：训练步的峰值
#
# `profile(profile_memory=True)` 在轨迹里为每次分配和释放记一条 `[memory]` 事件，`args` 中有 `Bytes`（本次分配为正、释放为负）、
# `Total Allocated`（此刻分配器的总分配字节数）和 `Device Type`（0 是 CPU，1 是 GPU——ROCm 上的 GPU 也记为 1）。
# 在 GPU 上还可以用 `torch.cuda.max_memory_allocated()` 和分配器快照：`torch.cuda.memory._record_memory_history()`、
# `torch.cuda.memory._dump_snapshot("snap.pickle")`，再在 <https://pytorch.org/memory_viz> 打开
#（[理解 CUDA 显存使用](https://docs.pytorch.org/docs/stable/torch_cuda_memory.html)）。
#
# **练习 9：显存时间线。** 实现 `memory_timeline(events, device_type)`：`events` 是导出轨迹的 `traceEvents`；只看名字为 `[memory]`、
# `args["Device Type"] == device_type` 的事件（按时间顺序）。返回 `{"start_bytes", "peak_bytes", "peak_above_start", "largest_alloc_bytes"}`：
# `start_bytes` = 第一个事件的 `Total Allocated` 减去它的 `Bytes`（剖析开始时已占用的量）；`peak_bytes` = 所有事件 `Total Allocated`
# 的最大值；`peak_above_start = peak_bytes − start_bytes`；`largest_alloc_bytes` = 单次分配 `Bytes` 的最大值。都是字节。
# 没有符合条件的事件时抛出 `ValueError`。

# %% [markdown] tags=["en"]
# ## 6 · Memory: the peak of a training step
#
# `profile(profile_memory=True)` writes a `[memory]` event into the trace for each allocation and free; its `args`
# hold `Bytes` (positive for an allocation, negative for a free), `Total Allocated` (the allocator's total at that
# moment) and `Device Type` (0 is the CPU, 1 the GPU; a ROCm GPU is 1 too). On a GPU there are also
# `torch.cuda.max_memory_allocated()` and allocator snapshots: `torch.cuda.memory._record_memory_history()`,
# `torch.cuda.memory._dump_snapshot("snap.pickle")`, then open it at <https://pytorch.org/memory_viz>
# ([understanding CUDA memory usage](https://docs.pytorch.org/docs/stable/torch_cuda_memory.html)).
#
# **Exercise 9: the memory timeline.** Implement `memory_timeline(events, device_type)`: `events` are an exported
# trace's `traceEvents`; consider only events named `[memory]` with `args["Device Type"] == device_type`, in time
# order. Return `{"start_bytes", "peak_bytes", "peak_above_start", "largest_alloc_bytes"}`: `start_bytes` = the
# first event's `Total Allocated` minus its `Bytes` (what was in use when profiling began); `peak_bytes` = the
# largest `Total Allocated`; `peak_above_start = peak_bytes − start_bytes`; `largest_alloc_bytes` = the largest
# single `Bytes`. All in bytes. Raise `ValueError` when no event qualifies.

# %% tags=["solution"] grade_id="09-memory-sol-1"
def memory_timeline(events, device_type):
    """Start, peak and largest allocation (bytes) of one device's [memory] events; see the contract above."""
    ### BEGIN SOLUTION
    mem = sorted((e for e in events if e.get("name") == "[memory]"
                  and e.get("args", {}).get("Device Type") == device_type), key=lambda e: e["ts"])
    if not mem:
        raise ValueError(f"no [memory] events for device type {device_type}: profile with profile_memory=True")
    start = mem[0]["args"]["Total Allocated"] - mem[0]["args"]["Bytes"]
    peak = max(e["args"]["Total Allocated"] for e in mem)
    return {"start_bytes": start, "peak_bytes": peak, "peak_above_start": peak - start,
            "largest_alloc_bytes": max(e["args"]["Bytes"] for e in mem)}
    ### END SOLUTION


def profile_training_memory(tag):
    model.train()
    batch = make_batch(0)
    train_step(batch)  # warm-up outside the profile
    with profile(activities=ACTIVITIES, profile_memory=True) as prof:
        train_step(batch)
        lab.synchronize(device)
    model.eval()
    prof.export_chrome_trace(f"memory_{tag}.json")
    return json.load(open(f"memory_{tag}.json", encoding="utf-8"))["traceEvents"]


def set_checkpointing(on):
    """Activation checkpointing on every decoder layer (transformers renamed the method in v5)."""
    name = "activation_checkpointing" if hasattr(model, "activation_checkpointing_enable") else "gradient_checkpointing"
    getattr(model, f"{name}_{'enable' if on else 'disable'}")()


MEM_DEVICE = 1 if GPU else 0
MEMORY = {"baseline": memory_timeline(profile_training_memory("baseline"), MEM_DEVICE)}
set_checkpointing(True)
MEMORY["checkpointing"] = memory_timeline(profile_training_memory("checkpointing"), MEM_DEVICE)
set_checkpointing(False)
MEMORY_SAVED = MEMORY["baseline"]["peak_above_start"] - MEMORY["checkpointing"]["peak_above_start"]
LOGITS_BYTES = TRAIN_BATCH * TRAIN_TOKENS * model.config.vocab_size * torch.finfo(dtype).bits // 8
for tag, m in MEMORY.items():
    print(f"{tag:>13}: peak {m['peak_above_start'] / 2**20:7.1f} MiB above start, "
          f"largest allocation {m['largest_alloc_bytes'] / 2**20:6.1f} MiB")
print(f"activation checkpointing saved {MEMORY_SAVED / 2**20:.1f} MiB "
      f"({MEMORY_SAVED / MEMORY['baseline']['peak_above_start']:.0%}); logits alone are {LOGITS_BYTES / 2**20:.1f} MiB")

# %% tags=["test"] grade_id="09-memory-1" points=2
_ev = [{"name": "[memory]", "ts": 1, "args": {"Bytes": 100, "Total Allocated": 600, "Device Type": 0}},
       {"name": "[memory]", "ts": 2, "args": {"Bytes": 300, "Total Allocated": 900, "Device Type": 0}},
       {"name": "[memory]", "ts": 3, "args": {"Bytes": -300, "Total Allocated": 600, "Device Type": 0}},
       {"name": "aten::mm", "ts": 2, "args": {}}]
_got = memory_timeline(_ev, 0)
assert _got == {"start_bytes": 500, "peak_bytes": 900, "peak_above_start": 400, "largest_alloc_bytes": 300}, \
    f"期望 / expected start 500, peak 900, +400, largest 300, got {_got}"
_ev2 = [dict(e, ts=10 - e["ts"]) for e in _ev] + \
       [{"name": "[memory]", "ts": 0, "args": {"Bytes": 5000, "Total Allocated": 5000, "Device Type": 1}}]
assert memory_timeline(_ev2, 0)["start_bytes"] == 900, "按时间顺序取第一个事件 / time order decides the first event"
assert memory_timeline(_ev2, 1)["peak_bytes"] == 5000, "只看所要求的设备类型 / only the requested device type"
try:
    memory_timeline(_ev, 1)
except ValueError:
    pass
else:
    raise AssertionError("没有符合条件的事件应抛出 ValueError / no qualifying event must raise ValueError")

# %% [markdown] tags=["zh"]
# 两个数要分开理解：**最大的单次分配**是 logits（B×T×词表大小×4 字节），它是最大的激活；**峰值**则是反向前保存的所有层激活之和。
# 激活检查点只保存每层的输入、反向时重算层内激活，用更多计算换显存，降的是后者；要降 logits 这一项，需要分块计算损失
# (chunked cross-entropy)。在 MI300X 这样 192 GB 的卡上，省下的显存可以换成更大的批或更长的序列。

# %% [markdown] tags=["en"]
# Keep the two numbers apart: the **largest single allocation** is the logits (B×T×vocab×4 bytes), the largest
# activation; the **peak** is the sum of all layer activations kept for the backward pass. Activation checkpointing
# keeps only each layer's input and recomputes the rest during backward, trading compute for memory: it lowers the
# latter. Lowering the logits term needs a chunked loss (chunked cross-entropy). On a 192 GB MI300X the memory
# saved buys a bigger batch or longer sequences.

# %%
_fig, _ax = plt.subplots(figsize=(7, 3))
for _tag in MEMORY:
    _events = json.load(open(f"memory_{_tag}.json", encoding="utf-8"))["traceEvents"]
    _mem = sorted((e for e in _events if e.get("name") == "[memory]" and e["args"]["Device Type"] == MEM_DEVICE),
                  key=lambda e: e["ts"])
    _ax.plot([(e["ts"] - _mem[0]["ts"]) / 1e3 for e in _mem],
             [(e["args"]["Total Allocated"] - MEMORY[_tag]["start_bytes"]) / 2**20 for e in _mem], label=_tag)
_ax.set_xlabel("ms into the training step")
_ax.set_ylabel("MiB above start")
_ax.legend()
plt.show()

# %% [markdown] tags=["zh"]
# ## 7 · 症状 → 杠杆，以及能证明它的指标
#
# 先把前面的测量汇总成一张表（已给出，不计分）。`RULES` 列出每个症状、显示它的指标、阈值和对应的杠杆；`pull` 表示症状存在、
# 而且杠杆在你的测量里确实更快（或更省显存）。阈值多是经验值，只有显存那条有可以算出来的理由：
# **"激活占满显存"** 的指标是 `activation_bytes_per_param` = 训练步峰值中高于起点的部分（反向前保存的激活，加上反向中陆续分配的梯度）
# 除以参数个数 `N_PARAMS`，阈值 16 字节。用混合精度 AdamW 训练时，每个参数的模型状态 (model states) 是 16 字节：bf16 权重 2 + bf16 梯度 2
# + fp32 的权重副本、一阶矩、二阶矩共 12（[ZeRO 论文](https://arxiv.org/abs/1910.02054) 第 3.1 节）。每参数的激活超过 16 字节，
# 激活就比真实训练里其余的一切都大，激活检查点是该拉的杠杆；低于它，先把模型状态分片或卸载 (ZeRO/FSDP，Lab 10) 更划算。
# 旧版本用"峰值 / 参数字节数 ≥ 1"：本实验的步骤里梯度自己就有参数字节数那么大，这条规则几乎总会触发。

# %% [markdown] tags=["en"]
# ## 7 · Symptom → lever, and the metric that proves it
#
# First the measurements gathered into one table (given, not graded). `RULES` lists each symptom, the metric that
# shows it, a threshold and the lever for it; `pull` means the symptom is present and the lever really was faster (or
# smaller) in your measurements. Most thresholds are rules of thumb; the memory one has a reason you can compute.
# **"Activations fill memory"** is measured by `activation_bytes_per_param` = the part of the training step's peak
# above its start (the activations kept for backward, plus the gradients allocated during it) over the number of
# parameters `N_PARAMS`, with a threshold of 16 bytes. Mixed-precision AdamW training keeps 16 bytes of model states
# per parameter: bf16 weights 2, bf16 gradients 2, and 12 for the fp32 copy of the weights, momentum and variance
# ([ZeRO paper](https://arxiv.org/abs/1910.02054), section 3.1). Above 16 bytes of activations per parameter the
# activations outweigh everything else a real training job holds, and checkpointing is the lever to pull; below it,
# sharding or offloading the model states (ZeRO/FSDP, lab 10) pays more. The previous version used "peak over the
# parameter bytes ≥ 1": in this lab's step the gradients alone are as large as the parameters, so that rule fired
# almost always.

# %%
N_PARAMS = sum(p.numel() for p in model.parameters())
MODEL_STATE_BYTES_PER_PARAM = 2 + 2 + 12  # mixed-precision AdamW: bf16 weights and gradients, fp32 copy and moments
RULES = [
    {"symptom": "device idle between launches (host-bound)", "metric": "decode_idle_fraction", "threshold": 0.2,
     "lever": "batching"},
    {"symptom": "launch overhead of many tiny kernels", "metric": "decode_idle_fraction", "threshold": 0.2,
     "lever": "graphs"},
    {"symptom": "many small elementwise kernels", "metric": "elementwise_share", "threshold": 0.1,
     "lever": "torch.compile"},
    {"symptom": "GEMMs dominate device time", "metric": "matmul_share", "threshold": 0.5, "lever": "TunableOp"},
    {"symptom": "device waits for data", "metric": "data_fraction", "threshold": 0.3, "lever": "data loader workers"},
    {"symptom": "activations fill memory", "metric": "activation_bytes_per_param",
     "threshold": MODEL_STATE_BYTES_PER_PARAM, "lever": "activation checkpointing"},
]


def decision_table(rules, measured, verdicts):
    """One row per rule: the measured value, whether the symptom is present, the lever and its verdict."""
    rows = []
    for rule in rules:
        if rule["metric"] not in measured:
            raise ValueError(f"no measurement for metric {rule['metric']!r}")
        value = measured[rule["metric"]]
        verdict = verdicts.get(rule["lever"], "not measured")
        present = value >= rule["threshold"]
        rows.append({"symptom": rule["symptom"], "metric": rule["metric"], "value": value, "present": present,
                     "lever": rule["lever"], "verdict": verdict,
                     "pull": present and verdict in ("faster", "smaller")})
    return rows


MEASURED = {"decode_idle_fraction": DECODE_IDLE["idle_fraction"],
            "elementwise_share": DECODE_SHARES["elementwise"] + DECODE_SHARES["norm"],
            "matmul_share": DECODE_SHARES["matmul"], "data_fraction": DATA_FRACTION,
            "activation_bytes_per_param": MEMORY["baseline"]["peak_above_start"] / N_PARAMS}
VERDICTS = {name: result["verdict"] for name, result in LEVERS.items()}
VERDICTS["activation checkpointing"] = "smaller" if MEMORY_SAVED > 0 else "no difference"
DECISIONS = decision_table(RULES, MEASURED, VERDICTS)
for row in DECISIONS:
    print(f"{'PULL' if row['pull'] else '    '} {row['symptom']:<44} {row['metric']}={row['value']:.3g} "
          f"present={row['present']!s:<5} -> {row['lever']} ({row['verdict']})")

# %% [markdown] tags=["zh"]
# **练习 10：两份剖析，一个杠杆。** 表里的规则只看一个数和一个阈值；工程师要做的是看着剖析说出"拉哪个杠杆"，并指出**哪个指标能证明它**：
# 这个杠杆会让它变化，而别的杠杆不会让它这样变化。只让"一步变短了"是不够的证据——几个杠杆都能做到。
# 下面的单元格为每个案例算好了一组指标（`CASE_METRICS`，已给出）：kernel 轨迹上是 `idle_fraction`（窗口内设备空闲的比例，练习 2）、
# `kernel_count`、`busy_us`（kernel 时间的并集，微秒）、`gemm_share`（GEMM kernel 占 kernel 总时间的比例；这些录制里 GEMM kernel 的名字以
# `Cijk_` 开头）；显存剖析上是 `peak_above_start_mib` 和 `largest_alloc_mib`（练习 9）。
#
# - **案例 A**：同一个 bf16 decode 步在 MI300X 上的两份录制（rocprofv3，示意数据）。哪个杠杆把第一份变成了第二份？哪个指标证明了它？
# - **案例 B**：你的训练步剖析了两次，第二次拉了一个杠杆（第 6 节）。哪个杠杆？哪个指标证明了它？
# - **案例 C**：案例 B 里拉过杠杆之后的那份训练步剖析。还剩下的最大一项，要用哪个杠杆降下来？哪个指标这么说？
#
# 在解答单元格里填 `JUDGEMENTS = {"A": {"lever": ..., "metric": ...}, "B": {...}, "C": {...}}`，杠杆取自 `LEVER_CHOICES`，指标取自
# `METRIC_CHOICES`（写字符串本身）。一个编出来的例子：某次改动后 decode 步的 `kernel_count` 从 940 降到 310，`busy_us` 几乎不变——
# 这是 `torch.compile` 把小算子融合成了更少的 kernel，证据是 `kernel_count`（批处理和 Graph 都不会减少每步的 kernel 数）。

# %% [markdown] tags=["en"]
# **Exercise 10: two profiles, one lever.** The table's rules look at one number and one threshold; an engineer looks
# at profiles, says which lever to pull, and names **the metric that proves it**: one that this lever moves and the
# other levers would not move that way. "The step got shorter" is not proof: several levers do that.
# The next cell computes a set of metrics for each case (`CASE_METRICS`, given): on a kernel trace `idle_fraction`
# (the device's idle share of the window, exercise 2), `kernel_count`, `busy_us` (the union of kernel time, in
# microseconds) and `gemm_share` (the GEMM kernels' share of all kernel time; in these recordings the GEMM kernels'
# names start with `Cijk_`); on a memory profile `peak_above_start_mib` and `largest_alloc_mib` (exercise 9).
#
# - **Case A**: two recordings of one bf16 decode step on an MI300X (rocprofv3, illustrative). Which lever turns the
#   first into the second, and which metric proves it?
# - **Case B**: your training step profiled twice, the second time with a lever pulled (section 6). Which lever, and
#   which metric proves it?
# - **Case C**: case B's second profile, with its lever pulled. Which lever lowers the largest item that is left, and
#   which metric says so?
#
# In the solution cell, set `JUDGEMENTS = {"A": {"lever": ..., "metric": ...}, "B": {...}, "C": {...}}` with a lever
# from `LEVER_CHOICES` and a metric from `METRIC_CHOICES` (the strings themselves). A made-up example: after a change,
# a decode step's `kernel_count` falls from 940 to 310 while `busy_us` barely moves. That is `torch.compile` fusing
# small operators into fewer kernels, and the proof is `kernel_count` (neither batching nor graphs lowers the number of
# kernels per step).

# %%
LEVER_CHOICES = ("batching", "graphs", "torch.compile", "TunableOp", "data loader workers",
                 "activation checkpointing", "chunked loss")
METRIC_CHOICES = ("idle_fraction", "kernel_count", "busy_us", "gemm_share", "peak_above_start_mib",
                  "largest_alloc_mib")


def trace_metrics(rows):
    """The kernel-trace metrics of one rocprofv3 recording (timestamps in ns)."""
    idle = recorded_idle(rows)
    summary = kernel_summary(rows)
    return {"idle_fraction": idle["idle_fraction"], "kernel_count": len(rows), "busy_us": idle["busy"] / 1e3,
            "gemm_share": sum(k["share"] for k in summary if k["name"].startswith("Cijk_"))}


def memory_metrics(timeline):
    return {"peak_above_start_mib": timeline["peak_above_start"] / 2**20,
            "largest_alloc_mib": timeline["largest_alloc_bytes"] / 2**20}


CASE_METRICS = {
    "A": [trace_metrics(TRACES["decode_eager"]), trace_metrics(TRACES["decode_graph"])],
    "B": [memory_metrics(MEMORY["baseline"]), memory_metrics(MEMORY["checkpointing"])],
    "C": [memory_metrics(MEMORY["checkpointing"])],
}
for case, profiles in CASE_METRICS.items():
    for i, metrics in enumerate(profiles, 1):
        print(f"case {case}, profile {i}: " + ", ".join(f"{k}={v:.3g}" for k, v in metrics.items()))

# %% tags=["solution"] grade_id="09-judge-sol-1"
# JUDGEMENTS = {case: {"lever": one of LEVER_CHOICES, "metric": one of METRIC_CHOICES}} for the cases A, B, C.
### BEGIN SOLUTION
JUDGEMENTS = {
    "A": {"lever": "graphs", "metric": "idle_fraction"},
    "B": {"lever": "activation checkpointing", "metric": "peak_above_start_mib"},
    "C": {"lever": "chunked loss", "metric": "largest_alloc_mib"},
}
### END SOLUTION

# %% tags=["test"] grade_id="09-judge-1" points=5
assert isinstance(JUDGEMENTS, dict) and sorted(JUDGEMENTS) == ["A", "B", "C"], \
    f"JUDGEMENTS 的键是 A、B、C / JUDGEMENTS has the keys A, B, C: {JUDGEMENTS!r}"
for _case, _answer in JUDGEMENTS.items():
    assert isinstance(_answer, dict) and _answer.get("lever") in LEVER_CHOICES, \
        f"案例 {_case}：杠杆取自 LEVER_CHOICES / case {_case}: a lever from LEVER_CHOICES, got {_answer!r}"
    assert _answer.get("metric") in METRIC_CHOICES, \
        f"案例 {_case}：指标取自 METRIC_CHOICES / case {_case}: a metric from METRIC_CHOICES, got {_answer!r}"
for _case in ("A", "B"):  # a lever's proof moves between the two profiles
    _metric = JUDGEMENTS[_case]["metric"]
    _before, _after = (p.get(_metric) for p in CASE_METRICS[_case])
    assert _before is not None and _after is not None, \
        f"案例 {_case} 的剖析里没有 {_metric} / case {_case}'s profiles have no {_metric}"
    assert abs(_after - _before) > 0.1 * abs(_before), \
        f"案例 {_case}：{_metric} 几乎没变（{_before:.3g} → {_after:.3g}），它证明不了杠杆 / " \
        f"case {_case}: {_metric} barely moved ({_before:.3g} -> {_after:.3g}), so it proves no lever"
assert JUDGEMENTS["C"]["metric"] in CASE_METRICS["C"][0], \
    f"案例 C 是一份显存剖析 / case C is a memory profile: {JUDGEMENTS['C']['metric']} is not one of its metrics"

# %% [markdown] tags=["zh"]
# ## 可选拓展（不计分）
#
# 在 gpu 配置下把 `torch.compile(model, mode="reduce-overhead")` 用在整个 decode 步上（它会捕获 Graph），用 `compare_runs`
# 与 eager 比较；再用 `rocprofv3 --kernel-trace` 录下两种运行，用 `busy_and_idle` 比较设备空闲比例。这一节没有要在 smoke 中运行的代码。

# %% [markdown] tags=["en"]
# ## Optional stretch (not graded)
#
# In the gpu profile, apply `torch.compile(model, mode="reduce-overhead")` to the whole decode step (it captures
# graphs) and compare it with eager using `compare_runs`; then record both runs with `rocprofv3 --kernel-trace` and
# compare the device's idle fraction with `busy_and_idle`. This section has no code for the smoke profile.

# %% [markdown] tags=["zh"]
# ## 小结
#
# 你能用 `torch.profiler` 按类别看自身时间、导出 Perfetto 轨迹；能从轨迹算出设备空闲并说出瓶颈在主机、设备还是数据；
# 能用"中位数 + 离散度"判断一个杠杆是否真的更快；知道 TunableOp 调什么、文件何时能随部署发布；能读 rocprofv3 的 kernel 轨迹与计数器、
# 算出带宽、MFMA 吞吐和 LDS 冲突（分母写清楚）；能找到训练步的显存峰值并用激活检查点降下来。在更大的 GPU 上：用 gpu 配置重跑，
# 再用 rocprofv3 / rocprof-compute 剖析你自己的服务。
# 文档：[torch.profiler](https://docs.pytorch.org/docs/stable/profiler.html) ·
# [TunableOp](https://docs.pytorch.org/docs/stable/cuda.tunable.html) ·
# [rocprofv3](https://rocm.docs.amd.com/projects/rocprofiler-sdk/en/latest/how-to/using-rocprofv3.html) ·
# [rocprof-compute](https://rocm.docs.amd.com/projects/rocprofiler-compute/en/latest/) ·
# [rocprof-sys](https://rocm.docs.amd.com/projects/rocprofiler-systems/en/latest/)。

# %% [markdown] tags=["en"]
# ## Wrap-up
#
# You can read self time by category with `torch.profiler` and export a Perfetto trace; compute the device's idle
# time from a trace and name the bound (host, device or data); decide with medians and spread whether a lever is
# really faster; say what TunableOp tunes and when its file can ship; read rocprofv3 kernel traces and counters
# into bandwidth, MFMA throughput and LDS conflicts (with the denominator named); and find a training step's peak
# memory and lower it with activation checkpointing. On a bigger GPU: rerun in the gpu profile, then profile your
# own service with rocprofv3 and rocprof-compute.
# Docs: [torch.profiler](https://docs.pytorch.org/docs/stable/profiler.html) ·
# [TunableOp](https://docs.pytorch.org/docs/stable/cuda.tunable.html) ·
# [rocprofv3](https://rocm.docs.amd.com/projects/rocprofiler-sdk/en/latest/how-to/using-rocprofv3.html) ·
# [rocprof-compute](https://rocm.docs.amd.com/projects/rocprofiler-compute/en/latest/) ·
# [rocprof-sys](https://rocm.docs.amd.com/projects/rocprofiler-systems/en/latest/).
