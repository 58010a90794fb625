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
# # 实验 01 · ROCm 环境搭建与诊断
#
# **版本** {{version}} · **时长**：核心部分约 100 分钟，另有约 15 分钟的选做（optional stretch）练习 ·
# **目标**：一个能用、且被诊断清楚的 GPU 环境。
#
# 大多数人在"让 PyTorch 看见 GPU"这一步放弃：内核与驱动版本、用户组、没有你的 gfx 架构的 wheel、
# 可见设备变量。本实验把这些逐一拆开：你将区分 ROCm / CUDA / CPU 构建，解析 `rocminfo`，
# 由 gfx 架构推出架构家族和波前大小 (wavefront size)，判断 wheel 是否支持你的 GPU 并找到正确的安装命令，
# 推算进程能看见哪些 GPU，写一个严谨的计时器测量带宽和矩阵乘吞吐并与数据手册 (datasheet) 峰值对比，
# 做同口径的能效比较，最后运行并读懂 `rocmlab doctor`。
#
# **前置知识**：Python、PyTorch 张量基础。冒烟（smoke）配置在 CPU 上几十秒跑完，只验证代码；
# gpu 配置在 ROCm 或 CUDA GPU 上做真实测量。标注"选做"的练习单独计分（grade_id 以 `01-stretch-` 开头），
# 后面的内容不依赖它们。

# %% [markdown] tags=["en"]
# # Lab 01 · ROCm setup and diagnosis
#
# **Version** {{version}} · **Time**: about 100 minutes for the core, plus about 15 minutes of optional
# stretch exercises · **Goal**: a working GPU environment that you have diagnosed and understand.
#
# Most newcomers give up at "make PyTorch see the GPU": kernel and driver versions, user groups, a
# wheel built without your gfx target, visible-device variables. This lab takes them apart: you
# tell ROCm, CUDA and CPU builds apart, parse `rocminfo`, derive the architecture family and
# wavefront size from a gfx target, decide whether a wheel supports your GPU and find the right
# install command, work out which GPUs a process sees, write a sound timer to measure bandwidth and
# matmul throughput against the datasheet peak, compare efficiency like for like, and finally run
# and read `rocmlab doctor`.
#
# **Prerequisites**: Python and PyTorch tensor basics. The smoke profile runs in well under a
# minute on CPU and only checks the code; the gpu profile measures a real ROCm or CUDA GPU.
# Exercises marked "optional stretch" are graded separately (their grade_id starts with
# `01-stretch-`), and nothing after them depends on them.

# %% [markdown] tags=["zh"]
# **自测与提交**：保存笔记本后，随时在终端运行 `rocmlab check 01-rocm-setup.ipynb`（在笔记本所在的文件夹里），它运行每个测试单元格里的可见测试，
# 立即告诉你哪一条没通过。做完后在工作坊的 JupyterHub 上用 **Nbgrader › Assignment List** 提交（可以多次提交），
# 讲师收取 (collect) 后评分。成绩来自隐藏检查：每个练习的约定里写明的每一条规则都单独检查、单独计分，
# 输入是按你的种子另外生成的（其他尺寸、其他取值和边界情况），所以要让函数对约定成立，而不只是对可见测试成立。
# 没通过的检查会告诉你它检查的是哪一条规则。

# %% [markdown] tags=["en"]
# **Self-check and submit**: save the notebook, then run `rocmlab check 01-rocm-setup.ipynb` in a terminal, in the notebook's folder, at any time: it runs the
# visible tests in each test cell and tells you at once which one fails. When you are done, submit on the
# workshop's JupyterHub with **Nbgrader › Assignment List** (you may submit again); the instructor collects and
# grades. The grade comes from hidden checks: each rule stated in an exercise's contract is checked and scored on
# its own, on inputs drawn for you (other sizes, other values, edge cases), so make the function hold to the
# contract, not just to the visible tests. A failed check tells you which rule it checks.

# %% tags=["parameters"]
PROFILE = "smoke"
DEVICE = "auto"
SEED = 0
COPY_MB = [1, 4, 16]               # sizes of the device-to-device copies, MiB; the largest is reported
MATMUL_SIZES = [128, 256, 384]     # square matmul sizes m = n = k
MATMUL_DTYPE = "float32"           # "bfloat16" / "float16" on a GPU
CALLS = 5                          # calls timed back to back in one sample
REPEATS = 5                        # timed samples per measurement (the median is reported)
WARMUP = 2                         # untimed calls before timing

# %%
import json
import pathlib
import subprocess
import sys
import time
from types import SimpleNamespace

import torch

from rocmlab import lab

lab.seed_everything(SEED)
device = lab.pick_device(DEVICE)
DATA = pathlib.Path("data")
print(lab.describe_environment(PROFILE, device))

# %% [markdown] tags=["zh"]
# ## 1. 分清软件栈：ROCm、CUDA 还是 CPU
#
# ROCm 版 PyTorch 复用 `torch.cuda` 这套 API：`torch.cuda.is_available()` 在 AMD GPU 上也返回 True，
# 设备名也叫 `cuda:0`。区分厂商要看构建信息：ROCm 构建上 `torch.version.hip` 是版本字符串、
# `torch.version.cuda` 是 None；CUDA 构建正好相反；CPU 构建两者都是 None。
#
# **常见误区**：用 `get_device_capability()` 判断厂商。在 ROCm 上它返回 gfx 的主/次版本号：
# MI200 的 gfx90a 得到 `(9, 0)`，与 NVIDIA Hopper (H100) 的计算能力 `(9, 0)` 完全相同。
# 能区分厂商的只有 `torch.version.hip` 和设备属性里的 `gcnArchName`。

# %% [markdown] tags=["en"]
# ## 1. Tell the stack apart: ROCm, CUDA or CPU
#
# PyTorch on ROCm reuses the `torch.cuda` API: `torch.cuda.is_available()` is True on an AMD GPU
# and the device is still called `cuda:0`. The build tells vendors apart: on a ROCm build
# `torch.version.hip` is a version string and `torch.version.cuda` is None; a CUDA build is the
# other way round; a CPU build has both None.
#
# **A common mistake**: telling vendors apart by `get_device_capability()`. On ROCm it returns
# the gfx major/minor: gfx90a (MI200) gives `(9, 0)`, the very tuple of NVIDIA Hopper (H100).
# Only `torch.version.hip` and the device property `gcnArchName` tell them apart.

# %%
print("torch.version.hip  =", getattr(torch.version, "hip", None))
print("torch.version.cuda =", torch.version.cuda)
print("torch.cuda.is_available() =", torch.cuda.is_available())
if torch.cuda.is_available():
    print("capability", torch.cuda.get_device_capability(0),
          "gcnArchName", getattr(torch.cuda.get_device_properties(0), "gcnArchName", "-"))

# %% [markdown] tags=["zh"]
# **练习 1 的约定**：`backend_of(torch_module)` 只看 `torch_module.version`，返回字符串 `"rocm"`、`"cuda"`
# 或 `"cpu"`。规则按顺序：`version.hip` 是非空字符串 → `"rocm"`；否则 `version.cuda` 是非空字符串 →
# `"cuda"`；否则 `"cpu"`。缺少的属性按 None 处理，空字符串不算版本。不要调用设备能力 (capability) 相关的函数。

# %% [markdown] tags=["en"]
# **Exercise 1 contract**: `backend_of(torch_module)` looks only at `torch_module.version` and returns
# the string `"rocm"`, `"cuda"` or `"cpu"`. Rules, in order: `version.hip` is a non-empty string →
# `"rocm"`; else `version.cuda` is a non-empty string → `"cuda"`; else `"cpu"`. A missing attribute
# counts as None, and an empty string is not a version. Do not call anything about the device capability.

# %% tags=["solution"] grade_id="01-backend-sol-1"
def backend_of(torch_module):
    """"rocm", "cuda" or "cpu" for a torch module, from `torch_module.version` only.

    ROCm when `version.hip` is a non-empty string, else CUDA when `version.cuda` is, else CPU.
    A missing attribute counts as None. Never look at the device capability.
    """
    ### BEGIN SOLUTION
    version = getattr(torch_module, "version", None)
    if getattr(version, "hip", None):
        return "rocm"
    if getattr(version, "cuda", None):
        return "cuda"
    return "cpu"
    ### END SOLUTION


print("this kernel's torch:", backend_of(torch))

# %% tags=["test"] grade_id="01-backend-1" points=2
def _fake_torch(hip, cuda, capability=(9, 0)):
    return SimpleNamespace(version=SimpleNamespace(hip=hip, cuda=cuda),
                           cuda=SimpleNamespace(get_device_capability=lambda i=0: capability))


