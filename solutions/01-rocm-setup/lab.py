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
# # Lab 01 · ROCm 环境搭建与诊断
#
# **版本** 1.0.0 · **时长** 约 120 分钟 · **目标**：一个能用、且被诊断清楚的 GPU 环境。
#
# 大多数人在"让 PyTorch 看见 GPU"这一步放弃：内核与驱动版本、用户组、没有你的 gfx 架构的 wheel、
# 可见设备变量。本实验把这些逐一拆开：你将区分 ROCm / CUDA / CPU 构建，解析 `rocminfo`，
# 由 gfx 架构推出架构家族和波前大小 (wavefront size)，判断 wheel 是否支持你的 GPU，推算进程能看见哪些 GPU，
# 写一个诚实的计时器测量带宽和矩阵乘吞吐并与数据手册 (datasheet) 峰值对比，做同口径的能效比较，
# 最后运行并读懂 `rocmlab doctor`。
#
# **前置知识**：Python、PyTorch 张量基础。smoke 配置在 CPU 上几十秒跑完；gpu 配置在 ROCm 或 CUDA GPU 上做真实测量。

# %% [markdown] tags=["en"]
# # Lab 01 · ROCm setup and diagnosis
#
# **Version** 1.0.0 · **Time** about 120 minutes · **Goal**: a working GPU environment that you
# have diagnosed and understand.
#
# Most newcomers give up at "make PyTorch see the GPU": kernel and driver versions, user groups, a
# wheel built without your gfx target, visible-device variables. This lab takes them apart: you
# tell ROCm, CUDA and CPU builds apart, parse `rocminfo`, derive the architecture family and
# wavefront size from a gfx target, decide whether a wheel supports your GPU, work out which GPUs
# a process sees, write an honest timer to measure bandwidth and matmul throughput against the
# datasheet peak, compare efficiency like for like, and finally run and read `rocmlab doctor`.
#
# **Prerequisites**: Python and PyTorch tensor basics. The smoke profile runs in well under a
# minute on CPU; the gpu profile measures a real ROCm or CUDA GPU.

# %% tags=["parameters"]
PROFILE = "smoke"
DEVICE = "auto"
SEED = 0
COPY_MB = [1, 4, 16]               # sizes of the device-to-device copies, MiB
MATMUL_SIZES = [128, 256, 384]     # square matmul sizes m = n = k
MATMUL_DTYPE = "float32"           # "bfloat16" / "float16" on a GPU
REPEATS = 5                        # timed calls per measurement
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
### BEGIN HIDDEN TESTS
assert backend_of(_fake_torch("7.2.53211", None, capability=(9, 4))) == "rocm"
assert backend_of(_fake_torch(None, "12.4", capability=(9, 0))) == "cuda"
assert backend_of(SimpleNamespace(version=SimpleNamespace(cuda="11.8"))) == "cuda"   # no hip attribute at all
assert backend_of(SimpleNamespace(version=SimpleNamespace())) == "cpu"
assert backend_of(_fake_torch("", None)) == "cpu"
_real = "rocm" if getattr(torch.version, "hip", None) else ("cuda" if torch.version.cuda else "cpu")
assert backend_of(torch) == _real
### END HIDDEN TESTS

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
### BEGIN HIDDEN TESTS
from rocmlab import probes as _probes

for _key in ("mi250x-2cards", "apu-780m", "mi300x-8gpu", "rx7900xtx"):
    _ref = [{"name": a.marketing_name, "gfx": a.name, "compute_units": a.compute_units,
             "wavefront_size": a.wavefront_size} for a in _probes.gpu_agents(ROCMINFO[_key])]
    assert parse_rocminfo(ROCMINFO[_key]) == _ref, _key
assert len(parse_rocminfo(ROCMINFO["mi250x-2cards"])) == 4          # two cards, two GCDs each
assert parse_rocminfo(ROCMINFO["apu-780m"])[0]["gfx"] == "gfx1103"
assert parse_rocminfo("") == []
### END HIDDEN TESTS

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
### BEGIN HIDDEN TESTS
from rocmlab import probes as _probes

assert arch_family("gfx90a:sramecc+:xnack-") == ("CDNA", 64)
assert arch_family("gfx950") == ("CDNA", 64) and arch_family("gfx908") == ("CDNA", 64)
assert arch_family("gfx906") == ("GCN", 64) and arch_family("gfx803") == ("GCN", 64)
assert arch_family("gfx1030") == ("RDNA", 32) and arch_family("gfx1201") == ("RDNA", 32)
assert arch_family("gfx1103") == ("RDNA", 32)
for _bad in ("sm_90", "", "gfx"):
    try:
        arch_family(_bad)
    except ValueError:
        pass
    else:
        raise AssertionError(f"{_bad!r} 应抛出 ValueError / must raise ValueError")
