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
# # Lab 08 · 量化与低精度推理：Instinct GPU 上的 FP8、MXFP4 与 INT4
#
# **版本** {{version}} · **时长** 约 {{minutes}} 分钟 · **前置**：Lab 02（KV cache 与显存账）；Lab 03 的 JSON 有效率指标
# （不要求完成 Lab 03）；PyTorch 基础。
#
# 低精度是 AMD 与 NVIDIA 差别最大、也最容易在部署时出错的地方：MI300X/MI325X (gfx942) 的 FP8 是 **FNUZ**
# 格式，MI350X/MI355X (gfx950) 与 H100/H200 的 FP8 是 **OCP** 格式——同一个字节在两边代表不同的数。
# 本实验在课程模型和质检数据上把这件事弄清楚：
#
# 1. 手工解码 FP8 字节：`e4m3fn`、`e4m3fnuz`、`e5m2`、`e5m2fnuz`；
# 2. 带饱和 (saturation) 的逐张量 / 逐通道缩放量化；
# 3. 在 MI300 上加载 OCP FP8 检查点：重解释比特、修正 scale、处理负零；反方向（fnuz 检查点到 OCP 硬件）要按值重新量化；
# 4. MXFP4（OCP 微缩放格式）的量化；
# 5. INT4 仅权重分组量化；
# 6. 质量与显存：困惑度、JSON 有效率、权重与 KV cache 字节数；
# 7. FP8 KV cache 能多容纳多少并发序列；
# 8. gpu 配置下用 `torch._scaled_mm` 跑真正的 FP8 GEMM，与 bf16 诚实对比。
#
# smoke 配置全部在 CPU 上用 `tiny-qwen-zh` 模拟；gpu 配置换成 `Qwen/Qwen2.5-0.5B-Instruct`，代码相同。
#
# **自查与提交。** 每个练习下面的测试单元是给你自查用的可见测试；在终端运行 `rocmlab check <笔记本>.ipynb` 会一次跑完它们。
# 提交：在工作坊 Hub 上，从 Jupyter 菜单 **Nbgrader › Assignment List** 提交，或在终端运行 `rocmlab submit <笔记本>.ipynb`（提交并立即评分，打印分数和未满足的规则）；讲师也可能统一收取。若你是从课程网站下载的笔记本，没有 Hub：`rocmlab check` 给出可见测试的结果，把笔记本按讲师说的方式交给讲师评分。
# 成绩来自隐藏检查：它们按练习说明
# 里写明的每一条规则，用针对你生成的其他输入（其他形状、数值、格式）逐条检查，每条规则单独计分；失败时你会看到违反了哪条
# 规则。说明里没写的要求不会被检查。

# %% [markdown] tags=["en"]
# # Lab 08 · Low-precision inference: FP8, MXFP4 and INT4 on Instinct GPUs
#
# **Version** {{version}} · **Time** about {{minutes}} minutes · **Prerequisites**: lab 02 (the KV cache and memory
# accounting); lab 03's JSON-validity metric (finishing lab 03 is not required); PyTorch basics.
#
# Low precision is where AMD and NVIDIA differ most, and where deployments break: FP8 on MI300X/MI325X
# (gfx942) is the **FNUZ** format, FP8 on MI350X/MI355X (gfx950) and H100/H200 is the **OCP** format, and
# the same byte means a different number on each. This lab sorts it out on the course model and data:
#
# 1. decode FP8 bytes by hand: `e4m3fn`, `e4m3fnuz`, `e5m2`, `e5m2fnuz`;
# 2. per-tensor and per-channel scaled quantization, with saturation;
# 3. load an OCP FP8 checkpoint on an MI300: reinterpret the bits, fix the scale, handle negative zero; the other
#    way round (an fnuz checkpoint on OCP hardware) requantizes by value;
# 4. quantize to MXFP4 (OCP microscaling);
# 5. INT4 weight-only group quantization;
# 6. quality against memory: perplexity, JSON validity, weight and KV-cache bytes;
# 7. how many more concurrent sequences an FP8 KV cache holds;
# 8. in the gpu profile, real FP8 GEMMs with `torch._scaled_mm`, compared honestly with bf16.
#
# The smoke profile emulates everything on CPU with `tiny-qwen-zh`; the gpu profile uses
# `Qwen/Qwen2.5-0.5B-Instruct` with the same code.
#
# **Self-check and submit.** The test cell under each exercise holds visible tests for your own check;
# `rocmlab check <notebook>.ipynb` in a terminal runs them all at once.
# To submit on the workshop hub, use Jupyter's **Nbgrader › Assignment List** (*Submit*), or run `rocmlab submit
# <notebook>.ipynb` in a terminal (it submits and has it graded now, printing the score and each rule not met);
# the instructor may also collect. If you downloaded the notebook from the course site, there is no hub: `rocmlab
# check` gives the visible tests' results, and you hand the notebook to your instructor the way they ask.
# Your grade comes from hidden checks: each rule
# stated in an exercise's contract is checked on its own, with points of its own, on inputs generated for you
# (other shapes, values and formats); a failed check names the rule you broke. Nothing the contract does not
# state is checked.

# %% [markdown] tags=["zh"]
# **课程模型。** 下面的设置单元格会准备 `MODEL`。`tiny-qwen-zh` 是用课程数据在本机构建的小模型（不下载）：
# 这台机器上第一次用到它时，该单元格要构建它，两个 CPU 核上大约 3–5 分钟，之后从缓存读取。
# 可以提前在终端运行 `rocmlab assets build-model`，或把 `ROCMLAB_CACHE` 指向已有构建好的模型的文件夹。

# %% [markdown] tags=["en"]
# **The course model.** The setup cell below prepares `MODEL`. `tiny-qwen-zh` is a small model built on this
# machine from the course data (nothing is downloaded): the first time a lab needs it here, that cell builds it,
# about 3–5 minutes on two CPU cores; later runs read the cache. Build it ahead of time with `rocmlab assets
# build-model` in a terminal, or point `ROCMLAB_CACHE` at a folder that holds a built one.

# %% tags=["parameters"]
PROFILE = "smoke"
DEVICE = "auto"
SEED = 0
MODEL = "tiny-qwen-zh"
N_PPL = 96                # qc_reports eval descriptions scored for perplexity
N_JSON = 24               # JSON-completion prompts for the validity metric
JSON_NEW_TOKENS = 32
INT4_GROUP = 64           # tiny-qwen-zh's MLP width 704 is not a multiple of 128; the gpu profile uses 128
GEMM_SIZES = [128]        # square FP8 / bf16 GEMMs of section 8 (CPU _scaled_mm is slow: smoke keeps it small)
GEMM_ITERS = 2            # GEMMs between two synchronisations, per timed sample
REPEATS = 3
WARMUP = 1
CPU_THREADS = 1

# %%
import contextlib
import json
import math
import statistics

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from transformers import GenerationConfig

from rocmlab import lab
from rocmlab.lab import datasheets
from rocmlab.lab.env import gpu_arch
from rocmlab.lab.models import model_path

lab.seed_everything(SEED)
print("course model:", model_path(MODEL))  # tiny-qwen-zh: built here the first time (about 3–5 min on 2 CPU cores)
device = lab.pick_device(DEVICE)
if device.type == "cpu":
    # One thread: the seeded numbers repeat, and graders running many notebooks do not oversubscribe.
    torch.set_num_threads(CPU_THREADS)
ARCH = gpu_arch(device.index or 0) if device.type == "cuda" else None
print(lab.describe_environment(PROFILE, device))
print(f"GPU arch: {ARCH or 'none (CPU)'}")

# %% [markdown] tags=["zh"]
# ## 1 · FP8 格式，逐位解码
#
# 一个 FP8 字节 = 1 位符号 + E 位指数 + M 位尾数。指数域 e ≠ 0 时值为 (−1)^s · (1 + m/2^M) · 2^(e − bias)；
# e = 0 时为非规格化数 (subnormal)：(−1)^s · (m/2^M) · 2^(1 − bias)。四种格式的差别全在**偏置 (bias) 与特殊值**：
#
# | 格式 | E/M | bias | 特殊值 |
# | --- | --- | --- | --- |
# | `e4m3fn`（OCP E4M3） | 4/3 | 7 | 无 ±inf；S.1111.111（0x7F、0xFF）是 NaN；0x80 是 −0 |
# | `e5m2`（OCP E5M2） | 5/2 | 15 | 与 IEEE 相同：指数全 1、尾数 0 是 ±inf，尾数非 0 是 NaN；有 −0 |
# | `e4m3fnuz` | 4/3 | 8 | 无 inf、无 −0：**只有 0x80 是 NaN**，其余都是有限数 |
# | `e5m2fnuz` | 5/2 | 16 | 同上：只有 0x80 是 NaN |
#
# 出处：OCP 8-bit Floating Point Specification (OFP8) rev 1.0
# （https://www.opencompute.org/documents/ocp-8-bit-floating-point-specification-ofp8-revision-1-0-2023-12-01-pdf-1 ，
# 其基础是 arXiv:2209.05433）；FNUZ 格式来自 arXiv:2206.02915，偏置 8 / 16 见 LLVM `APFloat.h` 与 PyTorch
# `c10/util/Float8_e4m3fnuz.h`。PyTorch 文档的 dtype 表（https://pytorch.org/docs/stable/tensor_attributes.html ）
# 解释后缀：f = 只有有限值编码（无 inf），n = NaN 编码不同于 IEEE，uz = 只有无符号零。
# 谁用哪一种：ROCm 文档 “Data types and precision support”
# （https://rocm.docs.amd.com/en/latest/reference/precision-support.html ）写明 CDNA3（MI300A/MI300X/MI325X）
# 原生支持 FP8 **FNUZ**，`__hip_fp8_e4m3`（OCP）只在 CDNA4（MI350X/MI355X）与 RDNA4 上；NVIDIA Hopper 用的是
# arXiv:2209.05433 的格式，即 OCP。
#
# **常见错误**：vLLM 文档曾说 E4M3 的 “small dynamic range (±240.0)”
# （https://docs.vllm.ai/en/v0.11.2/features/quantization/quantized_kvcache/ ）。240 是 `e4m3fnuz` 的最大值；
# OCP E4M3 的最大值是 448。下面你会亲手算出这两个数。

# %% [markdown] tags=["en"]
# ## 1 · FP8 formats, bit for bit
#
# An FP8 byte is 1 sign bit, E exponent bits and M mantissa bits. For an exponent field e ≠ 0 the value is
# (−1)^s · (1 + m/2^M) · 2^(e − bias); for e = 0 it is subnormal: (−1)^s · (m/2^M) · 2^(1 − bias). The four
# formats differ only in the **bias and the special values**:
#
# | format | E/M | bias | special values |
# | --- | --- | --- | --- |
# | `e4m3fn` (OCP E4M3) | 4/3 | 7 | no ±inf; S.1111.111 (0x7F, 0xFF) is NaN; 0x80 is −0 |
# | `e5m2` (OCP E5M2) | 5/2 | 15 | as IEEE: exponent all ones with mantissa 0 is ±inf, otherwise NaN; has −0 |
# | `e4m3fnuz` | 4/3 | 8 | no inf, no −0: **only 0x80 is NaN**, every other byte is finite |
# | `e5m2fnuz` | 5/2 | 16 | the same: only 0x80 is NaN |
#
# Sources: the OCP 8-bit Floating Point Specification (OFP8) rev 1.0
# (https://www.opencompute.org/documents/ocp-8-bit-floating-point-specification-ofp8-revision-1-0-2023-12-01-pdf-1,
# built on arXiv:2209.05433); the FNUZ formats come from arXiv:2206.02915, their biases 8 / 16 are in LLVM's
# `APFloat.h` and PyTorch's `c10/util/Float8_e4m3fnuz.h`. PyTorch's dtype table
# (https://pytorch.org/docs/stable/tensor_attributes.html) explains the suffixes: f = finite encodings only (no
# inf), n = NaN encodings differ from IEEE, uz = unsigned zero only. Who uses which: the ROCm page "Data types
# and precision support" (https://rocm.docs.amd.com/en/latest/reference/precision-support.html) says CDNA3
# (MI300A/MI300X/MI325X) natively supports FP8 **FNUZ**, while `__hip_fp8_e4m3` (OCP) exists only on CDNA4
# (MI350X/MI355X) and RDNA4; NVIDIA Hopper uses the format of arXiv:2209.05433, i.e. OCP.
#
# **A common mistake**: vLLM's docs once gave E4M3 a "small dynamic range (±240.0)"
# (https://docs.vllm.ai/en/v0.11.2/features/quantization/quantized_kvcache/). 240 is the `e4m3fnuz` maximum;
# OCP E4M3 goes to 448. You will compute both numbers yourself below.

# %% [markdown] tags=["zh"]
# **练习 1**：`decode_fp8(byte, fmt)` 把一个字节按格式解码成 Python `float`。
#
# - `byte`：0–255 的 `int`；其他（包括 `bool`、越界值）抛 `ValueError`。`fmt`：`"e4m3fn"`、`"e4m3fnuz"`、
#   `"e5m2"`、`"e5m2fnuz"` 之一，否则抛 `ValueError`。
# - 位布局与公式见上；`FP8_FIELDS` 给出每种格式的 (E, M)，**偏置要你自己填**。
# - NaN 返回 `math.nan`；`e5m2` 的无穷返回 `±math.inf`；`e4m3fn` / `e5m2` 的 0x80 返回 `-0.0`（带符号的零）。
# - 检查：全部 4 × 256 个字节与 PyTorch 的 `tensor.view(dtype).float()` 逐个相同（NaN 对 NaN，零的符号也一致）。

# %% [markdown] tags=["en"]
# **Exercise 1**: `decode_fp8(byte, fmt)` decodes one byte in a format into a Python `float`.
#
# - `byte`: an `int` in 0–255; anything else (a `bool`, an out-of-range value) raises `ValueError`. `fmt`: one
#   of `"e4m3fn"`, `"e4m3fnuz"`, `"e5m2"`, `"e5m2fnuz"`, else `ValueError`.
# - Layout and formulas above; `FP8_FIELDS` gives each format's (E, M), **the bias is yours to supply**.
# - NaN returns `math.nan`; the infinities of `e5m2` return `±math.inf`; 0x80 in `e4m3fn` / `e5m2` returns
#   `-0.0` (a signed zero).
# - Checked: all 4 × 256 bytes equal PyTorch's `tensor.view(dtype).float()` one by one (NaN for NaN, the sign
#   of zero included).

# %% tags=["solution"] grade_id="08-fp8bits-sol-1"
FP8_FIELDS = {"e4m3fn": (4, 3), "e4m3fnuz": (4, 3), "e5m2": (5, 2), "e5m2fnuz": (5, 2)}  # (exponent, mantissa) bits
FP8_TORCH = {"e4m3fn": torch.float8_e4m3fn, "e4m3fnuz": torch.float8_e4m3fnuz,
             "e5m2": torch.float8_e5m2, "e5m2fnuz": torch.float8_e5m2fnuz}


def decode_fp8(byte, fmt):
    """The value of one FP8 byte (int 0..255) in format fmt, as a Python float (nan, ±inf, -0.0 included)."""
    ### BEGIN SOLUTION
    if fmt not in FP8_FIELDS:
        raise ValueError(f"fmt must be one of {sorted(FP8_FIELDS)}, got {fmt!r}")
    if isinstance(byte, bool) or not isinstance(byte, int) or not 0 <= byte <= 255:
        raise ValueError(f"byte must be an int in 0..255, got {byte!r}")
    exp_bits, man_bits = FP8_FIELDS[fmt]
    bias = {"e4m3fn": 7, "e4m3fnuz": 8, "e5m2": 15, "e5m2fnuz": 16}[fmt]
    sign = -1.0 if byte & 0x80 else 1.0
    exponent = (byte >> man_bits) & ((1 << exp_bits) - 1)
    mantissa = byte & ((1 << man_bits) - 1)
    if fmt.endswith("fnuz"):
        if byte == 0x80:
            return math.nan
    elif fmt == "e4m3fn":
        if exponent == 0b1111 and mantissa == 0b111:
            return math.nan
    elif exponent == 0b11111:
        return sign * math.inf if mantissa == 0 else math.nan
    if exponent == 0:
        return sign * (mantissa / 2**man_bits) * 2.0 ** (1 - bias)
    return sign * (1 + mantissa / 2**man_bits) * 2.0 ** (exponent - bias)
    ### END SOLUTION


