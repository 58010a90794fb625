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
# # 实验 10 · FSDP2 分片训练与分布式检查点
#
# `10-fsdp2` · 版本 {{version}} · 约 {{minutes}} 分钟（计分核心；选做的练习 5 不计入） · 先修：实验 03（显存预算、质检报告 JSON）、实验 05（DDP、torchrun、弹性重启）
#
# 实验 03 算过：7B 模型全量微调光是权重、梯度和优化器状态就要一百多 GiB；实验 05 的 DDP 让每张卡都存一整份。
# 单卡放不下的模型，在 MI300X 节点上是靠**分片**（sharding）训练的：每个 rank 只存每个参数的 1/N。本实验用
# PyTorch 的 FSDP2（`fully_shard`）和分布式检查点（DCP，`torch.distributed.checkpoint`）做完整的一遍：
#
# 1. 显存账：DDP、ZeRO-1/2/3 与 FSDP2（bf16 参数、fp32 归约）每个 rank 各存多少字节，8 张 MI300X 最多能训多大的模型；
# 2. 用 `fully_shard` 逐层、再对根模块分片，看清每个 rank 手里是每个参数的哪 1/N（DTensor 分片）；
# 3. 一步训练里发生了什么：all-gather、计算、reshard、reduce-scatter 的顺序，以及预取（prefetch）；
# 4. 与单进程训练等价：损失曲线与最终参数在给定容差内一致，并说清楚为什么不能逐位相同；
# 5. （选做）通信量：FSDP 的 all-gather + reduce-scatter 对比 DDP 的 all-reduce，按字节数核对公式与实测；
# 6. 分布式检查点：分片保存，SIGKILL 一个 rank 后恢复；换一个 world size（2 → 1）加载并导出为 `transformers` 能直接加载的 safetensors 模型；
# 7. 在质检数据上分片微调 tiny-qwen-zh，最后用实验 03 的 JSON 指标评测。
#
# 冒烟（smoke）配置：CPU、gloo、2 个 rank、tiny-qwen-zh；GPU 上是 nccl（ROCm 上即 RCCL），代码相同。

# %% [markdown] tags=["en"]
# # Lab 10 · Sharded fine-tuning with FSDP2 and DCP
#
# `10-fsdp2` · version {{version}} · about {{minutes}} minutes (the graded core; the optional exercise 5 is not counted) · prerequisites: lab 03 (memory budget, QC report JSON), lab 05 (DDP, torchrun, elastic restart)
#
# Lab 03 computed that a full fine-tune of a 7B model needs over a hundred GiB for weights, gradients and optimizer state alone; lab 05's DDP keeps a whole copy on every GPU. Models that do not fit on one GPU are trained on MI300X nodes by **sharding**: each rank stores 1/N of every parameter. This lab goes all the way with PyTorch's FSDP2 (`fully_shard`) and distributed checkpoints (DCP, `torch.distributed.checkpoint`):
#
# 1. the memory bill: bytes per rank under DDP, ZeRO-1/2/3 and FSDP2 (bf16 parameters, fp32 reduction), and the largest model 8 MI300X can train;
# 2. shard the model with `fully_shard`, layer by layer and then the root, and see which 1/N of each parameter each rank holds (DTensor shards);
# 3. what happens in one step: the order of all-gather, compute, reshard and reduce-scatter, and prefetching;
# 4. equivalence with single-process training: loss curve and final parameters agree within a stated tolerance, and why they cannot be bit-identical;
# 5. (optional stretch) communication volume: FSDP's all-gathers and reduce-scatters against DDP's all-reduce, in bytes, checked against the formula and against what was measured;
# 6. distributed checkpoints: sharded save, resume after a SIGKILL of one rank; load with another world size (2 → 1) and export a safetensors model that `transformers` loads;
# 7. a sharded fine-tune of tiny-qwen-zh on the QC data, scored at the end with lab 03's JSON metrics.
#
# The smoke profile: CPU, gloo, 2 ranks, tiny-qwen-zh. On GPUs the backend is nccl (RCCL on ROCm), with the same code.

# %% [markdown] tags=["zh"]
# **自测与提交。** 每个练习下面的测试单元格是可见的自测：随时运行它们，或在终端运行 `rocmlab check <本笔记本>.ipynb`（它执行所有可见测试）。做完后提交：提交：在工作坊 Hub 上，从 Jupyter 菜单 **Nbgrader › Assignment List** 提交，或在终端运行 `rocmlab submit <笔记本>.ipynb`（提交并立即评分，打印分数和未满足的规则）；讲师也可能统一收取。若你是从课程网站下载的笔记本，没有 Hub：`rocmlab check` 给出可见测试的结果，把笔记本按讲师说的方式交给讲师评分。成绩来自隐藏检查：它们逐条检查练习说明中写明的每条规则，输入由你自己的种子生成（其他尺寸、其他 world size、边界情况），不会检查说明之外的要求。可见测试全部通过、又满足说明中的每条规则，就能得到满分。

# %% [markdown] tags=["en"]
# **Self-check and submit.** The test cell under each exercise is your visible self-check: run it any time, or run `rocmlab check <this notebook>.ipynb` in a terminal (it runs all visible tests). When done, submit: to submit on the workshop hub, use Jupyter's **Nbgrader › Assignment List** (*Submit*), or run `rocmlab submit <notebook>.ipynb` in a terminal (it submits and has it graded now, printing the score and each rule not met); the instructor may also collect. If you downloaded the notebook from the course site, there is no hub: `rocmlab check` gives the visible tests' results, and you hand the notebook to your instructor the way they ask. The grade comes from hidden checks that test each rule stated in an exercise's text, one by one, on inputs drawn from your own seed (other sizes, other world sizes, edge cases); they check nothing the text does not state. Pass the visible tests and follow every stated rule, and you get full marks.

# %% [markdown] tags=["zh"]
# **课程模型。** 下面的设置单元格会准备 `MODEL`。`tiny-qwen-zh` 是用课程数据在本机构建的小模型（不下载）：
# 这台机器上第一次用到它时，该单元格要构建它，两个 CPU 核上大约 3–5 分钟，之后从缓存读取。
# 可以提前在终端运行 `rocmlab assets build-model`，或把 `ROCMLAB_CACHE` 指向已有构建好的模型的文件夹。

# %% [markdown] tags=["en"]
# **The course model.** The setup cell below prepares `MODEL`. `tiny-qwen-zh` is a small model built on this
# machine from the course data (nothing is downloaded): the first time a lab needs it here, that cell builds it,
# about 3–5 minutes on two CPU cores; later runs read the cache. Build it ahead of time with `rocmlab assets
# build-model` in a terminal, or point `ROCMLAB_CACHE` at a folder that holds a built one.

# %%
import copy
import inspect
import json
import math
import os
import re
import shutil
import signal
import tempfile
import textwrap
import time
import warnings
from pathlib import Path

import psutil
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict, get_state_dict,
                                                     set_state_dict)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig
from transformers.utils import logging as hf_logging

from rocmlab import lab
from rocmlab.lab.launch import import_lines
from rocmlab.lab.models import model_path

# %% tags=["parameters"]
PROFILE = "smoke"
DEVICE = "auto"
SEED = 0
MODEL = "tiny-qwen-zh"
WORLD_SIZE = 2             # ranks of every launch
BACKEND = "auto"           # auto: nccl when every rank gets its own GPU, else gloo on CPU
TIMEOUT_S = 300            # per torchrun launch; every rank is ended after it
CPU_THREADS = 1            # torch threads in this notebook on CPU (each rank uses one: OMP_NUM_THREADS=1)
GLOBAL_BATCH = 8           # QC samples per step, over all ranks
EQUIV_STEPS = 8            # steps compared with a single process (exercise 4)
FT_STEPS = 60              # steps of the sharded fine-tune (exercises 6 and 7)
FT_LR = 2e-3
CKPT_EVERY = 4             # a DCP checkpoint every this many steps
CRASH_AT = 6               # the last rank is SIGKILLed before this step, on the first attempt
SCHEDULE_STEPS = 1         # steps per configuration in the schedule measurements (timed on GPUs)
N_EVAL = 16                # held-out reports scored in exercise 7
MAX_NEW_TOKENS = 96

# %%
lab.seed_everything(SEED)
print(lab.describe_environment(PROFILE))
print("course model:", model_path(MODEL))  # tiny-qwen-zh: built here the first time (about 3–5 min on 2 CPU cores)
if CPU_THREADS:
    torch.set_num_threads(CPU_THREADS)
hf_logging.disable_progress_bar()
# DCP says so whenever it loads or saves without a process group, which this notebook does on purpose.
warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")


def backend_for(nproc):
    """nccl (RCCL on ROCm) when there is one GPU per rank, else gloo with CPU tensors."""
    if BACKEND != "auto":
        return BACKEND
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return "nccl" if gpus >= nproc else "gloo"


device = lab.pick_device(DEVICE)
# Everything this lab writes (rank scripts, rank results, checkpoints, the export) lives here;
# the last cell removes it and checks that nothing survived.
WORK = Path(tempfile.mkdtemp(prefix="lab10-work-", dir=Path.cwd()))
print("ranks:", WORLD_SIZE, "| backend:", backend_for(WORLD_SIZE), "| notebook device:", device, "| scratch:", WORK.name)

# %% [markdown] tags=["zh"]
# ## 1 · 显存账：每个 rank 要存多少字节
#
# 训练状态有三部分：参数、梯度、优化器状态（AdamW 的一阶矩 m 和二阶矩 v）。ZeRO 论文（Rajbhandari et al., 2020, [arXiv:1910.02054](https://arxiv.org/abs/1910.02054)）按混合精度 Adam 记账：16 位参数 2 B、16 位梯度 2 B、优化器 12 B（fp32 主权重 4 B + m 4 B + v 4 B），共 16 B/参数。ZeRO 的三个阶段依次把优化器状态、梯度、参数切成 N 份（N = rank 数）。
#
# FSDP2 的 `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)` 记账方式不同（[fully_shard 文档](https://docs.pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)）：每个 rank 常驻的是 **fp32 分片参数**——它们本身就是主权重，文档原话是 FSDP 不需要额外显存存高精度副本；梯度经 fp32 reduce-scatter 后以 fp32 分片保存；AdamW 的 m、v 跟随参数是 fp32。bf16 的完整参数只在某一层计算时临时 all-gather 出来。
#
# | 策略 strategy | 参数 params | 梯度 grads | 优化器 optimizer |
# | --- | --- | --- | --- |
# | `ddp` | 2 | 2 | 12 |
# | `zero1` | 2 | 2 | 12/N |
# | `zero2` | 2 | 2/N | 12/N |
# | `zero3` | 2/N | 2/N | 12/N |
# | `fsdp2` | 4/N | 4/N | 8/N |
#
# （单位：字节/参数，不计激活、临时的 all-gather 缓冲和框架开销。）
#
# **练习 1。** `state_bytes_per_rank(n_params, world_size, strategy)` 按上表返回 `{"params", "grads", "optimizer", "total"}`，单位字节（float，不取整，不考虑分片时的填充）；`total` 是前三项之和。`strategy` 不在上表、`world_size < 1` 或 `n_params < 0` 时抛 `ValueError`。`largest_model(memory_bytes, world_size, strategy)` 返回每个 rank 有 `memory_bytes` 字节时能放下训练状态的最大参数量：`total ≤ memory_bytes` 的最大整数。

# %% [markdown] tags=["en"]
# ## 1 · The memory bill: bytes per rank
#
# Training state has three parts: parameters, gradients, and optimizer state (AdamW's first and second moments m and v). The ZeRO paper (Rajbhandari et al., 2020, [arXiv:1910.02054](https://arxiv.org/abs/1910.02054)) counts mixed-precision Adam: 16-bit parameters 2 B, 16-bit gradients 2 B, optimizer 12 B (fp32 master weights 4 B + m 4 B + v 4 B), 16 B per parameter in all. ZeRO's three stages split the optimizer state, then the gradients, then the parameters into N parts (N = number of ranks).
#
# FSDP2 with `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)` keeps a different bill ([fully_shard docs](https://docs.pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)): each rank keeps **fp32 sharded parameters**, which are the master weights themselves (the docs: FSDP needs no extra memory for a high-precision copy); gradients are reduce-scattered in fp32 and kept as fp32 shards; AdamW's m and v follow the fp32 parameters. Full bf16 parameters exist only while one layer computes, all-gathered for it.
#
# | strategy | params | grads | optimizer |
# | --- | --- | --- | --- |
# | `ddp` | 2 | 2 | 12 |
# | `zero1` | 2 | 2 | 12/N |
# | `zero2` | 2 | 2/N | 12/N |
# | `zero3` | 2/N | 2/N | 12/N |
# | `fsdp2` | 4/N | 4/N | 8/N |
#
# (Bytes per parameter; activations, the transient all-gather buffers and framework overhead are left out.)
#
# **Exercise 1.** `state_bytes_per_rank(n_params, world_size, strategy)` returns `{"params", "grads", "optimizer", "total"}` from the table, in bytes (floats, not rounded, shard padding ignored); `total` is the sum of the other three. Raise `ValueError` when `strategy` is not in the table, `world_size < 1` or `n_params < 0`. `largest_model(memory_bytes, world_size, strategy)` returns the largest parameter count whose training state fits in `memory_bytes` per rank: the largest integer with `total ≤ memory_bytes`.

# %% tags=["solution"] grade_id="10-memory-sol-1"
STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "fsdp2")