for _key, _text in ROCMINFO.items():          # the family's wavefront agrees with what the device reports
    for _gpu in _probes.gpu_agents(_text):
        assert arch_family(_gpu.name)[1] == _gpu.wavefront_size, (_key, _gpu.name)
### END HIDDEN TESTS

# %% [markdown] tags=["zh"]
# ## 4. 这个 wheel 支持我的 GPU 吗？
#
# PyTorch 的 ROCm wheel 只为一组 gfx 目标编译内核，`torch.cuda.get_arch_list()` 给出这组目标。
# 设备目标不在其中时，`is_available()` 可能仍为 True，但第一个内核就报 `invalid device function`。
# 比较时去掉特性后缀比基础目标；若两边都写明了同一特性（如 `xnack+` 与 `xnack-`）而取值相反，则不兼容；
# 只有一边写明的特性不影响兼容。注意 `gfx110` 不是 `gfx1100`：按目标比较，不要做子串匹配。
# 从 ROCm 7.14 (TheRock) 起，多架构 wheel 索引把 GPU 目标作为附加项安装，例如 `torch[device-gfx942]`。

# %% [markdown] tags=["en"]
# ## 4. Does this wheel support my GPU?
#
# A PyTorch ROCm wheel carries kernels for a set of gfx targets, listed by
# `torch.cuda.get_arch_list()`. When the device's target is missing, `is_available()` may still be
# True, and the first kernel fails with `invalid device function`. Compare base targets with the
# feature suffixes removed; when both sides name the same feature (say `xnack+` and `xnack-`) with
# opposite values, they are incompatible; a feature named on one side only does not matter. Note
# that `gfx110` is not `gfx1100`: compare targets, never substrings. From ROCm 7.14 (TheRock) the
# multi-arch wheel index installs the GPU target as an extra, e.g. `torch[device-gfx942]`.

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


from rocmlab.lab.env import gpu_arch

_arch = gpu_arch() if torch.cuda.is_available() else None
print("this device:", _arch, "| wheel:", torch.cuda.get_arch_list() or "(CPU build: no GPU targets)")

# %% tags=["test"] grade_id="01-wheel-1" points=2
_wheel = ["gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx1030", "gfx1100", "gfx1101"]
assert wheel_supports("gfx942:sramecc+:xnack-", _wheel) is True, "gfx942 在列表中 / gfx942 is in the list"
assert wheel_supports("gfx1201", _wheel) is False, "gfx1201 不在列表中 / gfx1201 is not in the list"
### BEGIN HIDDEN TESTS
from rocmlab import probes as _probes

_cases = [("gfx90a:sramecc+:xnack-", ["gfx90a:xnack+"]), ("gfx90a:sramecc+:xnack-", ["gfx90a:xnack-"]),
          ("gfx90a:sramecc+:xnack-", ["gfx90a"]), ("gfx1100", ["gfx110", "gfx11000"]), ("gfx1100", []),
          ("gfx90a", ["gfx90a:sramecc+"]), ("gfx942:sramecc-", ["gfx942:sramecc+", "gfx942:sramecc-"])]
for _dev, _list in _cases:
    _want = any(_probes.target_compatible(_dev, _b) for _b in _list)
    assert wheel_supports(_dev, _list) is _want, (_dev, _list, _want)
### END HIDDEN TESTS

# %% [markdown] tags=["zh"]
# ## 5. 进程能看见哪些 GPU？
#
# `ROCR_VISIBLE_DEVICES` 在 ROCm 运行时层选出物理 GPU；`HIP_VISIBLE_DEVICES` 再在这些 GPU 中按*新的*编号挑选。
# 本实验的模型（与 `CUDA_VISIBLE_DEVICES` 的规则相同）：未设置的变量不做筛选；空字符串意味着一个也不可见；
# 遇到越界或非数字的编号就停止，其后的编号被忽略。容器里还要确认 `--device /dev/kfd --device /dev/dri`。
# 参考：[ROCm GPU isolation](https://rocm.docs.amd.com/en/latest/conceptual/gpu-isolation.html)。