_got = backend_of(_fake_torch("6.4.43484", None))
assert _got == "rocm", f"hip='6.4.43484' 应为 rocm / expected 'rocm', got {_got!r}"
_got = backend_of(_fake_torch(None, "12.8"))
assert _got == "cuda", f"cuda='12.8' 应为 cuda / expected 'cuda', got {_got!r}"
_got = backend_of(_fake_torch(None, None))
assert _got == "cpu", f"两者皆 None 应为 cpu / expected 'cpu', got {_got!r}"
assert type(_got) is str, f"返回普通 str / returns a plain str, got {type(_got).__name__}"
_got = backend_of(SimpleNamespace(version=SimpleNamespace(cuda="12.8")))
assert _got == "cuda", f"缺少 hip 属性按 None 处理 / a missing hip attribute counts as None, got {_got!r}"
_got = backend_of(_fake_torch("", None))
assert _got == "cpu", f"空字符串不算版本 / an empty string is not a version, got {_got!r}"

# %% [markdown] tags=["zh"]
# ## 2. 读懂 rocminfo
#
# `rocminfo` 列出 HSA 运行时看到的所有代理 (agent)：CPU 和 GPU 各一个块，块以 `Agent N` 开头。
# GPU 块里 `Name` 是 gfx 目标 (如 `gfx942`)，`Marketing Name` 是产品名，还有 `Compute Unit`、
# `Wavefront Size`。注意块内的 `ISA Info` 小节会再次出现 `Name:`（完整目标 ID，如
# `amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-`），代理自己的 `Name` 是块中第一个。
# 一张 MI250X 卡有两个 GCD (Graphics Compute Die)，rocminfo 中显示为两个 GPU 代理；
# APU（如 Radeon 780M）的 CPU 代理名字里也可能带 "Radeon"，要看 `Device Type`。

# %% [markdown] tags=["en"]
# ## 2. Read rocminfo
#
# `rocminfo` lists every agent the HSA runtime sees: one block per CPU and GPU, each opened by
# `Agent N`. In a GPU block, `Name` is the gfx target (e.g. `gfx942`), `Marketing Name` the
# product, plus `Compute Unit` and `Wavefront Size`. The block's `ISA Info` section repeats
# `Name:` (the full target id, e.g. `amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-`); the agent's
# own `Name` is the first in the block. One MI250X card holds two GCDs (Graphics Compute Dies)
# and shows as two GPU agents; an APU's CPU agent may carry "Radeon" in its name, so go by
# `Device Type`.

# %%
ROCMINFO = {p.stem: p.read_text(encoding="utf-8") for p in sorted((DATA / "rocminfo").glob("*.txt"))}
print(sorted(ROCMINFO))
_lines = ROCMINFO["rx7900xtx"].splitlines()
_start = next(i for i, line in enumerate(_lines) if line.strip() == "Agent 2")
print("\n".join(_lines[_start - 1:_start + 12]))

# %% [markdown] tags=["zh"]
# **练习 2 的约定**：`parse_rocminfo(text)` 按出现顺序返回所有 GPU 代理（`Device Type` 为 `GPU` 的块；CPU
# 代理跳过），每个是字典 `{"name": Marketing Name, "gfx": 该代理自己的 Name（块中第一个 Name，不是 ISA Info
# 里的）, "compute_units": int, "wavefront_size": int}`。`Wavefront Size: 64(0x40)` 取 64。一张 MI250X 卡是
# 两个代理；空文本返回 `[]`。隐藏检查用同样格式的其他 rocminfo 输出（多个 GPU、名字带 Radeon 的 APU CPU 代理）检查。

# %% [markdown] tags=["en"]
# **Exercise 2 contract**: `parse_rocminfo(text)` returns every GPU agent in order (blocks whose
# `Device Type` is `GPU`; CPU agents are skipped), each a dict `{"name": Marketing Name, "gfx": the
# agent's own Name (the first Name in its block, not one from ISA Info), "compute_units": int,
# "wavefront_size": int}`. `Wavefront Size: 64(0x40)` means 64. One MI250X card is two agents; empty
# text gives `[]`. Hidden checks use other rocminfo outputs in this format (several GPUs, an APU's CPU agent named Radeon).

# %% tags=["solution"] grade_id="01-rocminfo-sol-1"
def parse_rocminfo(text):
    """The GPU agents in rocminfo output, in order, as dicts:
    {"name": Marketing Name, "gfx": the agent's Name (e.g. "gfx942"),
     "compute_units": int, "wavefront_size": int}. CPU agents are skipped.
    "Wavefront Size: 64(0x40)" means 64.
    """
    ### BEGIN SOLUTION
    agents, current, in_isa = [], None, False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("Agent ") and line[6:].isdigit():
            current, in_isa = {}, False
            agents.append(current)
            continue
        if current is None or ":" not in line:
            continue
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "ISA Info":
            in_isa = True
        elif key == "Name" and not in_isa and "gfx" not in current:
            current["gfx"] = value
        elif key == "Marketing Name":
            current["name"] = value
        elif key == "Device Type":
            current["type"] = value
        elif key in ("Compute Unit", "Wavefront Size"):
            field = "compute_units" if key == "Compute Unit" else "wavefront_size"
            current[field] = int(value.split("(")[0])
    return [{k: a.get(k) for k in ("name", "gfx", "compute_units", "wavefront_size")}
            for a in agents if a.get("type") == "GPU"]
    ### END SOLUTION


for _name, _text in ROCMINFO.items():
    print(f"{_name:>14}: {parse_rocminfo(_text)[:1]} ... {len(parse_rocminfo(_text))} GPU agent(s)")

# %% tags=["test"] grade_id="01-rocminfo-1" points=3
_got = parse_rocminfo(ROCMINFO["rx7900xtx"])
_want = [{"name": "Radeon RX 7900 XTX", "gfx": "gfx1100", "compute_units": 96, "wavefront_size": 32}]
assert _got == _want, f"RX 7900 XTX: 期望 / expected {_want}, 得到 / got {_got}"
_got = parse_rocminfo(ROCMINFO["mi300x-8gpu"])
assert len(_got) == 8, f"MI300X 节点有 8 个 GPU 代理 / the MI300X node has 8 GPU agents, got {len(_got)}"
assert _got[0] == {"name": "AMD Instinct MI300X", "gfx": "gfx942", "compute_units": 304, "wavefront_size": 64}, _got[0]
assert type(_got[0]["compute_units"]) is int and type(_got[0]["wavefront_size"]) is int, \
    f"compute_units 与 wavefront_size 是 int / compute_units and wavefront_size are ints: {_got[0]}"
_got = parse_rocminfo(ROCMINFO["apu-780m"])
assert [a["gfx"] for a in _got] == ["gfx1103"], f"跳过 CPU 代理，即使名字带 Radeon / skip CPU agents, even one named Radeon: {_got}"
assert parse_rocminfo("") == [], "空文本返回 [] / empty text gives []"

# %% [markdown] tags=["zh"]
# ## 3. 架构家族与波前大小
#
# gfx 目标编码了架构：gfx908 (MI100)、gfx90a (MI200)、gfx942 (MI300)、gfx950 (MI350) 是 CDNA；
# 其余 gfx9（Vega，如 gfx900/gfx906）及更早的 gfx6–gfx8 是 GCN；gfx10xx、gfx11xx、gfx12xx 是 RDNA。
#
# **常见误区**："MI300X 默认 wavefront 是 32"——错。CDNA 与 GCN 以 wave64 运行；RDNA 默认 wave32
# （也支持 wave64 模式）。这一点决定了规约、warp 级原语和占用率的计算。永远从设备读取
# （`torch.cuda.get_device_properties(i).warp_size` 或 rocminfo 的 `Wavefront Size`），不要假设。
# 参考：[ROCm GPU 规格表](https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html) 的 Wavefront Size 列。

# %% [markdown] tags=["en"]
# ## 3. Architecture family and wavefront size
#
# The gfx target encodes the architecture: gfx908 (MI100), gfx90a (MI200), gfx942 (MI300) and
# gfx950 (MI350) are CDNA; the other gfx9 parts (Vega, e.g. gfx900/gfx906) and the older gfx6–gfx8
# are GCN; gfx10xx, gfx11xx and gfx12xx are RDNA.
#
# **A common mistake**: "MI300X's default wavefront is 32". It is not: CDNA and GCN run wave64;
# RDNA runs wave32 by default (it also has a wave64 mode). It changes reductions, warp-level
# primitives and occupancy maths. Always read it from the device
# (`torch.cuda.get_device_properties(i).warp_size`, or rocminfo's `Wavefront Size`), never assume.
# Source: the Wavefront Size column of the [ROCm GPU specifications](https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html).