def state_bytes_per_rank(n_params, world_size, strategy):
    """Bytes of parameters, gradients and optimizer state one rank holds (see the table above).
    Returns {"params", "grads", "optimizer", "total"} as floats."""
    ### BEGIN SOLUTION
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if world_size < 1 or n_params < 0:
        raise ValueError(f"need world_size >= 1 and n_params >= 0, got {world_size}, {n_params}")
    n = world_size
    per_param = {"ddp": (2, 2, 12), "zero1": (2, 2, 12 / n), "zero2": (2, 2 / n, 12 / n),
                 "zero3": (2 / n, 2 / n, 12 / n), "fsdp2": (4 / n, 4 / n, 8 / n)}[strategy]
    params, grads, optimizer = (b * n_params for b in per_param)
    return {"params": params, "grads": grads, "optimizer": optimizer, "total": params + grads + optimizer}
    ### END SOLUTION


def largest_model(memory_bytes, world_size, strategy):
    """The largest whole number of parameters whose training state fits in memory_bytes per rank."""
    ### BEGIN SOLUTION
    return math.floor(memory_bytes / state_bytes_per_rank(1, world_size, strategy)["total"])
    ### END SOLUTION


# %% tags=["test"] grade_id="10-memory-1" points=3
_b = state_bytes_per_rank(1_000_000, 4, "zero2")
assert set(_b) == {"params", "grads", "optimizer", "total"}, f"返回键 return keys: {sorted(_b)}"
assert math.isclose(_b["params"], 2e6) and math.isclose(_b["grads"], 0.5e6) and math.isclose(_b["optimizer"], 3e6), \
    f"zero2, N=4: 每参数 2 + 2/4 + 12/4 字节 / bytes per parameter 2 + 2/4 + 12/4, got {_b}"
assert math.isclose(state_bytes_per_rank(10, 8, "fsdp2")["total"], 20.0), "fsdp2, N=8: 16/8 = 2 B/param"
assert largest_model(192 * 2**30, 8, "zero3") == 96 * 2**30, "8 × 192 GiB, ZeRO-3: 2 B/param per rank"
assert largest_model(100, 1, "ddp") == 6, "100 B, DDP: 16 B/param, 最大整数 / the largest whole count is 6"
for _bad in [(10, 2, "zero4"), (10, 0, "ddp"), (-1, 2, "ddp")]:
    try:
        state_bytes_per_rank(*_bad)
    except ValueError:
        pass
    else:
        raise AssertionError(f"state_bytes_per_rank{_bad} 应抛 ValueError / should raise ValueError")
print("显存账正确 / memory bill correct")

# %% [markdown] tags=["zh"]
# 把它用在三个模型上。参数量从模型配置在 `meta` 设备上构建模型后数出来（不占内存，也不下载任何东西）；两个 Qwen 配置取自模型卡页面上公布的 `config.json`，模型卡写的是 0.49B 与 7.61B（[Qwen2.5-0.5B-Instruct](https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct)、[Qwen2.5-7B-Instruct](https://huggingface.co/Qwen/Qwen2.5-7B-Instruct)）。MI300X 有 192 GB HBM3（[AMD MI300X 数据手册](https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf)）。显存容量按二进制计：[ROCm GPU 规格表](https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html) 写作 192 GiB（显卡报告的字节数比 192 × 10⁹ 多）。但 192 × 2³⁰ = 206,158,430,208 字节也比显卡实际报告的多：一块 MI300X VF（云上的虚拟机）向 rocm-smi 报告 205,822,885,888 字节，裸机上的 MI300X 报告 206,141,652,992 字节（[ROCm/legacy-rocm-build#4750](https://github.com/ROCm/legacy-rocm-build/issues/4750) 中 rocm-smi 的输出），其余留作保留区。下面取前者 `MI300X_BYTES` = 205,822,885,888 字节，而且一个字节都不留给激活和框架，所以得到的是上限。

# %% [markdown] tags=["en"]
# Now the three models. Parameter counts come from building each model from its config on the `meta` device (no memory, nothing downloaded); the two Qwen configs are the published `config.json` values, and the model cards say 0.49B and 7.61B ([Qwen2.5-0.5B-Instruct](https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct), [Qwen2.5-7B-Instruct](https://huggingface.co/Qwen/Qwen2.5-7B-Instruct)). MI300X has 192 GB of HBM3 ([AMD MI300X datasheet](https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf)). Memory capacity counts in binary units: the [ROCm GPU specifications](https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html) list it as 192 GiB (a board reports more than 192 × 10⁹ bytes). Yet 192 × 2³⁰ = 206,158,430,208 bytes is more than the board reports: an MI300X VF (a cloud VM) reports 205,822,885,888 bytes to rocm-smi, and a bare-metal MI300X 206,141,652,992 (rocm-smi's output in [ROCm/legacy-rocm-build#4750](https://github.com/ROCm/legacy-rocm-build/issues/4750)); the rest is reserved. We take the former, `MI300X_BYTES` = 205,822,885,888 bytes, and leave nothing for activations or the framework, so the answers are upper bounds.

# %%
QWEN_CONFIGS = {  # published config.json values (model pages above)
    "Qwen2.5-0.5B": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True),
    "Qwen2.5-7B": dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4, tie_word_embeddings=False),
}


def count_parameters(config):
    """Parameters of the causal LM `config` describes (tied weights counted once), built on `meta`."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


MI300X_BYTES = 205_822_885_888   # what an MI300X VF reports to rocm-smi: less than 192 × 2**30 (see above)
base_config = AutoConfig.from_pretrained(model_path(MODEL))
PARAM_COUNTS = {"tiny-qwen-zh" if MODEL == "tiny-qwen-zh" else MODEL: count_parameters(base_config)}
PARAM_COUNTS.update({name: count_parameters(AutoConfig.for_model("qwen2", **kw)) for name, kw in QWEN_CONFIGS.items()})
for name, n in PARAM_COUNTS.items():
    row = "  ".join(f"{s} {state_bytes_per_rank(n, 8, s)['total'] / 2**30:8.2f}" for s in STRATEGIES)
    print(f"{name:>14}: {n / 1e9:6.3f} B params | GiB per rank on 8 GPUs: {row}")
print("largest model on 8 × MI300X (training state only):",
      {s: f"{largest_model(MI300X_BYTES, 8, s) / 1e9:.1f} B" for s in STRATEGIES})
_ = lab.plot_bars({s: state_bytes_per_rank(PARAM_COUNTS["Qwen2.5-7B"], 8, s)["total"] / 2**30 for s in STRATEGIES},
                  title="Qwen2.5-7B, 8 ranks: training state per rank", ylabel="GiB", reference=MI300X_BYTES / 2**30)

# %% [markdown] tags=["zh"]
# 读这张表：DDP 下 7B 每张卡要 113 GiB，8 张 MI300X 最多只能训约 12.9B；ZeRO-1 约 37.4B，ZeRO-2 约 54.9B；ZeRO-3 / FSDP2 把 16 B/参数全部切成 8 份，上限升到约 102.9B。ZeRO-3 和 FSDP2 总量相同但构成不同：FSDP2 常驻的是 fp32 参数本身，没有单独的主权重副本，bf16 的完整参数只在计算时临时出现。真实训练还要留出激活（与 batch × 序列长度 × 层数成正比，激活检查点可以压缩）、一两层的 all-gather 缓冲和框架开销，所以实际能训的模型要小得多。multi-gpu 配置会把第 7 节微调时实测的每 rank 峰值显存和这里的预测放在一起。

# %% [markdown] tags=["en"]
# Reading the table: under DDP a 7B model needs 113 GiB per GPU, and 8 MI300X train at most about 12.9B; ZeRO-1 about 37.4B, ZeRO-2 about 54.9B; ZeRO-3 / FSDP2 split all 16 B per parameter eight ways and the ceiling rises to about 102.9B. ZeRO-3 and FSDP2 add up to the same total but differ in what they hold: FSDP2 keeps the fp32 parameters themselves, with no separate master copy, and full bf16 parameters appear only while computing. Real training must also hold activations (proportional to batch × sequence × layers; activation checkpointing cuts them), the all-gather buffers of a layer or two and framework overhead, so the model that really trains is much smaller. The multi-gpu profile puts the peak memory per rank measured during section 7's fine-tune next to this prediction.

# %% [markdown] tags=["zh"]
# ## 准备：每个 rank 都要用到的代码
#
# 和实验 05 一样，rank 是 torchrun 启动的独立进程，看不到笔记本里的变量。`write_rank_script` 把笔记本的 import（笔记本里绑定的每个模块和导入的名字，所以你在任何单元格里加的 `import re` 也会到达各 rank）和写好的函数（`inspect.getsource`）拼成一个脚本，`launch` 用 `lab.run_torchrun` 启动它：有超时，结束时所有 rank 都被清理；每个 rank 把结果 `torch.save` 到 `rank{r}.pt`。
#
# **干净退出。** 每个 rank 脚本在 `init_process_group` 之前 `import torch.distributed.nn`，所有模型、优化器都放在一个已经返回的函数里，最后在每个 rank 上调用 `lab.end_process_group()`：它先清掉 DTensor 持有 DeviceMesh（进而持有进程组）的缓存，再 `destroy_process_group()`，然后返回仍在运行的 gloo 线程名——干净时是空列表。否则 gloo 的工作线程会比进程组活得更久，进程退出时偶尔以 SIGABRT（"terminate called without an active exception"）结束。每个 rank 都把这个列表写进结果，最后一个单元会检查。
#
# **数据。** 训练样本是实验 03 的对话格式：系统提示 + 产品线与缺陷描述 → 回答是报告 JSON 加 `<|im_end|>`；只有回答部分计入损失（其余标签为 −100）。第 `step` 步的全局批只由 `(SEED, step)` 决定，补齐到这一批的最大长度；rank r 取其中连续的第 r 段。

# %% [markdown] tags=["en"]
# ## Setup: code every rank needs
#
# As in lab 05, ranks are separate processes started by torchrun and cannot see the notebook's variables. `write_rank_script` writes the notebook's imports (every module and imported name the notebook has bound, so an `import re` you add in any cell reaches the ranks too) and functions from the notebook (`inspect.getsource`) into a script; `launch` starts it with `lab.run_torchrun`, which has a timeout and cleans up every rank; each rank `torch.save`s its result to `rank{r}.pt`.
#
# **A clean exit.** Every rank script imports `torch.distributed.nn` before `init_process_group`, keeps every model and optimizer inside a function that has returned, and calls `lab.end_process_group()` on every rank at the end: it first clears DTensor's caches that hold a DeviceMesh (and with it the process group), then calls `destroy_process_group()`, and returns the names of gloo threads still running, an empty list when clean. Otherwise gloo's worker threads outlive the group, and the process sometimes dies with SIGABRT at exit ("terminate called without an active exception"). Every rank reports the list, and the last cell checks it.
#
# **Data.** Samples use lab 03's chat format: a system prompt + product line and defect description → the answer is the report as JSON followed by `<|im_end|>`; only the answer counts in the loss (every other label is −100). The global batch of step `step` depends only on `(SEED, step)` and is padded to its longest sample; rank r takes the r-th contiguous slice.

# %%
REPORT_KEYS = ("defect_type", "location", "severity", "disposition", "root_cause", "action")
SYSTEM_PROMPT = "你是质检助手。把缺陷描述转换成 JSON 质检报告，字段：" + "、".join(REPORT_KEYS) + "。"


def qc_prompt_messages(record):
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"产品线：{record['product_line']}\n缺陷描述：{record['description']}"}]


def qc_answer(record):
    return json.dumps({key: record["report"][key] for key in REPORT_KEYS}, ensure_ascii=False)


def encode_qc(record, tokenizer):
    """(input_ids, labels) of one sample: prompt labels -100, answer + <|im_end|> labelled."""
    prompt = tokenizer.apply_chat_template(qc_prompt_messages(record), tokenize=False, add_generation_prompt=True)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    answer_ids = tokenizer(qc_answer(record), add_special_tokens=False)["input_ids"]
    answer_ids.append(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    return prompt_ids + answer_ids, [-100] * len(prompt_ids) + answer_ids


def pad_rows(rows, pad_id, length):
    """Right-pad (input_ids, labels) rows to `length`: {"input_ids", "attention_mask", "labels"}."""
    ids = torch.full((len(rows), length), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), length), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), length), dtype=torch.long)
    for i, (row_ids, row_labels) in enumerate(rows):
        ids[i, :len(row_ids)] = torch.tensor(row_ids)
        labels[i, :len(row_labels)] = torch.tensor(row_labels)
        mask[i, :len(row_ids)] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def global_batch(step, items, tokenizer, cfg):
    """The encoded rows of one step's global batch: a function of (seed, step) only."""
    order = torch.randperm(len(items), generator=torch.Generator().manual_seed(cfg["seed"] * 100_003 + step))
    return [encode_qc(items[i], tokenizer) for i in order[: cfg["global_batch"]].tolist()]


def rank_rows(rows, rank, world):
    per_rank = len(rows) // world
    return rows[rank * per_rank:(rank + 1) * per_rank]


def start_rank(cfg):
    """Join the process group torchrun described; return (rank, world, device, 1-D device mesh)."""
    device = torch.device("cpu")
    if cfg["backend"] == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)   # before init_process_group: each rank's communicator on its own GPU
        # Deterministic kernels where they exist (warn_only: an op without one warns instead of raising), and the
        # math attention backend, whose backward is plain matmuls and softmax, instead of the fused kernels.
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cuda.enable_flash_sdp(False)
        torch.backends.cuda.enable_mem_efficient_sdp(False)
        torch.backends.cuda.enable_cudnn_sdp(False)
        torch.backends.cuda.enable_math_sdp(True)
    dist.init_process_group(cfg["backend"])
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    return dist.get_rank(), dist.get_world_size(), device, mesh


def load_for_training(cfg, device):
    model, tokenizer = lab.load_model(cfg["model"], device=device, dtype=torch.float32)
    return model.train(), tokenizer


def full_parameters(model):
    """Every rank must call this (it all-gathers); rank 0 gets {name: full CPU tensor}, others None."""
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {k: v.detach().clone() for k, v in full.items()} if dist.get_rank() == 0 else None