# %% [markdown] tags=["en"]
# ## 5. Which GPUs does a process see?
#
# `ROCR_VISIBLE_DEVICES` selects physical GPUs in the ROCm runtime; `HIP_VISIBLE_DEVICES` then
# picks among those by their *new* numbering. This lab's model (the same rule as
# `CUDA_VISIBLE_DEVICES`): an unset variable selects everything; an empty string leaves nothing
# visible; an out-of-range or non-numeric index stops the list and the rest is ignored. In a
# container also check `--device /dev/kfd --device /dev/dri`. See
# [ROCm GPU isolation](https://rocm.docs.amd.com/en/latest/conceptual/gpu-isolation.html).

# %% tags=["solution"] grade_id="01-visible-sol-1"
def visible_gpus(n_physical, env):
    """Physical GPU indices a HIP process sees, in the order it numbers them (its device 0 first),
    given `n_physical` GPUs and an environment dict with optional ROCR_VISIBLE_DEVICES and
    HIP_VISIBLE_DEVICES (comma-separated indices)."""
    ### BEGIN SOLUTION
    visible = list(range(n_physical))
    for name in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        if name not in env:
            continue
        chosen = []
        for item in env[name].split(","):
            item = item.strip()
            if not item.isdigit() or int(item) >= len(visible):
                break
            chosen.append(visible[int(item)])
        visible = chosen
    return visible
    ### END SOLUTION


print(visible_gpus(8, {"ROCR_VISIBLE_DEVICES": "4,5,6,7", "HIP_VISIBLE_DEVICES": "1"}))

# %% tags=["test"] grade_id="01-visible-1" points=2
assert visible_gpus(8, {}) == list(range(8)), "未设置时全部可见 / unset means all visible"
_got = visible_gpus(8, {"HIP_VISIBLE_DEVICES": "2,3"})
assert _got == [2, 3], f"期望 / expected [2, 3], got {_got}"
### BEGIN HIDDEN TESTS
from rocmlab import doctor as _doctor

for _env in ({"ROCR_VISIBLE_DEVICES": "4,5,6,7", "HIP_VISIBLE_DEVICES": "1"}, {"HIP_VISIBLE_DEVICES": "3,1"},
             {"ROCR_VISIBLE_DEVICES": ""}, {"HIP_VISIBLE_DEVICES": "0,9,1"}, {"ROCR_VISIBLE_DEVICES": "6,2"},
             {"ROCR_VISIBLE_DEVICES": "1,3", "HIP_VISIBLE_DEVICES": "1,0"}):
    assert visible_gpus(8, _env) == _doctor.visible_devices(8, _env)[0], _env
assert visible_gpus(2, {"ROCR_VISIBLE_DEVICES": "1", "HIP_VISIBLE_DEVICES": "1"}) == []
### END HIDDEN TESTS

# %% [markdown] tags=["zh"]
# ## 6. 带宽与矩阵乘：与数据手册峰值对比
#
# 两个算术事实：一次设备内拷贝 `dst.copy_(src)` 读 n 个元素、写 n 个元素，搬运 `2·n·元素字节数`；
# (m×k)·(k×n) 矩阵乘做 `2·m·n·k` 次浮点运算（每个乘加算两次）。
#
# 计时的两个陷阱：GPU 调用是**异步**的，函数返回时工作可能还在队列里，所以读时钟前必须同步设备；
# 第一次调用包含内核加载、分配和调优，所以要先预热 (warm-up)、不计时。下面你写一个计时器，
# 时钟 `clock` 和同步 `sync` 由参数传入——测试会用一个假的"异步设备"来检查它。
# （`lab.time_it` 是课程后面使用的同一思路的版本。）

# %% [markdown] tags=["en"]
# ## 6. Bandwidth and matmul against the datasheet peak
#
# Two pieces of arithmetic: a device copy `dst.copy_(src)` reads n elements and writes n, moving
# `2·n·element_size` bytes; an (m×k)·(k×n) matmul does `2·m·n·k` floating-point operations (a
# multiply-add counts twice).
#
# Two timing traps: GPU calls are **asynchronous**, the function returns while the work may still
# be queued, so synchronize the device before reading the clock; the first call pays for kernel
# loading, allocation and tuning, so warm up untimed first. You now write a timer whose `clock`
# and `sync` are passed in; the test checks it against a fake "asynchronous device".
# (`lab.time_it` is the course's version of the same idea, used in later labs.)

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
### BEGIN HIDDEN TESTS
assert copy_bytes(256 * 2**20, 2) == 2**30 and copy_bytes(0, 4) == 0
assert matmul_flops(8192, 8192, 8192) == 2 * 8192**3 and matmul_flops(1, 4096, 11008) == 90177536
### END HIDDEN TESTS