# %% [markdown] tags=["zh"]
# **练习 3 的约定**：`arch_family(gfx)` 返回 `(家族, 默认波前大小)`。先去掉第一个冒号及其后的特性后缀
# （`gfx90a:sramecc+:xnack-` → `gfx90a`）。`CDNA_TARGETS` 中的目标 → `("CDNA", 64)`；`gfx` 后跟四位数字且以
# 10、11、12 开头 → `("RDNA", 32)`；`gfx` 后跟三位、以 6–9 开头 → `("GCN", 64)`；其余（如 `"sm_90"`、`""`、
# `"gfx"`）抛出 `ValueError`。

# %% [markdown] tags=["en"]
# **Exercise 3 contract**: `arch_family(gfx)` returns `(family, default wavefront size)`. First drop the
# first colon and the feature suffixes after it (`gfx90a:sramecc+:xnack-` → `gfx90a`). A target in
# `CDNA_TARGETS` → `("CDNA", 64)`; `gfx` plus four digits starting 10, 11 or 12 → `("RDNA", 32)`;
# `gfx` plus three characters starting 6–9 → `("GCN", 64)`; anything else (`"sm_90"`, `""`, `"gfx"`)
# raises `ValueError`.

# %% tags=["solution"] grade_id="01-arch-sol-1"
CDNA_TARGETS = ("gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950")


def arch_family(gfx):
    """(family, default wavefront size) for a gfx target, feature suffixes allowed
    ("gfx90a:sramecc+:xnack-"). CDNA_TARGETS → ("CDNA", 64); gfx10xx/11xx/12xx → ("RDNA", 32);
    any other gfx6xx–gfx9xx → ("GCN", 64). Anything else raises ValueError.
    """
    ### BEGIN SOLUTION
    base = str(gfx).split(":", 1)[0].strip().lower()
    if not base.startswith("gfx") or len(base) < 6:
        raise ValueError(f"not a gfx target: {gfx!r}")
    if base in CDNA_TARGETS:
        return "CDNA", 64
    digits = base[3:]
    if len(digits) == 4 and digits[:2] in ("10", "11", "12"):
        return "RDNA", 32
    if len(digits) == 3 and digits[0] in "6789":
        return "GCN", 64
    raise ValueError(f"unknown gfx target: {gfx!r}")
    ### END SOLUTION


for _t in ("gfx942", "gfx90a:sramecc+:xnack-", "gfx1100", "gfx906"):
    print(_t, arch_family(_t))

# %% tags=["test"] grade_id="01-arch-1" points=2
assert arch_family("gfx942") == ("CDNA", 64), f"MI300X (gfx942) 是 CDNA wave64 / is CDNA wave64, got {arch_family('gfx942')}"
assert arch_family("gfx1100") == ("RDNA", 32), f"RX 7900 XTX (gfx1100) 是 RDNA wave32 / is RDNA wave32, got {arch_family('gfx1100')}"
assert isinstance(arch_family("gfx906"), tuple) and arch_family("gfx906") == ("GCN", 64), \
    f"gfx906 是 GCN wave64，返回元组 / gfx906 is GCN wave64, as a tuple: got {arch_family('gfx906')!r}"
assert arch_family("gfx90a:sramecc+:xnack-") == ("CDNA", 64), "先去掉特性后缀 / drop the feature suffixes first"
try:
    arch_family("sm_90")
except ValueError:
    pass
else:
    raise AssertionError("'sm_90' 不是 gfx 目标，应抛出 ValueError / 'sm_90' is not a gfx target: raise ValueError")


# %% [markdown] tags=["zh"]
# ## 4. 这个 wheel 支持我的 GPU 吗？该装哪个？
#
# PyTorch 的 ROCm wheel 只为一组 gfx 目标编译内核，`torch.cuda.get_arch_list()` 给出这组目标。
# 设备目标不在其中时，`is_available()` 可能仍为 True，但第一个内核就报 `invalid device function`。
# 注意 `gfx110` 不是 `gfx1100`：按目标比较，不要做子串匹配。
#
# **练习 4 的约定**：`wheel_supports(device_arch, arch_list)` 返回布尔值 `True` / `False`：`arch_list` 中存在
# 某一项能在 `device_arch` 上运行即为 True。两边都可能带 `:特性+` / `:特性-` 后缀。能运行 = 基础目标（第一个冒号前）
# 完全相同，且没有任何一个特性被两边同时写明而取值相反（`xnack+` 对 `xnack-`）；只有一边写明的特性不影响兼容。
# 空列表返回 False。

# %% [markdown] tags=["en"]
# ## 4. Does this wheel support my GPU, and which one do I install?
#
# A PyTorch ROCm wheel carries kernels for a set of gfx targets, listed by
# `torch.cuda.get_arch_list()`. When the device's target is missing, `is_available()` may still be
# True, and the first kernel fails with `invalid device function`. Note that `gfx110` is not
# `gfx1100`: compare targets, never substrings.
#
# **Exercise 4 contract**: `wheel_supports(device_arch, arch_list)` returns the boolean `True` or
# `False`: True when some entry of `arch_list` can run on `device_arch`. Either side may carry
# `:feature+` / `:feature-` suffixes. An entry can run when its base target (before the first colon)
# is exactly the device's, and no feature is named by both sides with opposite signs (`xnack+`
# against `xnack-`); a feature named on one side only does not matter. An empty list gives False.

# %% tags=["solution"] grade_id="01-wheel-sol-1"
def wheel_supports(device_arch, arch_list):
    """True when some entry of `arch_list` can run on `device_arch` (both gfx target ids, possibly
    with ":feature+/-" suffixes): same base target, and no feature that both name with
    opposite signs."""
    ### BEGIN SOLUTION
    def split(target):
        base, *features = target.strip().split(":")
        return base, {f[:-1]: f[-1] for f in features if f and f[-1] in "+-"}

    base, have = split(device_arch)
    for entry in arch_list:
        entry_base, need = split(entry)
        if entry_base == base and all(have.get(k, v) == v for k, v in need.items()):
            return True
    return False
    ### END SOLUTION

# %%
from rocmlab.lab.env import gpu_arch

_arch = gpu_arch() if torch.cuda.is_available() else None
print("this device:", _arch, "| wheel:", torch.cuda.get_arch_list() or "(CPU build: no GPU targets)")

# %% tags=["test"] grade_id="01-wheel-1" points=2
_wheel = ["gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx1030", "gfx1100", "gfx1101"]
assert wheel_supports("gfx942:sramecc+:xnack-", _wheel) is True, "gfx942 在列表中 / gfx942 is in the list"
assert wheel_supports("gfx1201", _wheel) is False, "gfx1201 不在列表中 / gfx1201 is not in the list"
assert wheel_supports("gfx1100", ["gfx110"]) is False, "gfx110 不是 gfx1100，不做子串匹配 / gfx110 is not gfx1100: no substrings"
assert wheel_supports("gfx90a:xnack-", ["gfx90a:xnack+"]) is False, "xnack- 设备不能运行 xnack+ 代码 / an xnack- device cannot run xnack+ code"
assert wheel_supports("gfx90a:sramecc+:xnack-", ["gfx90a"]) is True, "只有一边写明的特性不影响 / a feature named on one side only does not matter"
assert wheel_supports("gfx942", []) is False, "空列表返回 False / an empty list gives False"

# %% [markdown] tags=["zh"]
# ### 装一个带你的目标的 PyTorch
#
# TheRock 构建的多架构 (multi-arch) 索引把 GPU 目标做成安装附加项：`torch[device-gfx942]` 会装上主机代码和
# **只含 gfx942** 的设备代码包（见 [TheRock RELEASES.md](https://github.com/ROCm/TheRock/blob/main/RELEASES.md)
# 的 device extras 表，表中也列出了 gfx1030–gfx1036、gfx1100–gfx1103、gfx1150–gfx1153、gfx1200/gfx1201 等 Radeon
# 与 APU 目标）。另一条路是 AMD 预装好 PyTorch 的 `rocm/pytorch` 容器；容器需要 `--device /dev/kfd --device /dev/dri`
# 和 video 组（[ROCm 文档：安装 PyTorch](https://rocm.docs.amd.com/projects/install-on-linux/en/latest/install/3rd-party/pytorch-install.html)）。
# 版本号会随发布变化，所以下面的命令不是抄在文字里的，而是运行时从课程的发布矩阵 `env/matrix.toml` 读出来的，
# 输出里写明了它们来自矩阵中的哪个 ROCm 版本。