def run_rank(work, cfg):
    """Start, run work(cfg, rank, world, device, mesh) -> dict, end the process group, save the result."""
    rank, world, device, mesh = start_rank(cfg)
    try:
        result = work(cfg, rank, world, device, mesh)
    finally:
        del mesh
        threads = lab.end_process_group()
    result["gloo_threads_after_destroy"] = threads
    out = Path(cfg["out"])
    out.mkdir(parents=True, exist_ok=True)
    torch.save(result, out / f"rank{rank}.pt")
    print(f"rank {rank}/{world}: done; gloo threads after destroy: {threads}", flush=True)


RANK_CODE = [qc_prompt_messages, qc_answer, encode_qc, pad_rows, global_batch, rank_rows, start_rank,
             load_for_training, full_parameters, run_rank]

# %%
RANK_HEADER = f"""\
import sys  # the script's main reads its configuration from argv
import torch.distributed.nn  # before init_process_group: see "A clean exit" above
hf_logging.disable_progress_bar()
REPORT_KEYS = {REPORT_KEYS!r}
SYSTEM_PROMPT = {SYSTEM_PROMPT!r}
"""


def write_rank_script(name, work, functions):
    """WORK/<name>.py: the notebook's imports (every module and imported name it has bound, so an import
    you add in any cell reaches the ranks too), the rank code, `functions`, `work`, and a main that runs
    work on every rank."""
    sources = [textwrap.dedent(inspect.getsource(f)) for f in (*RANK_CODE, *functions, work)]
    footer = f"\nif __name__ == '__main__':\n    run_rank({work.__name__}, json.loads(sys.argv[1]))\n"
    path = WORK / f"{name}.py"
    path.write_text(import_lines(globals()) + RANK_HEADER + "\n\n".join(sources) + footer, encoding="utf-8")
    return path


def launch(name, work, functions, cfg, *, nproc=WORLD_SIZE, max_restarts=0, env=None):
    """Run work on nproc ranks under torchrun; return (TorchrunResult, [rank result or None])."""
    out = WORK / f"{name}-out"
    shutil.rmtree(out, ignore_errors=True)
    cfg = dict(cfg, out=str(out), backend=backend_for(nproc))
    script = write_rank_script(name, work, functions)
    env = {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "CUBLAS_WORKSPACE_CONFIG": ":4096:8", **(env or {})}
    result = lab.run_torchrun(script, nproc=nproc, args=[json.dumps(cfg)], env=env, timeout_s=TIMEOUT_S,
                              max_restarts=max_restarts, cwd=WORK, show=False)
    print(result.summary())
    if not result.ok:
        for rank in result.ranks:
            print(f"───── rank {rank.rank} ─────\n{rank.output[-3000:]}")
    ranks = [torch.load(out / f"rank{r}.pt", weights_only=True) if (out / f"rank{r}.pt").exists() else None
             for r in range(nproc)]
    return result, ranks


def check_launch(result, ranks, what):
    assert result.ok, f"{what}: torchrun 失败 failed ({result.summary()}); 看上面各 rank 的输出 / see the rank output above"
    missing = [r for r, got in enumerate(ranks) if got is None]
    assert not missing, f"{what}: rank {missing} 没有写出结果 wrote no result"


def max_abs_diff(a, b):
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in b)


# %% [markdown] tags=["zh"]
# ## 2 · 用 `fully_shard` 分片
#
# `fully_shard(module, mesh=...)` 把 `module.parameters()` 原地换成 **DTensor**：每个参数沿第 0 维按 `torch.chunk` 切成 N 块，rank r 只保存第 r 块（放置方式 placement 为 `Shard(0)`）；第 0 维不能整除时前面的块大一点，FSDP 在内部补零对齐。每次调用 `fully_shard` 形成一个**通信组**：这个模块里还没有被更内层调用认领的参数，前向前一起 all-gather、反向后一起 reduce-scatter。所以要自底向上：先对每个解码层（`model.model.layers[i]`）调用，再对根模型调用，根模型收下剩下的参数（嵌入、最后的 RMSNorm、与嵌入共享的 `lm_head`）。
#
# `reshard_after_forward=True` 表示一层前向算完就释放完整参数、反向时再 all-gather 一次（省显存，多通信）；根模型保持默认值：FSDP 会让根模块前向后不释放，因为反向一开始就要用它（[fully_shard 文档](https://docs.pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)）。
#
# **练习 2。** `shard_model(model, mesh, mp_policy=None, reshard_after_forward=True)`：对 `model.model.layers` 中的每一层调用 `fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=...)`，再调用 `fully_shard(model, mesh=mesh, mp_policy=...)`（根模型不传 `reshard_after_forward`）；`mp_policy` 为 None 时用默认的 `MixedPrecisionPolicy()`。返回 `model`。检查在第 4 节的启动之后进行：每个参数都是放置为 `Shard(0)` 的 DTensor；rank r 的本地形状符合 `torch.chunk` 的切法；各 rank 的分片拼起来逐位等于原参数；每个解码层和根模型都是 `FSDPModule`，其他模块都不是。

# %% [markdown] tags=["en"]
# ## 2 · Sharding with `fully_shard`
#
# `fully_shard(module, mesh=...)` turns `module.parameters()` into **DTensors** in place: each parameter is split along dim 0 with `torch.chunk` into N pieces, and rank r keeps piece r only (placement `Shard(0)`); when dim 0 does not divide, the leading pieces are one row larger and FSDP pads internally. Each call makes one **communication group**: the module's parameters not already claimed by an inner call, all-gathered together before forward and reduce-scattered together after backward. So go bottom-up: first each decoder layer (`model.model.layers[i]`), then the root model, which takes what is left (the embedding, the final RMSNorm, and the `lm_head` tied to the embedding).
#
# `reshard_after_forward=True` frees a layer's full parameters as soon as its forward is done and all-gathers them again in backward (less memory, more traffic); the root keeps its default: FSDP does not reshard the root after forward, because backward needs it at once ([fully_shard docs](https://docs.pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)).
#
# **Exercise 2.** `shard_model(model, mesh, mp_policy=None, reshard_after_forward=True)`: call `fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=...)` on each layer of `model.model.layers`, then `fully_shard(model, mesh=mesh, mp_policy=...)` (the root gets no `reshard_after_forward`); `mp_policy=None` means the default `MixedPrecisionPolicy()`. Return `model`. It is checked after the launch in section 4: every parameter is a DTensor placed `Shard(0)`; rank r's local shape follows `torch.chunk`; the ranks' shards put together equal the original parameter bit for bit; every decoder layer and the root are `FSDPModule`s, and no other module is.

# %% tags=["solution"] grade_id="10-shard-sol-1"
def shard_model(model, mesh, mp_policy=None, reshard_after_forward=True):
    """fully_shard each decoder layer (model.model.layers), then the root model, on `mesh`. Returns model."""
    ### BEGIN SOLUTION
    policy = mp_policy if mp_policy is not None else MixedPrecisionPolicy()
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model
    ### END SOLUTION


# %% [markdown] tags=["zh"]
# ## 3 · 一步训练里发生了什么：调度与预取
#
# 分片后，每层前向之前 FSDP 要先把这一层的完整参数 all-gather 回来；`reshard_after_forward=True` 时反向还要再 all-gather 一次；每层反向算完梯度后做一次 reduce-scatter，每个 rank 只留下自己那 1/N 的平均梯度。在 GPU 上通信在单独的流上和计算重叠：**预取**（prefetch）就是提前发出后面几层的 all-gather。FSDP2 默认在反向隐式预取前一层；`set_modules_to_forward_prefetch` / `set_modules_to_backward_prefetch` 可以显式指定（[fully_shard 文档](https://docs.pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)）。预取越深，重叠越充分，同时驻留的完整参数也越多。
#
# **练习 3。** `set_prefetch(layers, depth)`：对第 i 层调用 `layers[i].set_modules_to_forward_prefetch(layers[i+1 : i+1+depth])` 和 `layers[i].set_modules_to_backward_prefetch([...])`，后者是第 i−1, i−2, …, i−depth 层（最近的在前，不越过第 0 层）。`depth = 0` 时两个列表都为空（回到 FSDP 的默认行为）。每一层都要调用，列表为空也要调用。下面的检查用一组假的层记录调用参数；第 4 节的启动会在真实模型上用钩子（hook）记下 all-gather 与每层计算的先后顺序。

# %% [markdown] tags=["en"]
# ## 3 · What happens in one step: the schedule and prefetching
#
# Once sharded, FSDP must all-gather a layer's full parameters before its forward; with `reshard_after_forward=True` it all-gathers them again in backward; after each layer's backward it reduce-scatters the gradients, and each rank keeps its 1/N of the averaged gradient. On a GPU communication runs on its own stream and overlaps compute: **prefetching** issues the all-gathers of the next layers early. FSDP2 prefetches the previous layer implicitly in backward; `set_modules_to_forward_prefetch` / `set_modules_to_backward_prefetch` set it explicitly ([fully_shard docs](https://docs.pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)). Deeper prefetching overlaps more, and keeps more full parameters resident at once.
#
# **Exercise 3.** `set_prefetch(layers, depth)`: on layer i call `layers[i].set_modules_to_forward_prefetch(layers[i+1 : i+1+depth])` and `layers[i].set_modules_to_backward_prefetch([...])` with layers i−1, i−2, …, i−depth (nearest first, never past layer 0). With `depth = 0` both lists are empty (FSDP's default behaviour). Call both on every layer, with an empty list too. The check below uses fake layers that record what they are given; the launch in section 4 records, with hooks, the order of all-gathers and layer computations in the real model.

# %% tags=["solution"] grade_id="10-prefetch-sol-1"
def set_prefetch(layers, depth):
    """Explicit FSDP prefetching: layer i prefetches the next `depth` layers in forward and the
    previous `depth` layers (nearest first) in backward."""
    ### BEGIN SOLUTION
    for i, layer in enumerate(layers):
        layer.set_modules_to_forward_prefetch(list(layers[i + 1:i + 1 + depth]))
        layer.set_modules_to_backward_prefetch(list(layers[max(0, i - depth):i])[::-1])
    ### END SOLUTION


# %%
class RecordingLayer:
    """Stands in for an FSDP layer: remembers which layers it was told to prefetch."""

    def __init__(self, index):
        self.index, self.forward, self.backward = index, None, None

    def set_modules_to_forward_prefetch(self, modules):
        self.forward = [m.index for m in modules]

    def set_modules_to_backward_prefetch(self, modules):
        self.backward = [m.index for m in modules]


# %% tags=["test"] grade_id="10-prefetch-1" points=2
_layers = [RecordingLayer(i) for i in range(4)]
set_prefetch(_layers, 1)
assert [_l.forward for _l in _layers] == [[1], [2], [3], []], f"前向预取 forward prefetch: {[_l.forward for _l in _layers]}"
assert [_l.backward for _l in _layers] == [[], [0], [1], [2]], f"反向预取 backward prefetch: {[_l.backward for _l in _layers]}"
_layers = [RecordingLayer(i) for i in range(3)]
set_prefetch(_layers, 5)
assert [_l.backward for _l in _layers] == [[], [0], [1, 0]], f"最近的在前、不越过第 0 层 / nearest first, never past layer 0: {[_l.backward for _l in _layers]}"
_layers = [RecordingLayer(i) for i in range(3)]
set_prefetch(_layers, 0)
assert [(_l.forward, _l.backward) for _l in _layers] == [([], [])] * 3, "depth 0: 每层都调用、列表为空 / both called on every layer with []"
print("预取设置正确 / prefetch lists correct")

# %% [markdown] tags=["zh"]
# ## 4 · 与单进程训练等价
#
# 数据并行等价于单进程的条件和实验 05 一样：相同的初始参数，每步用**整个全局批的平均梯度**更新。FSDP 的 reduce-scatter 对各 rank 的梯度取平均（除以 N）。陷阱在损失上：语言模型的损失是对**有标签的 token** 求平均，而不同 rank 上的回答长度不同、有标签的 token 数不同。每个 rank 各自求平均再让 FSDP 平均，等于"平均的平均"，token 少的 rank 权重偏大，和单进程在整个批上的平均不相等。正确做法：每个 rank 用本 rank 的**交叉熵之和**除以**全局**有标签 token 数，再乘以 N（抵消 FSDP 的除以 N）。全局 token 数用一次 `all_reduce` 求和得到。（Hugging Face 的 `Trainer` 用 `num_items_in_batch` 修正梯度累积时的同一个问题，见 [Fixing Gradient Accumulation](https://huggingface.co/blog/gradient_accumulation)。）
#
# **练习 4。** `rank_loss(logits, labels, global_label_tokens, world_size)`：`logits` 形状 (b, T, V)，`labels` 形状 (b, T)，−100 表示不计入。因果语言模型要错开一位：位置 t 的 logits 预测标签 t+1，即用 `logits[:, :-1]` 对 `labels[:, 1:]`。返回标量：本 rank 所有计入的位置上交叉熵之和（在 float32 中计算）× `world_size` / `global_label_tokens`。这样 N 个 rank 的梯度取平均后，恰好是整个全局批上按 token 平均的交叉熵的梯度。