# %% tags=["solution"] grade_id="01-harness-sol-1"
def time_per_call(fn, *, warmup, repeats, clock, sync):
    """Median seconds per call of `fn()`.

    Call fn `warmup` times untimed, then time `repeats` calls one by one: sync(), read clock(),
    fn(), sync(), read clock(). Raise ValueError when repeats < 1.
    """
    ### BEGIN SOLUTION
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        sync()
        start = clock()
        fn()
        sync()
        samples.append(clock() - start)
    samples.sort()
    middle = len(samples) // 2
    return samples[middle] if len(samples) % 2 else (samples[middle - 1] + samples[middle]) / 2
    ### END SOLUTION

# %% tags=["test"] grade_id="01-harness-1" points=3
class FakeDevice:
    """An asynchronous device: fn() only queues work; sync() waits for it; clock() reads the time."""

    def __init__(self, costs):
        self.costs, self.now, self.queued, self.calls = list(costs), 0.0, 0.0, 0

    def fn(self):
        self.queued += self.costs[min(self.calls, len(self.costs) - 1)]
        self.calls += 1

    def sync(self):
        self.now, self.queued = self.now + self.queued, 0.0

    def clock(self):
        return self.now


_dev = FakeDevice([100.0] * 4 + [1.0] * 10)               # four slow first calls, then 1 s each
_t = time_per_call(_dev.fn, warmup=4, repeats=3, clock=_dev.clock, sync=_dev.sync)
assert _t == 1.0, (f"期望每次 1.0 秒，得到 {_t}：是否排除了预热、读时钟前是否同步？ / expected 1.0 s per call, "
                   f"got {_t}: is warm-up excluded, and is the device synchronized before each clock read?")
assert _dev.calls == 7, f"应调用 fn 4+3 次 / fn must run 4 + 3 times, ran {_dev.calls}"
_dev = FakeDevice([2.0])
_dev.queued = 40.0                                            # work still queued when timing starts
_t = time_per_call(_dev.fn, warmup=0, repeats=1, clock=_dev.clock, sync=_dev.sync)
assert _t == 2.0, f"开始计时前要先同步，排空已排队的工作 / synchronize before starting the clock; got {_t}"
### BEGIN HIDDEN TESTS
_dev = FakeDevice([50.0, 2.0, 2.0, 9.0, 2.0, 2.0, 2.0])
assert time_per_call(_dev.fn, warmup=1, repeats=5, clock=_dev.clock, sync=_dev.sync) == 2.0   # median, not mean
_dev = FakeDevice([3.0])
_dev.queued = 40.0                                            # work queued before the harness starts
assert time_per_call(_dev.fn, warmup=0, repeats=3, clock=_dev.clock, sync=_dev.sync) == 3.0
_dev = FakeDevice([1.0, 5.0, 3.0, 7.0])
assert time_per_call(_dev.fn, warmup=0, repeats=4, clock=_dev.clock, sync=_dev.sync) == 4.0
try:
    time_per_call(_dev.fn, warmup=0, repeats=0, clock=_dev.clock, sync=_dev.sync)
    raise AssertionError("repeats=0 应抛出 ValueError / must raise ValueError")
except ValueError:
    pass
### END HIDDEN TESTS

# %% [markdown] tags=["zh"]
# ### 数据手册峰值（厂商公布值）
#
# | GPU | 架构 | 峰值显存带宽 | FP16/BF16 稠密 (dense) | FP8 稠密 | 板卡功耗 | 来源 |
# | --- | --- | --- | --- | --- | --- | --- |
# | AMD Instinct MI300X | gfx942 | 5.3 TB/s | 1307.4 TFLOPS | 2614.9 TFLOPS | 750 W | [AMD MI300X](https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html) |
# | AMD Instinct MI325X | gfx942 | 6.0 TB/s | 1307.4 TFLOPS | 2614.9 TFLOPS | 1000 W | [AMD MI325X](https://www.amd.com/en/products/accelerators/instinct/mi300/mi325x.html) |
# | AMD Instinct MI250X（整卡 2 个 GCD） | gfx90a | 3.2 TB/s | 383 TFLOPS | — | 560 W（峰值） | [AMD MI250X](https://www.amd.com/en/products/accelerators/instinct/mi200/mi250x.html) |
# | AMD Instinct MI210 | gfx90a | 1.6 TB/s | 181 TFLOPS | — | 300 W | [AMD MI210](https://www.amd.com/en/products/accelerators/instinct/mi200/mi210.html) |
# | AMD Radeon RX 7900 XTX | gfx1100 | 960 GB/s | 122.8 TFLOPS | — | 355 W | [AMD RX 7900 XTX](https://www.amd.com/en/products/graphics/desktops/radeon/7000-series/amd-radeon-rx-7900xtx.html) |
# | NVIDIA H100 SXM | sm_90 | 3.35 TB/s | 989.4 TFLOPS（手册写 1979，含稀疏） | 1978.9 TFLOPS（手册写 3958，含稀疏） | 700 W | [NVIDIA H100](https://www.nvidia.com/en-us/data-center/h100/) |
# | NVIDIA H200 SXM | sm_90 | 4.8 TB/s | 989.4 TFLOPS（手册写 1979，含稀疏） | 1978.9 TFLOPS（手册写 3958，含稀疏） | 700 W | [NVIDIA H200](https://www.nvidia.com/en-us/data-center/h200/) |
# | NVIDIA A100 SXM 80GB | sm_80 | 2.04 TB/s | 312 TFLOPS（含稀疏 624） | — | 400 W | [NVIDIA A100 datasheet](https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf) |
#
# MI250X 在 PyTorch 中是两个设备（每个 GCD 一个），单个设备的峰值是整卡的一半。
# 峰值是理论上限：拷贝通常能达到带宽峰值的七八成，矩阵乘要足够大、用 bf16/fp16 才接近算力峰值。