# %% tags=["test"] grade_id="08-fp8bits-1" points=3
assert decode_fp8(0x7E, "e4m3fn") == 448.0, f"0x7E 在 e4m3fn 中是最大值 448 / 0x7E is 448 in e4m3fn, got {decode_fp8(0x7E, 'e4m3fn')}"
assert math.isnan(decode_fp8(0x7F, "e4m3fn")), "e4m3fn: 0x7F (S.1111.111) 是 NaN / is NaN"
assert decode_fp8(0x7F, "e4m3fnuz") == 240.0, f"e4m3fnuz: 0x7F 是最大值 240 / is the maximum 240, got {decode_fp8(0x7F, 'e4m3fnuz')}"
assert math.isnan(decode_fp8(0x80, "e4m3fnuz")), "fnuz: 0x80 是 NaN（不是 −0）/ 0x80 is NaN (not −0)"
_negzero = decode_fp8(0x80, "e4m3fn")
assert _negzero == 0.0 and math.copysign(1.0, _negzero) == -1.0, "e4m3fn: 0x80 是 −0.0 / 0x80 is -0.0"
assert decode_fp8(0x38, "e4m3fn") == 1.0 and decode_fp8(0x38, "e4m3fnuz") == 0.5, \
    "同一字节在 fnuz 中是一半 / the same byte is half the value in fnuz"
assert decode_fp8(0x7C, "e5m2") == math.inf and decode_fp8(0x7B, "e5m2") == 57344.0
assert isinstance(decode_fp8(0x00, "e5m2fnuz"), float), "返回 Python float / return a Python float"
for _bad in ((256, "e4m3fn"), (3, "fp8")):
    try:
        decode_fp8(*_bad)
    except ValueError:
        pass
    else:
        raise AssertionError(f"decode_fp8{_bad} 应抛出 ValueError / must raise ValueError")

# %% [markdown] tags=["zh"]
# 用你的解码器把四种格式的关键数字列出来，再与 `torch.finfo` 对照。表中的“最小规格化数 / 最小非规格化数 /
# 最大有限值”都是从 256 个字节里**数出来**的，不是抄来的。

# %% [markdown] tags=["en"]
# Your decoder lists the key numbers of the four formats; compare them with `torch.finfo`. The smallest normal,
# smallest subnormal and largest finite values below are **counted** from the 256 bytes, not copied.

# %%
def format_facts(fmt):
    """Largest finite, smallest normal and subnormal, the NaN bytes, -0 and inf, from decode_fp8."""
    n_exp, n_man = FP8_FIELDS[fmt]
    values = {b: decode_fp8(b, fmt) for b in range(256)}
    finite = [v for v in values.values() if math.isfinite(v)]
    normal_bytes = [b for b in range(256) if (b >> n_man) & ((1 << n_exp) - 1) and math.isfinite(values[b])]
    return {"max": max(finite), "min_normal": min(abs(values[b]) for b in normal_bytes),
            "min_subnormal": min(abs(v) for v in finite if v != 0),
            "nan_bytes": [f"0x{b:02X}" for b, v in values.items() if math.isnan(v)],
            "has_inf": any(math.isinf(v) for v in values.values()),
            "has_neg_zero": any(v == 0 and math.copysign(1, v) < 0 for v in values.values())}


FP8_FACTS = {fmt: format_facts(fmt) for fmt in FP8_FIELDS}
print(f"{'format':9s} {'max':>8s} {'min normal':>11s} {'min subnormal':>14s}  inf   -0    NaN bytes")
for _fmt, _f in FP8_FACTS.items():
    _fi = torch.finfo(FP8_TORCH[_fmt])
    assert _f["max"] == _fi.max and _f["min_normal"] == _fi.smallest_normal, (_fmt, _f, _fi)
    print(f"{_fmt:9s} {_f['max']:8g} {_f['min_normal']:11.3g} {_f['min_subnormal']:14.3g}  {_f['has_inf']!s:5s} "
          f"{_f['has_neg_zero']!s:5s} {', '.join(_f['nan_bytes'][:3])}{' …' if len(_f['nan_bytes']) > 3 else ''}")
for _fmt in FP8_FIELDS:
    _gap = decode_fp8(torch.tensor([1.0]).to(FP8_TORCH[_fmt]).view(torch.uint8).item() + 1, _fmt) - 1.0
    if _gap != torch.finfo(FP8_TORCH[_fmt]).eps:
        print(f"note: torch.finfo({_fmt}).eps = {torch.finfo(FP8_TORCH[_fmt]).eps}, but the gap above 1.0 "
              f"counted from the bits is {_gap}: trust the bits")

# %% [markdown] tags=["zh"]
# **读数**：`e4m3fnuz` 的偏置比 `e4m3fn` 大 1，所以**同一个字节的值正好是一半**（0x38：1.0 对 0.5），最大值 240
# 而不是 448；它把 −0 的编码让给了唯一的 NaN，换来一个额外的最小二进制段（最小非规格化数 2^-10 对 2^-9）。
# E5M2 用一位尾数换来大得多的范围（57344），精度更低，常用于梯度；推理的权重与激活通常用 E4M3。
# 如果上面打印了一条 `note`，说明你装的 PyTorch 的 `finfo.eps` 与比特算出来的不一致——数据手册和比特才是依据。

# %% [markdown] tags=["en"]
# **Reading it**: `e4m3fnuz` has a bias one larger than `e4m3fn`, so **the same byte is exactly half the
# value** (0x38: 1.0 against 0.5) and the maximum is 240 instead of 448; it gave the −0 encoding to its only NaN
# and gained one extra binade at the bottom (smallest subnormal 2^-10 against 2^-9). E5M2 trades a mantissa bit
# for far more range (57344) and less precision, and is mostly used for gradients; inference weights and
# activations usually use E4M3. If a `note` was printed above, your PyTorch's `finfo.eps` disagrees with the
# bits: the specification and the bits are the reference.

# %% [markdown] tags=["zh"]
# ## 2 · 缩放量化与饱和
#
# 模型权重通常只有 10⁻² 量级，直接转成 E4M3 会大量落进非规格化区甚至变成 0。所以 FP8 总是**带缩放**：
# `scale = amax / fmax`，存 `q = w / scale`，用时 `w ≈ q · scale`。**逐张量** (per-tensor) 一个 scale；
# **逐通道** (per-channel) 每个输出通道（权重矩阵的每一行）一个 scale，离群值只拖累它所在的那一行。
#
# 超出范围的值怎么办？下面直接看你装的 PyTorch 如何把 500 转成四种 FP8：结果因 dtype 而异（饱和到最大值、
# 变成 inf、变成 NaN），而且随版本变过——torchao 的源码注释写着 PyTorch 2.13 之前 eager 模式下 e4m3 的转换不饱和
# （pytorch/ao `torchao/prototype/mx_formats/mx_tensor.py`）。**唯一可移植的做法是自己先 clamp 到 ±fmax 再转换。**
# 对静态 (static) scale 尤其重要：scale 来自校准数据，推理时的新数据可能超出范围。

# %% [markdown] tags=["en"]
# ## 2 · Scaled quantization and saturation
#
# Model weights are around 10⁻²; cast straight to E4M3 many land in the subnormals or become 0. So FP8 is
# always **scaled**: `scale = amax / fmax`, store `q = w / scale`, use `w ≈ q · scale`. **Per-tensor**: one
# scale; **per-channel**: one scale per output channel (each row of the weight matrix), so an outlier only
# costs its own row.
#
# What happens out of range? Below, your PyTorch casts 500 to the four FP8 dtypes: the result depends on the
# dtype (saturate to the maximum, become inf, become NaN), and it has changed between releases: torchao's source
# notes that before PyTorch 2.13 eager e4m3 casts did not saturate (pytorch/ao
# `torchao/prototype/mx_formats/mx_tensor.py`). **The only portable way is to clamp to ±fmax yourself before
# casting.** It matters most for a static scale: it comes from calibration data, and new data at inference
# time can exceed it.

# %%
_probe = torch.tensor([500.0, -500.0, 250.0])
for _fmt, _dt in FP8_TORCH.items():
    print(f"torch {torch.__version__}: {_probe.tolist()} -> {_fmt:9s} {_probe.to(_dt).float().tolist()}")

# %% [markdown] tags=["zh"]
# **练习 2**：`quantize_fp8(w, dtype, *, granularity="tensor", scale=None)` 返回 `(q, scale)`。
#
# - `w`：二维浮点张量 `[out, in]`，在 float32 中计算；`dtype`：四种 torch FP8 dtype 之一；`granularity`：
#   `"tensor"` 或 `"channel"`。其他输入（非二维、别的 dtype、别的粒度）抛 `ValueError`。
# - `fmax` 取 `torch.finfo(dtype).max`。`scale=None` 时：逐张量 `scale = amax(|w|) / fmax`，形状 `()`；逐通道每行
#   `amax / fmax`，形状 `[out, 1]`；某个 amax 为 0 时对应 scale 取 1.0。给定 `scale` 时原样使用（float32，形状
#   `()` 或 `[out, 1]`，必须全部 > 0，否则 `ValueError`）。
# - `q = clamp(w / scale, −fmax, fmax).to(dtype)`：**用除法**，先 clamp 再转换（饱和，绝不产生 inf/NaN）。
# - 返回的 `scale` 是 float32 张量。`dequantize_fp8(q, scale)`（已给出）= `q.float() * scale`。

# %% [markdown] tags=["en"]
# **Exercise 2**: `quantize_fp8(w, dtype, *, granularity="tensor", scale=None)` returns `(q, scale)`.
#
# - `w`: a 2-D float tensor `[out, in]`, computed in float32; `dtype`: one of the four torch FP8 dtypes;
#   `granularity`: `"tensor"` or `"channel"`. Anything else (not 2-D, another dtype, another granularity)
#   raises `ValueError`.
# - `fmax` is `torch.finfo(dtype).max`. With `scale=None`: per-tensor `scale = amax(|w|) / fmax`, shape `()`;
#   per-channel `amax / fmax` of each row, shape `[out, 1]`; where an amax is 0 that scale is 1.0. A given
#   `scale` is used as is (float32, shape `()` or `[out, 1]`, every entry > 0, else `ValueError`).
# - `q = clamp(w / scale, −fmax, fmax).to(dtype)`: **divide**, clamp first, then cast (saturation: never inf
#   or NaN).
# - The returned `scale` is a float32 tensor. `dequantize_fp8(q, scale)` (given) is `q.float() * scale`.

# %% tags=["solution"] grade_id="08-fp8quant-sol-1"
def quantize_fp8(w, dtype, *, granularity="tensor", scale=None):
    """Scaled, saturating FP8 quantization of a 2-D weight: returns (q in dtype, float32 scale)."""
    ### BEGIN SOLUTION
    if dtype not in FP8_TORCH.values():
        raise ValueError(f"dtype must be one of {list(FP8_TORCH.values())}, got {dtype}")
    if granularity not in ("tensor", "channel"):
        raise ValueError(f"granularity must be 'tensor' or 'channel', got {granularity!r}")
    if w.dim() != 2:
        raise ValueError(f"w must be 2-D [out, in], got shape {tuple(w.shape)}")
    fmax = torch.finfo(dtype).max
    w32 = w.float()
    if scale is None:
        amax = w32.abs().amax() if granularity == "tensor" else w32.abs().amax(dim=1, keepdim=True)
        scale = torch.where(amax > 0, amax / fmax, torch.ones_like(amax))
    else:
        scale = torch.as_tensor(scale, dtype=torch.float32, device=w.device)
        if not bool((scale > 0).all()):
            raise ValueError("a given scale must be > 0 everywhere")
    q = (w32 / scale).clamp(-fmax, fmax).to(dtype)
    return q, scale.float()
    ### END SOLUTION


def dequantize_fp8(q, scale):
    return q.float() * scale


# %% tags=["test"] grade_id="08-fp8quant-1" points=3
_g = torch.Generator().manual_seed(1)
_w = torch.randn(6, 32, generator=_g) * 0.02
_w[2, 5] = 0.5  # one outlier in row 2
_q, _s = quantize_fp8(_w, torch.float8_e4m3fn)
assert _q.dtype == torch.float8_e4m3fn and _s.dtype == torch.float32 and _s.shape == (), (_q.dtype, _s.dtype, _s.shape)
assert torch.isclose(_s, torch.tensor(0.5 / 448)), f"逐张量 scale = amax/448 / per-tensor scale = amax/448, got {_s}"
assert _q.float().abs().max() == 448, "amax 应映射到 448 / amax must map to 448"
_qc, _sc = quantize_fp8(_w, torch.float8_e4m3fn, granularity="channel")
assert _sc.shape == (6, 1) and torch.allclose(_sc, _w.abs().amax(1, keepdim=True) / 448), "逐通道：每行一个 scale / one scale per row"
_err_t = (dequantize_fp8(_q, _s) - _w).norm() / _w.norm()
_err_c = (dequantize_fp8(_qc, _sc) - _w).norm() / _w.norm()
assert _err_c < _err_t, f"离群值只拖累它那一行 / the outlier only costs its row: per-channel {_err_c:.4f} vs per-tensor {_err_t:.4f}"
_sat, _ = quantize_fp8(torch.tensor([[1.0, -5.0, 0.125]]), torch.float8_e4m3fnuz, scale=torch.tensor(1 / 64))
assert _sat.float().tolist() == [[64.0, -240.0, 8.0]], \
    f"给定 scale 时超出范围要饱和到 ±fmax / with a given scale, out-of-range values saturate to ±fmax: {_sat.float().tolist()}"
_qz, _sz = quantize_fp8(torch.zeros(2, 4), torch.float8_e5m2)
assert _sz.item() == 1.0 and _qz.float().abs().sum() == 0, f"全零张量的 scale 为 1.0 / an all-zero tensor gets scale 1.0: {_sz}"
try:
    quantize_fp8(torch.ones(2, 2), torch.bfloat16)
except ValueError:
    pass
else:
    raise AssertionError("dtype 不是 FP8 应抛出 ValueError / a non-FP8 dtype must raise ValueError")

# %% [markdown] tags=["zh"]
# 在 `tiny-qwen-zh`（gpu 配置是 Qwen2.5-0.5B）的真实权重上测量：每个解码层投影矩阵的相对误差
# ‖ŵ − w‖/‖w‖，比较四种 dtype 和两种粒度。模型以 float32 加载：本实验的质量对比都是在 float32 中**模拟**量化
# （把权重换成量化再反量化的值），只有第 8 节在 GPU 上真正用 FP8 计算。

# %% [markdown] tags=["en"]
# Measure it on the real weights of `tiny-qwen-zh` (Qwen2.5-0.5B in the gpu profile): the relative error
# ‖ŵ − w‖/‖w‖ of every decoder projection, for the four dtypes and both granularities. The model loads in
# float32: every quality comparison in this lab **emulates** quantization in float32 (weights replaced by their
# quantized-then-dequantized values); only section 8 computes in FP8 for real, on a GPU.

# %%
model, tok = lab.load_model(MODEL, device=device, dtype=torch.float32)
model.eval()
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def decoder_linears(m):
    """{name: nn.Linear} for the seven projections of every decoder layer (embeddings and lm_head excluded)."""
    return {name: mod for name, mod in m.named_modules()
            if isinstance(mod, torch.nn.Linear) and name.rsplit(".", 1)[-1] in PROJECTIONS}


LINEARS = decoder_linears(model)
print(f"{type(model).__name__}: {sum(p.numel() for p in model.parameters()):,} parameters; "
      f"{len(LINEARS)} decoder projections, e.g. {next(iter(LINEARS))} {tuple(next(iter(LINEARS.values())).weight.shape)}")