# %% [markdown] tags=["en"]
# ## 4 · Equivalence with single-process training
#
# Data parallelism equals single-process training under lab 05's conditions: the same initial parameters, and every step updated with **the gradient averaged over the whole global batch**. FSDP's reduce-scatter averages the ranks' gradients (divides by N). The trap is the loss: a language-model loss averages over the **labelled tokens**, and ranks hold answers of different lengths, so different numbers of labelled tokens. If each rank averages its own and FSDP then averages the ranks, that is a mean of means: a rank with fewer tokens weighs more, and the result is not the single-process mean over the whole batch. The right way: each rank divides **the sum** of its cross-entropies by the **global** number of labelled tokens, and multiplies by N (undoing FSDP's division by N). One `all_reduce` sums the global token count. (Hugging Face's `Trainer` fixes the same problem in gradient accumulation with `num_items_in_batch`; see [Fixing Gradient Accumulation](https://huggingface.co/blog/gradient_accumulation).)
#
# **Exercise 4.** `rank_loss(logits, labels, global_label_tokens, world_size)`: `logits` has shape (b, T, V), `labels` (b, T), with −100 meaning not counted. A causal LM is shifted by one: the logits at position t predict label t+1, i.e. `logits[:, :-1]` against `labels[:, 1:]`. Return a scalar: the sum of the cross-entropies over this rank's counted positions (computed in float32) × `world_size` / `global_label_tokens`. Then the average of the N ranks' gradients is exactly the gradient of the token-averaged cross-entropy over the whole global batch.

# %% tags=["solution"] grade_id="10-loss-sol-1"
def rank_loss(logits, labels, global_label_tokens, world_size):
    """This rank's share of the global token-mean causal-LM loss, scaled so that averaging the
    ranks' gradients gives the single-process gradient."""
    ### BEGIN SOLUTION
    shifted = logits[:, :-1].reshape(-1, logits.size(-1)).float()
    targets = labels[:, 1:].reshape(-1)
    total = F.cross_entropy(shifted, targets, ignore_index=-100, reduction="sum")
    return total * world_size / global_label_tokens
    ### END SOLUTION


# %%
def synthetic_batch(b, t, v, seed):
    """Random logits (requires grad) and labels with -100 prompts and padding of random lengths."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, t, v, generator=g, dtype=torch.float64).requires_grad_()
    labels = torch.randint(0, v, (b, t), generator=g)
    for row in range(b):
        start, stop = sorted(torch.randint(0, t + 1, (2,), generator=g).tolist())
        labels[row, :start] = -100
        labels[row, stop:] = -100
    return logits, labels


def sharded_gradient(loss_fn, logits, labels, world):
    """What FSDP computes: each rank's gradient of its own loss, averaged over the ranks."""
    n_global = int((labels[:, 1:] != -100).sum())
    per_rank = logits.size(0) // world
    total = sum(loss_fn(logits[r * per_rank:(r + 1) * per_rank], labels[r * per_rank:(r + 1) * per_rank], n_global, world)
                for r in range(world))
    (grad,) = torch.autograd.grad(total / world, logits)
    return grad


def reference_gradient(logits, labels):
    """One process, the whole batch: cross-entropy averaged over every labelled token."""
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1), ignore_index=-100)
    (grad,) = torch.autograd.grad(loss, logits)
    return grad


def per_rank_mean_loss(logits, labels, global_label_tokens, world_size):
    """The common mistake: each rank averages over its own tokens."""
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1), ignore_index=-100)


_logits, _labels = synthetic_batch(8, 12, 11, SEED)
_mistake = float((sharded_gradient(per_rank_mean_loss, _logits, _labels, 2) - reference_gradient(_logits, _labels)).abs().max())
print(f"平均的平均 mean of per-rank means: max |Δgrad| = {_mistake:.2e} (not zero)")

# %% tags=["test"] grade_id="10-loss-1" points=3
_logits, _labels = synthetic_batch(4, 9, 7, SEED + 1)
_got = sharded_gradient(rank_loss, _logits, _labels, 2)
_want = reference_gradient(_logits, _labels)
assert torch.allclose(_got, _want, rtol=1e-6, atol=1e-9), \
    f"两个 rank 的平均梯度应等于单进程梯度 / the 2-rank average gradient must equal the single-process gradient; max |Δ| = {float((_got - _want).abs().max()):.2e}"
_one = rank_loss(_logits, _labels, int((_labels[:, 1:] != -100).sum()), 1)
assert _one.dim() == 0 and _one.dtype == torch.float32, f"应返回 float32 标量 / a float32 scalar, got shape {tuple(_one.shape)} {_one.dtype}"
_n = int((_labels[:, 1:] != -100).sum())
_sum = F.cross_entropy(_logits[:, :-1].reshape(-1, 7), _labels[:, 1:].reshape(-1), ignore_index=-100, reduction="sum")
assert math.isclose(rank_loss(_logits, _labels, _n + 3, 4).item(), _sum.item() * 4 / (_n + 3), rel_tol=1e-5), \
    "值 = 交叉熵之和 × world_size / global_label_tokens / value = CE sum × world_size / global_label_tokens"
_empty = _labels.clone()
_empty[:] = -100
assert rank_loss(_logits, _empty, 5, 2).item() == 0.0, "没有计入 token 的 rank 贡献 0 / a rank with no labelled token contributes 0"
print("rank_loss 的平均梯度等于单进程梯度 / averaged rank_loss gradients equal the single-process gradient")

# %% [markdown] tags=["zh"]
# ### 启动：分片、调度、通信量、等价训练
#
# 一次启动做完第 2–5 节要在 rank 上做的事（每次 torchrun 启动都要花几秒，所以合在一起）：
#
# 1. **分片报告**：加载模型、记下原参数，`shard_model` 之后报告每个参数的类型、放置、全局与本地形状，以及 `full_tensor()`（一次 all-gather）是否逐位等于原参数；保存第 0 层几个参数的本地分片。
# 2. **调度与通信量**：对几种配置各跑 `SCHEDULE_STEPS` 步（默认；预取深度 1、2；`reshard_after_forward=False`；bf16 参数 + fp32 归约），每次用新模型。一个 `TorchDispatchMode` 在分发器（dispatcher）层面记下每次 all-gather / reduce-scatter 的缓冲区字节数；每层的前向预钩子（forward pre-hook）在 FSDP 自己的钩子之后运行，记下"第 i 层开始计算"。再用 DDP 的通信钩子（comm hook）记下 DDP 每步 all-reduce 的字节数。
# 3. **等价训练**：`EQUIV_STEPS` 步 AdamW，每步记录全局损失，最后在 rank 0 上取回完整参数。

# %% [markdown] tags=["en"]
# ### The launch: sharding, schedule, traffic, equivalence run
#
# One launch does what sections 2–5 need from the ranks (each torchrun launch costs seconds, so they share one):
#
# 1. **Shard report**: load the model, keep the original parameters, and after `shard_model` report each parameter's type, placement, global and local shapes, and whether `full_tensor()` (an all-gather) equals the original bit for bit; keep the local shards of a few layer-0 parameters.
# 2. **Schedule and traffic**: `SCHEDULE_STEPS` steps for each of a few configurations (default; prefetch depth 1 and 2; `reshard_after_forward=False`; bf16 parameters with fp32 reduction), each on a fresh model. A `TorchDispatchMode` records, at the dispatcher, the buffer bytes of every all-gather and reduce-scatter; a forward pre-hook on each layer, which runs after FSDP's own hook, records "layer i starts computing". A DDP comm hook records the bytes DDP all-reduces in a step.
# 3. **Equivalence run**: `EQUIV_STEPS` AdamW steps, the global loss of every step, and the full parameters gathered on rank 0 at the end.

# %%
def collective_recorder(events):
    """A dispatch mode that appends ("all_gather" | "reduce_scatter", full buffer bytes) to `events`
    for each c10d collective issued while it is active."""

    class CollectiveRecorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(getattr(func, "_overloadpacket", func))
            if name.endswith("_allgather_base_"):       # (output = the gathered full buffer, input = my shard)
                events.append(("all_gather", args[0].numel() * args[0].element_size()))
            elif name.endswith("_reduce_scatter_base_"):  # (output = my shard, input = the full buffer)
                events.append(("reduce_scatter", args[1].numel() * args[1].element_size()))
            return func(*args, **(kwargs or {}))

    return CollectiveRecorder()


def train_step(model, optimizer, rows, pad_id, rank, world, device):
    """One optimizer step on this rank's slice of the global batch; returns the global loss."""
    length = max(len(ids) for ids, _ in rows)
    batch = {k: v.to(device) for k, v in pad_rows(rank_rows(rows, rank, world), pad_id, length).items()}
    tokens = (batch["labels"][:, 1:] != -100).sum().to(torch.float64)
    dist.all_reduce(tokens)                                   # the global number of labelled tokens
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    loss = rank_loss(logits, batch["labels"], tokens.item(), world)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    report = loss.detach().to(torch.float64)
    dist.all_reduce(report)
    return report.item() / world                              # = the token mean over the global batch


def group_numels(model):
    """Parameters per FSDP group: the root's own first, then each decoder layer."""
    layer_ids = [{id(p) for p in layer.parameters()} for layer in model.model.layers]
    in_layers = set().union(*layer_ids)
    root = sum(p.numel() for p in model.parameters() if id(p) not in in_layers)
    return [root] + [sum(p.numel() for p in layer.parameters()) for layer in model.model.layers]