# %% [markdown] tags=["en"]
# ### Install a PyTorch that carries your target
#
# The multi-arch index that TheRock builds turns the GPU target into an install extra:
# `torch[device-gfx942]` installs the host code plus a device package with **only gfx942** code
# (see the device extras table in [TheRock's RELEASES.md](https://github.com/ROCm/TheRock/blob/main/RELEASES.md),
# which also lists Radeon and APU targets such as gfx1030–gfx1036, gfx1100–gfx1103, gfx1150–gfx1153
# and gfx1200/gfx1201). The other route is AMD's `rocm/pytorch` container with PyTorch preinstalled;
# a container needs `--device /dev/kfd --device /dev/dri` and the video group
# ([ROCm docs: installing PyTorch](https://rocm.docs.amd.com/projects/install-on-linux/en/latest/install/3rd-party/pytorch-install.html)).
# Versions change with every release, so the commands below are not typed into this text: they are
# read at run time from the course's release matrix, `env/matrix.toml`, and the output names the
# ROCm release of the matrix they come from.

# %%
from rocmlab.freshness import releases

DOCKER_RUN = ("docker run -it --cap-add=SYS_PTRACE --security-opt seccomp=unconfined "
              "--device=/dev/kfd --device=/dev/dri --group-add video --ipc=host --shm-size 8G")
_target = _arch or "gfx942"          # this GPU's target; on a CPU, MI300X's as an example
try:
    _matrix = releases.load_matrix()
except releases.MatrixError as err:  # rocmlab installed without the course repository
    _matrix = []
    print(f"no release matrix here ({err}); see TheRock's RELEASES.md for the install commands")
_wheel = next((e for e in _matrix if e.install and e.install.method == "multiarch"), None)
_image = next((e for e in _matrix if e.install and e.install.method == "image"), None)
if _wheel:
    print(f"# ROCm {_wheel.rocm}, TheRock multi-arch wheels, for {_target}:")
    print(f'pip install --index-url {_wheel.install.index_url} "{_wheel.install.requirement_for(_target)}"')
    if _target not in _wheel.gfx:
        print(f"#   note: the matrix lists {', '.join(_wheel.gfx)} for this release, not {_target}: "
              "check TheRock's RELEASES.md for a device extra")
if _image:
    print(f"# ROCm {_image.rocm}, PyTorch {_image.pytorch}, container:")
    print(f"{DOCKER_RUN} {_image.install.image}")

# %% [markdown] tags=["zh"]
# ### 消费级 Radeon 卡与 `HSA_OVERRIDE_GFX_VERSION`
#
# 老办法是让运行时"冒充"另一个目标：ROCr 运行时在建立拓扑时读取 `HSA_OVERRIDE_GFX_VERSION=主.次.步进`
# （也有只作用于拓扑节点 N 的 `HSA_OVERRIDE_GFX_VERSION_N`，N 是 KFD 的节点编号，CPU 也占编号），
# 并把 GPU 报告成这个 gfx 版本
# （源码：[rocm-systems `libhsakmt/src/topology.c`](https://github.com/ROCm/rocm-systems/blob/develop/projects/rocr-runtime/libhsakmt/src/topology.c)）。
# 例如 gfx1031 的卡设 `10.3.0`，进程就加载为 gfx1030 编译的内核。风险：没有任何检查保证两种 ISA 兼容——
# 为别的目标编译的内核跑在你的 GPU 上，ISA 有差别时得到的是错误结果或 GPU 故障，而不是一条清楚的报错；
# 不带节点号的形式作用于进程里的所有 GPU；wheel 里必须有*被冒充*目标的代码，而多架构索引的设备包只含自己那个目标
# 的代码。所以先找你真实目标的 device extra（上面的表），找不到时才考虑它。
# 它在 TheRock 构建的新版本运行时里是否仍然生效，本课程未能核实（我们读到的 ROCr 源码是 2025 年 8 月的版本，仍读取该变量）：
# 用之前，分别在设与不设它的情况下运行 `rocminfo`，看报告的目标是否变化。`rocmlab doctor` 看到它被设置时也会提示。

# %% [markdown] tags=["en"]
# ### Consumer Radeon cards and `HSA_OVERRIDE_GFX_VERSION`
#
# The old trick makes the runtime pose as another target: the ROCr runtime reads
# `HSA_OVERRIDE_GFX_VERSION=major.minor.stepping` when it builds its topology (there is also
# `HSA_OVERRIDE_GFX_VERSION_N` for topology node N only, N being KFD's node number, which counts
# CPUs too) and reports the GPU as that gfx version (source:
# [rocm-systems `libhsakmt/src/topology.c`](https://github.com/ROCm/rocm-systems/blob/develop/projects/rocr-runtime/libhsakmt/src/topology.c)).
# Set to `10.3.0` on a gfx1031 card, the process loads kernels built for gfx1030. The risks: nothing
# checks that the two ISAs are compatible. Kernels built for another target run on your GPU, and
# where the ISAs differ you get wrong results or a GPU fault, not a clear error; the form without a
# node number applies to every GPU in the process; and the wheel must hold code for the target you
# *pose as*, while a multi-arch device package holds code for its own target only. So look for your
# real target's device extra first (the table above), and consider the override only when there is
# none. Whether the runtime of TheRock-built releases still honours it, this course could not verify
# (the ROCr source we read, from August 2025, still reads the variable): before relying on it, run
# `rocminfo` with and without it and see whether the reported target changes. `rocmlab doctor`
# also flags it when it is set.

# %% [markdown] tags=["zh"]
# ## 5. 进程能看见哪些 GPU？
#
# 两层运行时各有一个变量。`ROCR_VISIBLE_DEVICES` 作用在 ROCr 运行时，对所有使用 ROCm 用户态的程序生效，
# 可以写编号也可以写 UUID；`HIP_VISIBLE_DEVICES` 作用在 HIP 运行时，在 ROCr 留下的 GPU 中按*新的*编号挑选；
# HIP 也读取 `CUDA_VISIBLE_DEVICES`（仅当 `HIP_VISIBLE_DEVICES` 未设置或为空时）。ROCm 文档建议在 Linux 上用
# `ROCR_VISIBLE_DEVICES`（[HIP 环境变量](https://rocm.docs.amd.com/projects/HIP/en/latest/reference/env_variables.html)、
# [GPU isolation](https://rocm.docs.amd.com/en/latest/conceptual/gpu-isolation.html)）。
# 下面的规则来自两个运行时的解析代码：ROCr 的 `amd_filter_device.cpp` 与 HIP (clr) 的 `rocdevice.cpp`。
# 注意它们与 CUDA 的习惯并不完全一样：例如空的 `HIP_VISIBLE_DEVICES` 等于没设。容器里还要确认 `--device /dev/kfd --device /dev/dri`。
#
# **练习 5 的约定**：`visible_gpus(uuids, env)` 中 `uuids` 是物理 GPU 的 UUID 列表（按 ROCr 的物理顺序，长度即 GPU 数），
# `env` 是环境变量字典。返回进程看到的 GPU 的**物理编号**列表，按进程的编号顺序（它的设备 0 在最前）。
# 1. `ROCR_VISIBLE_DEVICES` 已设置时先筛选：逗号分隔，每项去掉首尾空白后是十进制编号或 UUID（不区分大小写，完整 UUID）；
#    结果按列表顺序；遇到第一个无效项（不是数字也不是已知 UUID、越界、或指向已列出的 GPU）就停止，其后全部忽略；
#    设置为空字符串表示一个也不可见。（ROCr 还接受 UUID 的唯一前缀，本练习只用完整 UUID。）
# 2. 然后取 `HIP_VISIBLE_DEVICES`；它未设置或为空时取 `CUDA_VISIBLE_DEVICES`；两者都未设置或为空则不再筛选。
#    逗号分隔的编号指向 ROCr 留下的 GPU（重新从 0 编号）；每项必须是规范的十进制数字（HIP 不去空白，`" 2"` 无效）；
#    遇到第一个无效项就停止；已列出的编号再次出现时跳过（不停止）。