# %% [markdown] tags=["en"]
# ### Datasheet peaks (vendor figures)
#
# | GPU | arch | peak memory bandwidth | FP16/BF16 dense | FP8 dense | board power | source |
# | --- | --- | --- | --- | --- | --- | --- |
# | AMD Instinct MI300X | gfx942 | 5.3 TB/s | 1307.4 TFLOPS | 2614.9 TFLOPS | 750 W | [AMD MI300X](https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html) |
# | AMD Instinct MI325X | gfx942 | 6.0 TB/s | 1307.4 TFLOPS | 2614.9 TFLOPS | 1000 W | [AMD MI325X](https://www.amd.com/en/products/accelerators/instinct/mi300/mi325x.html) |
# | AMD Instinct MI250X (card, 2 GCDs) | gfx90a | 3.2 TB/s | 383 TFLOPS | — | 560 W (peak) | [AMD MI250X](https://www.amd.com/en/products/accelerators/instinct/mi200/mi250x.html) |
# | AMD Instinct MI210 | gfx90a | 1.6 TB/s | 181 TFLOPS | — | 300 W | [AMD MI210](https://www.amd.com/en/products/accelerators/instinct/mi200/mi210.html) |
# | AMD Radeon RX 7900 XTX | gfx1100 | 960 GB/s | 122.8 TFLOPS | — | 355 W | [AMD RX 7900 XTX](https://www.amd.com/en/products/graphics/desktops/radeon/7000-series/amd-radeon-rx-7900xtx.html) |
# | NVIDIA H100 SXM | sm_90 | 3.35 TB/s | 989.4 TFLOPS (sheet: 1979 with sparsity) | 1978.9 TFLOPS (sheet: 3958 with sparsity) | 700 W | [NVIDIA H100](https://www.nvidia.com/en-us/data-center/h100/) |
# | NVIDIA H200 SXM | sm_90 | 4.8 TB/s | 989.4 TFLOPS (sheet: 1979 with sparsity) | 1978.9 TFLOPS (sheet: 3958 with sparsity) | 700 W | [NVIDIA H200](https://www.nvidia.com/en-us/data-center/h200/) |
# | NVIDIA A100 SXM 80GB | sm_80 | 2.04 TB/s | 312 TFLOPS (624 with sparsity) | — | 400 W | [NVIDIA A100 datasheet](https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf) |
#
# An MI250X is two devices in PyTorch (one per GCD); one device's peak is half the card's.
# Peaks are theoretical ceilings: a copy usually reaches 70–80 % of peak bandwidth, and a matmul
# nears peak compute only when it is large and in bf16/fp16.

# %%
DATASHEET = {   # per device as PyTorch numbers it; figures from the table above (H100/H200: SXM boards)
    "MI300X": {"bandwidth_gbs": 5300, "fp16_tflops": 1307.4, "board_w": 750},
    "MI325X": {"bandwidth_gbs": 6000, "fp16_tflops": 1307.4, "board_w": 1000},
    "MI250X": {"bandwidth_gbs": 3276.8 / 2, "fp16_tflops": 383.0 / 2, "board_w": 560 / 2},
    "MI210": {"bandwidth_gbs": 1638.4, "fp16_tflops": 181.0, "board_w": 300},
    "7900 XTX": {"bandwidth_gbs": 960, "fp16_tflops": 122.8, "board_w": 355},
    "H100": {"bandwidth_gbs": 3350, "fp16_tflops": 989.4, "board_w": 700},
    "H200": {"bandwidth_gbs": 4800, "fp16_tflops": 989.4, "board_w": 700},
    "A100": {"bandwidth_gbs": 2039, "fp16_tflops": 312.0, "board_w": 400},
}