def measure_schedule(cfg, run, pristine, tokenizer, rank, world, device, mesh):
    """Events of SCHEDULE_STEPS steps under one configuration: collectives and layer starts."""
    model = copy.deepcopy(pristine).to(device)
    numels = group_numels(model)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if run["bf16"] else None
    shard_model(model, mesh, mp_policy=policy, reshard_after_forward=run["reshard"])
    if run["depth"]:
        set_prefetch(list(model.model.layers), run["depth"])
    events, recording = [], [True]   # the schedule of the first step only
    for i, layer in enumerate(model.model.layers):
        layer.register_forward_pre_hook(lambda module, args, i=i: recording[0] and events.append(("forward", i)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"])
    items = lab.load_qc_reports("train")
    seconds, peak = [], None
    for step in range(cfg["schedule_steps"]):
        rows = global_batch(step, items, tokenizer, cfg)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        recording[0] = step == 0
        started = time.perf_counter()
        with collective_recorder(events if step == 0 else []):
            train_step(model, optimizer, rows, tokenizer.pad_token_id, rank, world, device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            peak = torch.cuda.max_memory_allocated(device)
        seconds.append(time.perf_counter() - started)
    return {"events": events, "group_numels": numels, "seconds": seconds, "peak_bytes": peak}


def measure_ddp_traffic(cfg, pristine, tokenizer, device):
    """Bytes of the gradient buckets DDP all-reduces in one backward (a comm hook sees each bucket)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    ddp = DDP(copy.deepcopy(pristine).to(device), device_ids=[device.index] if device.type == "cuda" else None)
    buckets = []

    def counting_hook(state, bucket):
        buckets.append(bucket.buffer().numel() * bucket.buffer().element_size())
        return default_hooks.allreduce_hook(None, bucket)

    ddp.register_comm_hook(None, counting_hook)
    items = lab.load_qc_reports("train")
    rows = global_batch(0, items, tokenizer, cfg)
    batch = pad_rows(rank_rows(rows, dist.get_rank(), dist.get_world_size()), tokenizer.pad_token_id,
                     max(len(ids) for ids, _ in rows))
    batch = {k: v.to(device) for k, v in batch.items()}
    ddp(**batch).loss.backward()
    return {"bucket_bytes": buckets}


def fsdp_work(cfg, rank, world, device, mesh):
    started = time.perf_counter()
    # 1. shard report
    pristine, tokenizer = load_for_training(cfg, torch.device("cpu"))
    model = copy.deepcopy(pristine).to(device)
    original = {name: p.detach().cpu().clone() for name, p in model.named_parameters()}
    shard_model(model, mesh)
    params = {}
    for name, p in model.named_parameters():
        is_dtensor = isinstance(p, DTensor)
        entry = {"dtensor": is_dtensor, "global_shape": list(p.shape)}
        if is_dtensor:
            entry.update(placements=[repr(pl) for pl in p.placements], mesh_size=p.device_mesh.size(),
                         local_shape=list(p.to_local().shape),
                         full_equal=bool(torch.equal(p.full_tensor().cpu(), original[name])))
        params[name] = entry
    keep = [n for n in original if n.startswith("model.layers.0.") and original[n].numel() <= 64 * 1024]
    shards = {n: p.to_local().detach().cpu().clone() for n, p in model.named_parameters() if n in keep}
    fsdp_modules = sorted(n or "<root>" for n, m in model.named_modules() if isinstance(m, FSDPModule))
    n_layers = len(model.model.layers)
    del model
    phases = {"shard report": time.perf_counter() - started}
    # 2. schedules, traffic
    schedules = {run["name"]: measure_schedule(cfg, run, pristine, tokenizer, rank, world, device, mesh)
                 for run in cfg["schedules"]}
    ddp_traffic = measure_ddp_traffic(cfg, pristine, tokenizer, device)
    phases["schedules and traffic"] = time.perf_counter() - started - sum(phases.values())
    # 3. equivalence run
    model = shard_model(copy.deepcopy(pristine).to(device), mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.0)
    items = lab.load_qc_reports("train")
    losses = [train_step(model, optimizer, global_batch(step, items, tokenizer, cfg), tokenizer.pad_token_id,
                         rank, world, device) for step in range(cfg["equiv_steps"])]
    final = full_parameters(model)
    phases["equivalence run"] = time.perf_counter() - started - sum(phases.values())
    return {"params": params, "shards": shards, "fsdp_modules": fsdp_modules, "n_layers": n_layers,
            "original": {n: original[n] for n in keep}, "schedules": schedules, "ddp": ddp_traffic,
            "losses": losses, "final": final, "phase_seconds": phases}


SCHEDULES = [{"name": "default", "depth": 0, "reshard": True, "bf16": False},
             {"name": "prefetch-1", "depth": 1, "reshard": True, "bf16": False},
             {"name": "prefetch-2", "depth": 2, "reshard": True, "bf16": False},
             {"name": "no-reshard", "depth": 0, "reshard": False, "bf16": False},
             {"name": "bf16-params", "depth": 0, "reshard": True, "bf16": True}]
TRAIN_CFG = {"seed": SEED, "model": MODEL, "lr": FT_LR, "global_batch": GLOBAL_BATCH}
FSDP_CFG = dict(TRAIN_CFG, equiv_steps=EQUIV_STEPS, schedules=SCHEDULES, schedule_steps=SCHEDULE_STEPS)
assert GLOBAL_BATCH % WORLD_SIZE == 0, f"GLOBAL_BATCH={GLOBAL_BATCH} must divide by WORLD_SIZE={WORLD_SIZE}"
fsdp_result, fsdp_ranks = launch(
    "fsdp", fsdp_work,
    [shard_model, set_prefetch, rank_loss, collective_recorder, train_step, group_numels, measure_schedule,
     measure_ddp_traffic], FSDP_CFG)
if fsdp_result.ok:
    print("rank 0 time per phase:", {k: f"{v:.1f} s" for k, v in fsdp_ranks[0]["phase_seconds"].items()})

# %% tags=["test"] grade_id="10-shard-1" points=3
check_launch(fsdp_result, fsdp_ranks, "fsdp")
_report = fsdp_ranks[0]
for _name, _p in _report["params"].items():
    assert _p["dtensor"], f"{_name}: 不是 DTensor / not a DTensor (was fully_shard called on its module?)"
    assert _p["placements"] == ["Shard(dim=0)"] and _p["mesh_size"] == WORLD_SIZE, f"{_name}: placements {_p['placements']}"
    assert _p["full_equal"], f"{_name}: all-gather 回来的参数与原参数不同 / the gathered parameter differs from the original"
_want_modules = sorted(["<root>"] + [f"model.layers.{i}" for i in range(_report["n_layers"])])
assert _report["fsdp_modules"] == _want_modules, \
    f"FSDPModule 应是每个解码层和根模型 / every decoder layer and the root, got {_report['fsdp_modules']}"
for _r, _got in enumerate(fsdp_ranks):
    for _name, _p in _got["params"].items():
        _mine = [c.shape[0] for c in torch.empty(_p["global_shape"][0]).chunk(WORLD_SIZE)]
        _mine = _mine[_r] if _r < len(_mine) else 0
        assert _p["local_shape"] == [_mine] + _p["global_shape"][1:], \
            f"rank {_r}, {_name}: 本地形状应是 torch.chunk 的第 {_r} 块 / local shape should be chunk {_r}: {_p['local_shape']}"
for _name, _orig in _report["original"].items():
    assert torch.equal(torch.cat([_got["shards"][_name] for _got in fsdp_ranks]), _orig), \
        f"{_name}: 各 rank 分片拼接应逐位等于原参数 / the shards joined must equal the original"
print(f"{len(_report['params'])} 个参数都是 Shard(0) 的 DTensor / parameters are Shard(0) DTensors; FSDP groups: {len(_want_modules)}")

# %% [markdown] tags=["zh"]
# 数一下：tiny-qwen-zh 每层 0.74M 个参数，嵌入 1.05M；两个 rank 时每个 rank 只存每个矩阵的一半行。把 `Shard(0)` 的分片拼起来（`full_tensor()` 就是一次 all-gather）得到的正是原参数：分片不丢任何信息，只是换了存放的地方。
#
# 下面是默认配置的调度：`AG` 是 all-gather，`RS` 是 reduce-scatter，`F i` 是第 i 层开始前向。

# %% [markdown] tags=["en"]
# Counting: tiny-qwen-zh has 0.74M parameters per layer and 1.05M in the embedding; with two ranks each rank stores half the rows of each matrix. Putting the `Shard(0)` pieces together (`full_tensor()` is one all-gather) gives back exactly the original parameter: sharding loses nothing, it only moves where things live.
#
# Below is the default configuration's schedule: `AG` is an all-gather, `RS` a reduce-scatter, `F i` layer i starting its forward.

# %%
def schedule_text(events):
    short = {"all_gather": "AG", "reduce_scatter": "RS"}
    return " ".join(f"F{e[1]}" if e[0] == "forward" else short[e[0]] for e in events)


for _name, _run in fsdp_ranks[0]["schedules"].items() if fsdp_result.ok else []:
    print(f"{_name:>12}: {schedule_text(_run['events'])}")


# %% [markdown] tags=["zh"]
# 怎么读：默认时，根模块先 all-gather（嵌入在第一层之前要用），然后每层"AG → F i"：这一层的参数刚好在它开始计算前到位。反向里第一个 RS 之前已经有两个 AG——当前层和隐式预取的前一层。预取深度 1 时，第 0 层开始计算之前已经发出了第 0、1 层的 all-gather；深度 2 时发出 0、1、2 层。`reshard_after_forward=False` 时反向一个 AG 都没有：省下的通信用显存换——每层的完整参数从前向一直留到反向。
#
# 规则（下面的测试按它检查）：L 层，前向预取深度 d（默认 d = 0）时，第 i 层开始前向前已发出 min(i + 2 + d, L + 1) 次 all-gather（含根模块那次）；反向预取深度 d（默认 d = 0）时，第 k 次 reduce-scatter（k = 0 是最后一层）之前反向**至少**已发出 min(k + 1 + d, L) 次 all-gather（这一层自己的参数必须先到，再加上显式预取的 d 层），L 层的 reduce-scatter 之后是根模块的 reduce-scatter，此时反向的 L 次 all-gather 都已发出。FSDP2 的隐式预取可能再多发一次（上面默认配置的反向就是这样），这是实现细节，检查只要求"至少"。在 CPU 上 gloo 是同步执行的，所以这里只能看**顺序**；在 GPU 上同一个顺序决定了通信能不能藏在计算后面，multi-gpu 配置下面会打印每种配置的步时与峰值显存。

# %% [markdown] tags=["en"]
# How to read it: by default the root is all-gathered first (the embedding is needed before layer 0), then each layer goes "AG → F i": its parameters arrive just before it starts computing. In backward, two AGs come before the first RS: the current layer and the previous one, prefetched implicitly. With prefetch depth 1, the all-gathers of layers 0 and 1 are issued before layer 0 starts; with depth 2, layers 0, 1 and 2. With `reshard_after_forward=False` backward has no AG at all: the traffic saved is paid in memory, every layer's full parameters stay from forward to backward.
#
# The rule (the test below checks it): with L layers and forward prefetch depth d (default d = 0), min(i + 2 + d, L + 1) all-gathers (the root's included) have been issued before layer i starts its forward; with backward prefetch depth d (default d = 0), **at least** min(k + 1 + d, L) backward all-gathers come before the k-th reduce-scatter (k = 0 is the last layer): the layer's own parameters must arrive first, plus the d layers prefetched explicitly; after the L layers' reduce-scatters comes the root's, by which time all L backward all-gathers have been issued. FSDP2's implicit prefetching may issue one more (the default schedule above does): that is an implementation detail, and the check asks for "at least" only. On CPU gloo runs synchronously, so only the **order** can be seen here; on a GPU the same order decides whether communication hides behind compute, and the multi-gpu profile prints each configuration's step time and peak memory below.

# %%
def forward_gathers_before_layers(events):
    """For each layer start, the number of all-gathers issued before it."""
    counts, gathers = [], 0
    for event in events:
        if event[0] == "all_gather":
            gathers += 1
        elif event[0] == "forward":
            counts.append(gathers)
    return counts


def backward_gathers_before_reduce_scatters(events):
    """For each reduce-scatter, the number of all-gathers issued after the last layer's forward started."""
    last_forward = max(i for i, e in enumerate(events) if e[0] == "forward")
    counts, gathers = [], 0
    for event in events[last_forward:]:
        if event[0] == "all_gather":
            gathers += 1
        elif event[0] == "reduce_scatter":
            counts.append(gathers)
    return counts


if fsdp_result.ok:
    for _name, _run in fsdp_ranks[0]["schedules"].items():
        print(f"{_name:>12}: AGs before each layer's forward {forward_gathers_before_layers(_run['events'])}, "
              f"backward AGs before each RS {backward_gathers_before_reduce_scatters(_run['events'])}")
        if _run["peak_bytes"] is not None:
            print(f"{'':>12}  median step {sorted(_run['seconds'])[len(_run['seconds']) // 2] * 1e3:.1f} ms, "
                  f"peak {_run['peak_bytes'] / 2**30:.2f} GiB on rank 0")

# %% tags=["test"] grade_id="10-prefetch-2" points=2
check_launch(fsdp_result, fsdp_ranks, "fsdp")
_L = fsdp_ranks[0]["n_layers"]
for _name, _depth in [("default", 0), ("prefetch-1", 1)]:
    _got = forward_gathers_before_layers(fsdp_ranks[0]["schedules"][_name]["events"])
    _want = [min(_i + 2 + _depth, _L + 1) for _i in range(_L)]
    assert _got == _want, f"{_name}: 每层前向前的 all-gather 数 / all-gathers before each layer's forward {_got}, expected {_want}"
_got = backward_gathers_before_reduce_scatters(fsdp_ranks[0]["schedules"]["prefetch-1"]["events"])
assert len(_got) == _L + 1 and all(_c >= min(_k + 2, _L) for _k, _c in enumerate(_got[:_L])) and _got[_L] == _L, \
    f"prefetch-1: 第 k 次 RS 前至少 min(k + 2, L) 次反向 AG，根的 RS 在最后 / at least min(k + 2, L) backward AGs before RS k, the root's RS last: {_got}"
print("预取的调度符合规则 / the prefetch schedule follows the rule")

# %% [markdown] tags=["zh"]
# ### 等价性：损失曲线与最终参数
#
# 在笔记本里用同样的初始参数、同样的全局批、同样的 AdamW，在一个进程里训练 `EQUIV_STEPS` 步（`rank_loss` 取 `world_size=1`，就是整个批上按 token 平均），然后与两个 rank 的 FSDP 结果比较。
#
# **为什么不是逐位相同。** 数学上两者相等，但浮点加法不满足结合律：(1) 单进程在一次矩阵乘里把 8 条样本的梯度加在一起，FSDP 是每个 rank 先加 4 条，再由 reduce-scatter 把两个部分和相加——求和顺序不同；(2) reduce-scatter 的平均是"先求和再除以 N"，而单进程只有一次除以 token 数，舍入点不同；(3) 不同的批大小可能让矩阵乘内核选择不同的分块。每步只差 1e-7 量级的相对误差，AdamW 按 √v 归一化更新，会把极小梯度分量上的差别放大，所以误差随步数增长。我们要求：每步损失相差不超过 1e-4，最终参数的最大绝对差不超过 1e-3（参数本身是 O(0.1) 量级），并且损失在下降。

# %% [markdown] tags=["en"]
# ### Equivalence: the loss curve and the final parameters
#
# In the notebook, one process trains `EQUIV_STEPS` steps from the same initial parameters on the same global batches with the same AdamW (`rank_loss` with `world_size=1` is the token mean over the whole batch); then we compare with the two-rank FSDP run.
#
# **Why not bit for bit.** The two are equal in exact arithmetic, but floating-point addition is not associative: (1) one process sums the gradients of 8 samples inside one matmul, while FSDP sums 4 on each rank and the reduce-scatter adds the two partial sums: another order; (2) the reduce-scatter's average is "sum, then divide by N", while the single process divides once by the token count: other rounding points; (3) another batch size can make the matmul kernel pick other blocking. Each step differs by a relative 1e-7 or so; AdamW normalises updates by √v, which magnifies differences in tiny gradient components, so the gap grows with the steps. We require: each step's loss within 1e-4, the final parameters within 1e-3 in maximum absolute difference (the parameters themselves are O(0.1)), and a falling loss.

# %%
def train_single_process(cfg, steps):
    """The reference: one process, whole global batches, same model, same AdamW."""
    model, tokenizer = lab.load_model(cfg["model"], device=device, dtype=torch.float32)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.0)
    items = lab.load_qc_reports("train")
    losses = []
    for step in range(steps):
        rows = global_batch(step, items, tokenizer, cfg)
        batch = {k: v.to(device) for k, v in pad_rows(rows, tokenizer.pad_token_id, max(len(r[0]) for r in rows)).items()}
        tokens = int((batch["labels"][:, 1:] != -100).sum())
        loss = rank_loss(model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits,
                         batch["labels"], tokens, 1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


single_losses, single_params = train_single_process(TRAIN_CFG, EQUIV_STEPS)
if device.type == "cuda":
    torch.cuda.empty_cache()   # give the memory back before the ranks train on the same GPUs
if fsdp_result.ok:
    _fsdp = fsdp_ranks[0]
    lab.plot_lines({"1 process": (range(EQUIV_STEPS), single_losses),
                    f"FSDP, {WORLD_SIZE} ranks": (range(EQUIV_STEPS), _fsdp["losses"])},
                   title="same global batches, same AdamW", xlabel="step", ylabel="token-mean loss")
    print("max |Δloss| per step:", max(abs(a - b) for a, b in zip(single_losses, _fsdp["losses"])))
    print("max |Δparam| at the end:", max_abs_diff(_fsdp["final"], single_params))

# %% tags=["test"] grade_id="10-equiv-1" points=3
check_launch(fsdp_result, fsdp_ranks, "fsdp")
_fsdp = fsdp_ranks[0]
assert len(_fsdp["losses"]) == EQUIV_STEPS and all(math.isfinite(x) for x in _fsdp["losses"]), f"losses: {_fsdp['losses']}"
_dloss = max(abs(a - b) for a, b in zip(single_losses, _fsdp["losses"]))
assert _dloss <= 1e-4, f"每步损失应在 1e-4 内一致 / per-step loss within 1e-4; max |Δ| = {_dloss:.2e} (rank_loss?)"
_dparam = max_abs_diff(_fsdp["final"], single_params)
assert _dparam <= 1e-3, f"最终参数应在 1e-3 内一致 / final parameters within 1e-3; max |Δ| = {_dparam:.2e}"
assert set(_fsdp["final"]) == set(single_params), "参数名应相同 / the same parameter names"
assert all(_got["losses"] == _fsdp["losses"] for _got in fsdp_ranks), "每个 rank 报告同一个全局损失 / every rank reports the same global loss"
assert _fsdp["losses"][-1] < _fsdp["losses"][0], f"损失应下降 / the loss must fall: {_fsdp['losses']}"
print(f"FSDP 与单进程一致：损失差 {_dloss:.1e}，参数差 {_dparam:.1e} / FSDP matches one process")

# %% [markdown] tags=["zh"]
# ## 5 · 选做 · 通信量：FSDP 对 DDP
#
# 环形算法下，一次涉及完整大小 B 字节缓冲区的 all-gather 或 reduce-scatter，每个 rank 发送 (N−1)/N · B；一次 all-reduce（= reduce-scatter + all-gather）发送 2(N−1)/N · B（nccl-tests 的 [PERFORMANCE.md](https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md) 里 busbw 因子的来历）。DDP 每步对全部梯度 all-reduce 一次；FSDP 每步前向 all-gather 全部参数、反向再 all-gather 一次、梯度 reduce-scatter 一次。同样的数据类型下是 3(N−1)/N 对 2(N−1)/N，即常说的"约 1.5 倍 DDP"。
#
# **练习 5（选做，3 分，与核心分开计分：grade_id 为 `10-stretch-comm-1`；后面不依赖它，时长里不计入）。** `comm_bytes_per_step(group_numels, world_size, param_bytes=4, reduce_bytes=4, reshard_after_forward=True)`：`group_numels` 是每个 FSDP 组的参数个数，根模块在第一个。返回每个 rank 每步**发送**的字节数 `{"all_gather_forward", "all_gather_backward", "reduce_scatter", "fsdp_total", "ddp_all_reduce"}`（float）：
# - 前向：每个组 all-gather 一次，每个元素 `param_bytes` 字节；
# - 反向：`reshard_after_forward=True` 时除根模块外的每个组再 all-gather 一次（`param_bytes`），为 False 时没有；根模块从不在反向重新 all-gather；
# - 每个组的梯度 reduce-scatter 一次，每个元素 `reduce_bytes` 字节；`fsdp_total` 是这三项之和；
# - DDP：所有梯度一次 all-reduce，每个元素 `reduce_bytes` 字节；
# - 一个完整大小 B 字节的 all-gather / reduce-scatter 发送 (N−1)/N · B，all-reduce 发送 2(N−1)/N · B；N = 1 时全为 0。分片时的填充忽略不计。

# %% [markdown] tags=["en"]
# ## 5 · Optional stretch · communication volume: FSDP against DDP
#
# With ring algorithms, an all-gather or reduce-scatter over a full buffer of B bytes makes each rank send (N−1)/N · B; an all-reduce (= reduce-scatter + all-gather) sends 2(N−1)/N · B (where the busbw factors in nccl-tests' [PERFORMANCE.md](https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md) come from). DDP all-reduces all gradients once per step; FSDP all-gathers all parameters in forward, again in backward, and reduce-scatters the gradients once. In the same dtype that is 3(N−1)/N against 2(N−1)/N: the often-quoted "about 1.5× DDP".
#
# **Exercise 5 (optional stretch, 3 points scored apart from the core: its grade_id is `10-stretch-comm-1`; nothing later needs it, and the lab's time does not count it).** `comm_bytes_per_step(group_numels, world_size, param_bytes=4, reduce_bytes=4, reshard_after_forward=True)`: `group_numels` holds the parameter count of each FSDP group, the root first. Return the bytes each rank **sends** per step, `{"all_gather_forward", "all_gather_backward", "reduce_scatter", "fsdp_total", "ddp_all_reduce"}` (floats):
# - forward: every group is all-gathered once, `param_bytes` per element;
# - backward: with `reshard_after_forward=True` every group except the root is all-gathered again (`param_bytes`), with False none is; the root is never re-gathered in backward;
# - every group's gradients are reduce-scattered once, `reduce_bytes` per element; `fsdp_total` is the sum of these three;
# - DDP: one all-reduce of all gradients, `reduce_bytes` per element;
# - an all-gather / reduce-scatter over a full B-byte buffer sends (N−1)/N · B, an all-reduce 2(N−1)/N · B; with N = 1 everything is 0. Shard padding is ignored.

# %% tags=["solution"] grade_id="10-stretch-comm-sol-1"
def comm_bytes_per_step(group_numels, world_size, param_bytes=4, reduce_bytes=4, reshard_after_forward=True):
    """Bytes each rank sends in one FSDP2 training step, and in one DDP step, with ring algorithms."""
    ### BEGIN SOLUTION
    share = (world_size - 1) / world_size
    total = sum(group_numels)
    forward = share * total * param_bytes
    backward = share * sum(group_numels[1:]) * param_bytes if reshard_after_forward else 0.0
    reduce_scatter = share * total * reduce_bytes
    return {"all_gather_forward": forward, "all_gather_backward": backward, "reduce_scatter": reduce_scatter,
            "fsdp_total": forward + backward + reduce_scatter, "ddp_all_reduce": 2 * share * total * reduce_bytes}
    ### END SOLUTION


# %%
def measured_bytes_sent(run, world):
    """Bytes one rank sent, from the recorded collectives: (N-1)/N of each full buffer, split by phase."""
    share = (world - 1) / world
    last_forward = max(i for i, e in enumerate(run["events"]) if e[0] == "forward")
    sent = {"all_gather_forward": 0.0, "all_gather_backward": 0.0, "reduce_scatter": 0.0}
    for i, event in enumerate(run["events"]):
        if event[0] == "all_gather":
            sent["all_gather_forward" if i < last_forward else "all_gather_backward"] += share * event[1]
        elif event[0] == "reduce_scatter":
            sent["reduce_scatter"] += share * event[1]
    sent["fsdp_total"] = sum(sent.values())
    return sent


if fsdp_result.ok:
    _numels = fsdp_ranks[0]["schedules"]["default"]["group_numels"]
    _ddp = 2 * (WORLD_SIZE - 1) / WORLD_SIZE * sum(fsdp_ranks[0]["ddp"]["bucket_bytes"])
    print(f"groups: root {_numels[0]:,} + {len(_numels) - 1} layers × {_numels[1]:,} parameters; DDP measured {_ddp / 1e6:.2f} MB/step")
    for _name, _pb, _reshard in [("default", 4, True), ("no-reshard", 4, False), ("bf16-params", 2, True)]:
        _m = measured_bytes_sent(fsdp_ranks[0]["schedules"][_name], WORLD_SIZE)
        print(f"{_name:>12}: measured " + ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in _m.items())
              + f" | FSDP / DDP = {_m['fsdp_total'] / _ddp:.2f}")

# %% tags=["test"] grade_id="10-stretch-comm-1" points=3
check_launch(fsdp_result, fsdp_ranks, "fsdp")
_numels = fsdp_ranks[0]["schedules"]["default"]["group_numels"]
_pred = comm_bytes_per_step(_numels, WORLD_SIZE)
assert set(_pred) == {"all_gather_forward", "all_gather_backward", "reduce_scatter", "fsdp_total", "ddp_all_reduce"}, f"keys {sorted(_pred)}"
_meas = measured_bytes_sent(fsdp_ranks[0]["schedules"]["default"], WORLD_SIZE)
for _k, _v in _meas.items():
    assert math.isclose(_pred[_k], _v, rel_tol=1e-9, abs_tol=1e-6), f"默认配置 default: {_k} 预测 predicted {_pred[_k]:.0f} B, 实测 measured {_v:.0f} B"
_ddp = 2 * (WORLD_SIZE - 1) / WORLD_SIZE * sum(fsdp_ranks[0]["ddp"]["bucket_bytes"])
assert math.isclose(_pred["ddp_all_reduce"], _ddp, rel_tol=1e-9, abs_tol=1e-6), f"DDP: predicted {_pred['ddp_all_reduce']:.0f} B, measured {_ddp:.0f} B"
_got = comm_bytes_per_step([100, 10, 10], 4, param_bytes=2, reduce_bytes=4, reshard_after_forward=False)
_want = {"all_gather_forward": 180.0, "all_gather_backward": 0.0, "reduce_scatter": 360.0, "fsdp_total": 540.0,
         "ddp_all_reduce": 720.0}
assert all(math.isclose(_got[_k], _v) for _k, _v in _want.items()), \
    f"[100, 10, 10], N=4, bf16 参数 / params, 不 reshard / no reshard: 期望 / expected {_want}, got {_got}"
_got = comm_bytes_per_step([100, 10, 10], 4)
assert math.isclose(_got["all_gather_backward"], 60.0), f"反向只重新 gather 根以外的组 / backward re-gathers all groups but the root: {_got}"
assert comm_bytes_per_step([5, 5], 1)["fsdp_total"] == 0.0, "N = 1: 不发送 / nothing is sent"
print("公式与实测的通信量一致 / formula and measured traffic agree")

# %% [markdown] tags=["zh"]
# **读数。** 同为 fp32 时 FSDP/DDP 小于 1.5：根模块（这里是嵌入，占 tiny-qwen-zh 参数的四分之一）在反向不重新 all-gather。bf16 参数、fp32 归约时 all-gather 的字节数减半，FSDP 每步发送的字节数甚至少于 fp32 梯度的 DDP——比较时数据类型要对齐：DDP 用 bf16 梯度时同样减半。`reshard_after_forward=False` 把 FSDP 的通信降到 DDP 的水平，代价是每层完整参数常驻显存（像 ZeRO-2）。在 8 张 MI300X 上，按实验 04 的 xGMI 数字（每 GPU 约 336 GB/s 可用，出自 AMD ROCm 博客 [Understanding RCCL Bandwidth and xGMI Performance on AMD Instinct MI300X](https://rocm.blogs.amd.com/software-tools-optimization/mi300x-rccl-xgmi/README.html)），7B 模型 bf16 all-gather 一次完整参数约 15 GB × 7/8 ≈ 13 GB，约 40 ms：只要每层的计算比它的 all-gather 长，预取就能把通信藏起来。

# %% [markdown] tags=["en"]
# **Reading the numbers.** In fp32 FSDP/DDP comes out below 1.5: the root (here the embedding, a quarter of tiny-qwen-zh's parameters) is not all-gathered again in backward. With bf16 parameters and fp32 reduction the all-gathers halve, and FSDP sends fewer bytes per step than DDP with fp32 gradients: compare like with like, since DDP with bf16 gradients halves too. `reshard_after_forward=False` brings FSDP down to DDP's traffic at the price of keeping every layer's full parameters in memory (like ZeRO-2). On 8 MI300X, with lab 04's xGMI figures (about 336 GB/s usable per GPU, from the AMD ROCm blog [Understanding RCCL Bandwidth and xGMI Performance on AMD Instinct MI300X](https://rocm.blogs.amd.com/software-tools-optimization/mi300x-rccl-xgmi/README.html)), all-gathering a 7B model's full bf16 parameters once is about 15 GB × 7/8 ≈ 13 GB, some 40 ms: as long as each layer computes longer than its all-gather takes, prefetching hides the traffic.

# %% [markdown] tags=["zh"]
# ## 6 · 分布式检查点（DCP）与恢复
#
# `dcp.save(state, checkpoint_id=dir)`：每个 rank 只写自己的分片（`__<rank>_0.distcp`），协调者（rank 0）在所有 rank 写完之后最后写 `.metadata`，记录每个分片的偏移和大小；`dcp.load` 按这份元数据只读每个 rank 需要的部分，所以保存和加载时的 rank 数可以不同（load-time resharding，[DCP 文档](https://docs.pytorch.org/docs/stable/distributed.checkpoint.html)）。模型和优化器的分片状态字典用 `get_state_dict(model, optimizer)` 取得，用 `set_state_dict(...)` 放回（`torch.distributed.checkpoint.state_dict`）。
#
# 因为 `.metadata` 最后写，**有 `.metadata` 的目录才是完整的检查点**：一个 rank 在保存途中被杀，留下的目录没有它，恢复时必须跳过。
#
# **练习 6。** `save_checkpoint(model, optimizer, step, root)`：每个 rank 都调用；把 `{"model": ..., "optim": ...}`（来自 `get_state_dict`）用 `dcp.save` 写到 `root/step-{step:06d}`（例如 `step-000008`），返回这个路径（`Path` 或 `str`，相对或绝对都行：检查按路径比较）。`load_latest_checkpoint(model, optimizer, root)`：在 `root` 下找步数最大的、含 `.metadata` 的 `step-*` 目录；没有时什么都不改，返回 0；有时先用 `get_state_dict` 取得形状正确的状态字典，`dcp.load` 就地读入，再 `set_state_dict` 放回模型和优化器，返回该步数。

# %% [markdown] tags=["en"]
# ## 6 · Distributed checkpoints (DCP) and resuming
#
# `dcp.save(state, checkpoint_id=dir)`: each rank writes only its own shards (`__<rank>_0.distcp`), and the coordinator (rank 0) writes `.metadata` last, after every rank has written, recording each shard's offsets and sizes; `dcp.load` reads, following that metadata, only what each rank needs, so the number of ranks may differ between save and load (load-time resharding, [DCP docs](https://docs.pytorch.org/docs/stable/distributed.checkpoint.html)). `get_state_dict(model, optimizer)` returns the sharded state dicts of the model and optimizer, and `set_state_dict(...)` puts them back (`torch.distributed.checkpoint.state_dict`).
#
# Since `.metadata` comes last, **a directory is a complete checkpoint only if it holds `.metadata`**: a rank killed in the middle of a save leaves a directory without it, which resuming must skip.
#
# **Exercise 6.** `save_checkpoint(model, optimizer, step, root)`: every rank calls it; write `{"model": ..., "optim": ...}` (from `get_state_dict`) with `dcp.save` to `root/step-{step:06d}` (e.g. `step-000008`) and return that path (a `Path` or a `str`, relative or absolute: it is compared as a path). `load_latest_checkpoint(model, optimizer, root)`: find the `step-*` directory under `root` with the highest step that holds `.metadata`; if there is none, change nothing and return 0; otherwise take correctly shaped state dicts from `get_state_dict`, read into them in place with `dcp.load`, put them back into the model and optimizer with `set_state_dict`, and return that step.

# %% tags=["solution"] grade_id="10-dcp-sol-1"
def save_checkpoint(model, optimizer, step, root):
    """Sharded DCP checkpoint of model and optimizer in root/step-{step:06d}; returns the path."""
    ### BEGIN SOLUTION
    path = Path(root) / f"step-{step:06d}"
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(path))
    return path
    ### END SOLUTION


def load_latest_checkpoint(model, optimizer, root):
    """Load the newest complete checkpoint under root into model and optimizer; its step, or 0."""
    ### BEGIN SOLUTION
    done = [p for p in Path(root).glob("step-*") if (p / ".metadata").is_file()]
    if not done:
        return 0
    latest = max(done, key=lambda p: int(p.name.split("-")[1]))
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=str(latest))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return int(latest.name.split("-")[1])
    ### END SOLUTION