def relative_error(w, w_hat):
    return float((w_hat.detach() - w.detach()).norm() / w.detach().norm())


@contextlib.contextmanager
def weights_set(m, new_weights):
    """Give the named decoder projections the weights in new_weights ({name: tensor}); restore them on exit."""
    linears = decoder_linears(m)
    saved = {name: linears[name].weight.detach().clone() for name in new_weights}
    with torch.no_grad():
        for name, w in new_weights.items():
            linears[name].weight.copy_(w.to(linears[name].weight.dtype))
    try:
        yield m
    finally:
        with torch.no_grad():
            for name, w in saved.items():
                linears[name].weight.copy_(w)


fp8_errors = {}
for _fmt, _dt in FP8_TORCH.items():
    for _gran in ("tensor", "channel"):
        _errs = [relative_error(m.weight.float(), dequantize_fp8(*quantize_fp8(m.weight.detach(), _dt, granularity=_gran)))
                 for m in LINEARS.values()]
        fp8_errors[f"{_fmt}\n{_gran}"] = statistics.fmean(_errs)
for _k, _v in fp8_errors.items():
    print(f"{_k.replace(chr(10), ' '):20s} mean relative error {_v:.4f}")
_fig, _ax = plt.subplots(figsize=(10, 3.5))
lab.plot_bars(fp8_errors, title=f"FP8 weight error on {MODEL} (mean over projections)", ylabel="‖ŵ − w‖ / ‖w‖", ax=_ax)
plt.show()

# %% [markdown] tags=["zh"]
# **读数**：E4M3 的误差约为 E5M2 的一半（多一位尾数）；`e4m3fn` 与 `e4m3fnuz` 几乎一样——两者网格的相对间距相同，
# fnuz 只是把同样的网格整体缩小一半。逐通道只比逐张量好一点点：FP8 是**浮点**网格，每个二进制段里的相对精度都一样，
# scale 只决定数值落在范围的哪一段，只有掉进非规格化区（或被饱和）的值才吃亏。INT4 的网格是均匀的，scale 的粒度就重要得多——
# 所以第 5 节要分组。

# %% [markdown] tags=["en"]
# **Reading it**: E4M3 errors are about half of E5M2's (one more mantissa bit); `e4m3fn` and `e4m3fnuz` are
# almost equal: their grids have the same relative spacing, fnuz's is the same grid scaled by one half.
# Per-channel is only slightly better than per-tensor: FP8 is a **floating-point** grid with the same relative
# precision in every binade, so the scale only decides where in the range values land, and only values that
# sink into the subnormals (or saturate) lose. INT4's grid is uniform, so its scale granularity matters far more:
# hence the groups of section 5.

# %% [markdown] tags=["zh"]
# ## 3 · 在 MI300 上加载 OCP FP8 检查点
#
# 公开的 FP8 检查点通常是 OCP `e4m3fn`，AMD 自己发布的也是（Hugging Face 合集 amd/quark-quantized-ocp-fp8-models）。
# MI300X/MI325X 的矩阵核心只做 FNUZ。
# 把字节**原样重解释**为 `e4m3fnuz` 时，每个有限值都恰好变成一半（偏置 8 对 7），所以 scale 必须**乘 2**。
# 还有两个字节要特殊处理：
#
# - 0x80：在 fn 中是 −0（太小的负值量化后就是它），在 fnuz 中却是 NaN，一个 NaN 就会让整层输出变成 NaN；
# - 0x7F / 0xFF：在 fn 中是 NaN，在 fnuz 中却是 ±240——NaN 会悄悄变成 ±480。
#
# 这正是 vLLM 在 ROCm 上做的 `normalize_e4m3fn_to_e4m3fnuz`
# （vllm-project/vllm `vllm/model_executor/layers/quantization/utils/w8a8_utils.py`：0x80 置 0、scale × 2；
# 注意它通过 `view` **原地**修改了传入的权重）。两个常见的错误修法：按 448/240 缩放 scale（网上代码里见过），
# 以及先转成 float 再 `.to(torch.float8_e4m3fnuz)`（240 以上的值变成 NaN 或被截到 240，取决于版本，见下方演示）。

# %% [markdown] tags=["en"]
# ## 3 · Loading an OCP FP8 checkpoint on an MI300
#
# Published FP8 checkpoints are usually OCP `e4m3fn`, AMD's own too (the Hugging Face collection
# amd/quark-quantized-ocp-fp8-models). The matrix cores of the MI300X/MI325X do FNUZ only. **Reinterpreting the bytes** as `e4m3fnuz` halves every finite value exactly
# (bias 8 against 7), so the scale must be **doubled**. Two bytes need care:
#
# - 0x80: −0 in fn (what a negative value too small for the format quantizes to), but NaN in fnuz; one NaN turns
#   a whole layer's output into NaN;
# - 0x7F / 0xFF: NaN in fn, but ±240 in fnuz, so a NaN silently becomes ±480.
#
# That is what vLLM does on ROCm in `normalize_e4m3fn_to_e4m3fnuz` (vllm-project/vllm
# `vllm/model_executor/layers/quantization/utils/w8a8_utils.py`: 0x80 set to 0, scale × 2; note that it
# changes the caller's weight **in place** through a `view`). Two common wrong fixes: scaling by 448/240 (seen
# in public code), and casting through float with `.to(torch.float8_e4m3fnuz)` (values above 240 become NaN or
# are clipped to 240, depending on the release; shown below).

# %% [markdown] tags=["zh"]
# **练习 3**：`ocp_to_fnuz(q, scale)` 返回 `(q_fnuz, scale_fnuz)`。
#
# - `q`：`torch.float8_e4m3fn` 张量（任意形状），否则抛 `ValueError`；`scale`：float 张量（任意形状，逐张量或逐通道）。
# - 按**比特**转换：0x80 → 0x00；0x7F 与 0xFF → 0x80（fnuz 的 NaN，NaN 仍是 NaN）；其余字节不变；结果视为
#   `torch.float8_e4m3fnuz`。`scale_fnuz = scale * 2`（形状、dtype 不变）。
# - **不得修改**传入的 `q` 与 `scale`。
# - 检查：对所有非 NaN 字节，`q_fnuz.float() * scale_fnuz` 与 `q.float() * scale` 完全相等（包括 ±448 这样的饱和边界
#   和最小非规格化数）；−0 变成 +0 而不是 NaN。

# %% [markdown] tags=["en"]
# **Exercise 3**: `ocp_to_fnuz(q, scale)` returns `(q_fnuz, scale_fnuz)`.
#
# - `q`: a `torch.float8_e4m3fn` tensor (any shape), else `ValueError`; `scale`: a float tensor (any shape,
#   per-tensor or per-channel).
# - Convert the **bits**: 0x80 → 0x00; 0x7F and 0xFF → 0x80 (the fnuz NaN: NaN stays NaN); every other byte
#   unchanged; view the result as `torch.float8_e4m3fnuz`. `scale_fnuz = scale * 2` (same shape and dtype).
# - **Do not modify** the `q` and `scale` passed in.
# - Checked: for every non-NaN byte, `q_fnuz.float() * scale_fnuz` equals `q.float() * scale` exactly (the
#   saturation edges ±448 and the smallest subnormal included); −0 becomes +0, not NaN.

# %% tags=["solution"] grade_id="08-fnuz-sol-1"
def ocp_to_fnuz(q, scale):
    """An OCP e4m3fn tensor and its scale, as e4m3fnuz bits and the doubled scale (inputs untouched)."""
    ### BEGIN SOLUTION
    if q.dtype != torch.float8_e4m3fn:
        raise ValueError(f"q must be torch.float8_e4m3fn, got {q.dtype}")
    bits = q.view(torch.uint8).clone()
    negative_zero = bits == 0x80
    nan = (bits & 0x7F) == 0x7F
    bits[negative_zero] = 0x00
    bits[nan] = 0x80
    return bits.view(torch.float8_e4m3fnuz), scale * 2
    ### END SOLUTION


# %% tags=["test"] grade_id="08-fnuz-1" points=3
_fn = torch.tensor([448.0, -448.0, 1.0, -0.0, 2.0**-9, -3.5]).to(torch.float8_e4m3fn)
_fz, _fs = ocp_to_fnuz(_fn, torch.tensor(0.25))
assert _fz.dtype == torch.float8_e4m3fnuz, f"结果应为 e4m3fnuz / the result must be e4m3fnuz, got {_fz.dtype}"
assert _fs.item() == 0.5, f"scale 应乘 2 / the scale must double: got {_fs.item()}"
assert torch.equal(_fz.float() * _fs, _fn.float() * 0.25), \
    f"反量化值必须不变 / dequantized values must not change: {(_fz.float() * _fs).tolist()} vs {(_fn.float() * 0.25).tolist()}"
assert not torch.isnan(_fz.float()).any(), "−0 (0x80) 必须变成 +0 而不是 NaN / −0 must become +0, not NaN"
_nan_fn = torch.tensor([0x7F, 0xFF, 0x80, 0x38], dtype=torch.uint8)
_nz, _ = ocp_to_fnuz(_nan_fn.view(torch.float8_e4m3fn), torch.tensor(1.0))
assert _nz.view(torch.uint8).tolist() == [0x80, 0x80, 0x00, 0x38], \
    f"0x7F/0xFF → 0x80（NaN）, 0x80 → 0x00, 其余不变 / others kept: {[hex(b) for b in _nz.view(torch.uint8).tolist()]}"
assert _nan_fn.tolist() == [0x7F, 0xFF, 0x80, 0x38], "不得修改传入的 q / the q passed in must not change"
try:
    ocp_to_fnuz(torch.ones(3).to(torch.float8_e5m2), torch.tensor(1.0))
except ValueError:
    pass
else:
    raise AssertionError("q 不是 e4m3fn 应抛出 ValueError / q that is not e4m3fn must raise ValueError")

# %% [markdown] tags=["zh"]
# 对照四种做法：你的转换、只重解释比特不处理 −0、按 448/240 缩放 scale、先转 float 再转 fnuz。“检查点”是把模型所有投影
# 逐通道量化成 OCP FP8；最后一列把转换后的权重装回模型，看一个提示词的 logits 里有没有 NaN：

# %% [markdown] tags=["en"]
# Four ways side by side: your conversion, the bits without the −0 fix, scaling by 448/240, and casting through
# float. The "checkpoint" is every projection of the model quantized to OCP FP8 per channel; the last column
# loads the converted weights into the model and looks for NaN in the logits of one prompt:

# %%
ckpt = {name: quantize_fp8(mod.weight.detach(), torch.float8_e4m3fn, granularity="channel")
        for name, mod in LINEARS.items()}
reference = {name: dequantize_fp8(q, s) for name, (q, s) in ckpt.items()}
print(f"bytes 0x80 (-0) in the checkpoint: {sum(int((q.view(torch.uint8) == 0x80).sum()) for q, _ in ckpt.values())} "
      f"of {sum(q.numel() for q, _ in ckpt.values()):,}")


def bits_only(q, scale):
    return q.view(torch.float8_e4m3fnuz), scale * 2


def bits_scaled_by_max_ratio(q, scale):
    raw = q.view(torch.uint8).clone()
    raw[raw == 0x80] = 0
    return raw.view(torch.float8_e4m3fnuz), scale * 448 / 240


def cast_through_float(q, scale):
    return q.float().to(torch.float8_e4m3fnuz), scale


_prompt = tok(lab.load_qc_reports("eval")[0]["description"], return_tensors="pt").to(device)
for _name, _convert in (("bits + scale x2 (yours)", ocp_to_fnuz), ("bits + scale x2, -0 kept", bits_only),
                        ("bits + scale x448/240", bits_scaled_by_max_ratio), ("cast through float", cast_through_float)):
    _deq = {name: dequantize_fp8(*_convert(q, s)) for name, (q, s) in ckpt.items()}
    _nan = sum(int(torch.isnan(d).sum()) for d in _deq.values())
    _err = statistics.fmean(relative_error(reference[k], torch.nan_to_num(d)) for k, d in _deq.items())
    with weights_set(model, _deq), torch.no_grad():
        _logits_nan = bool(torch.isnan(model(**_prompt).logits).any())
    print(f"{_name:26s} NaN weights: {_nan:6d}   relative error vs the checkpoint: {_err:.2e}   "
          f"NaN logits: {_logits_nan}")

# %% [markdown] tags=["zh"]
# 只有比特重解释加 scale × 2 并处理 −0 才是精确的。检查点里只要有 0x80（第一行数出了几个），不处理 −0 就会把 NaN
# 带进 logits；448/240 让每个值差 448/480 ≈ −7%；按值转换毁掉 240 以上的值（每行的最大值一定在 448 附近）：变成
# NaN，或在会饱和的版本中被截到 240——同样是错的。

# %% [markdown] tags=["en"]
# Only the bit reinterpretation with a doubled scale and the −0 fix is exact. If the checkpoint holds any 0x80
# (the first line counts them), skipping the −0 fix puts NaN into the logits; 448/240 puts every value off by
# 448/480 ≈ −7 %; the value cast ruins everything above 240 (every row's maximum sits near 448): NaN, or, in a
# release that saturates, clipped to 240, which is just as wrong.

# %% [markdown] tags=["zh"]
# ### 3b · 反方向：fnuz 检查点拿到 MI355X 或 H100 上
#
# 为 MI300 量化的检查点（`e4m3fnuz`）拿到 OCP 硬件上时，比特重解释不再可行。把字节原样当作 fn、scale 减半，
# 有三个字节会出错：fnuz 的 0x80（NaN）在 fn 中是 −0；fnuz 的 0x7F / 0xFF（±240，fnuz 的最大值）在 fn 中是 NaN。
# 而按 amax 缩放的量化正好把每行（逐通道）或整个张量的最大值映射到 ±240，所以**每一行都有这样的字节**。
# 把它们截到 0x7E / 0xFE 可以避免 NaN，但这些元素会偏小约 7%（fn 的 0x7E 配上减半的 scale 等于 fnuz 的 224）。
#
# 这个方向上按**值**转换才是对的，和练习 3 正好相反：fn 的网格包含 fnuz 从 2⁻⁶ 到 240 的每一个值
# （fn 的最大值是 448，比 240 大；两者尾数都是 3 位），所以 scale **保持不变**、把每个值重新量化成 fn，
# 2⁻⁶ 以上的值一个都不变。只有 fnuz 最小的一段（2⁻¹⁰ 的奇数倍，比 2⁻⁶ 小）fn 表示不了，按“就近舍入、平局取偶”落到
# 相邻的 2⁻⁹ 的倍数上——它们比每行最大值小四个数量级以上。
#
# 格式的定义：OCP 8-bit Floating Point Specification (OFP8) Revision 1.0（
# https://github.com/opencomputeproject/FP8 ，E4M3：偏置 7、NaN 为 S.1111.111、最大 448、有 −0）；fnuz 来自 Graphcore/AMD/
# Qualcomm 的 “8-bit Numerical Formats for Deep Neural Networks”（arXiv:2206.02915，偏置 8、没有 inf 和 −0、NaN 是 0x80、最大 240），
# ROCm 的数据类型页（https://rocm.docs.amd.com/en/latest/reference/precision-support.html ）写明 FNUZ 变体“没有无穷、没有有符号零，
# NaN 用负零表示”，HIP 的低精度类型页（https://rocm.docs.amd.com/projects/HIP/en/latest/reference/low_fp_types.html ）列出 gfx942 只支持
# FNUZ FP8。PyTorch 的 `torch.float8_e4m3fnuz` 与 `torch.float8_e4m3fn` 就是这两种格式（`torch.finfo(...).max` 为 240 与 448）。