def datasheet_for(device):
    if device.type != "cuda":
        return None, None
    name = torch.cuda.get_device_name(device)
    return next(((key, spec) for key, spec in DATASHEET.items() if key in name), (name, None))


def sync():
    lab.synchronize(device)


def copy_bandwidth_gbs(mib):
    """GB/s of dst.copy_(src) for fp32 tensors of `mib` MiB on the lab's device."""
    n = mib * 2**20 // 4
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    seconds = time_per_call(lambda: dst.copy_(src), warmup=WARMUP, repeats=REPEATS,
                            clock=time.perf_counter, sync=sync)
    return copy_bytes(n, 4) / seconds / 1e9


def matmul_tflops(size, dtype):
    """TFLOPS of a square size^3 matmul in `dtype` on the lab's device."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    seconds = time_per_call(lambda: a @ b, warmup=WARMUP, repeats=REPEATS, clock=time.perf_counter, sync=sync)
    return matmul_flops(size, size, size) / seconds / 1e12


copy_rows = [(mib, copy_bandwidth_gbs(mib)) for mib in COPY_MB]
matmul_rows = [(size, matmul_tflops(size, getattr(torch, MATMUL_DTYPE))) for size in MATMUL_SIZES]

for mb, gbs in copy_rows:
    print(f"copy {mb:>5} MiB: {gbs:9.1f} GB/s")
for size, tflops in matmul_rows:
    print(f"matmul {size:>5}^3 {MATMUL_DTYPE}: {tflops:9.3f} TFLOPS")

# %%
import matplotlib.pyplot as plt

gpu_key, spec = datasheet_for(device)
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.5))
lab.plot_lines({"achieved": ([r[0] for r in copy_rows], [r[1] for r in copy_rows])}, ax=ax1, logx=True,
               title="device copy bandwidth", xlabel="MiB", ylabel="GB/s")
lab.plot_lines({"achieved": ([r[0] for r in matmul_rows], [r[1] for r in matmul_rows])}, ax=ax2,
               title=f"matmul {MATMUL_DTYPE}", xlabel="m = n = k", ylabel="TFLOPS")
if spec:
    ax1.axhline(spec["bandwidth_gbs"], color="red", linestyle="--", label=f"{gpu_key} peak")
    ax2.axhline(spec["fp16_tflops"], color="red", linestyle="--", label=f"{gpu_key} fp16 dense peak")
    ax1.legend(), ax2.legend()
    print(f"{gpu_key}: best copy {max(r[1] for r in copy_rows) / spec['bandwidth_gbs']:.0%} of peak bandwidth, "
          f"best matmul {max(r[1] for r in matmul_rows) / spec['fp16_tflops']:.0%} of fp16 dense peak")
else:
    print(f"no datasheet entry for {gpu_key or 'this CPU'}: achieved figures only")
plt.tight_layout()
plt.show()

# %% [markdown] tags=["zh"]
# **这些数字在真实 GPU 上意味着什么**：在 MI300X 上，大拷贝应达到数 TB/s；bf16 的 8192³ 矩阵乘应达到
# 数百 TFLOPS。若只有峰值的一小部分：检查是否真的在 GPU 上（`device`）、是否预热、尺寸是否够大、
# 是否用了 fp32（fp32 矩阵乘的峰值远低于 fp16/bf16）。CPU 上的 smoke 数字只说明代码能跑。

# %% [markdown] tags=["en"]
# **What the numbers mean on a real GPU**: on an MI300X a large copy should reach several TB/s,
# and a bf16 8192³ matmul hundreds of TFLOPS. If you see a small fraction of peak, check that you
# are on the GPU (`device`), warmed up, used big enough sizes, and not fp32 (fp32 matmul peaks far
# below fp16/bf16). The smoke numbers on CPU only show that the code runs.

# %% [markdown] tags=["zh"]
# ## 7. 能效：同口径比较
#
# 厂商手册常给每种精度两个数：稠密 (dense) 和"含稀疏 (with sparsity)"，后者是前者的两倍，
# 只在 2:4 结构化稀疏的矩阵上成立。把一家的稀疏值和另一家的稠密值放在一起比，结论会翻转。
# 下面的表就是这样混着写的（`sparse=True` 表示该数字含稀疏）。请先换算成稠密值，再除以板卡功耗。

# %% [markdown] tags=["en"]
# ## 7. Efficiency per watt, like for like
#
# Datasheets often give two figures per precision: dense and "with sparsity", twice the dense one
# and only true for 2:4 structured-sparse matrices. Put one vendor's sparse figure next to
# another's dense figure and the conclusion flips. The table below mixes them like that
# (`sparse=True` marks a figure that includes sparsity). Convert to dense, then divide by board power.

# %%
MIXED_FP16 = [
    {"gpu": "MI300X", "fp16_tflops": 1307.4, "sparse": False, "board_w": 750},
    {"gpu": "H100 SXM", "fp16_tflops": 1979.0, "sparse": True, "board_w": 700},
    {"gpu": "A100 SXM", "fp16_tflops": 624.0, "sparse": True, "board_w": 400},
    {"gpu": "MI250X", "fp16_tflops": 383.0, "sparse": False, "board_w": 560},
]
naive = {row["gpu"]: row["fp16_tflops"] / row["board_w"] for row in MIXED_FP16}
print("naive TFLOPS/W (mixed table):", {k: round(v, 2) for k, v in naive.items()})

# %% tags=["solution"] grade_id="01-watt-sol-1"
def tflops_per_watt(table):
    """{gpu: dense TFLOPS per watt} for rows {"gpu", "fp16_tflops", "sparse", "board_w"}.
    A sparse figure is twice the dense one. Raise ValueError for a board power <= 0."""
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
assert abs(_got["MI300X"] - 1307.4 / 750) < 1e-9, f"MI300X 稠密 / dense: {_got['MI300X']}"
assert abs(_got["H100 SXM"] - 989.5 / 700) < 1e-9, f"H100 的 1979 含稀疏，稠密为 989.5 / H100's 1979 includes sparsity: {_got['H100 SXM']}"
### BEGIN HIDDEN TESTS
assert max(_got, key=_got.get) == "MI300X"
_t = [{"gpu": "A", "fp16_tflops": 800.0, "sparse": True, "board_w": 400},
      {"gpu": "B", "fp16_tflops": 500.0, "sparse": False, "board_w": 500},
      {"gpu": "C", "fp16_tflops": 122.8, "sparse": False, "board_w": 355}]
_ref = {"A": 1.0, "B": 1.0, "C": 122.8 / 355}
_got = tflops_per_watt(_t)
assert set(_got) == set(_ref) and all(abs(_got[k] - _ref[k]) < 1e-9 for k in _ref), _got
assert tflops_per_watt([]) == {}
try:
    tflops_per_watt([{"gpu": "Z", "fp16_tflops": 1.0, "sparse": False, "board_w": 0}])
    raise AssertionError("board_w=0 应抛出 ValueError / must raise ValueError")
except ValueError:
    pass
### END HIDDEN TESTS

# %% [markdown] tags=["zh"]
# 同口径后排序变了：混合表里 H100 看起来每瓦算力最高，换成稠密值后 MI300X 领先。
# 在规模部署中，显存带宽和能效往往比峰值 FLOPS 更决定成本——但前提是两边用同一种数字。

# %% [markdown] tags=["en"]
# Like for like, the ranking changes: in the mixed table H100 seems the most efficient; in dense
# figures MI300X leads. At scale, memory bandwidth and efficiency decide cost more than peak
# FLOPS, provided both sides use the same kind of figure.

# %% [markdown] tags=["zh"]
# ## 8. 运行并读懂 `rocmlab doctor`
#
# `rocmlab doctor` 检查操作系统与内核、amdgpu 驱动、ROCm 版本、rocminfo / amd-smi 看到的 GPU、
# `/dev/kfd` 与 `/dev/dri/renderD*` 的读写权限和 render/video 组、PyTorch 构建与 wheel 的架构列表、
# 可见设备变量、多 GPU 的 `iommu=pt`、NUMA 自动均衡、易导致挂起的 `NCCL_*` 设置、磁盘空间和模型镜像。
# 每一项给出 ok / skip / warn / fail、中英文修复建议和文档链接。退出码：0 正常，1 有警告，3 有失败
# （2 留给参数错误）。`--json` 输出机器可读的报告；`--machine 目录` 回放一台录制的机器。

# %% [markdown] tags=["en"]
# ## 8. Run and read `rocmlab doctor`
#
# `rocmlab doctor` checks the OS and kernel, the amdgpu driver, the ROCm version, the GPUs that
# rocminfo / amd-smi see, read/write access to `/dev/kfd` and `/dev/dri/renderD*` and the
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

# %% tags=["solution"] grade_id="01-doctor-sol-1"
def triage(report, lang="en"):
    """The findings to act on in a `rocmlab doctor --json` report: every "fail" first, then every
    "warn", each group in report order, as dicts {"check", "status", "fix"} where "fix" is the
    finding's fix_en or fix_zh text (by `lang`)."""
    ### BEGIN SOLUTION
    key = "fix_zh" if lang == "zh" else "fix_en"
    return [{"check": f["check"], "status": f["status"], "fix": f[key]}
            for status in ("fail", "warn") for f in report["findings"] if f["status"] == status]
    ### END SOLUTION