# %% [markdown] tags=["zh"]
# 下面的 worker 就是第 7 节的分片微调：`FT_STEPS` 步，每 `CKPT_EVERY` 步保存一次检查点（rank 0 只保留最新的两个），rank 0 每步把损失追加到 `train_log.jsonl`。第一次运行（`TORCHELASTIC_RESTART_COUNT == 0`）时，最后一个 rank 在第 `CRASH_AT` 步之前用 `SIGKILL` 杀死自己——没有清理、没有异常处理，就像 OOM killer 或掉电。torchrun（`--max-restarts 1`）结束其他 rank 并重启整组；新进程从最后一个完整检查点恢复（和实验 05 一样设置 `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`，每次重启用一个新的 rendezvous store：pytorch/pytorch#135712 报告共享的 store 让重启连到上一次的旧端口，已在 2024 年 9 月由 #135957 修复，本实验要求的 torch ≥ 2.6 已包含；但 #167288（2025 年 11 月起未关闭）又报告了 torchrun 重启后的 “Connection refused”，而新 store 在这里没有任何代价，所以保留）。恢复后的运行在第 `EQUIV_STEPS` 步取回完整参数：它必须与第 4 节那次不中断的启动**逐位相同**——两者是同样的代码在同样的 rank 上执行同样顺序的运算；同理，重放的那几步的损失与第一次运行完全相同，最后一个检查点（第 `FT_STEPS` 步）是完整的。在 GPU 上这要求确定性的内核：rank 在 GPU 上打开 `torch.use_deterministic_algorithms(True, warn_only=True)`，并且只用 math 注意力后端（ROCm 上融合注意力内核的反向可能不确定，或在确定性模式下直接报错）。`warn_only=True` 让没有确定性实现的算子只发警告、不报错，所以在 GPU 上不再保证逐位相同：那里的要求是第 `EQUIV_STEPS` 步参数的最大绝对差不超过 1e-3（第 4 节的容差），重放步的损失相差不超过 1e-4；在 CPU（gloo）上仍要求逐位相同。