# %% [markdown] tags=["en"]
# ## 5. Which GPUs does a process see?
#
# Each of two runtime layers has a variable. `ROCR_VISIBLE_DEVICES` acts in the ROCr runtime, for
# every program on the ROCm user-mode stack, and takes indices or UUIDs; `HIP_VISIBLE_DEVICES` acts
# in the HIP runtime and picks among the GPUs ROCr left by their *new* numbering; HIP also reads
# `CUDA_VISIBLE_DEVICES` (only when `HIP_VISIBLE_DEVICES` is unset or empty). The ROCm docs recommend
# `ROCR_VISIBLE_DEVICES` on Linux ([HIP environment variables](https://rocm.docs.amd.com/projects/HIP/en/latest/reference/env_variables.html),
# [GPU isolation](https://rocm.docs.amd.com/en/latest/conceptual/gpu-isolation.html)). The rules below
# come from the two runtimes' parsers: ROCr's `amd_filter_device.cpp` and HIP's (clr)
# `rocdevice.cpp`. They are not all CUDA's habits: an empty `HIP_VISIBLE_DEVICES`, for one, is the
# same as unset. In a container also check `--device /dev/kfd --device /dev/dri`.
#
# **Exercise 5 contract**: in `visible_gpus(uuids, env)`, `uuids` lists the physical GPUs' UUIDs in
# ROCr's physical order (its length is the GPU count) and `env` is a dict of environment variables.
# Return the **physical indices** of the GPUs the process sees, in the order it numbers them (its
# device 0 first).
# 1. When `ROCR_VISIBLE_DEVICES` is set it filters first: comma-separated, each item stripped of
#    surrounding whitespace is a decimal index or a UUID (case-insensitive, whole UUID); the result
#    follows the list order; the list ends at the first invalid item (neither a number nor a known
#    UUID, out of range, or naming a GPU already listed) and everything after it is ignored; set to
#    the empty string, it leaves no GPU visible. (ROCr also accepts a unique leading part of a UUID;
#    this exercise uses whole UUIDs.)
# 2. Then take `HIP_VISIBLE_DEVICES`, or `CUDA_VISIBLE_DEVICES` when that is unset or empty; when
#    both are unset or empty, nothing more is filtered. The comma-separated indices point into the
#    GPUs ROCr left (renumbered from 0); each must be a plain decimal number (HIP strips no
#    whitespace: `" 2"` is invalid); the list ends at the first invalid item; an index listed again
#    is skipped (it does not end the list).

# %% tags=["solution"] grade_id="01-visible-sol-1"
def visible_gpus(uuids, env):
    """Physical indices of the GPUs a HIP process sees, its device 0 first (rules in the prose)."""
    ### BEGIN SOLUTION
    visible = list(range(len(uuids)))
    if "ROCR_VISIBLE_DEVICES" in env:
        by_uuid = {u.upper(): i for i, u in enumerate(uuids)}
        chosen = []
        for item in env["ROCR_VISIBLE_DEVICES"].split(",") if env["ROCR_VISIBLE_DEVICES"] else []:
            item = item.strip().upper()
            index = by_uuid.get(item) if item.startswith("GPU-") else (int(item) if item.isdigit() else None)
            if index is None or index >= len(visible) or index in chosen:
                break
            chosen.append(index)
        visible = chosen
    hip = env.get("HIP_VISIBLE_DEVICES") or env.get("CUDA_VISIBLE_DEVICES") or ""
    if hip:
        chosen = []
        for item in hip.split(","):
            if not item.isdigit() or str(int(item)) != item or int(item) >= len(visible):
                break
            if visible[int(item)] not in chosen:
                chosen.append(visible[int(item)])
        visible = chosen
    return visible
    ### END SOLUTION

# %%
GPU_UUIDS = [f"GPU-{0x4B2C1A9F8D3E6F00 + i:016X}" for i in range(8)]   # an 8-GPU node
print(GPU_UUIDS[:2], "...")
print(visible_gpus(GPU_UUIDS, {"ROCR_VISIBLE_DEVICES": "4,5,6,7", "HIP_VISIBLE_DEVICES": "1"}))

# %% tags=["test"] grade_id="01-visible-1" points=3
_got = visible_gpus(GPU_UUIDS, {})
assert _got == list(range(8)), f"规则 2：都未设置时全部可见 / rule 2: nothing set means all visible; got {_got}"
_got = visible_gpus(GPU_UUIDS, {"HIP_VISIBLE_DEVICES": "2,3"})
assert _got == [2, 3], f"规则 2：HIP 编号 / rule 2: HIP indices; expected [2, 3], got {_got}"
_got = visible_gpus(GPU_UUIDS, {"ROCR_VISIBLE_DEVICES": f"{GPU_UUIDS[5]},0"})
assert _got == [5, 0], f"规则 1：UUID 与编号按列表顺序 / rule 1: UUIDs and indices, list order; expected [5, 0], got {_got}"
_got = visible_gpus(GPU_UUIDS, {"ROCR_VISIBLE_DEVICES": "4,5,6,7", "HIP_VISIBLE_DEVICES": "1,0"})
assert _got == [5, 4], f"规则 2：HIP 在 ROCR 留下的 GPU 中重新编号 / rule 2: HIP renumbers what ROCR left; expected [5, 4], got {_got}"
_got = visible_gpus(GPU_UUIDS, {"ROCR_VISIBLE_DEVICES": "2,9,1"})
assert _got == [2], f"规则 1：在第一个无效项处结束 / rule 1: the list ends at the first invalid item; expected [2], got {_got}"
_got = visible_gpus(GPU_UUIDS, {"HIP_VISIBLE_DEVICES": "", "CUDA_VISIBLE_DEVICES": "3,3,1"})
assert _got == [3, 1], f"规则 2：空的 HIP 改读 CUDA，重复编号跳过 / rule 2: empty HIP falls back to CUDA, a repeat is skipped; got {_got}"

# %% [markdown] tags=["zh"]
# ## 6. 带宽与矩阵乘：与数据手册峰值对比
#
# 两个算术事实：一次设备内拷贝 `dst.copy_(src)` 读 n 个元素、写 n 个元素，搬运 `2·n·元素字节数`；
# (m×k)·(k×n) 矩阵乘做 `2·m·n·k` 次浮点运算（每个乘加算两次）。
#
# **练习 6a 的约定**：`copy_bytes(n_elements, element_size)` 返回拷贝搬运的字节数（整数，读加写）；
# `matmul_flops(m, n, k)` 返回 (m×k)·(k×n) 矩阵乘的浮点运算次数（整数）。

# %% [markdown] tags=["en"]
# ## 6. Bandwidth and matmul against the datasheet peak
#
# Two pieces of arithmetic: a device copy `dst.copy_(src)` reads n elements and writes n, moving
# `2·n·element_size` bytes; an (m×k)·(k×n) matmul does `2·m·n·k` floating-point operations (a
# multiply-add counts twice).
#
# **Exercise 6a contract**: `copy_bytes(n_elements, element_size)` returns the bytes a copy moves
# (an integer, read plus write); `matmul_flops(m, n, k)` returns the floating-point operations of an
# (m×k)·(k×n) matmul (an integer).

# %% tags=["solution"] grade_id="01-arith-sol-1"
def copy_bytes(n_elements, element_size):
    """Bytes moved by a device-to-device copy of n_elements of element_size bytes (read + write)."""
    ### BEGIN SOLUTION
    return 2 * n_elements * element_size
    ### END SOLUTION


def matmul_flops(m, n, k):
    """Floating-point operations of an (m x k) @ (k x n) matmul."""
    ### BEGIN SOLUTION
    return 2 * m * n * k
    ### END SOLUTION

# %% tags=["test"] grade_id="01-arith-1" points=1
assert copy_bytes(1024, 4) == 8192, f"1024 个 fp32 的拷贝读写共 8192 字节 / a copy of 1024 fp32 moves 8192 bytes, got {copy_bytes(1024, 4)}"
assert matmul_flops(2, 3, 4) == 48, f"2·2·3·4 = 48, got {matmul_flops(2, 3, 4)}"
assert type(copy_bytes(1024, 4)) is int and type(matmul_flops(2, 3, 4)) is int, "返回整数 / both return ints"

# %% [markdown] tags=["zh"]
# ### 严谨地计时
#
# 三个陷阱。其一，GPU 调用是**异步**的：函数返回时工作可能还在队列里，读时钟前必须同步，或者改用设备事件
# (event) 在队列里打时间戳——`torch.cuda.Event` 在 ROCm 上就是 HIP 事件（PyTorch 的 HIP 支持复用 `torch.cuda`
# 接口，见 [HIP (ROCm) semantics](https://docs.pytorch.org/docs/stable/notes/hip.html)）。其二，第一次调用包含内核加载、
# 分配和调优，要先预热 (warm-up)、不计时。其三，每调用一次就同步一次，会把同步和发射的开销算进每一次调用，
# 小拷贝被严重高估耗时：应在两个标记之间**连续调用 N 次**，再除以 N。
#
# 下面给出两种计时器，都是一对函数 `(start, stop)`：`start()` 打一个标记，`stop(mark)` 等设备做完此前排队的工作，
# 返回从标记到现在的秒数。`wall_timer` 用主机时钟、读时钟前同步；`event_timer` 用设备事件。

# %% [markdown] tags=["en"]
# ### Timing soundly
#
# Three traps. First, GPU calls are **asynchronous**: a call returns while its work may still be
# queued, so synchronize before reading the clock, or let device events timestamp the queue itself;
# `torch.cuda.Event` is a HIP event on ROCm (PyTorch's HIP support reuses the `torch.cuda`
# interfaces, see [HIP (ROCm) semantics](https://docs.pytorch.org/docs/stable/notes/hip.html)). Second,
# the first call pays for kernel loading, allocation and tuning, so warm up untimed. Third, a sync
# after every call charges the sync and launch overhead to each call, and small copies look far
# slower than they are: make **N calls back to back** between two marks and divide by N.
#
# Two timers are given below, each a pair of functions `(start, stop)`: `start()` takes a mark, and
# `stop(mark)` waits for the work queued so far and returns the seconds from the mark. `wall_timer`
# uses the host clock and synchronizes before reading it; `event_timer` uses device events.