# %% [markdown] tags=["zh"]
# **练习 3b**：`fnuz_to_ocp(q, scale)` 返回 `(q_fn, scale_fn)`。
#
# - `q`：`torch.float8_e4m3fnuz` 张量（任意形状），否则抛 `ValueError`；`scale`：float 张量（任意形状）。
# - `q_fn` 是 `torch.float8_e4m3fn`，形状不变；`scale_fn` 与 `scale` 值相同、形状相同（scale 不变）。
# - 绝对值不小于 2⁻⁶ 的每个值**完全不变**：`q_fn.float() == q.float()`，包括每行的最大值 ±240。
# - 更小的值舍入到最近的 fn 值，平局取偶（与 PyTorch 把 float 转成 `float8_e4m3fn` 的舍入相同）；fnuz 的 NaN（0x80）仍是 NaN。
# - **不得修改**传入的 `q` 与 `scale`。

# %% [markdown] tags=["en"]
# ### 3b · The other way round: an fnuz checkpoint on an MI355X or an H100
#
# A checkpoint quantized for the MI300 (`e4m3fnuz`) cannot go to OCP hardware by reinterpreting bits. Read the
# bytes as fn with a halved scale and three bytes break: fnuz's 0x80 (NaN) is −0 in fn, and fnuz's 0x7F / 0xFF
# (±240, the fnuz maximum) are NaN in fn. amax scaling maps the maximum of every row (per channel) or of the
# tensor to exactly ±240, so **every row holds such a byte**. Clamping them to 0x7E / 0xFE avoids the NaN, but
# those elements come out about 7 % small (fn's 0x7E with the halved scale is fnuz's 224).
#
# In this direction the **value** conversion is right, the opposite of exercise 3: the fn grid holds every fnuz
# value from 2⁻⁶ to 240 (fn reaches 448, beyond 240, and both have 3 mantissa bits), so keep the scale **as it
# is** and requantize each value to fn: nothing from 2⁻⁶ up changes. Only fnuz's smallest values (odd multiples
# of 2⁻¹⁰, below 2⁻⁶) have no fn twin; they round to the nearest multiple of 2⁻⁹, ties to even, and they are
# more than four orders of magnitude below each row's maximum.
#
# Where the formats are defined: the OCP 8-bit Floating Point Specification (OFP8) Revision 1.0
# (https://github.com/opencomputeproject/FP8; E4M3: bias 7, NaN S.1111.111, maximum 448, with −0); fnuz comes from
# Graphcore, AMD and Qualcomm's "8-bit Numerical Formats for Deep Neural Networks" (arXiv:2206.02915; bias 8, no inf
# and no −0, NaN is 0x80, maximum 240). ROCm's data-type page
# (https://rocm.docs.amd.com/en/latest/reference/precision-support.html) says the FNUZ variant has "no infinity or
# signed zero (NaN represented as negative zero)", and HIP's low-precision page
# (https://rocm.docs.amd.com/projects/HIP/en/latest/reference/low_fp_types.html) lists FNUZ FP8 only for gfx942.
# PyTorch's `torch.float8_e4m3fnuz` and `torch.float8_e4m3fn` are these two formats (`torch.finfo(...).max` is 240
# and 448).

# %% [markdown] tags=["en"]
# **Exercise 3b**: `fnuz_to_ocp(q, scale)` returns `(q_fn, scale_fn)`.
#
# - `q`: a `torch.float8_e4m3fnuz` tensor (any shape), else `ValueError`; `scale`: a float tensor (any shape).
# - `q_fn` is `torch.float8_e4m3fn` of the same shape; `scale_fn` has the values and shape of `scale` (the scale
#   does not change).
# - Every value of magnitude 2⁻⁶ or more is kept **exactly**: `q_fn.float() == q.float()`, each row's maximum ±240
#   included.
# - Smaller values round to the nearest fn value, ties to even (as PyTorch rounds a float cast to
#   `float8_e4m3fn`); the fnuz NaN (0x80) stays NaN.
# - **Do not modify** the `q` and `scale` passed in.

# %% tags=["solution"] grade_id="08-ocp-sol-1"
def fnuz_to_ocp(q, scale):
    """An e4m3fnuz tensor and its scale, requantized to e4m3fn with the same scale (inputs untouched)."""
    ### BEGIN SOLUTION
    if q.dtype != torch.float8_e4m3fnuz:
        raise ValueError(f"q must be torch.float8_e4m3fnuz, got {q.dtype}")
    return q.float().to(torch.float8_e4m3fn), scale.clone()
    ### END SOLUTION


# %% tags=["test"] grade_id="08-ocp-1" points=3
_fz_bytes = torch.tensor([0x7F, 0xFF, 0x7E, 0x38, 0x10, 0x01, 0x03, 0x80], dtype=torch.uint8)
_oc, _os = fnuz_to_ocp(_fz_bytes.view(torch.float8_e4m3fnuz), torch.tensor([0.5]))
assert _oc.dtype == torch.float8_e4m3fn, f"结果应为 e4m3fn / the result must be e4m3fn, got {_oc.dtype}"
assert _os.tolist() == [0.5], f"scale 不变 / the scale stays as it is: got {_os.tolist()}"
assert _oc.float()[:5].tolist() == [240.0, -240.0, 224.0, 0.5, 2.0**-6], \
    f"±240 与 2⁻⁶ 以上的值不变 / ±240 and every value from 2⁻⁶ up are kept: {_oc.float()[:5].tolist()}"
assert _oc.float()[5:7].tolist() == [0.0, 2.0**-8], \
    f"2⁻¹⁰ → 0、3·2⁻¹⁰ → 2⁻⁸（就近、平局取偶 / nearest, ties to even）: {_oc.float()[5:7].tolist()}"
assert torch.isnan(_oc.float()[7]), "fnuz 的 NaN（0x80）仍是 NaN / the fnuz NaN (0x80) stays NaN"
assert _fz_bytes.tolist() == [0x7F, 0xFF, 0x7E, 0x38, 0x10, 0x01, 0x03, 0x80], "不得修改传入的 q / the q passed in must not change"
try:
    fnuz_to_ocp(torch.ones(3).to(torch.float8_e4m3fn), torch.tensor(1.0))
except ValueError:
    pass
else:
    raise AssertionError("q 不是 e4m3fnuz 应抛出 ValueError / q that is not e4m3fnuz must raise ValueError")

# %% [markdown] tags=["zh"]
# 在课程模型上对照三种做法：把每个投影逐通道量化成 fnuz 当作“MI300 检查点”，再分别用比特重解释加 scale 减半、
# 同样但把 0x7F / 0xFF 截到 0x7E / 0xFE、以及你的 `fnuz_to_ocp` 转成 fn，数出含 NaN 的行和与检查点的相对误差：

# %% [markdown] tags=["en"]
# The three ways on the course model: every projection quantized to fnuz per channel is the "MI300 checkpoint";
# convert it to fn by reinterpreting the bits with a halved scale, the same with 0x7F / 0xFF clamped to 0x7E / 0xFE,
# and with your `fnuz_to_ocp`, and count the rows that hold a NaN and the error against the checkpoint:

# %%
def bits_as_fn(q, scale):
    return q.view(torch.float8_e4m3fn), scale / 2


def bits_as_fn_clamped(q, scale):
    raw = q.view(torch.uint8).clone()
    raw[raw == 0x7F], raw[raw == 0xFF], raw[raw == 0x80] = 0x7E, 0xFE, 0x7F
    return raw.view(torch.float8_e4m3fn), scale / 2


fnuz_ckpt = {name: quantize_fp8(mod.weight.detach(), torch.float8_e4m3fnuz, granularity="channel")
             for name, mod in LINEARS.items()}
fnuz_reference = {name: dequantize_fp8(q, s) for name, (q, s) in fnuz_ckpt.items()}
for _name, _convert in (("bits + scale / 2", bits_as_fn), ("bits + scale / 2, clamped", bits_as_fn_clamped),
                        ("requantized, same scale (yours)", fnuz_to_ocp)):
    _deq = {name: dequantize_fp8(*_convert(q, s)) for name, (q, s) in fnuz_ckpt.items()}
    _rows = sum(int(torch.isnan(d).any(dim=1).sum()) for d in _deq.values())
    _err = statistics.fmean(relative_error(fnuz_reference[k], torch.nan_to_num(d)) for k, d in _deq.items())
    _max_err = max(float((fnuz_reference[k] - torch.nan_to_num(d)).abs().max() / fnuz_reference[k].abs().max())
                   for k, d in _deq.items())
    print(f"{_name:32s} rows with NaN: {_rows:5d} of {sum(d.shape[0] for d in _deq.values())}   "
          f"relative error: {_err:.2e}   worst element / row max: {_max_err:.2e}")

# %% [markdown] tags=["zh"]
# 只重解释比特时每一行都有 NaN；截断后没有 NaN，但每行最大值偏小约 7%（最差元素一列）；按值重新量化的误差只来自
# 2⁻⁶ 以下的几个值，相对于行最大值可以忽略。
# **选择 dtype 要看 gfx 架构**（第 8 节的 `fp8_gemm_dtype`），不要靠试探：
# PyTorch 只在 gfx942 上把 `_scaled_mm` 当作 fnuz，在 gfx950、gfx1200/1201 上用 OCP
# （pytorch/pytorch `aten/src/ATen/native/cuda/Blas.cpp`，新版本在 `ScaledBlas.cpp`：`_scaled_mm_allowed_device`、
# `_scaled_mm_is_fnuz`）。

# %% [markdown] tags=["en"]
# Reinterpreting the bits puts a NaN in every row; clamping removes the NaN but leaves each row's maximum about 7 %
# small (the worst-element column); requantizing by value only moves the few values below 2⁻⁶, which are
# negligible against each row's maximum.
# **Choose the dtype from the gfx arch** (section 8's `fp8_gemm_dtype`), never by trial: PyTorch treats
# `_scaled_mm` as fnuz only on gfx942 and as OCP on gfx950 and gfx1200/1201 (pytorch/pytorch
# `aten/src/ATen/native/cuda/Blas.cpp`, `ScaledBlas.cpp` in newer releases: `_scaled_mm_allowed_device`,
# `_scaled_mm_is_fnuz`).

# %% [markdown] tags=["zh"]
# ## 4 · MXFP4：OCP 微缩放格式
#
# OCP Microscaling Formats (MX) v1.0（https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf ）
# 把**连续 32 个元素**作为一块，共享一个 **E8M0** scale：8 位无符号指数，偏置 127，值为 2^(e−127)，0xFF 是 NaN，
# 没有零（torch dtype `float8_e8m0fnu`）。MXFP4 的元素是 **FP4 E2M1**：1 位符号、2 位指数（偏置 1）、1 位尾数，
# 没有 inf 和 NaN，8 个非负值为 0, 0.5, 1, 1.5, 2, 3, 4, 6。每个元素平均 4 + 8/32 = 4.25 位。
#
# 规范第 6.3 节的 scale 取法：`X = 2^(floor(log2(amax)) − emax_elem)`，E2M1 的最大 2 的幂是 4，即 emax_elem = 2（规范作者的参考实现 microsoft/microxcaling 的 `mx/mx_ops.py` 也是先 floor(log2) 再减 emax：是**向下**取整）。
# 于是块内最大值除以 X 落在 [4, 8)，超过 6 的部分饱和到 6。
#
# **谁能原生计算**：ROCm 的精度支持表中，FP4/FP6 的矩阵核心支持只在 CDNA4（MI350X/MI355X，gfx950）上；CDNA3
# （MI300X，gfx942）只能在内核里先解包成 FP8/bf16 再算——省显存和带宽，不省矩阵算力。

# %% [markdown] tags=["en"]
# ## 4 · MXFP4: OCP microscaling
#
# The OCP Microscaling Formats (MX) v1.0 spec
# (https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf) groups **32
# consecutive elements** into a block that shares one **E8M0** scale: an 8-bit unsigned exponent, bias 127,
# value 2^(e−127), 0xFF is NaN, no zero (torch dtype `float8_e8m0fnu`). MXFP4's elements are **FP4 E2M1**: 1
# sign, 2 exponent (bias 1) and 1 mantissa bit, no inf and no NaN; the 8 non-negative values are 0, 0.5, 1,
# 1.5, 2, 3, 4, 6. On average 4 + 8/32 = 4.25 bits per element.
#
# Section 6.3 of the spec chooses the scale as `X = 2^(floor(log2(amax)) − emax_elem)`; E2M1's largest power of
# two is 4, so emax_elem = 2 (the spec authors' reference code, microsoft/microxcaling `mx/mx_ops.py`, also takes
# floor(log2) and then subtracts emax: the exponent rounds **down**). The block maximum divided by X then lies in [4, 8), and whatever exceeds 6
# saturates to 6.
#
# **Who computes it natively**: in ROCm's precision-support tables, matrix-core support for FP4/FP6 exists only
# on CDNA4 (MI350X/MI355X, gfx950); CDNA3 (MI300X, gfx942) has to unpack to FP8/bf16 inside the kernel: it saves
# memory and bandwidth, not matrix FLOPs.

# %% [markdown] tags=["zh"]
# **练习 4**：`mxfp4_quantize(x, block_size=32)` 返回 `(codes, scales)`。
#
# - `x`：有限值的浮点张量，最后一维能被 `block_size` 整除（否则 `ValueError`），按最后一维分块，在 float32 中计算。
# - 每块：`amax = max|x|`；共享指数 `e = floor(log2(amax)) − 2`，amax 为 0 时 `e = −127`；`e` 截到 [−127, 127]；
#   `scales` 存 `e + 127`（`torch.uint8`，形状 `x.shape[:-1] + (n // block_size,)`，n 为最后一维长度）。**floor(log2) 要精确**：
#   float 的 `log2` 在略小于 2 的幂处可能向上舍入，`torch.frexp` 直接给出指数。
# - 元素：`v = x / 2**e`；|v| 取最近的 E2M1 值，**平局取偶数编码**（末位为 0 的那个，即 IEEE 的就近取偶），大于 6 的
#   饱和为 6。编码 = 符号位 0x8（当 `x < 0`）| 幅值在 `FP4_E2M1_VALUES` 中的下标 0–7。`codes` 为 `torch.uint8`，
#   形状与 `x` 相同（每字节一个编码，不打包）。
# - `mxfp4_dequantize(codes, scales, block_size)` 已给出。

# %% [markdown] tags=["en"]
# **Exercise 4**: `mxfp4_quantize(x, block_size=32)` returns `(codes, scales)`.
#
# - `x`: a float tensor of finite values whose last dimension divides by `block_size` (else `ValueError`),
#   blocked along the last dimension, computed in float32.
# - Per block: `amax = max|x|`; shared exponent `e = floor(log2(amax)) − 2`, or `e = −127` when amax is 0; `e`
#   clamped to [−127, 127]; `scales` holds `e + 127` (`torch.uint8`, shape `x.shape[:-1] + (n // block_size,)`,
#   n the last dimension).
#   **floor(log2) must be exact**: a float `log2` may round up just below a power of two; `torch.frexp` gives
#   the exponent directly.
# - Elements: `v = x / 2**e`; |v| goes to the nearest E2M1 value, **ties to the even code** (the one whose last
#   bit is 0: IEEE round-to-nearest-even), anything above 6 saturates to 6. Code = sign bit 0x8 (when `x < 0`) |
#   the magnitude's index 0–7 in `FP4_E2M1_VALUES`. `codes` is `torch.uint8` with the shape of `x` (one code per
#   byte, unpacked).
# - `mxfp4_dequantize(codes, scales, block_size)` is given.