for item in triage(recorded):
    print(f"[{item['status']}] {item['check']}: {item['fix']}")

# %% tags=["test"] grade_id="01-doctor-1" points=2
_report = {"findings": [
    {"check": "os", "status": "ok", "fix_en": "", "fix_zh": ""},
    {"check": "numa", "status": "warn", "fix_en": "disable it", "fix_zh": "关闭它"},
    {"check": "access", "status": "fail", "fix_en": "join render", "fix_zh": "加入 render 组"},
]}
_got = triage(_report)
_want = [{"check": "access", "status": "fail", "fix": "join render"},
         {"check": "numa", "status": "warn", "fix": "disable it"}]
assert _got == _want, f"期望 / expected {_want}, got {_got}"
assert [i["check"] for i in triage(recorded)][:1] == ["torch-arch"], "录制机器的首个问题是 torch-arch / the recorded machine's first problem is torch-arch"
### BEGIN HIDDEN TESTS
assert triage(_report, lang="zh")[0]["fix"] == "加入 render 组"
_other = run_doctor("--machine", str(DATA / "machines" / "no-render-group"))
_ref = ([{"check": f["check"], "status": "fail", "fix": f["fix_zh"]} for f in _other["findings"] if f["status"] == "fail"]
        + [{"check": f["check"], "status": "warn", "fix": f["fix_zh"]} for f in _other["findings"] if f["status"] == "warn"])