# %%
def wall_timer(sync, clock=time.perf_counter):
    """(start, stop) on a host clock, synchronizing the device before every reading."""
    def start():
        sync()
        return clock()

    def stop(mark):
        sync()
        return clock() - mark

    return start, stop


def event_timer():
    """(start, stop) with device events on the current stream (HIP events on ROCm)."""
    def start():
        mark = torch.cuda.Event(enable_timing=True)
        mark.record()
        return mark

    def stop(mark):
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        end.synchronize()
        return mark.elapsed_time(end) / 1000   # elapsed_time is in milliseconds

    return start, stop

# %% [markdown] tags=["zh"]
# **练习 6b 的约定**：`time_per_call(fn, *, calls, repeats, warmup, start, stop)` 返回每次调用的秒数（浮点数）。
# 先不计时地调用 `fn()` `warmup` 次；然后重复 `repeats` 次：`mark = start()`，连续调用 `fn()` `calls` 次，
# `stop(mark)` 得到这一组的秒数，记录"秒数 / calls"。返回这些记录的中位数（个数为偶数时取中间两个的平均）。
# `start` 和 `stop` 每组各调用一次，组内不打标记。`calls < 1` 或 `repeats < 1` 时抛出 `ValueError`。

# %% [markdown] tags=["en"]
# **Exercise 6b contract**: `time_per_call(fn, *, calls, repeats, warmup, start, stop)` returns seconds
# per call (a float). Call `fn()` `warmup` times untimed; then, `repeats` times: `mark = start()`,
# call `fn()` `calls` times back to back, `stop(mark)` gives the group's seconds, record
# "seconds / calls". Return the median of the records (the mean of the middle two for an even
# count). `start` and `stop` run once per group, with no marks inside it. Raise `ValueError` when
# `calls < 1` or `repeats < 1`.

# %% tags=["solution"] grade_id="01-harness-sol-1"
def time_per_call(fn, *, calls, repeats, warmup, start, stop):
    """Median seconds per call of fn(), timed `calls` calls at a time (rules in the prose)."""
    ### BEGIN SOLUTION
    if calls < 1 or repeats < 1:
        raise ValueError(f"calls and repeats must be >= 1, got calls={calls}, repeats={repeats}")
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        mark = start()
        for _ in range(calls):
            fn()
        samples.append(stop(mark) / calls)
    samples.sort()
    middle = len(samples) // 2
    return samples[middle] if len(samples) % 2 else (samples[middle - 1] + samples[middle]) / 2
    ### END SOLUTION

# %% tags=["test"] grade_id="01-harness-1" points=3
class FakeDevice:
    """An asynchronous device. fn() queues its cost and returns at once; the device runs the queue
    in order. start()/stop() behave like device events: a mark is the point in the queue after the
    work queued so far, and stop(mark) returns the device time from the mark to the end of the queue."""

    def __init__(self, costs, queued=0.0):
        self.costs, self.calls, self.marks, self.end = list(costs), 0, 0, queued

    def fn(self):
        self.end += self.costs[min(self.calls, len(self.costs) - 1)]
        self.calls += 1

    def start(self):
        self.marks += 1
        return self.end

    def stop(self, mark):
        return self.end - mark


_dev = FakeDevice([100.0] * 4 + [1.0] * 10)               # four slow first calls, then 1 s each
_t = time_per_call(_dev.fn, calls=3, repeats=2, warmup=4, start=_dev.start, stop=_dev.stop)
assert _t == 1.0, f"预热要排除在计时之外 / warm-up must stay out of the timing: expected 1.0 s per call, got {_t}"
assert _dev.calls == 4 + 3 * 2, f"fn 应调用 warmup + calls·repeats = 10 次 / fn must run warmup + calls·repeats = 10 times, ran {_dev.calls}"
assert _dev.marks == 2, f"每组只打一个标记，组内不打 / one mark per group, none inside it: {_dev.marks} marks for 2 groups"
_dev = FakeDevice([1.0, 1.0, 4.0])
_t = time_per_call(_dev.fn, calls=3, repeats=1, warmup=0, start=_dev.start, stop=_dev.stop)
assert _t == 2.0, f"一组的秒数除以 calls / a group's seconds divided by calls: expected (1+1+4)/3 = 2.0, got {_t}"
assert isinstance(_t, float), f"返回 float / returns a float, got {type(_t).__name__}"
_dev = FakeDevice([1.0, 5.0, 3.0, 7.0])
_t = time_per_call(_dev.fn, calls=1, repeats=4, warmup=0, start=_dev.start, stop=_dev.stop)
assert _t == 4.0, f"偶数组取中间两个的平均 / an even count takes the mean of the middle two: expected 4.0, got {_t}"
try:
    time_per_call(_dev.fn, calls=0, repeats=3, warmup=0, start=_dev.start, stop=_dev.stop)
except ValueError:
    pass
else:
    raise AssertionError("calls < 1 应抛出 ValueError / calls < 1 must raise ValueError")

# %% [markdown] tags=["zh"]
# ### 数据手册峰值（厂商公布值）
#
# 下表来自课程的共享表 `rocmlab.lab.datasheets`（实验 01 和 02 共用这一份，每行附来源链接）。"手册原值"是厂商
# 印出来的数字：NVIDIA 的 H100/H200 数据手册只给"含稀疏 (with sparsity)"的 FP16 值，稠密值是它的一半。末级缓存
# (last-level cache) 取自 [ROCm GPU 规格表](https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html)：MI300X/MI325X/MI350X/MI355X
# 的 Infinity Cache 为 256 MiB，RX 7900 XTX 为 96 MiB。表按 PyTorch 报告的产品名**精确**匹配：H100 PCIe、H100 NVL、
# A100 40GB 是不同的产品，数字也不同，不在表中时宁可没有数字，也不能借用 SXM 版的。
# MI250X 在 PyTorch 中是两个设备（每个 GCD 一个），单个设备的峰值是整卡的一半。峰值是理论上限：能达到几成只能测量，
# 报告时写明分母（哪个手册数字、稠密还是稀疏、什么数据类型）。

# %% [markdown] tags=["en"]
# ### Datasheet peaks (vendor figures)
#
# The table below comes from the course's shared table `rocmlab.lab.datasheets` (labs 01 and 02
# use this one copy; each row links its sources). "As printed" is the vendor's own figure: NVIDIA's
# H100/H200 datasheets give the FP16 figure "with sparsity" only, and the dense figure is half of
# it. Last-level caches come from the [ROCm GPU specifications](https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html):
# 256 MiB of Infinity Cache on MI300X/MI325X/MI350X/MI355X, 96 MiB on an RX 7900 XTX. Rows are
# matched on the product name PyTorch reports, **exactly**: H100 PCIe, H100 NVL and A100 40GB are
# other products with other figures, and a GPU missing from the table gets no figures rather than
# the SXM ones. An MI250X is two devices in PyTorch (one per GCD); one device's peak is half the
# card's. Peaks are theoretical ceilings: how close you get is a measurement, and the report names
# its denominator (which datasheet figure, dense or sparse, which data type).

# %%
from IPython.display import Markdown, display

from rocmlab.lab import datasheets

display(Markdown(datasheets.markdown_table()))
gpu_name, spec = datasheets.for_device(device)
peak = spec.per_device() if spec else None
print(f"this device: {gpu_name} -> {'datasheet row ' + spec.key if spec else 'no datasheet row (figures are measured only)'}")

# %% [markdown] tags=["zh"]
# ### 测量
#
# 拷贝带宽受缓存影响：数据能放进末级缓存时，测到的是缓存带宽而不是显存带宽。所以拷贝的尺寸至少是末级缓存的 4 倍
# （MI300X：4 × 256 MiB = 1 GiB），报告的是**最大尺寸**的结果，而不是各尺寸里的最大值——小尺寸的数字可能更高，
# 那正是缓存。gpu 配置用到 2 GiB；冒烟配置在 CPU 上只用几 MiB，数字只说明代码能跑（CPU 的缓存同样会抬高它们）。
# GPU 上用事件计时，CPU 上用主机时钟。

# %% [markdown] tags=["en"]
# ### Measure
#
# Copy bandwidth depends on caches: when the data fits in the last-level cache, you measure the
# cache, not the memory. So copy sizes are at least 4× the last-level cache (MI300X: 4 × 256 MiB =
# 1 GiB), and the figure reported is the **largest size's**, not the maximum over sizes: a smaller
# size may show more, and that is the cache. The gpu profile goes up to 2 GiB; the smoke profile uses
# a few MiB on a CPU, and its numbers only show that the code runs (CPU caches inflate them just the
# same). A GPU is timed with events, a CPU with the host clock.