# %% [markdown] tags=["en"]
# The worker below is section 7's sharded fine-tune: `FT_STEPS` steps, a checkpoint every `CKPT_EVERY` steps (rank 0 keeps the newest two), and rank 0 appends each step's loss to `train_log.jsonl`. On the first attempt (`TORCHELASTIC_RESTART_COUNT == 0`) the last rank kills itself with `SIGKILL` before step `CRASH_AT`: no cleanup, no exception handler, like the OOM killer or a power cut. torchrun (`--max-restarts 1`) ends the other ranks and restarts the group; the new processes resume from the last complete checkpoint (with `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1` as in lab 05: a fresh rendezvous store for every restart. pytorch/pytorch#135712, a shared store sending restarted ranks to the previous attempt's port, was closed with a fix in September 2024 (#135957), which the torch ≥ 2.6 this lab requires contains; #167288, open since November 2025, reports "Connection refused" after torchrun restarts again, and a fresh store costs nothing here, so the launch keeps it). After the resume the run gathers the full parameters at step `EQUIV_STEPS`: they must equal section 4's uninterrupted launch **bit for bit**, since both are the same code doing the same operations in the same order on the same ranks; likewise the replayed steps repeat the first attempt's losses exactly, and the last checkpoint (step `FT_STEPS`) is complete. On GPUs this takes deterministic kernels: the ranks switch on `torch.use_deterministic_algorithms(True, warn_only=True)` there and use only the math attention backend (on ROCm the fused attention kernels' backward may be non-deterministic, or raise in deterministic mode). With `warn_only=True` an operator without a deterministic implementation warns instead of raising, so bit equality is no longer guaranteed on GPUs: there the parameters at step `EQUIV_STEPS` must agree within 1e-3 in maximum absolute difference (section 4's tolerance) and the replayed steps' losses within 1e-4; on CPU (gloo) they must still be bit-identical.

# %%
def prune_checkpoints(root, keep):
    """Rank 0: delete all but the newest `keep` complete checkpoints."""
    done = sorted((p for p in Path(root).glob("step-*") if (p / ".metadata").is_file()), key=lambda p: p.name)
    for old in done[:-keep]:
        for f in old.iterdir():
            f.unlink()
        old.rmdir()


def finetune_work(cfg, rank, world, device, mesh):
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    model, tokenizer = load_for_training(cfg, device)
    shard_model(model, mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.0)
    start = load_latest_checkpoint(model, optimizer, cfg["ckpt"])
    print(f"rank {rank}, attempt {attempt}: starting at step {start}", flush=True)
    items = lab.load_qc_reports("train")
    snapshot, log = None, Path(cfg["ckpt"]).parent / "train_log.jsonl"
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    for step in range(start, cfg["steps"]):
        if attempt == 0 and step == cfg["crash_at"] and rank == world - 1:
            print(f"rank {rank}: SIGKILL before step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        loss = train_step(model, optimizer, global_batch(step, items, tokenizer, cfg), tokenizer.pad_token_id,
                          rank, world, device)
        if rank == 0:
            with open(log, "a", encoding="utf-8") as f:
                f.write(json.dumps({"attempt": attempt, "step": step, "loss": loss}) + "\n")
        done = step + 1
        if done == cfg["snapshot_at"]:
            snapshot = full_parameters(model)
        if done % cfg["every"] == 0 or done == cfg["steps"]:
            save_checkpoint(model, optimizer, done, cfg["ckpt"])
            if rank == 0:
                prune_checkpoints(cfg["ckpt"], keep=2)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    return {"attempt": attempt, "resumed_from": start, "snapshot": snapshot, "final": full_parameters(model),
            "peak_bytes": peak, "n_params": sum(p.numel() for p in model.parameters())}


shutil.rmtree(WORK / "finetune", ignore_errors=True)  # run again: a fresh folder, no stale checkpoint to resume
FT_CKPT = WORK / "finetune" / "checkpoints"
FT_CKPT.mkdir(parents=True)
FT_CFG = dict(TRAIN_CFG, steps=FT_STEPS, every=CKPT_EVERY, crash_at=CRASH_AT, snapshot_at=EQUIV_STEPS, ckpt=str(FT_CKPT))
assert CKPT_EVERY <= CRASH_AT < EQUIV_STEPS <= FT_STEPS, "the crash must come after a checkpoint and before the snapshot"
ft_result, ft_ranks = launch("finetune", finetune_work,
                             [shard_model, rank_loss, train_step, save_checkpoint, load_latest_checkpoint,
                              prune_checkpoints], FT_CFG, max_restarts=1,
                             env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"})
ft_log = [json.loads(line) for line in (WORK / "finetune" / "train_log.jsonl").read_text().splitlines()] \
    if (WORK / "finetune" / "train_log.jsonl").exists() else []
for _attempt in sorted({e["attempt"] for e in ft_log}):
    _steps = [e["step"] for e in ft_log if e["attempt"] == _attempt]
    print(f"attempt {_attempt}: steps {_steps[0]}–{_steps[-1]}")

# %% tags=["test"] grade_id="10-dcp-1" points=3
check_launch(ft_result, ft_ranks, "finetune")
assert re.search(r"exitcode\s*:\s*-9|Signal 9|SIGKILL", ft_result.output), "第一次运行应有一个 rank 被 SIGKILL / a rank was SIGKILLed on attempt 0"
for _r, _got in enumerate(ft_ranks):
    assert _got["attempt"] == 1, f"rank {_r}: 应在第 1 次重启中完成 / should finish on restart 1, attempt {_got['attempt']}"
    assert _got["resumed_from"] == (CRASH_AT // CKPT_EVERY) * CKPT_EVERY, \
        f"rank {_r}: 应从最后一个完整检查点恢复 / should resume from the last complete checkpoint, started at {_got['resumed_from']}"
_snap, _uninterrupted = ft_ranks[0]["snapshot"], fsdp_ranks[0]["final"]
_tol = 0.0 if backend_for(WORLD_SIZE) == "gloo" else 1e-3   # GPUs: warn_only determinism, see above
assert _snap is not None and max_abs_diff(_snap, _uninterrupted) <= _tol, \
    f"恢复后第 {EQUIV_STEPS} 步的参数应与不中断的运行一致（容差 {_tol}）/ resumed parameters at step {EQUIV_STEPS} must match the uninterrupted run (tolerance {_tol}); max |Δ| = {max_abs_diff(_snap, _uninterrupted) if _snap else None}"
_first = {_e["step"]: _e["loss"] for _e in ft_log if _e["attempt"] == 0}
for _e in ft_log:
    if _e["attempt"] == 1 and _e["step"] in _first:
        assert abs(_e["loss"] - _first[_e["step"]]) <= (0.0 if _tol == 0.0 else 1e-4), \
            f"重放的第 {_e['step']} 步损失应与第一次相同 / replayed step {_e['step']}: the loss differs"
# In this process, without a process group: the newest directory has no .metadata (a torn save) and is skipped.
_root = Path(tempfile.mkdtemp(prefix="lab10-dcp-check-", dir=WORK))
_src = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.Linear(3, 2))
_opt = torch.optim.AdamW(_src.parameters(), lr=0.1)
assert load_latest_checkpoint(_src, _opt, _root) == 0 and not _opt.state, "没有检查点：返回 0、不改变任何东西 / no checkpoint: return 0, change nothing"
_src(torch.randn(4, 5)).sum().backward()
_opt.step()
assert Path(save_checkpoint(_src, _opt, 3, _root)) == _root / "step-000003", "路径 / the path is root/step-000003"
(_root / "step-000009").mkdir()
(_root / "step-000009" / "__0_0.distcp").write_bytes(b"torn")
_dst = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.Linear(3, 2))
_dst_opt = torch.optim.AdamW(_dst.parameters(), lr=0.1)
assert load_latest_checkpoint(_dst, _dst_opt, _root) == 3, "最新的完整检查点是第 3 步 / the newest complete checkpoint is step 3"
assert all(torch.equal(_dst.state_dict()[_k], _v) for _k, _v in _src.state_dict().items()), "模型未恢复 / model not restored"
assert torch.equal(_dst_opt.state_dict()["state"][0]["exp_avg"], _opt.state_dict()["state"][0]["exp_avg"]), \
    "优化器状态未恢复 / optimizer state not restored"
print(f"SIGKILL 之后从第 {ft_ranks[0]['resumed_from']} 步恢复，第 {EQUIV_STEPS} 步参数一致 / resumed from step {ft_ranks[0]['resumed_from']}, parameters match at step {EQUIV_STEPS}")

# %% [markdown] tags=["zh"]
# ### 换一个 world size：2 → 1，导出 safetensors
#
# 部署不需要分片：推理服务要的是一个普通的 Hugging Face 模型目录。DCP 检查点是两个 rank 写的（每个参数两个分片），我们在**这个笔记本的单个进程**里、不建进程组，把它读进一个普通（未分片）的模型：没有进程组时 DCP 按单进程处理，读的时候把两个分片拼回完整张量。
#
# **练习 7。** `export_full_model(checkpoint_dir, base_model, tokenizer, out_dir)`：`base_model` 是结构相同、未分片、在 CPU 上的模型。用 `{"model": base_model.state_dict()}` 作为目标、`dcp.load` 就地读入检查点里的 `"model"` 部分（优化器状态不读），然后把模型（safetensors）和分词器都用 `save_pretrained` 写进 `out_dir`，返回 `Path(out_dir)`。检查：`transformers` 的 `AutoModelForCausalLM.from_pretrained(out_dir)` 加载后的参数与分片训练结束时的完整参数逐位相同。

# %% [markdown] tags=["en"]
# ### Another world size: 2 → 1, exported as safetensors
#
# Deployment needs no shards: an inference server wants a plain Hugging Face model folder. The DCP checkpoint was written by two ranks (two shards per parameter); we read it, in **this notebook's single process** with no process group, into a plain (unsharded) model: without a process group DCP works as a single process and puts the two shards back together as it reads.
#
# **Exercise 7.** `export_full_model(checkpoint_dir, base_model, tokenizer, out_dir)`: `base_model` is a plain model of the same architecture on CPU. Use `{"model": base_model.state_dict()}` as the destination and `dcp.load` the checkpoint's `"model"` part into it in place (not the optimizer state), then write the model (safetensors) and the tokenizer into `out_dir` with `save_pretrained`; return `Path(out_dir)`. The check: loaded by `transformers`' `AutoModelForCausalLM.from_pretrained(out_dir)`, the parameters equal the full parameters at the end of the sharded run bit for bit.