# %% tags=["solution"] grade_id="08-mxfp4-sol-1"
FP4_E2M1_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def mxfp4_quantize(x, block_size=32):
    """OCP MXFP4: (codes uint8 shaped like x, one E2M1 code per element; scales uint8, one E8M0 byte per block)."""
    ### BEGIN SOLUTION
    if x.shape[-1] % block_size:
        raise ValueError(f"the last dimension {x.shape[-1]} is not a multiple of block_size {block_size}")
    blocks = x.float().reshape(*x.shape[:-1], x.shape[-1] // block_size, block_size)
    amax = blocks.abs().amax(dim=-1)
    _, exponent = torch.frexp(amax)  # amax = m * 2**exponent with m in [0.5, 1): floor(log2 amax) = exponent - 1
    shared = torch.where(amax > 0, exponent - 1 - 2, torch.full_like(exponent, -127)).clamp(-127, 127)
    v = blocks / torch.exp2(shared.float()).unsqueeze(-1)
    magnitude = v.abs().clamp(max=6.0)
    step = torch.where(magnitude < 2, 0.5, torch.where(magnitude < 4, 1.0, 2.0))
    rounded = torch.round(magnitude / step) * step  # torch.round is half-to-even: an even multiple is an even code
    index = torch.bucketize(rounded, FP4_E2M1_VALUES.to(rounded.device))
    codes = (index | torch.where(v < 0, 8, 0)).to(torch.uint8).reshape(x.shape)
    return codes, (shared + 127).to(torch.uint8)
    ### END SOLUTION


def mxfp4_dequantize(codes, scales, block_size=32):
    signed = torch.cat([FP4_E2M1_VALUES, -FP4_E2M1_VALUES]).to(codes.device)
    values = signed[codes.long()].reshape(*codes.shape[:-1], codes.shape[-1] // block_size, block_size)
    return (values * torch.exp2(scales.float() - 127).unsqueeze(-1)).reshape(codes.shape)


# %% tags=["test"] grade_id="08-mxfp4-1" points=3
_blk = torch.tensor([[6.0, -3.0, 1.0, 0.5, 0.25, 0.75, 5.0, 0.0] * 4])
_c, _sc = mxfp4_quantize(_blk)
assert _c.dtype == torch.uint8 and _c.shape == (1, 32) and _sc.shape == (1, 1), (_c.dtype, _c.shape, _sc.shape)
assert _sc.item() == 127, f"amax 6 -> floor(log2 6) - 2 = 0 -> scale byte 127, got {_sc.item()}"
assert _c[0, :8].tolist() == [7, 8 | 5, 2, 1, 0, 2, 6, 0], \
    f"6→7, −3→0x8|5, 1→2, 0.5→1, 0.25→0（平局取偶 / tie to even）, 0.75→2（1.0）, 5→6（4.0）, 0→0; got {_c[0, :8].tolist()}"
_x = torch.randn(3, 64, generator=_g)
_c2, _s2 = mxfp4_quantize(_x)
assert _s2.shape == (3, 2) and _c2.shape == (3, 64)
assert torch.equal(_s2.view(torch.float8_e8m0fnu).float(), torch.exp2(_s2.float() - 127)), "E8M0 bytes, bias 127"
_rt = mxfp4_dequantize(_c2, _s2)
assert relative_error(_x, _rt) < 0.2, f"MXFP4 round trip too far off: {relative_error(_x, _rt):.3f}"
_c7, _s7 = mxfp4_quantize(torch.tensor([[7.0] + [0.0] * 31]))
assert _s7.item() == 127 and _c7[0, 0].item() == 7, \
    f"amax 7: floor(log2 7) − 2 = 0 → 字节 127（规范向下取整，不是 128）/ byte 127 (the spec rounds down, not 128), 7 饱和为 6 / saturates to 6 (code 7); got {_s7.item()}, {_c7[0, 0].item()}"
_two = torch.cat([torch.full((1, 32), 1.0), torch.full((1, 32), 4.0)], dim=-1)
assert mxfp4_quantize(_two)[1].tolist() == [[125, 127]], \
    f"每 32 个元素一个 scale / one scale per block of 32: amax 1 → 125, amax 4 → 127; got {mxfp4_quantize(_two)[1].tolist()}"
for _k in range(2):  # each block quantized alone equals the blocked result
    _ck, _sk = mxfp4_quantize(_x[:, 32 * _k : 32 * (_k + 1)])
    assert torch.equal(_sk[:, 0], _s2[:, _k]) and torch.equal(_ck, _c2[:, 32 * _k : 32 * (_k + 1)]), \
        f"块 {_k} 单独量化与整体中不同 / block {_k} quantized alone differs from within x"
_c3, _s3 = mxfp4_quantize(torch.zeros(2, 2, 32), block_size=16)
assert _s3.shape == (2, 2, 2) and _s3.sum().item() == 0, f"沿最后一维分块；全零块 scale 字节为 0 / blocks along the last dim; an all-zero block has scale byte 0: {_s3.tolist()}"
try:
    mxfp4_quantize(torch.ones(2, 40))
except ValueError:
    pass
else:
    raise AssertionError("最后一维不是 block_size 的整数倍应抛出 ValueError / must raise ValueError")

# %% [markdown] tags=["zh"]
# 同样的权重误差对比：MXFP4 每 32 个元素一个 2 的幂 scale。它与 FP8 逐通道相比差在哪里？

# %% [markdown] tags=["en"]
# The same weight-error comparison: MXFP4 has one power-of-two scale per 32 elements. How far is it from FP8
# per-channel?

# %%
mx_err = statistics.fmean(relative_error(m.weight.float(), mxfp4_dequantize(*mxfp4_quantize(m.weight.detach())))
                          for m in LINEARS.values())
print(f"MXFP4 mean relative weight error {mx_err:.4f}  (FP8 e4m3fn per-channel {fp8_errors['e4m3fn' + chr(10) + 'channel']:.4f})")

# %% [markdown] tags=["zh"]
# ## 5 · INT4 仅权重分组量化
#
# GPTQ（arXiv:2210.17323）与 AWQ（arXiv:2306.00978）的检查点把权重存成 4 位整数，每 `group_size` 个输入通道
# 一组，每组一个 scale 和一个零点 (zero-point)，常用组大小 128。这是**仅权重** (weight-only) 量化：GEMM 在内核里
# 解包后仍用 bf16/fp16 计算，省的是显存和带宽。非对称量化把区间 [lo, hi] 映射到整数 0–15；和 PyTorch 的
# MinMax observer 一样，区间先扩展到包含 0，这样 0（例如填充或被剪枝的权重）能被精确表示。
#
# 组大小必须整除输入维：Qwen2.5-0.5B 的 896 = 7 × 128、4864 = 38 × 128 都可以；`tiny-qwen-zh` 的 MLP 宽 704 =
# 5.5 × 128 不行，所以 smoke 配置用 64（`INT4_GROUP`）。

# %% [markdown] tags=["en"]
# ## 5 · INT4 weight-only group quantization
#
# GPTQ (arXiv:2210.17323) and AWQ (arXiv:2306.00978) checkpoints store weights as 4-bit integers, one scale and
# one zero-point per group of `group_size` input channels, commonly 128. This is **weight-only** quantization:
# the kernel unpacks and the GEMM still runs in bf16/fp16, saving memory and bandwidth. Asymmetric quantization
# maps the range [lo, hi] onto the integers 0–15; like PyTorch's MinMax observers the range is first widened to
# include 0, so that 0 (padding, pruned weights) is exact.
#
# The group size must divide the input dimension: Qwen2.5-0.5B's 896 = 7 × 128 and 4864 = 38 × 128 do;
# `tiny-qwen-zh`'s MLP width 704 = 5.5 × 128 does not, so the smoke profile uses 64 (`INT4_GROUP`).

# %% [markdown] tags=["zh"]
# **练习 5**：`int4_group_quantize(w, group_size=128)` 返回字典 `{"q", "scale", "zero"}`。
#
# - `w`：二维 `[out, in]`，在 float32 中计算；`in` 不能被 `group_size` 整除或 `w` 不是二维时抛 `ValueError`。
# - 目标：非对称 (asymmetric) 的 4 位分组量化。每行每 `group_size` 个连续输入为一组，组内的 16 个整数级 0…15 均匀铺满
#   这一组的取值范围，而这个范围要扩到包含 0（让 0 能被精确表示，填充和 ReLU 之后的零很多）。由此自己推出：
#   - 级间距 `scale`：范围 [lo, hi] 除以 15 段；全零组（范围为空）取 `scale = 1.0`；
#   - 零点 `zero`：表示 0 的那个整数级（取整，落在 0…15 内）；
#   - `q`：每个权重最近的整数级（`torch.round`，就近取偶；`w / scale` **用除法**算），超出 0…15 的截断。
# - 返回：`q` 为 `torch.uint8 [out, in]`；`scale` 为 float32 `[out, in // group_size]`；`zero` 为 `torch.uint8`，形状同 `scale`。
# - `int4_dequantize(packed)`（已给出）= `(q − zero) * scale`（按组展开）。

# %% [markdown] tags=["en"]
# **Exercise 5**: `int4_group_quantize(w, group_size=128)` returns a dict `{"q", "scale", "zero"}`.
#
# - `w`: 2-D `[out, in]`, computed in float32; `ValueError` when `in` is not a multiple of `group_size` or `w`
#   is not 2-D.
# - The goal: asymmetric 4-bit group quantization. Each run of `group_size` consecutive inputs in a row is a
#   group; its 16 integer levels 0…15 spread evenly over the group's range, widened to include 0 (so that 0,
#   common after padding and ReLU, is exact). Work out from that:
#   - the level spacing `scale`: the range [lo, hi] cut into 15 steps; 1.0 for an all-zero group (empty range);
#   - the zero-point `zero`: the integer level that stands for 0 (rounded, within 0…15);
#   - `q`: each weight's nearest level (`torch.round`, half to even; compute `w / scale` by **division**),
#     clamped to 0…15.
# - Returns: `q` as `torch.uint8 [out, in]`; `scale` float32 `[out, in // group_size]`; `zero` as
#   `torch.uint8` with the shape of `scale`.
# - `int4_dequantize(packed)` (given) is `(q − zero) * scale`, expanded per group.

# %% tags=["solution"] grade_id="08-int4-sol-1"
def int4_group_quantize(w, group_size=128):
    """Asymmetric INT4 weight-only quantization with one scale and zero-point per group of inputs."""
    ### BEGIN SOLUTION
    if w.dim() != 2:
        raise ValueError(f"w must be 2-D [out, in], got shape {tuple(w.shape)}")
    out_features, in_features = w.shape
    if in_features % group_size:
        raise ValueError(f"in_features {in_features} is not a multiple of group_size {group_size}")
    groups = w.float().reshape(out_features, in_features // group_size, group_size)
    lo = groups.amin(dim=-1).clamp(max=0)
    hi = groups.amax(dim=-1).clamp(min=0)
    scale = (hi - lo) / 15
    scale = torch.where(hi > lo, scale, torch.ones_like(scale))
    zero = torch.clamp(torch.round(-lo / scale), 0, 15)
    q = torch.clamp(torch.round(groups / scale.unsqueeze(-1)) + zero.unsqueeze(-1), 0, 15)
    return {"q": q.reshape(out_features, in_features).to(torch.uint8), "scale": scale, "zero": zero.to(torch.uint8)}
    ### END SOLUTION


def int4_dequantize(packed):
    q, scale, zero = packed["q"], packed["scale"], packed["zero"]
    group_size = q.shape[1] // scale.shape[1]
    return (q.float() - zero.float().repeat_interleave(group_size, 1)) * scale.repeat_interleave(group_size, 1)


# %% tags=["test"] grade_id="08-int4-1" points=3
_wi = torch.tensor([[-1.5, 0.0, 1.5, 3.0, 0.1, 0.25, 0.3, 0.4]])
_p = int4_group_quantize(_wi, group_size=4)
assert set(_p) == {"q", "scale", "zero"}, f"返回键 / return keys: {set(_p)}"
assert _p["q"].dtype == torch.uint8 and _p["zero"].dtype == torch.uint8 and _p["scale"].dtype == torch.float32
assert _p["scale"].shape == (1, 2) and _p["q"].shape == (1, 8)
assert torch.allclose(_p["scale"], torch.tensor([[4.5 / 15, 0.4 / 15]])), \
    f"scale = (hi − lo)/15，区间包含 0 / the range includes 0: {_p['scale'].tolist()}"
assert _p["zero"].tolist() == [[5, 0]], f"zero = round(−lo/scale): 第二组全为正，lo = 0 / the second group is all positive, lo = 0: {_p['zero'].tolist()}"
assert _p["q"].tolist() == [[0, 5, 10, 15, 4, 9, 11, 15]], _p["q"].tolist()
assert torch.allclose(int4_dequantize(_p), _wi, atol=0.3 / 2 + 1e-6)
_pz = int4_group_quantize(torch.zeros(1, 8), group_size=8)
assert _pz["scale"].item() == 1.0, f"全零组 scale 为 1.0 / an all-zero group gets scale 1.0: {_pz['scale'].item()}"
try:
    int4_group_quantize(torch.ones(4, 100), group_size=64)
except ValueError:
    pass
else:
    raise AssertionError("in_features 不能被 group_size 整除应抛出 ValueError / must raise ValueError")

# %%
int4_err = statistics.fmean(relative_error(m.weight.float(), int4_dequantize(int4_group_quantize(m.weight.detach(), INT4_GROUP)))
                            for m in LINEARS.values())
print(f"INT4 g{INT4_GROUP} mean relative weight error {int4_err:.4f}  (MXFP4 {mx_err:.4f})")

# %% [markdown] tags=["zh"]
# ## 6 · 质量与显存
#
# 权重误差只是代理指标。真正要看的是模型还好不好用：在 `qc_reports` 的评测描述上算**困惑度** (perplexity)，
# 并用 Lab 03 的 **JSON 有效率**（整段输出能否解析为 JSON 对象）。`tiny-qwen-zh` 预训练时见过 JSON 格式的工位日志，
# 却从未见过报告格式（那是 Lab 03 教的），所以这里的 JSON 任务是补全日志行：给出 `{"location": "…", "severity": "`
# 这样的开头，看模型能否写出一行合法 JSON。gpu 配置的 Qwen2.5-0.5B-Instruct 用同样的提示词。
#
# **练习 6a**：`perplexity(model, tokenizer, texts, *, max_tokens=128)`。
#
# - 每条文本单独分词（`add_special_tokens=False`），截取前 `max_tokens` 个 token；少于 2 个 token 的文本不计。
# - 困惑度 = exp(所有文本所有被预测 token 的负对数似然之和 / 被预测 token 总数)，即**按 token 加权**，
#   不是各文本困惑度或各文本平均损失的平均。没有可计的 token 时抛 `ValueError`。
# - 可以分批（补齐加 attention mask），但结果必须等于逐条计算（相对误差 1e-4 内）。返回 Python `float`。

# %% [markdown] tags=["en"]
# ## 6 · Quality against memory
#
# Weight error is a proxy. What counts is whether the model still works: **perplexity** on the `qc_reports`
# eval descriptions, and lab 03's **JSON-validity rate** (does the whole output parse as a JSON object).
# `tiny-qwen-zh` saw JSON station logs in pre-training but never the report format (lab 03 teaches that), so
# the JSON task here completes log lines: given an opening like `{"location": "…", "severity": "`, does the
# model write one valid line of JSON. The gpu profile's Qwen2.5-0.5B-Instruct gets the same prompts.
#
# **Exercise 6a**: `perplexity(model, tokenizer, texts, *, max_tokens=128)`.
#
# - Tokenize each text on its own (`add_special_tokens=False`) and keep its first `max_tokens` tokens; a text
#   with fewer than 2 tokens does not count.
# - Perplexity = exp(sum of the negative log-likelihoods of every predicted token of every text / number of
#   predicted tokens): **weighted by tokens**, not a mean of per-text perplexities or per-text mean losses.
#   `ValueError` when no token is left to predict.
# - You may batch (padding plus an attention mask), but the result must equal the text-by-text computation
#   (relative difference within 1e-4). Return a Python `float`.

# %% tags=["solution"] grade_id="08-ppl-sol-1"
def perplexity(model, tokenizer, texts, *, max_tokens=128):
    """Token-weighted perplexity of texts, each scored on its own (first max_tokens tokens)."""
    ### BEGIN SOLUTION
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"][:max_tokens] for t in texts]
    ids = sorted((x for x in ids if len(x) >= 2), key=len)
    if not ids:
        raise ValueError("no text has 2 or more tokens: nothing to score")
    dev = next(model.parameters()).device
    total_nll, total_tokens = 0.0, 0
    with torch.inference_mode():
        for start in range(0, len(ids), 32):
            chunk = ids[start:start + 32]
            width = max(map(len, chunk))
            batch = torch.zeros(len(chunk), width, dtype=torch.long)
            mask = torch.zeros_like(batch)
            for row, x in enumerate(chunk):
                batch[row, :len(x)] = torch.tensor(x)
                mask[row, :len(x)] = 1
            batch, mask = batch.to(dev), mask.to(dev)
            logits = model(input_ids=batch, attention_mask=mask).logits[:, :-1].float()
            nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="none")
            counted = mask[:, 1:].reshape(-1).bool()
            total_nll += float(nll[counted].sum())
            total_tokens += int(counted.sum())
    return math.exp(total_nll / total_tokens)
    ### END SOLUTION


# %%
EVAL_TEXTS = [r["description"] for r in lab.load_qc_reports("eval")][:N_PPL]
with lab.Timer(device) as _t:
    base_ppl = perplexity(model, tok, EVAL_TEXTS)
print(f"{MODEL} perplexity on {len(EVAL_TEXTS)} qc_reports eval descriptions: {base_ppl:.2f} ({_t.seconds:.1f} s)")


# %% tags=["test"] grade_id="08-ppl-1" points=2
def _ppl_ref(m, texts, max_tokens=128):
    nll, n = 0.0, 0
    with torch.no_grad():
        for t in texts:
            x = tok(t, add_special_tokens=False)["input_ids"][:max_tokens]
            if len(x) < 2:
                continue
            ids = torch.tensor([x], device=device)
            nll += float(m(input_ids=ids, labels=ids).loss) * (len(x) - 1)
            n += len(x) - 1
    return math.exp(nll / n)


_few = EVAL_TEXTS[:6]
assert isinstance(base_ppl, float) and math.isfinite(base_ppl) and base_ppl > 1, base_ppl
assert math.isclose(perplexity(model, tok, _few), _ppl_ref(model, _few), rel_tol=1e-4), \
    f"应等于逐条计算、按 token 加权 / must equal the text-by-text, token-weighted value: {perplexity(model, tok, _few)} vs {_ppl_ref(model, _few)}"
assert math.isclose(perplexity(model, tok, _few, max_tokens=8), _ppl_ref(model, _few, 8), rel_tol=1e-4), \
    "只取前 max_tokens 个 token / keep the first max_tokens tokens"
try:
    perplexity(model, tok, [""])
except ValueError:
    pass
else:
    raise AssertionError("没有可预测的 token 应抛出 ValueError / nothing to predict must raise ValueError")

# %% [markdown] tags=["zh"]
# 下面把每种格式**模拟**到七个投影矩阵上（嵌入、lm_head、norm 保持 float32，与常见部署一致），算困惑度和 JSON
# 有效率，结束后恢复原权重。FP8 行只量化权重（W8A16 模拟）；激活也量化的 W8A8 见第 8 节与选做题。

# %% [markdown] tags=["en"]
# Now **emulate** each format on the seven projections (embeddings, lm_head and norms stay float32, as usual in
# deployments), score perplexity and JSON validity, and restore the weights afterwards. The FP8 rows quantize
# weights only (W8A16 emulation); W8A8 with quantized activations is in section 8 and the stretch exercise.

# %%
def weights_replaced(m, transform):
    """weights_set with transform(weight in float32) for every decoder projection."""
    return weights_set(m, {name: transform(mod.weight.detach().float()) for name, mod in decoder_linears(m).items()})


FP8 = torch.float8_e4m3fn  # the OCP format; fnuz gives the same numbers up to the grid (section 2)
FORMATS = {
    "fp32": lambda w: w,
    "fp8 tensor": lambda w: dequantize_fp8(*quantize_fp8(w, FP8, granularity="tensor")),
    "fp8 channel": lambda w: dequantize_fp8(*quantize_fp8(w, FP8, granularity="channel")),
    "mxfp4": lambda w: mxfp4_dequantize(*mxfp4_quantize(w)),
    f"int4 g{INT4_GROUP}": lambda w: int4_dequantize(int4_group_quantize(w, INT4_GROUP)),
}
KEY_PAIRS = (("location", "severity"), ("root_cause", "action"))   # station-log keys tiny-qwen-zh knows
LOG_KEYS = {"location": "location", "severity": "severity", "root_cause": "cause", "action": "action"}
_eval = lab.load_qc_reports("eval")
JSON_PROMPTS = []
for _i in range(N_JSON):
    _first, _second = KEY_PAIRS[_i % 2]
    _value = _eval[_i]["report"][_first]
    JSON_PROMPTS.append(f'{{"{LOG_KEYS[_first]}": {json.dumps(_value, ensure_ascii=False)}, "{LOG_KEYS[_second]}": "')
GREEDY = GenerationConfig(max_new_tokens=JSON_NEW_TOKENS, do_sample=False, num_beams=1, repetition_penalty=1.0,
                          eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)


def parse_json_object(text):
    """Lab 03's rule: the whole text (surrounding whitespace allowed) parses as a JSON object."""
    try:
        value = json.loads(text.strip())
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


@torch.no_grad()
def json_valid_rate(m, prompts):
    """Share of prompts whose first completed line (prompt + greedy continuation) is a JSON object."""
    tok.padding_side = "left"
    try:
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(m.device)
        out = m.generate(**enc, generation_config=GREEDY)
    finally:
        tok.padding_side = "right"
    texts = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    lines = [(p + t).split("\n")[0] for p, t in zip(prompts, texts)]
    return sum(parse_json_object(line) is not None for line in lines) / len(lines), lines


quality = {}
for _name, _transform in FORMATS.items():
    with lab.Timer(device) as _t, weights_replaced(model, _transform):
        _ppl = perplexity(model, tok, EVAL_TEXTS)
        _rate, _lines = json_valid_rate(model, JSON_PROMPTS)
    quality[_name] = {"perplexity": _ppl, "json_valid": _rate, "example": _lines[0]}
    print(f"{_name:12s} perplexity {_ppl:8.3f}   JSON valid {_rate:5.2f}   ({_t.seconds:.1f} s)  e.g. {_lines[0][:60]}")

# %% [markdown] tags=["zh"]
# **练习 6b**：`weight_bytes(config, fmt, *, group_size=128)` 返回一个 Qwen2 模型的权重字节数（`float`）。
#
# - `config`：Hugging Face 键的字典（同 Lab 02）：`num_hidden_layers`、`hidden_size`、`num_attention_heads`、
#   `num_key_value_heads`（缺省等于头数）、`head_dim`（缺省 hidden / 头数）、`intermediate_size`、`vocab_size`、
#   `tie_word_embeddings`。
# - 以 `fmt` 存储的是每层七个投影：q `[头数·hd, h]`、k、v `[KV头数·hd, h]`、o `[h, 头数·hd]`、gate、up
#   `[inter, h]`、down `[h, inter]`。其余都按 bf16（2 字节）：嵌入 `V·h`、未共享时的 lm_head `V·h`、q/k/v 的偏置、
#   每层两个 RMSNorm 和最后一个 norm（各 `h`）。
# - 每个投影矩阵 `[out, in]` 的字节数：`"bf16"` 2·out·in；`"fp8-tensor"` out·in + 4（一个 fp32 scale）；
#   `"fp8-channel"` out·in + 4·out；`"mxfp4"` out·in/2 + out·in/32（每 32 个元素一个 E8M0 字节）；
#   `"int4"` out·in/2 + 每组 2.5 字节（2 字节的 fp16/bf16 scale + 打包的 4 位零点 0.5 字节），组数 out·in/group_size。
# - 未知 `fmt`、`in` 不能被 32（mxfp4）或 `group_size`（int4）整除时抛 `ValueError`。

# %% [markdown] tags=["en"]
# **Exercise 6b**: `weight_bytes(config, fmt, *, group_size=128)` returns the weight bytes of a Qwen2 model
# (a `float`).
#
# - `config`: a dict with Hugging Face keys (as in lab 02): `num_hidden_layers`, `hidden_size`,
#   `num_attention_heads`, `num_key_value_heads` (default: the head count), `head_dim` (default hidden /
#   heads), `intermediate_size`, `vocab_size`, `tie_word_embeddings`.
# - Stored in `fmt`: the seven projections of each layer: q `[heads·hd, h]`, k and v `[kv_heads·hd, h]`, o
#   `[h, heads·hd]`, gate and up `[inter, h]`, down `[h, inter]`. Everything else in bf16 (2 bytes): the
#   embedding `V·h`, the lm_head `V·h` when untied, the q/k/v biases, two RMSNorms per layer and the final norm
#   (`h` each).
# - Bytes of one projection `[out, in]`: `"bf16"` 2·out·in; `"fp8-tensor"` out·in + 4 (one fp32 scale);
#   `"fp8-channel"` out·in + 4·out; `"mxfp4"` out·in/2 + out·in/32 (one E8M0 byte per 32 elements); `"int4"`
#   out·in/2 + 2.5 bytes per group (a 2-byte fp16/bf16 scale and a packed 4-bit zero-point), out·in/group_size
#   groups.
# - `ValueError` for an unknown `fmt`, or an `in` that is not a multiple of 32 (mxfp4) or of `group_size`
#   (int4).

# %% tags=["solution"] grade_id="08-memory-sol-1"
WEIGHT_FORMATS = ("bf16", "fp8-tensor", "fp8-channel", "mxfp4", "int4")


def weight_bytes(config, fmt, *, group_size=128):
    """Weight bytes of a Qwen2-style decoder with its seven projections stored in fmt, the rest in bf16."""
    ### BEGIN SOLUTION
    if fmt not in WEIGHT_FORMATS:
        raise ValueError(f"fmt must be one of {WEIGHT_FORMATS}, got {fmt!r}")
    h, heads = config["hidden_size"], config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or h // heads
    inter, vocab = config["intermediate_size"], config["vocab_size"]
    q_out, kv_out = heads * head_dim, kv_heads * head_dim
    shapes = [(q_out, h), (kv_out, h), (kv_out, h), (h, q_out), (inter, h), (inter, h), (h, inter)]

    def matrix(out_f, in_f):
        n = out_f * in_f
        if fmt == "bf16":
            return 2 * n
        if fmt == "fp8-tensor":
            return n + 4
        if fmt == "fp8-channel":
            return n + 4 * out_f
        if fmt == "mxfp4":
            if in_f % 32:
                raise ValueError(f"mxfp4 needs in_features divisible by 32, got {in_f}")
            return n / 2 + n / 32
        if in_f % group_size:
            raise ValueError(f"int4 needs in_features divisible by group_size {group_size}, got {in_f}")
        return n / 2 + (n / group_size) * 2.5

    per_layer = sum(matrix(o, i) for o, i in shapes) + 2 * (q_out + 2 * kv_out) + 2 * 2 * h
    embeddings = 2 * vocab * h * (1 if config.get("tie_word_embeddings") else 2)
    return float(config["num_hidden_layers"] * per_layer + embeddings + 2 * h)
    ### END SOLUTION


# %% [markdown] tags=["zh"]
# 配置来自 Hugging Face 上公开的 `config.json`（https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct/blob/main/config.json 、
# https://huggingface.co/Qwen/Qwen2.5-7B-Instruct/blob/main/config.json ），与 Lab 02、Lab 03 用的相同：
# 0.5B：24 层、hidden 896、14 头、2 个 KV 头、intermediate 4864、词表 151936、共享嵌入；7B：28 层、hidden 3584、
# 28 头、4 个 KV 头、intermediate 18944、词表 152064、不共享嵌入。KV cache 用 Lab 02 的公式。

# %% [markdown] tags=["en"]
# The configs are the published `config.json` files on Hugging Face
# (https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct/blob/main/config.json,
# https://huggingface.co/Qwen/Qwen2.5-7B-Instruct/blob/main/config.json), the same as in labs 02 and 03: 0.5B:
# 24 layers, hidden 896, 14 heads, 2 KV heads, intermediate 4864, vocab 151936, tied embeddings; 7B: 28 layers,
# hidden 3584, 28 heads, 4 KV heads, intermediate 18944, vocab 152064, untied. The KV cache uses lab 02's formula.

# %%
QWEN25_05B = {"model_type": "qwen2", "num_hidden_layers": 24, "hidden_size": 896, "num_attention_heads": 14,
              "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 151936, "tie_word_embeddings": True}
QWEN25_7B = {"model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 3584, "num_attention_heads": 28,
             "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "tie_word_embeddings": False}


def kv_cache_bytes(config, n_tokens, *, batch=1, bytes_per_elem=2):
    """Lab 02's formula: 2 (K and V) x layers x KV heads x head_dim x bytes x tokens x batch."""
    n_heads = config["num_attention_heads"]
    n_kv = config.get("num_key_value_heads") or n_heads
    per_head = config.get("head_dim") or config["hidden_size"] // n_heads
    return 2 * config["num_hidden_layers"] * n_kv * per_head * bytes_per_elem * n_tokens * batch


# %% tags=["test"] grade_id="08-memory-1" points=2
assert weight_bytes(QWEN25_05B, "bf16") == 2 * 494_032_768, \
    f"bf16 = 2 × 参数量（Lab 02：494,032,768）/ 2 x the parameter count: {weight_bytes(QWEN25_05B, 'bf16'):,.0f}"
_tiny_cfg = model.config.to_dict()
assert weight_bytes(_tiny_cfg, "bf16") == 2 * sum(p.numel() for p in model.parameters()), "必须与加载的模型一致 / must match the loaded model"
_lin05 = 24 * (896 * 896 * 2 + 128 * 896 * 2 + 4864 * 896 * 3)
assert weight_bytes(QWEN25_05B, "fp8-tensor") == 2 * 494_032_768 - _lin05 + 24 * 7 * 4, \
    "fp8-tensor：每个投影 1 字节/权重 + 4 字节 scale / 1 byte per weight + a 4-byte scale per projection"
assert math.isclose(weight_bytes(QWEN25_05B, "mxfp4"), 2 * 494_032_768 - 2 * _lin05 + _lin05 * (0.5 + 1 / 32)), \
    "mxfp4：每权重半字节 + 每 32 个 1 字节 / half a byte per weight + 1 byte per 32"
try:
    weight_bytes(QWEN25_05B, "int4", group_size=100)
except ValueError:
    pass
else:
    raise AssertionError("896 不能被 100 整除，应抛出 ValueError / 896 is not a multiple of 100: must raise ValueError")

# %% [markdown] tags=["zh"]
# 把质量和显存画在一起：横轴是七个投影每个权重平均占多少位（含 scale 的开销，按 `tiny-qwen-zh` 的形状算），纵轴是困惑度
# 与 JSON 有效率。右图是 Qwen2.5-0.5B 与 7B 在各格式下的权重 + 32 条 4096 token 序列的 KV cache（bf16 与 FP8）。
# 这里的模型字节用 GB = 10⁹ 字节；第 7 节的显存容量用 GiB（2³⁰ 字节）：厂商印的“192 GB”显存按二进制计，见下文。

# %% [markdown] tags=["en"]
# Quality and memory together: the x axis is the average bits per weight of the seven projections (scale
# overhead included, for `tiny-qwen-zh`'s shapes), the y axes perplexity and JSON validity. On the right: the
# weights of Qwen2.5-0.5B and 7B in each format, plus the KV cache of 32 sequences of 4096 tokens (bf16 and FP8).
# Model bytes here are in GB = 10⁹ bytes; section 7's memory capacities are GiB (2³⁰ bytes): the "192 GB" vendors
# print for memory counts in binary units, see there.

# %%
_n_lin = sum(m.weight.numel() for m in LINEARS.values())
_rest = weight_bytes(_tiny_cfg, "bf16") - 2 * _n_lin
FORMAT_OF = {"fp32": None, "fp8 tensor": "fp8-tensor", "fp8 channel": "fp8-channel", "mxfp4": "mxfp4",
             f"int4 g{INT4_GROUP}": "int4"}
bits_per_weight = {name: 32.0 if f is None else 8 * (weight_bytes(_tiny_cfg, f, group_size=INT4_GROUP) - _rest) / _n_lin
                   for name, f in FORMAT_OF.items()}
_fig, (_ax0, _ax1, _ax2) = plt.subplots(1, 3, figsize=(16, 4))
for _i, (_name, _row) in enumerate(quality.items()):
    _xy_ppl = (bits_per_weight[_name], 100 * (_row["perplexity"] / quality["fp32"]["perplexity"] - 1))
    _xy_json = (bits_per_weight[_name], _row["json_valid"])
    for _ax, _xy in ((_ax0, _xy_ppl), (_ax1, _xy_json)):
        _ax.scatter(*_xy, s=40)
        _ax.annotate(_name, _xy, xytext=(5, -12 if _i % 2 else 6), textcoords="offset points", fontsize=8)
for _ax, _ylabel, _title in ((_ax0, "perplexity change vs fp32 (%)", "perplexity (qc_reports eval)"),
                             (_ax1, "JSON-valid rate", f"JSON validity ({len(JSON_PROMPTS)} prompts)")):
    _ax.set_xscale("log", base=2)
    _ax.set(title=f"{MODEL}: {_title}", xlabel="bits per projection weight (scales included)", ylabel=_ylabel)
    _ax.grid(True, alpha=0.3)
_ax1.set_ylim(-0.05, 1.05)
_mem = {}
for _mname, _cfg in (("0.5B", QWEN25_05B), ("7B", QWEN25_7B)):
    for _fmt in ("bf16", "fp8-channel", "mxfp4", "int4"):
        _mem[(_mname, _fmt)] = {"weights": weight_bytes(_cfg, _fmt) / 1e9,
                                "kv bf16": kv_cache_bytes(_cfg, 4096, batch=32) / 1e9,
                                "kv fp8": kv_cache_bytes(_cfg, 4096, batch=32, bytes_per_elem=1) / 1e9}
_labels = [f"{m}\n{f}" for m, f in _mem]
_ax2.bar(_labels, [v["weights"] for v in _mem.values()], label="weights")
_ax2.bar(_labels, [v["kv fp8"] for v in _mem.values()], bottom=[v["weights"] for v in _mem.values()], label="KV fp8 (32 x 4096)")
_ax2.bar(_labels, [v["kv bf16"] - v["kv fp8"] for v in _mem.values()],
         bottom=[v["weights"] + v["kv fp8"] for v in _mem.values()], label="extra for KV bf16", alpha=0.4)
_ax2.set(title="Qwen2.5 weights + KV cache", ylabel="GB")
_ax2.legend(fontsize=8)
_ax2.tick_params(axis="x", labelsize=7)
plt.tight_layout()
plt.show()
for (_mname, _fmt), _v in _mem.items():
    print(f"Qwen2.5-{_mname:4s} {_fmt:12s} weights {_v['weights']:6.2f} GB | KV 32x4096: bf16 {_v['kv bf16']:6.2f} GB, fp8 {_v['kv fp8']:6.2f} GB")

# %%
# This run's reading: every number the text below compares comes from here, not from the author's run.
_ppls = [row["perplexity"] for row in quality.values()]
_int4 = f"int4 g{INT4_GROUP}"
print(f"perplexity / 困惑度, five formats: {min(_ppls):.2f} – {max(_ppls):.2f} "
      f"(spread {100 * (max(_ppls) / min(_ppls) - 1):.2f} %)")
print(f"JSON validity / JSON 有效率: fp32 {quality['fp32']['json_valid']:.2f}, {_int4} {quality[_int4]['json_valid']:.2f} "
      f"(one prompt is worth / 每个提示占 {1 / len(JSON_PROMPTS):.2f})")

# %% [markdown] tags=["zh"]
# **读数**（数字见上一格，来自你这次运行）：比较五种格式困惑度的差别与模型本身的困惑度，比较 JSON 有效率的差别与一个
# 提示的分量——差一两个提示就在噪声范围内。一个只有 4M 参数、本身就没学好的模型不是好裁判：它自身的误差远大于量化噪声。
# 在真实规模的 LLM 上，4 位的就近舍入 (round-to-nearest) 量化会带来可测的困惑度上升——这正是 GPTQ、AWQ 存在的原因
# （两篇论文都以它为对照）；用 gpu 配置在 Qwen2.5-0.5B 上看。
# 显存上：7B 的权重从 bf16 到 4 位缩小约 2.7 倍（嵌入仍是 bf16）；而 32 条 4096 token 的 bf16 KV cache 已有 bf16 权重的一半——
# 并发越高，KV cache 越是大头，这就是下一节。

# %% [markdown] tags=["en"]
# **Reading it** (the numbers are in the cell above, from your run): compare the spread of the five formats'
# perplexities with the model's own perplexity, and the difference in JSON validity with what one prompt is
# worth: one or two prompts are within the noise. A 4 M-parameter model that never learned its data well is a
# poor judge: its own error dwarfs the quantization noise. On LLMs of real size, 4-bit round-to-nearest
# quantization costs measurable perplexity, which is why GPTQ and AWQ exist (both papers compare against it); run
# the gpu profile to see it on Qwen2.5-0.5B. On memory: 7B's weights shrink about 2.7× from bf16 to 4 bits (the
# embeddings stay bf16), while the bf16 KV cache of 32 sequences of 4096 tokens is already half the bf16 weights.
# The higher the concurrency, the more the KV cache dominates: the next section.

# %% [markdown] tags=["zh"]
# ## 7 · FP8 KV cache：能多容纳多少并发序列
#
# Lab 02 的容量表算的是“权重放下后，剩下的显存能放多少个 KV token”。服务端真正关心的是：上下文长度 L 下能同时跑多少条
# 序列。FP8 KV cache 把每个 token 的 KV 字节减半（vLLM 的 `kv_cache_dtype="fp8"`；不校准时 scale 默认为 1.0，
# 见 https://docs.vllm.ai/en/latest/features/quantization/quantized_kvcache/ ），FP8 权重再腾出一些显存（不到一半：嵌入仍是 bf16）。
#
# 下面给出的 `max_concurrent_sequences(memory_bytes, weights_bytes, kv_bytes_per_token, context_tokens, *, reserve_bytes=0)`
# 把练习 6b 的 `weight_bytes` 和 KV cache 合成一个答案（它不计分，是练习 6b 的用法）：
#
# - 可用于 KV 的字节 = `memory_bytes − weights_bytes − reserve_bytes`（`weights_bytes`：权重字节数，如 `weight_bytes(...)`
#   的结果；`reserve_bytes`：激活与运行时开销）。
# - 返回 `int`：可用字节 // (`kv_bytes_per_token × context_tokens`)；可用字节 ≤ 0 时为 0。
# - `kv_bytes_per_token` 或 `context_tokens` ≤ 0 时抛 `ValueError`。

# %% [markdown] tags=["en"]
# ## 7 · FP8 KV cache: how many more concurrent sequences
#
# Lab 02's capacity table asked "after the weights, how many KV tokens fit". A server asks how many sequences of
# context L can run at once. An FP8 KV cache halves the KV bytes per token (vLLM's `kv_cache_dtype="fp8"`;
# without calibration its scales default to 1.0, see
# https://docs.vllm.ai/en/latest/features/quantization/quantized_kvcache/), and FP8 weights free some memory on
# top (less than half of it: the embeddings stay bf16).
#
# The given `max_concurrent_sequences(memory_bytes, weights_bytes, kv_bytes_per_token, context_tokens, *,
# reserve_bytes=0)` turns exercise 6b's `weight_bytes` and the KV cache into one answer (it is not graded: it is
# what exercise 6b is for):
#
# - Bytes left for the KV cache = `memory_bytes − weights_bytes − reserve_bytes` (`weights_bytes`: the weights'
#   bytes, e.g. from `weight_bytes(...)`; `reserve_bytes`: activations and runtime overhead).
# - Returns an `int`: those bytes // (`kv_bytes_per_token × context_tokens`); 0 when no bytes are left.
# - `ValueError` when `kv_bytes_per_token` or `context_tokens` is ≤ 0.

# %%
def max_concurrent_sequences(memory_bytes, weights_bytes, kv_bytes_per_token, context_tokens, *, reserve_bytes=0):
    """Sequences of context_tokens whose KV cache fits next to the weights (an int, 0 if none)."""
    if kv_bytes_per_token <= 0 or context_tokens <= 0:
        raise ValueError(f"kv_bytes_per_token and context_tokens must be > 0, got {kv_bytes_per_token}, {context_tokens}")
    free = memory_bytes - weights_bytes - reserve_bytes
    if free <= 0:
        return 0
    return int(free // (kv_bytes_per_token * context_tokens))


print(f"Qwen2.5-7B KV cache: {kv_cache_bytes(QWEN25_7B, 1):,} bytes per token in bf16 (2 × 28 × 4 × 128 × 2)")

# %% [markdown] tags=["zh"]
# Qwen2.5-7B、上下文 8192、预留 10% 显存给激活与运行时。显存容量取自课程的共享数据手册表 `rocmlab.lab.datasheets`
# （与 Lab 01、02 同一份，每行附厂商来源，下面会打印出来）。厂商印的“192 GB”是二进制单位：AMD 的 ROCm GPU 规格表写作
# 192 GiB，MI300X 向 rocm-smi 报告 205,822,885,888 字节（比 192 × 10⁹ 多），所以按 `memory_bytes` = 192 × 2³⁰ 字节算（Lab 10 同样）。第一列就是 Lab 02 表格的算法（bf16 权重与 KV，可容纳的
# KV token 数），后面换算成序列数。

# %% [markdown] tags=["en"]
# Qwen2.5-7B, context 8192, 10 % of memory reserved for activations and the runtime. Memory sizes come from the
# course's shared datasheet table `rocmlab.lab.datasheets` (the same as in labs 01 and 02; each row cites its
# vendor source, printed below). The "192 GB" vendors print is binary: AMD's ROCm GPU table says 192 GiB, and an
# MI300X reports 205,822,885,888 bytes to rocm-smi (more than 192 × 10⁹), so we count `memory_bytes` = 192 × 2³⁰
# bytes (as lab 10 does). The first column is lab 02's table (bf16 weights and KV: KV tokens that fit),
# then converted to sequences.

# %%
CAPACITY_GPUS = ("MI300X", "MI355X", "H100 SXM", "H200 SXM")
GPU_MEMORY_BYTES = {key: datasheets.by_key(key).memory_bytes for key in CAPACITY_GPUS}
CONTEXT = 8192
SETUPS = {"bf16 W, bf16 KV": ("bf16", 2), "fp8 W, bf16 KV": ("fp8-channel", 2), "fp8 W, fp8 KV": ("fp8-channel", 1)}
capacity = {}
print(f"Qwen2.5-7B, context {CONTEXT}, 10 % reserved; memory: " +
      ", ".join(f"{k} {b / 2**30:g} GiB ({datasheets.by_key(k).sources[0]})" for k, b in GPU_MEMORY_BYTES.items()))
for _gpu, _mem_b in GPU_MEMORY_BYTES.items():
    _lab02_tokens = (_mem_b - weight_bytes(QWEN25_7B, "bf16")) / kv_cache_bytes(QWEN25_7B, 1)
    _row = {name: max_concurrent_sequences(_mem_b, weight_bytes(QWEN25_7B, wf), kv_cache_bytes(QWEN25_7B, 1, bytes_per_elem=kb),
                                           CONTEXT, reserve_bytes=0.1 * _mem_b)
            for name, (wf, kb) in SETUPS.items()}
    capacity[_gpu] = _row
    print(f"{_gpu:9s} lab 02: {_lab02_tokens:12,.0f} KV tokens | sequences: " +
          ", ".join(f"{k} {v:4d}" for k, v in _row.items()))
_fig, _ax = plt.subplots(figsize=(8, 3.5))
_xs = range(len(GPU_MEMORY_BYTES))
for _j, _setup in enumerate(SETUPS):
    _ax.bar([x + 0.27 * (_j - 1) for x in _xs], [capacity[g][_setup] for g in GPU_MEMORY_BYTES], width=0.27, label=_setup)
_ax.set_xticks(list(_xs), list(GPU_MEMORY_BYTES))
_ax.set(title=f"Qwen2.5-7B: concurrent sequences at context {CONTEXT}", ylabel="sequences")
_ax.legend(fontsize=8)
plt.show()

# %% [markdown] tags=["zh"]
# **读数**：对 7B，FP8 权重只腾出约 6.5 GB，每张卡多十几条序列；FP8 KV cache 才让序列数翻倍。权重相对显存很小时，
# 决定并发的是 KV 的 dtype。Lab 02 那一列除以 8192 就是不留余量时的序列数。
#
# 显存省下来是真的，质量代价呢？在模型上模拟 FP8 KV cache：给每层 `k_proj`、`v_proj` 的输出挂钩子，按逐张量动态
# scale 量化再反量化。这是近似：真实的 K cache 存的是旋转位置编码 (RoPE) 之后的 K，scale 通常来自校准（vLLM 默认 1.0）。

# %% [markdown] tags=["en"]
# **Reading it**: for 7B, FP8 weights free only about 6.5 GB, a dozen or so more sequences per card; the FP8 KV
# cache is what doubles the count. Once the weights are small next to memory, the KV dtype sets the
# concurrency. Lab 02's column divided by 8192 is the sequence count with nothing reserved.
#
# The memory saving is real; what does it cost in quality? Emulate an FP8 KV cache on the model: hooks on every
# `k_proj` and `v_proj` output quantize and dequantize with a dynamic per-tensor scale. An approximation: a
# real K cache stores K after the rotary embedding (RoPE), and its scale usually comes from calibration (vLLM's
# default is 1.0).

# %%
@contextlib.contextmanager
def fp8_kv_emulated(m, dtype=FP8):
    def fake_quant(module, inputs, output):
        flat = output.reshape(-1, output.shape[-1])
        return dequantize_fp8(*quantize_fp8(flat, dtype)).reshape(output.shape).to(output.dtype)

    hooks = [mod.register_forward_hook(fake_quant) for name, mod in decoder_linears(m).items()
             if name.endswith(("k_proj", "v_proj"))]
    try:
        yield m
    finally:
        for hook in hooks:
            hook.remove()


with fp8_kv_emulated(model):
    kv_fp8_ppl = perplexity(model, tok, EVAL_TEXTS)
print(f"perplexity: fp32 KV {quality['fp32']['perplexity']:.3f} -> emulated FP8 KV {kv_fp8_ppl:.3f} "
      f"({kv_fp8_ppl / quality['fp32']['perplexity'] - 1:+.2%})")

# %% [markdown] tags=["zh"]
# ## 8 · 真正的 FP8 GEMM（gpu 配置）
#
# `torch._scaled_mm(a, b, scale_a, scale_b, out_dtype)` 计算 `(a · scale_a) @ (b · scale_b)`：a、b 为 FP8，
# 矩阵核心直接做 FP8 乘加。PyTorch 允许它的设备：ROCm 上 gfx942（FNUZ）、gfx1200/1201 与 gfx950（OCP；这两者
# 还要求构建时的 ROCm 版本足够新，源码以 `ROCM_VERSION` 判断）；CUDA 上计算能力 ≥ 8.9（pytorch/pytorch
# `ScaledBlas.cpp` / `Blas.cpp`，`_scaled_mm_allowed_device`）。所以 dtype 按**架构**选，绝不靠 `is_bf16_supported()` 之类在 ROCm 上总是返回 True 的探测。CPU 上它也能运行
# （用于检查正确性），但计时没有意义。
#
# 诚实测量：每个计时样本内连续跑 `GEMM_ITERS` 次 GEMM、前后各同步一次；报告 `REPEATS` 个样本的中位数和最小–最大范围；
# 只有当两个范围不重叠时才说“真的更快”。峰值百分比的分母是数据手册的**稠密** (dense) 峰值，并写明 dtype。bf16 的
# 稠密峰值和 FP8 峰值都取自共享表 `rocmlab.lab.datasheets`，按手册原样记录、每行注明出处（H100/H200 手册只印了含 2:4 稀疏的
# 1979 和 3958，稠密是一半）：FP8 稠密峰值 MI300X / MI325X 2614.9 TFLOPS，MI355X 5033.2，MI350X 4613.7，H100 SXM / H200 1979。
# 它们都等于 CU 数 × 每 CU 每时钟的 FP8 FLOPs × 峰值时钟：MI300X 304 × 4096 × 2.1 GHz，MI355X 256 × 8192 × 2.4 GHz。
# MI355X / MI350X 两个数是按这个算式**推出来的**（表中该行的 `fp8_basis` 写明）。AMD 的 ROCm 博客“Matrix Core Programming on
# AMD CDNA3 and CDNA4 architecture”（https://rocm.blogs.amd.com/software-tools-optimization/matrix-cores-cdna/README.html ）
# 给出同一个算式：2·M·N·K × 矩阵核心数 × 峰值时钟 / 指令周期数。CDNA 4 的 FP8 指令 16×16×128 要 32 个周期，MI355X 有
# 256 × 4 = 1024 个矩阵核心、2.4 GHz，得 5033.2；博客的表把它取整为 5 PF。同一张表里 MXFP4 / MXFP6 是 10 PF：同形状的
# FP4/FP6 指令只要 16 个周期，所以它们的稠密峰值是 FP8 的 **2 倍**，不是 4 倍。bf16 也一样：共享表里 MI355X / MI350X 的
# bf16 是厂商取整后的 2500 / 2300 TFLOPS，按同一算式（16×16×32 需 16 周期）是 2516.6 / 2306.9——FP8 是精确值，bf16 是取整值，
# 两者之比因此略偏离 2。

# %% [markdown] tags=["en"]
# ## 8 · Real FP8 GEMMs (gpu profile)
#
# `torch._scaled_mm(a, b, scale_a, scale_b, out_dtype)` computes `(a · scale_a) @ (b · scale_b)` with FP8 a
# and b: the matrix cores multiply-accumulate FP8 directly. PyTorch allows it on ROCm gfx942 (FNUZ), gfx1200/1201
# and gfx950 (OCP; these two only in builds for a recent enough ROCm, gated on `ROCM_VERSION`), and on CUDA
# compute capability ≥ 8.9 (pytorch/pytorch `ScaledBlas.cpp` / `Blas.cpp`, `_scaled_mm_allowed_device`). So the
# dtype is chosen from the **arch**, never from probes such as `is_bf16_supported()`, which is True on every ROCm
# build. It also runs on CPU (for correctness), where timings mean nothing.
#
# Honest measurement: each timed sample runs `GEMM_ITERS` GEMMs between two synchronisations; report the
# median of `REPEATS` samples with the min–max range, and call one faster only when the ranges do not overlap.
# A percentage of peak has the datasheet's **dense** peak as its denominator and names the dtype. The bf16 dense
# and FP8 peaks come from the shared table `rocmlab.lab.datasheets`, as the sheets print them, each row with its
# sources (the H100/H200 sheets print only 1979 and 3958 "with sparsity", twice the dense figures): FP8 dense
# peaks MI300X / MI325X 2614.9 TFLOPS, MI355X 5033.2, MI350X 4613.7, H100 SXM / H200 1979. Each is CUs × FP8
# FLOPs per clock per CU × peak clock: MI300X 304 × 4096 × 2.1 GHz, MI355X 256 × 8192 × 2.4 GHz.
# The MI355X / MI350X figures are **derived** from that product (the table row's `fp8_basis` says so). AMD's ROCm
# blog "Matrix Core Programming on AMD CDNA3 and CDNA4 architecture"
# (https://rocm.blogs.amd.com/software-tools-optimization/matrix-cores-cdna/README.html) gives the same formula,
# 2·M·N·K × matrix cores × peak clock / the instruction's cycles: CDNA 4's FP8 16×16×128 instruction takes 32
# cycles, and an MI355X has 256 × 4 = 1024 matrix cores at 2.4 GHz, so 5033.2; the blog's table rounds it to 5 PF.
# The same table gives MXFP4 / MXFP6 10 PF: the FP4/FP6 instruction of that shape takes 16 cycles, so their dense
# peak is **twice** FP8's, not four times. The bf16 figures of the shared table for MI355X / MI350X are the
# vendor's rounded 2500 / 2300 TFLOPS; the same formula (16×16×32 in 16 cycles) gives 2516.6 / 2306.9. FP8's are
# exact and bf16's rounded, so their ratio is a little off 2.

# %%
def fp8_gemm_dtype(arch):
    """The FP8 dtype torch._scaled_mm takes on this arch, or None where PyTorch does not allow it."""
    if arch is None:
        return torch.float8_e4m3fn  # CPU: correctness only
    if arch == "gfx942":
        return torch.float8_e4m3fnuz
    if arch in ("gfx950", "gfx1200", "gfx1201"):
        return torch.float8_e4m3fn
    if arch.startswith("sm_"):
        major, minor = divmod(int(arch[3:]), 10)
        return torch.float8_e4m3fn if (major, minor) >= (8, 9) else None
    return None


def dense_peaks(spec):
    """{"bf16": dense TFLOPS, "fp8": dense TFLOPS or None} of a datasheets row, or None off the table."""
    if spec is None:
        return None
    return {"bf16": spec.fp16_dense_tflops, "fp8": spec.fp8_dense_tflops}


def time_per_call(fn):
    """Median and (min, max) seconds per call: GEMM_ITERS calls between two synchronisations per sample."""
    t = lab.time_it(lambda: [fn() for _ in range(GEMM_ITERS)], repeats=REPEATS, warmup=WARMUP, device=device)
    per_call = [s / GEMM_ITERS for s in t["samples"]]
    return statistics.median(per_call), (min(per_call), max(per_call))


GEMM_DTYPE = fp8_gemm_dtype(ARCH)
gpu_name, gpu_spec = datasheets.for_device(device)
peaks = dense_peaks(gpu_spec)
print(f"{gpu_name} ({ARCH or 'cpu'}): FP8 GEMM dtype {GEMM_DTYPE}; dense peaks (TFLOPS) {peaks or 'not in the table'}"
      + (f"; sources {', '.join(gpu_spec.sources)}" if gpu_spec else ""))
gemm_rows = []
if GEMM_DTYPE is None:
    print(f"torch._scaled_mm is not allowed on {ARCH}: no FP8 GEMM here")
for _n in GEMM_SIZES if GEMM_DTYPE is not None else []:
    _gen = torch.Generator(device=device).manual_seed(SEED)
    _a = torch.randn(_n, _n, generator=_gen, device=device, dtype=torch.bfloat16)
    _b = torch.randn(_n, _n, generator=_gen, device=device, dtype=torch.bfloat16)
    _qa, _sa = quantize_fp8(_a, GEMM_DTYPE)
    _qb, _sb = quantize_fp8(_b, GEMM_DTYPE)
    _qbt = _qb.t()  # _scaled_mm wants its second operand column-major

    def _fp8(qa=_qa, qbt=_qbt, sa=_sa, sb=_sb):
        return torch._scaled_mm(qa, qbt, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)

    _err = relative_error(dequantize_fp8(_qa, _sa) @ dequantize_fp8(_qb, _sb).t(), _fp8().float())
    _t16, _r16 = time_per_call(lambda a=_a, b=_b: a @ b.t())
    _t8, _r8 = time_per_call(_fp8)
    _row = {"n": _n, "bf16_tflops": 2 * _n**3 / _t16 / 1e12, "fp8_tflops": 2 * _n**3 / _t8 / 1e12,
            "speedup": _t16 / _t8, "real": _r8[1] < _r16[0], "fp8_vs_dequantized_error": _err}
    gemm_rows.append(_row)
    _pct = "" if peaks is None else f" | {_row['bf16_tflops'] / peaks['bf16']:.0%} of the bf16 dense peak"
    if peaks is not None and peaks["fp8"] is not None:
        _pct += f", {_row['fp8_tflops'] / peaks['fp8']:.0%} of the FP8 dense peak"
    print(f"n={_n:5d}: bf16 {_row['bf16_tflops']:8.2f} TFLOPS [{_r16[0] * 1e3:.3f}-{_r16[1] * 1e3:.3f} ms], "
          f"FP8 {_row['fp8_tflops']:8.2f} TFLOPS [{_r8[0] * 1e3:.3f}-{_r8[1] * 1e3:.3f} ms], "
          f"x{_row['speedup']:.2f} ({'beyond the spread' if _row['real'] else 'within the spread'}); "
          f"FP8 vs dequantized GEMM {_err:.1e}{_pct}")
if device.type == "cpu":
    print("CPU: _scaled_mm ran for correctness only; these timings say nothing about a GPU")

# %% [markdown] tags=["zh"]
# **在 GPU 上读数**：大矩阵上 FP8 的 TFLOPS 接近 bf16 的两倍才说明矩阵核心真的在跑 FP8；小矩阵（2048）每次调用的工作量
# 不足以填满 GPU，发射等固定开销占比大，加速比小。量化不在计时范围内（计时前做一次）；真实的 W8A8 层每次调用都要量化激活，
# 那部分开销要另算（见选做练习）。逐张量 scale 的 GEMM 和反量化后的 bf16 GEMM 的相对误差应在 10⁻² 量级以下（累加是 fp32）。
# 在 MI300X 上若 `_scaled_mm` 报 dtype 错误，先检查张量是不是 fnuz——回到第 3 节。

# %% [markdown] tags=["en"]
# **Reading it on a GPU**: FP8 TFLOPS close to twice bf16 on the large sizes show the matrix cores really run
# FP8; small sizes (2048) have too little work per call to fill the GPU, so fixed costs such as the launch weigh
# more and they gain less. The quantization is outside the timed region (done once before timing); a real W8A8
# layer quantizes its activations on every call, a cost to add on top (the optional exercise). The per-tensor FP8 GEMM
# should agree with the dequantized GEMM to well under 10⁻² (accumulation is fp32). If `_scaled_mm` raises a dtype
# error on an MI300X, check that the tensors are fnuz: back to section 3.

# %% [markdown] tags=["zh"]
# ## 选做 · W8A8 线性层（1 分，与核心分开计分，后面不依赖它）
#
# FP8 推理通常权重和激活都是 FP8（W8A8）：权重逐通道静态量化，激活按 token（每行）动态量化，一次 `_scaled_mm`
# 完成乘法和两组 scale（vLLM 的 `apply_fp8_linear` 的做法）。
#
# `fp8_linear(x, q_weight, weight_scale)`：`x` 为 `[M, K]` 浮点；`q_weight` 为 `[N, K]` FP8，`weight_scale` 为 `[N, 1]`
# float32（来自 `quantize_fp8(..., granularity="channel")`）。用 `quantize_fp8(x, q_weight.dtype, granularity="channel")`
# 量化 x（每行一个 scale），再调用一次 `torch._scaled_mm(qx, q_weight.t(), scale_a=sx, scale_b=weight_scale.t(),
# out_dtype=torch.bfloat16)`（逐行 scale 在多数 GPU 上只接受 bf16/fp16 输出，PyTorch 的 `_scaled_mm` 会检查），返回
# `[M, N]` 的 `.float()`。检查在所有配置下都用 CPU 张量（PyTorch 的 CPU `_scaled_mm` 两种 FP8 都支持）：与两边都反量化后
# 的 float32 矩阵乘相差在 bf16 的舍入范围内（相对 1e-2）。

# %% [markdown] tags=["en"]
# ## Optional stretch · a W8A8 linear layer (1 point, scored apart from the core; nothing later needs it)
#
# FP8 inference usually puts both weights and activations in FP8 (W8A8): weights quantized statically per
# channel, activations dynamically per token (per row), and one `_scaled_mm` does the product and both sets of
# scales (what vLLM's `apply_fp8_linear` does).
#
# `fp8_linear(x, q_weight, weight_scale)`: `x` is `[M, K]` float; `q_weight` is `[N, K]` FP8 and `weight_scale`
# `[N, 1]` float32 (from `quantize_fp8(..., granularity="channel")`). Quantize x with `quantize_fp8(x,
# q_weight.dtype, granularity="channel")` (one scale per row), then one `torch._scaled_mm(qx, q_weight.t(),
# scale_a=sx, scale_b=weight_scale.t(), out_dtype=torch.bfloat16)` (PyTorch's `_scaled_mm` accepts row-wise scales
# only with a bf16 or fp16 output on most GPUs); return the `[M, N]` result `.float()`. Checked on CPU tensors in
# every profile (PyTorch's CPU `_scaled_mm` takes both FP8 variants): within bf16 rounding (1e-2 relative) of the
# float32 product of both dequantized operands.

# %% tags=["solution"] grade_id="08-stretch-w8a8-sol-1"
def fp8_linear(x, q_weight, weight_scale):
    """W8A8: per-token FP8 activations times per-channel FP8 weights with one torch._scaled_mm (bf16 out), as float32."""
    ### BEGIN SOLUTION
    qx, sx = quantize_fp8(x, q_weight.dtype, granularity="channel")
    return torch._scaled_mm(qx, q_weight.t(), scale_a=sx, scale_b=weight_scale.t(), out_dtype=torch.bfloat16).float()
    ### END SOLUTION


# %% tags=["test"] grade_id="08-stretch-w8a8-1" points=1
_layer = LINEARS[next(k for k in LINEARS if k.endswith("gate_proj"))]
_wq, _ws = quantize_fp8(_layer.weight.detach().cpu(), FP8, granularity="channel")  # checked on CPU in every profile
_xin = torch.randn(16, _layer.in_features, generator=torch.Generator().manual_seed(3))
_y = fp8_linear(_xin, _wq, _ws)
_xq, _xs = quantize_fp8(_xin, _wq.dtype, granularity="channel")
_yref = dequantize_fp8(_xq, _xs) @ dequantize_fp8(_wq, _ws).t()
assert _y.shape == (16, _layer.out_features) and _y.dtype == torch.float32, (_y.shape, _y.dtype)
assert torch.allclose(_y, _yref, rtol=1e-2, atol=1e-2 * float(_yref.abs().max())), f"与反量化后的乘积不符 / differs from the dequantized product: {relative_error(_yref, _y):.2e}"

# %% [markdown] tags=["zh"]
# ## 小结
#
# 你亲手解码了四种 FP8，知道 MI300X 的 FNUZ 与 MI355X/H100 的 OCP 为什么同一字节差一倍、为什么 −0 会变成 NaN；
# 写出了带饱和的缩放量化、正确的 OCP→FNUZ 转换及其反方向、按 OCP MX 规范的 MXFP4、GPTQ/AWQ 式的 INT4 分组量化；
# 在课程模型上测了困惑度与 JSON 有效率，算清了权重和 KV cache 的字节，并把 Lab 02 的容量表换算成并发序列数。
#
# 在更大的 GPU 上可以试：gpu 配置（Qwen2.5-0.5B-Instruct）下比较各格式的困惑度；在 MI300X 与 MI355X 上分别跑第 8 节，
# 看 `_scaled_mm` 的 dtype 和 TFLOPS；用 vLLM 加 `--kv-cache-dtype fp8` 服务同一模型，再用 Lab 02 的基准测同样的负载。
# 参考：OCP OFP8 与 MX 规范、ROCm 精度支持页、PyTorch dtype 文档（链接见各节）。

# %% [markdown] tags=["en"]
# ## Wrap-up
#
# You decoded the four FP8 formats by hand and know why the same byte is worth half as much on an MI300X (FNUZ)
# as on an MI355X or H100 (OCP) and why −0 turns into NaN; you wrote saturating scaled quantization, a correct
# OCP→FNUZ conversion and its reverse, MXFP4 as the OCP MX spec defines it and GPTQ/AWQ-style INT4 group quantization; you
# measured perplexity and JSON validity on the course model, counted weight and KV-cache bytes, and turned lab
# 02's capacity table into concurrent sequences.
#
# On a bigger GPU: compare the formats' perplexity in the gpu profile (Qwen2.5-0.5B-Instruct); run section 8 on
# an MI300X and an MI355X and compare the `_scaled_mm` dtype and TFLOPS; serve the same model with vLLM and
# `--kv-cache-dtype fp8` and measure the same load with lab 02's benchmark. References: the OCP OFP8 and MX
# specs, ROCm's precision-support page, PyTorch's dtype docs (links in each section).