assert triage(_other, lang="zh") == _ref and {"access", "torch"} <= {i["check"] for i in _ref}
assert triage({"findings": []}) == []
assert triage(here) == [{"check": f["check"], "status": f["status"], "fix": f["fix_en"]}
                        for s in ("fail", "warn") for f in here["findings"] if f["status"] == s]
### END HIDDEN TESTS

# %% [markdown] tags=["zh"]
# ## 小结
#
# 你现在能：分清 ROCm / CUDA / CPU 构建（不靠 capability 元组），读 rocminfo 与 gfx 目标，知道 CDNA 是 wave64、
# RDNA 默认 wave32，判断 wheel 是否包含你的架构，推算可见 GPU，用同步和预热正确计时，用同口径的数据手册数字比较能效，
# 并读懂 `rocmlab doctor`。在更大的 GPU 上：用 gpu 配置重跑第 6 节，看拷贝带宽和 bf16 矩阵乘距峰值多远。
# 文档：[ROCm 安装](https://rocm.docs.amd.com/projects/install-on-linux/en/latest/) ·
# [兼容性矩阵](https://rocm.docs.amd.com/en/latest/compatibility/compatibility-matrix.html) ·
# [PyTorch on ROCm](https://rocm.docs.amd.com/projects/install-on-linux/en/latest/install/3rd-party/pytorch-install.html)。

# %% [markdown] tags=["en"]
# ## Wrap-up
#
# You can now tell ROCm, CUDA and CPU builds apart (not by the capability tuple), read rocminfo
# and gfx targets, know that CDNA runs wave64 and RDNA defaults to wave32, check a wheel's arch
# list, work out the visible GPUs, time GPU work honestly with synchronization and warm-up, compare
# efficiency with like-for-like datasheet figures, and read `rocmlab doctor`. On a bigger GPU,
# rerun section 6 in the gpu profile and see how close copy bandwidth and bf16 matmul get to peak.
# Docs: [ROCm install](https://rocm.docs.amd.com/projects/install-on-linux/en/latest/) ·
# [compatibility matrix](https://rocm.docs.amd.com/en/latest/compatibility/compatibility-matrix.html) ·
# [PyTorch on ROCm](https://rocm.docs.amd.com/projects/install-on-linux/en/latest/install/3rd-party/pytorch-install.html).