# %% tags=["solution"] grade_id="10-export-sol-1"
def export_full_model(checkpoint_dir, base_model, tokenizer, out_dir):
    """Load the "model" part of a DCP checkpoint into the plain base_model (one process) and save it,
    with the tokenizer, as a Hugging Face model folder (safetensors). Returns Path(out_dir)."""
    ### BEGIN SOLUTION
    state = {"model": base_model.state_dict()}
    dcp.load(state, checkpoint_id=str(checkpoint_dir))
    base_model.load_state_dict(state["model"])
    base_model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return Path(out_dir)
    ### END SOLUTION


# %%
final_ckpt = FT_CKPT / f"step-{FT_STEPS:06d}"
if (final_ckpt / ".metadata").is_file():
    _meta = dcp.FileSystemReader(str(final_ckpt)).read_metadata()
    _embed = _meta.state_dict_metadata["model.model.embed_tokens.weight"]
    print("saved by", len({f.name for f in final_ckpt.glob("*.distcp")}), "ranks; embed_tokens chunks (offsets, sizes):",
          [(tuple(c.offsets), tuple(c.sizes)) for c in _embed.chunks])
export_base, export_tokenizer = lab.load_model(MODEL, device="cpu", dtype=torch.float32)
EXPORT_DIR = WORK / "export"
exported = export_full_model(final_ckpt, export_base, export_tokenizer, EXPORT_DIR)
print(sorted(p.name for p in exported.iterdir()))

# %% tags=["test"] grade_id="10-export-1" points=2
check_launch(ft_result, ft_ranks, "finetune")
assert (EXPORT_DIR / "model.safetensors").is_file(), f"应写出 model.safetensors / expected model.safetensors in {EXPORT_DIR}"
_reloaded = AutoModelForCausalLM.from_pretrained(EXPORT_DIR, dtype=torch.float32)
_reloaded_state = _reloaded.state_dict()
_final = ft_ranks[0]["final"]
assert set(_final) <= set(_reloaded_state), f"缺少参数 missing: {sorted(set(_final) - set(_reloaded_state))[:5]}"
_d = max(float((_reloaded_state[k] - _final[k]).abs().max()) for k in _final)
assert _d == 0.0, f"导出模型应逐位等于分片训练的最终参数 / the export must equal the sharded run's final parameters; max |Δ| = {_d:.2e}"
assert (EXPORT_DIR / "tokenizer_config.json").is_file(), "分词器也要保存 / the tokenizer is saved too"
assert exported == EXPORT_DIR and isinstance(exported, Path), f"返回值应是 out_dir 对应的 Path / the result should be out_dir as a Path, got {exported!r}"
print("2 个 rank 写的检查点在 1 个进程里读回并导出，transformers 加载结果逐位相同 / 2-rank checkpoint exported from 1 process, bit-identical")

# %% [markdown] tags=["zh"]
# ## 7 · 分片微调的结果：实验 03 的 JSON 指标
#
# 上面那次启动就是在质检数据上的全量分片微调。下面用实验 03 的指标比较基座模型和导出的微调模型：在 `N_EVAL` 条留出报告上贪心解码，**JSON 有效率**（整段输出是否是一个 JSON 对象）和 `defect_type`、`severity`、`disposition` 三个字段的**精确匹配**率；结果写进 `metrics.json`（键 `model`、`world_size`、`steps`、`losses`、`base`、`tuned`）。训练损失曲线里第一次运行和恢复后的运行在重放的步上完全重合。
#
# 检查（第 7 项，只有测试、没有新函数：它检验前面所有练习合在一起的结果）：每步一个有限的损失，最后 5 步的平均低于第一步；微调模型的 JSON 有效率至少 0.75 且不低于基座；三个字段精确匹配率的平均比基座至少高 0.1。

# %% [markdown] tags=["en"]
# ## 7 · The sharded fine-tune: lab 03's JSON metrics
#
# The launch above was a full sharded fine-tune on the QC data. Now lab 03's metrics compare the base model with the exported fine-tuned one: greedy decoding on `N_EVAL` held-out reports, the **valid-JSON rate** (is the whole output one JSON object) and the **exact match** rate of the fields `defect_type`, `severity` and `disposition`; the results go to `metrics.json` (keys `model`, `world_size`, `steps`, `losses`, `base`, `tuned`). In the training loss curve, the first attempt and the resumed one coincide on the replayed steps.
#
# The check (item 7 is a test with no new function: it tests all the exercises above working together): one finite loss per step, the mean of the last 5 below the first; the fine-tuned model's valid-JSON rate at least 0.75 and not below the base model's; the mean exact-match rate of the three fields at least 0.1 above the base model's.

# %%
EXACT_FIELDS = ("defect_type", "severity", "disposition")


def parse_report(text):
    try:
        value = json.loads(text.strip())
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def score_reports(predictions, records):
    parsed = [parse_report(p) for p in predictions]
    n = len(predictions)
    return {"valid_json": sum(p is not None for p in parsed) / n,
            "exact_match": {f: sum(p is not None and p.get(f) == r["report"][f] for p, r in zip(parsed, records)) / n
                            for f in EXACT_FIELDS}}


@torch.no_grad()
def generate_reports(model, tokenizer, records):
    tokenizer.padding_side = "left"   # generation continues from the right end of every row
    try:
        prompts = [tokenizer.apply_chat_template(qc_prompt_messages(r), tokenize=False, add_generation_prompt=True)
                   for r in records]
        enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
        config = GenerationConfig(max_new_tokens=MAX_NEW_TOKENS, do_sample=False, num_beams=1,
                                  eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
                                  pad_token_id=tokenizer.pad_token_id)
        out = model.generate(**enc, generation_config=config)
        return tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    finally:
        tokenizer.padding_side = "right"


eval_records = lab.load_qc_reports("eval")[:N_EVAL]
base_model, base_tokenizer = lab.load_model(MODEL, device=device)
base_scores = score_reports(generate_reports(base_model, base_tokenizer, eval_records), eval_records)
del base_model
tuned_model, tuned_tokenizer = lab.load_model(str(EXPORT_DIR), device=device)
tuned_predictions = generate_reports(tuned_model, tuned_tokenizer, eval_records)
tuned_scores = score_reports(tuned_predictions, eval_records)
print("base :", json.dumps(base_scores, ensure_ascii=False))
print("tuned:", json.dumps(tuned_scores, ensure_ascii=False))
print("tuned sample:", tuned_predictions[0])
ft_losses = {e["step"]: e["loss"] for e in ft_log}
Path("metrics.json").write_text(json.dumps(
    {"model": MODEL, "profile": PROFILE, "world_size": WORLD_SIZE, "steps": FT_STEPS,
     "losses": [ft_losses[s] for s in sorted(ft_losses)], "base": base_scores, "tuned": tuned_scores},
    ensure_ascii=False, indent=1), encoding="utf-8")
lab.plot_lines({f"attempt {a}": ([e["step"] for e in ft_log if e["attempt"] == a],
                                 [e["loss"] for e in ft_log if e["attempt"] == a])
                for a in sorted({e["attempt"] for e in ft_log})},
               title=f"{MODEL}: sharded fine-tune, {WORLD_SIZE} ranks, SIGKILL before step {CRASH_AT}",
               xlabel="step", ylabel="token-mean loss", marker="")

# %% tags=["test"] grade_id="10-finetune-1" points=2
_metrics = json.loads(Path("metrics.json").read_text(encoding="utf-8"))
assert {"model", "world_size", "steps", "losses", "base", "tuned"} <= set(_metrics), f"metrics.json keys: {sorted(_metrics)}"
_l = _metrics["losses"]
assert len(_l) == FT_STEPS and all(math.isfinite(x) for x in _l), f"每步一个有限损失 / one finite loss per step: {len(_l)}"
assert sum(_l[-5:]) / 5 < _l[0], "损失应下降 / the loss must fall"
assert tuned_scores["valid_json"] >= max(0.75, base_scores["valid_json"]), \
    f"JSON 有效率应至少 0.75 且不低于基座 / valid-JSON rate: base {base_scores['valid_json']:.2f}, tuned {tuned_scores['valid_json']:.2f}"
_mean = lambda s: sum(s["exact_match"].values()) / len(s["exact_match"])  # noqa: E731
assert _mean(tuned_scores) >= _mean(base_scores) + 0.1, \
    f"三个字段精确匹配率平均应比基座高至少 0.1 / mean exact match at least 0.1 above base: base {_mean(base_scores):.2f}, tuned {_mean(tuned_scores):.2f}"
assert _metrics["tuned"] == tuned_scores and _metrics["steps"] == FT_STEPS and _metrics["world_size"] == WORLD_SIZE, \
    "metrics.json 应记录本次运行 / metrics.json records this run"
print("分片微调让模型学会了报告格式 / the sharded fine-tune taught the report format")

# %% [markdown] tags=["zh"]
# 在 multi-gpu 配置下，每个 rank 还报告了微调时的峰值显存，这里把它和练习 1 的预测放在一起（fp32 分片参数、梯度、AdamW 状态：16 B/参数 ÷ N；预测不含激活和 all-gather 缓冲，所以实测应更高）。CPU 上没有这个数字。

# %% [markdown] tags=["en"]
# In the multi-gpu profile each rank also reported its peak memory during the fine-tune; here it stands next to exercise 1's prediction (fp32 sharded parameters, gradients and AdamW state: 16 B per parameter ÷ N; the prediction leaves out activations and all-gather buffers, so the measurement should be higher). On CPU there is no such number.

# %%
if ft_result.ok:
    _n = ft_ranks[0]["n_params"]
    _pred = 16 * _n / WORLD_SIZE
    for _r, _got in enumerate(ft_ranks):
        if _got["peak_bytes"] is None:
            print(f"rank {_r}: CPU run, peak memory not measured; predicted state {_pred / 2**30:.3f} GiB")
        else:
            print(f"rank {_r}: peak {_got['peak_bytes'] / 2**30:.2f} GiB, predicted state {_pred / 2**30:.2f} GiB "
                  f"(+ activations and buffers = {(_got['peak_bytes'] - _pred) / 2**30:.2f} GiB)")
            assert _got["peak_bytes"] >= _pred, "a rank holds at least its shards of parameters, gradients and AdamW state"

# %% [markdown] tags=["zh"]
# ## 小结
#
# 你算清了 DDP、ZeRO 与 FSDP2 每个 rank 的显存账；用 `fully_shard` 逐层分片，看到每个 rank 只持有每个参数的 1/N；从钩子记录里读出了 all-gather、计算、reduce-scatter 的顺序与预取的效果；用正确的损失缩放让两个 rank 与一个进程在容差内等价；按字节核对了 FSDP 与 DDP 的通信量；用 DCP 分片保存，在 SIGKILL 之后逐位无损地恢复，再在另一个 world size 下读回并导出为普通的 safetensors 模型；最后用实验 03 的指标评测了分片微调。
#
# 在更大的 GPU 上可以试：`multi-gpu` 配置（每卡一个 rank，RCCL）；把练习 1 的预测和实测峰值显存对照；比较预取深度与 `reshard_after_forward` 的步时；打开 bf16 `MixedPrecisionPolicy`；用 `torch.distributed.checkpoint` 的异步保存（`dcp.async_save`）让保存与训练重叠。文档：[fully_shard](https://docs.pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)、[DCP](https://docs.pytorch.org/docs/stable/distributed.checkpoint.html)、[torchrun](https://docs.pytorch.org/docs/stable/elastic/run.html)、[RCCL](https://rocm.docs.amd.com/projects/rccl/en/latest/)。
#
# 最后一个单元检查每个 rank 都干净退出（没有存活的 gloo 线程），清理本实验的所有临时文件，并确认没有子进程留下。

# %% [markdown] tags=["en"]
# ## Summary
#
# You worked out the memory bill per rank under DDP, ZeRO and FSDP2; sharded the model layer by layer with `fully_shard` and saw each rank hold 1/N of every parameter; read the order of all-gathers, compute and reduce-scatters, and what prefetching changes, from hook records; made two ranks equal one process within tolerance with the right loss scaling; checked FSDP's and DDP's traffic in bytes; saved sharded checkpoints with DCP, resumed after a SIGKILL bit for bit, and read them back with another world size to export a plain safetensors model; and scored the sharded fine-tune with lab 03's metrics.
#
# On bigger GPUs, try: the `multi-gpu` profile (one rank per GPU, RCCL); put exercise 1's prediction next to the measured peak memory; compare step times across prefetch depths and `reshard_after_forward`; switch on the bf16 `MixedPrecisionPolicy`; overlap saving with training with DCP's asynchronous save (`dcp.async_save`). Docs: [fully_shard](https://docs.pytorch.org/docs/stable/distributed.fsdp.fully_shard.html), [DCP](https://docs.pytorch.org/docs/stable/distributed.checkpoint.html), [torchrun](https://docs.pytorch.org/docs/stable/elastic/run.html), [RCCL](https://rocm.docs.amd.com/projects/rccl/en/latest/).
#
# The last cell checks that every rank exited cleanly (no gloo thread alive), removes every scratch file of this lab, and checks that no child process is left.

# %%
_threads = {f"{name} rank {r}": got["gloo_threads_after_destroy"]
            for name, ranks in (("fsdp", fsdp_ranks), ("finetune", ft_ranks)) for r, got in enumerate(ranks) if got}
print("gloo threads after destroy_process_group:", _threads)
del export_base, tuned_model
shutil.rmtree(WORK, ignore_errors=True)
alive = [p for p in psutil.Process().children(recursive=True) if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
assert all(t == [] or t is None for t in _threads.values()), f"gloo 线程在 destroy 之后仍存活 / gloo threads outlived destroy: {_threads}"
assert not WORK.exists() and not list(Path.cwd().glob("lab10-work-*")), "scratch folder survived"
assert not alive and not lab.leftover_processes(), f"仍有子进程 / child processes alive: {[(p.pid, p.name()) for p in alive]}"
print("清理完毕：每个 rank 干净退出，没有子进程、没有临时文件 / clean: every rank exited cleanly, nothing left")