# %%
def sync():
    lab.synchronize(device)


start, stop = event_timer() if device.type == "cuda" else wall_timer(sync)


def copy_bandwidth_gbs(mib):
    """GB/s of dst.copy_(src) for fp32 tensors of `mib` MiB on the lab's device."""
    n = mib * 2**20 // 4
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    seconds = time_per_call(lambda: dst.copy_(src), calls=CALLS, repeats=REPEATS, warmup=WARMUP,
                            start=start, stop=stop)
    return copy_bytes(n, 4) / seconds / 1e9


def matmul_tflops(size, dtype):
    """TFLOPS of a square size^3 matmul in `dtype` on the lab's device."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    seconds = time_per_call(lambda: a @ b, calls=CALLS, repeats=REPEATS, warmup=WARMUP, start=start, stop=stop)
    return matmul_flops(size, size, size) / seconds / 1e12


copy_rows = [(mib, copy_bandwidth_gbs(mib)) for mib in sorted(COPY_MB)]
matmul_rows = [(size, matmul_tflops(size, getattr(torch, MATMUL_DTYPE))) for size in sorted(MATMUL_SIZES)]
for mib, gbs in copy_rows:
    print(f"copy {mib:>5} MiB: {gbs:9.1f} GB/s")
for size, tflops in matmul_rows:
    print(f"matmul {size:>5}^3 {MATMUL_DTYPE}: {tflops:9.3f} TFLOPS")

largest_mib, reported_gbs = copy_rows[-1]
print(f"reported copy bandwidth: {reported_gbs:.1f} GB/s at the largest size, {largest_mib} MiB")
if peak and peak["llc_mib"]:
    ratio = largest_mib / peak["llc_mib"]
    verdict = "ok" if ratio >= 4 else "too small: the figure includes cache hits; raise COPY_MB"
    print(f"largest size = {ratio:.1f} x the {peak['llc_mib']:g} MiB last-level cache ({verdict})")
if peak:
    print(f"{spec.key}: {reported_gbs / peak['bandwidth_gbs']:.0%} of the datasheet's "
          f"{peak['bandwidth_gbs']:g} GB/s; matmul {matmul_rows[-1][1] / peak['fp16_dense_tflops']:.0%} "
          f"of {peak['fp16_dense_tflops']:g} dense FP16/BF16 TFLOPS ({MATMUL_DTYPE})")

# %%
import matplotlib.pyplot as plt

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.5))
lab.plot_lines({"achieved": ([r[0] for r in copy_rows], [r[1] for r in copy_rows])}, ax=ax1, logx=True,
               title="device copy bandwidth", xlabel="MiB", ylabel="GB/s")
lab.plot_lines({"achieved": ([r[0] for r in matmul_rows], [r[1] for r in matmul_rows])}, ax=ax2,
               title=f"matmul {MATMUL_DTYPE}", xlabel="m = n = k", ylabel="TFLOPS")
if peak:
    ax1.axhline(peak["bandwidth_gbs"], color="red", linestyle="--", label=f"{spec.key} datasheet")
    if peak["llc_mib"]:
        ax1.axvline(4 * peak["llc_mib"], color="gray", linestyle=":", label="4 x last-level cache")
    ax2.axhline(peak["fp16_dense_tflops"], color="red", linestyle="--", label=f"{spec.key} FP16/BF16 dense")
    ax1.legend(), ax2.legend()
plt.tight_layout()
plt.show()

# %% [markdown] tags=["zh"]
# **这些数字在真实 GPU 上意味着什么**：在 MI300X 上，2 GiB 的拷贝应达到数 TB/s；bf16 的 8192³ 矩阵乘应达到
# 数百 TFLOPS。若只有峰值的一小部分：检查是否真的在 GPU 上（`device`）、是否预热、尺寸是否够大、
# 是否用了 fp32（fp32 矩阵乘的峰值远低于 fp16/bf16）。小尺寸的拷贝若高于大尺寸，那是缓存，不是显存。

# %% [markdown] tags=["en"]
# **What the numbers mean on a real GPU**: on an MI300X a 2 GiB copy should reach several TB/s, and
# a bf16 8192³ matmul hundreds of TFLOPS. If you see a small fraction of peak, check that you are on
# the GPU (`device`), warmed up, used big enough sizes, and not fp32 (fp32 matmul peaks far below
# fp16/bf16). A small copy that beats a large one is the cache, not the memory.

# %% [markdown] tags=["zh"]
# ## 7. 能效：同口径比较
#
# 厂商手册常给每种精度两个数：稠密 (dense) 和"含稀疏 (with sparsity)"，后者是前者的两倍，
# 只在 2:4 结构化稀疏的矩阵上成立。把一家的稀疏值和另一家的稠密值放在一起比，结论会翻转。
# 下面的表就是照着手册原值这样混着抄的（`sparse=True` 表示该数字含稀疏）：H100 的 1979 是 NVIDIA 手册印的
# 含稀疏值，A100 的 624 也是。

# %% [markdown] tags=["en"]
# ## 7. Efficiency per watt, like for like
#
# Datasheets often give two figures per precision: dense and "with sparsity", twice the dense one
# and only true for 2:4 structured-sparse matrices. Put one vendor's sparse figure next to
# another's dense figure and the conclusion flips. The table below was copied from the datasheets
# just like that (`sparse=True` marks a figure that includes sparsity): H100's 1979 is the sparse
# figure NVIDIA prints, and so is A100's 624.

# %%
def _as_printed(key, *, copied_sparse=False):
    """A row as a datasheet prints it; copied_sparse: someone copied the "with sparsity" figure."""
    gpu = datasheets.by_key(key)
    sparse = gpu.fp16_sparse or copied_sparse
    figure = gpu.fp16_dense_tflops * 2 if sparse else gpu.fp16_dense_tflops
    return {"gpu": key, "fp16_tflops": figure, "sparse": sparse, "board_w": gpu.board_w}


MIXED_FP16 = [_as_printed("MI300X"), _as_printed("H100 SXM"), _as_printed("A100 SXM 80GB", copied_sparse=True),
              _as_printed("MI250X")]
naive = {row["gpu"]: row["fp16_tflops"] / row["board_w"] for row in MIXED_FP16}
print(MIXED_FP16)
print("naive TFLOPS/W (mixed table):", {k: round(v, 2) for k, v in naive.items()})

# %% [markdown] tags=["zh"]
# **练习 7 的约定**：`tflops_per_watt(table)` 的输入是字典列表 `{"gpu", "fp16_tflops", "sparse", "board_w"}`，
# 返回字典 `{gpu: 稠密 TFLOPS / 板卡功耗瓦数}`（浮点数）。`sparse` 为 True 的数字先除以 2 得到稠密值。
# 某行 `board_w <= 0` 时抛出 `ValueError`；空表返回 `{}`。

# %% [markdown] tags=["en"]
# **Exercise 7 contract**: `tflops_per_watt(table)` takes a list of dicts `{"gpu", "fp16_tflops",
# "sparse", "board_w"}` and returns a dict `{gpu: dense TFLOPS / board watts}` (floats). A figure
# with `sparse` True is halved to get the dense one. A row with `board_w <= 0` raises `ValueError`;
# an empty table gives `{}`.

# %% tags=["solution"] grade_id="01-watt-sol-1"
def tflops_per_watt(table):
    """{gpu: dense TFLOPS per watt} (rules in the prose)."""
    ### BEGIN SOLUTION
    out = {}
    for row in table:
        if row["board_w"] <= 0:
            raise ValueError(f"{row['gpu']}: board power must be positive, got {row['board_w']}")
        dense = row["fp16_tflops"] / 2 if row["sparse"] else row["fp16_tflops"]
        out[row["gpu"]] = dense / row["board_w"]
    return out
    ### END SOLUTION


fair = tflops_per_watt(MIXED_FP16)
print("dense TFLOPS/W:", {k: round(v, 2) for k, v in fair.items()})
lab.plot_bars({f"{k}\n(mixed)": v for k, v in naive.items()} | {f"{k}\n(dense)": v for k, v in fair.items()},
              title="FP16 TFLOPS per watt: mixed vs like for like", ylabel="TFLOPS / W")
plt.xticks(fontsize=7)
plt.show()

# %% tags=["test"] grade_id="01-watt-1" points=2
_got = tflops_per_watt(MIXED_FP16)
assert abs(_got["MI300X"] - 1307.4 / 750) < 1e-9, f"MI300X 的数字本就是稠密值 / MI300X's figure is already dense: {_got['MI300X']}"
assert abs(_got["H100 SXM"] - 1979 / 2 / 700) < 1e-9, \
    f"H100 的 1979 含稀疏，稠密为一半 989.5 / H100's 1979 includes sparsity, dense is half, 989.5: {_got['H100 SXM']}"
assert tflops_per_watt([]) == {}, "空表返回 {} / an empty table gives {}"
try:
    tflops_per_watt([{"gpu": "Z", "fp16_tflops": 1.0, "sparse": False, "board_w": 0}])
except ValueError:
    pass
else:
    raise AssertionError("board_w <= 0 应抛出 ValueError / board_w <= 0 must raise ValueError")

# %% [markdown] tags=["zh"]
# 同口径后排序变了：混合表里 H100 看起来每瓦算力最高，换成稠密值后 MI300X 领先。在规模部署中，
# 显存带宽和能效往往比峰值 FLOPS 更决定成本——但前提是两边用同一种数字。

# %% [markdown] tags=["en"]
# Like for like, the ranking changes: in the mixed table H100 seems the most efficient; in dense
# figures MI300X leads. At scale, memory bandwidth and efficiency decide cost more than peak
# FLOPS, provided both sides use the same kind of figure.

# %% [markdown] tags=["zh"]
# ## 8. 运行并读懂 `rocmlab doctor`
#
# `rocmlab doctor` 检查操作系统与内核、amdgpu 驱动、ROCm 版本、ROCm 内核驱动拓扑（KFD，`/sys/class/kfd`）
# 与 amd-smi 列出的 GPU、
# `/dev/kfd` 与 `/dev/dri/renderD*` 的读写权限和 render/video 组、PyTorch 构建与 wheel 的架构列表、
# 可见设备变量、多 GPU 的 `iommu=pt`、NUMA 自动均衡、易导致挂起的 `NCCL_*` 设置、磁盘空间和模型镜像。
# 每一项给出 ok / skip / warn / fail、中英文修复建议和文档链接。退出码：0 正常，1 有警告，3 有失败
# （2 留给参数错误）。`--json` 输出机器可读的报告；`--machine 目录` 回放一台录制的机器。

# %% [markdown] tags=["en"]
# ## 8. Run and read `rocmlab doctor`
#
# `rocmlab doctor` checks the OS and kernel, the amdgpu driver, the ROCm version, the GPUs that
# the ROCm kernel driver's topology (KFD, `/sys/class/kfd`) and amd-smi list, read/write access to `/dev/kfd` and `/dev/dri/renderD*` and the
# render/video groups, the PyTorch build and its wheel's arch list, visible-device variables,
# `iommu=pt` for multi-GPU, NUMA auto-balancing, `NCCL_*` settings that cause hangs, disk space
# and the model mirror. Each finding is ok / skip / warn / fail with a fix hint in Chinese and
# English and a doc link. Exit status: 0 fine, 1 warnings, 3 failures (2 is a usage error).
# `--json` prints a machine-readable report; `--machine DIR` replays a recorded machine.

# %%
def run_doctor(*extra):
    done = subprocess.run([sys.executable, "-m", "rocmlab.doctor", "--json", *extra],
                          capture_output=True, text=True, timeout=120, check=False)
    if done.returncode not in (0, 1, 3):
        raise RuntimeError(f"rocmlab doctor exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


from rocmlab import doctor as rocmlab_doctor

here = run_doctor()
print(rocmlab_doctor.render_table(here, lang="both"))
recorded = run_doctor("--machine", str(DATA / "machines" / "wheel-lacks-arch"))
print(rocmlab_doctor.render_table(recorded, lang="en"))

# %% [markdown] tags=["zh"]
# ## 小结
#
# 你现在能：分清 ROCm / CUDA / CPU 构建（不靠 capability 元组），读 rocminfo 与 gfx 目标，知道 CDNA 是 wave64、
# RDNA 默认 wave32，判断 wheel 是否包含你的架构并找到对应的安装命令，按运行时的真实规则推算可见 GPU，
# 用预热、连续 N 次调用和设备事件正确计时，用超过末级缓存 4 倍的尺寸测带宽，用同口径的数据手册数字比较能效，
# 并读懂 `rocmlab doctor`。在更大的 GPU 上：用 gpu 配置重跑第 6 节，看拷贝带宽和 bf16 矩阵乘距峰值多远。
# 文档：[ROCm 安装](https://rocm.docs.amd.com/projects/install-on-linux/en/latest/) ·
# [兼容性矩阵](https://rocm.docs.amd.com/en/latest/compatibility/compatibility-matrix.html) ·
# [TheRock 发布说明](https://github.com/ROCm/TheRock/blob/main/RELEASES.md)。

# %% [markdown] tags=["en"]
# ## Wrap-up
#
# You can now tell ROCm, CUDA and CPU builds apart (not by the capability tuple), read rocminfo
# and gfx targets, know that CDNA runs wave64 and RDNA defaults to wave32, check a wheel's arch
# list and find the install command for your target, work out the visible GPUs by the runtimes' own
# rules, time GPU work soundly with warm-up, N calls per mark and device events, measure bandwidth
# with sizes beyond 4× the last-level cache, compare efficiency with like-for-like datasheet
# figures, and read `rocmlab doctor`. On a bigger GPU, rerun section 6 in the gpu profile and see
# how close copy bandwidth and bf16 matmul get to peak. Docs:
# [ROCm install](https://rocm.docs.amd.com/projects/install-on-linux/en/latest/) ·
# [compatibility matrix](https://rocm.docs.amd.com/en/latest/compatibility/compatibility-matrix.html) ·
# [TheRock releases](https://github.com/ROCm/TheRock/blob/main/RELEASES.md).

# %% [markdown] tags=["zh"]
# ## 选做（optional stretch）：把 doctor 的报告排成待办清单
#
# 这一题单独计分，前面的内容都不依赖它。**选做练习的约定**：`triage(report, lang="en")` 的输入是 `rocmlab doctor --json` 的报告（字典，`report["findings"]`
# 是发现项列表），返回要处理的项：先是所有 `"fail"`，再是所有 `"warn"`，每组内保持报告中的顺序；每项是字典
# `{"check", "status", "fix"}`，`fix` 取该项的 `fix_en`（`lang="en"`）或 `fix_zh`（`lang="zh"`）。
# 没有 fail / warn 时返回 `[]`。隐藏检查用其他同样结构的报告检查。

# %% [markdown] tags=["en"]
# ## Optional stretch: turn the doctor's report into a to-do list
#
# This one is graded separately, and nothing above depends on it. **Stretch contract**: `triage(report, lang="en")` takes a `rocmlab doctor --json` report (a dict
# whose `report["findings"]` is the list of findings) and returns the findings to act on: every
# `"fail"` first, then every `"warn"`, each group in report order; each is a dict `{"check", "status",
# "fix"}`, where `fix` is the finding's `fix_en` (`lang="en"`) or `fix_zh` (`lang="zh"`). With no fail
# or warn it returns `[]`. Hidden checks use other reports of the same shape.

# %% tags=["solution"] grade_id="01-stretch-triage-sol-1"
def triage(report, lang="en"):
    """The findings to act on, fails first (rules in the prose)."""
    ### BEGIN SOLUTION
    key = "fix_zh" if lang == "zh" else "fix_en"
    return [{"check": f["check"], "status": f["status"], "fix": f[key]}
            for status in ("fail", "warn") for f in report["findings"] if f["status"] == status]
    ### END SOLUTION


for item in triage(recorded):
    print(f"[{item['status']}] {item['check']}: {item['fix']}")

# %% tags=["test"] grade_id="01-stretch-triage-1" points=2
_report = {"findings": [
    {"check": "os", "status": "ok", "fix_en": "", "fix_zh": ""},
    {"check": "numa", "status": "warn", "fix_en": "disable it", "fix_zh": "关闭它"},
    {"check": "access", "status": "fail", "fix_en": "join render", "fix_zh": "加入 render 组"},
]}
_got = triage(_report)
_want = [{"check": "access", "status": "fail", "fix": "join render"},
         {"check": "numa", "status": "warn", "fix": "disable it"}]
assert _got == _want, f"fail 在前、warn 在后，ok 不列 / fails first, then warns, no oks: expected {_want}, got {_got}"
assert [i["check"] for i in triage(recorded)][:1] == ["torch-arch"], "录制机器的首个问题是 torch-arch / the recorded machine's first problem is torch-arch"
assert triage(_report, lang="zh")[0]["fix"] == "加入 render 组", "lang='zh' 取 fix_zh / lang='zh' takes fix_zh"
assert triage({"findings": [_report["findings"][0]]}) == [], "没有 fail / warn 时返回 [] / nothing to act on gives []"
