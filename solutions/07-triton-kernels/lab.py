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
# # 实验 07 · Triton 算子开发
#
# `07-triton-kernels` · 版本 {{version}} · 计分核心约 {{minutes}} 分钟（另有选做）
#
# 前面的实验一直在调用别人写好的算子。这一次你亲手写课程模型（Qwen2 架构的 tiny-qwen-zh）需要的融合算子 (fused kernel)，并让它们在 AMD GPU 上跑对、跑快：
#
# 1. 带掩码 (mask) 的向量加法：程序编号 (program id)、`BLOCK`、尾部掩码；
# 2. 融合的、数值稳定的按行 softmax，并按字节数算清它比 eager PyTorch 少搬多少数据；
# 3. 用 `tl.dot` 写分块矩阵乘：fp32 累加、尺寸不是块的整数倍、转置（非连续）输入；
# 4. 融合 RMSNorm 与 SwiGLU，并把它们换进 tiny-qwen-zh 的前向计算，与原模块的 logits 对比；
# 5. 一个在 AMD 上合法的启动配置空间：wavefront 宽度、LDS、MFMA 尺寸，以及从 CUDA 移植时最常见的"32 线程"错误；
# 6. （选做 stretch）你自己算子的 roofline：算术强度 (arithmetic intensity)、受限于带宽还是算力；gpu 配置下用 `triton.testing.do_bench` 实测并与 torch、数据手册峰值对比。
#
# **两种运行方式。** smoke 配置在 CPU 上用 Triton 的解释器 (`TRITON_INTERPRET=1`) 运行同样的内核：它能证明结果**正确**，但它的耗时**毫无意义**（逐个程序用 NumPy 模拟，比 GPU 慢成千上万倍），所以 smoke 配置不做任何性能结论。gpu 配置在 ROCm（或 CUDA）GPU 上编译运行，测时间、算峰值百分比、自动调优 (autotune)。两种配置运行同一份测试代码。
#
# **先修**：实验 01（wavefront、数据手册峰值、诚实计时）、PyTorch 张量与步长 (stride)。

# %% [markdown] tags=["zh"]
# **自查与提交。** 每个练习下面的测试单元是给你自查用的可见测试；在终端运行 `rocmlab check <笔记本>.ipynb` 会一次跑完它们。提交：在工作坊 Hub 的 nbgrader **Assignments** 标签页里提交本笔记本（或等讲师统一收取）。成绩来自隐藏检查：它们按练习说明里写明的每一条规则，用针对你生成的其他输入（其他尺寸、dtype、步长）逐条检查，每条规则单独计分；失败时你会看到违反了哪条规则。说明里没写的要求不会被检查。

# %% [markdown] tags=["en"]
# # Lab 07 · Triton kernels on AMD GPUs
#
# `07-triton-kernels` · version {{version}} · about {{minutes}} minutes for the graded core (plus optional stretches)
#
# So far the labs called kernels someone else wrote. This time you write the fused kernels the course model (tiny-qwen-zh, Qwen2 architecture) needs, and make them correct and fast on AMD GPUs:
#
# 1. vector add with masks: program ids, `BLOCK`, tail masking;
# 2. a fused, numerically stable row softmax, and, counted in bytes, how much less data it moves than eager PyTorch;
# 3. a tiled matmul with `tl.dot`: fp32 accumulation, sizes that are not multiples of the tile, transposed (non-contiguous) inputs;
# 4. fused RMSNorm and SwiGLU, swapped into tiny-qwen-zh's forward and checked against the stock modules' logits;
# 5. a launch configuration space that is valid on AMD: wavefront width, LDS, MFMA size, and the most common CUDA-port bug, the hard-coded 32 lanes;
# 6. (optional stretch) the roofline of your own kernels: arithmetic intensity, memory- or compute-bound; in the gpu profile, measured with `triton.testing.do_bench` against torch and the datasheet peak.
#
# **Two ways to run.** The smoke profile runs the same kernels on the CPU in Triton's interpreter (`TRITON_INTERPRET=1`). It proves the results **correct**; its timings **mean nothing** (every program is simulated with NumPy, thousands of times slower than a GPU), so the smoke profile draws no performance conclusion at all. The gpu profile compiles the kernels for a ROCm (or CUDA) GPU, times them, computes % of peak and autotunes. Both profiles run the same test code.
#
# **Prerequisites**: lab 01 (wavefronts, datasheet peaks, honest timing), PyTorch tensors and strides.

# %% [markdown] tags=["en"]
# **Self-check and submit.** The test cell under each exercise holds visible tests for your own check; `rocmlab check <notebook>.ipynb` in a terminal runs them all at once. To submit, use nbgrader's **Assignments** tab on the workshop hub (or wait for the instructor's collect). Your grade comes from hidden checks: each rule stated in an exercise's contract is checked on its own, with points of its own, on inputs generated for you (other sizes, dtypes, strides); a failed check names the rule you broke. Nothing the contract does not state is checked.

# %%
import contextlib
import inspect
import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

from rocmlab import lab

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
INTERPRET = "auto"                 # "auto": Triton's interpreter exactly when the device is the CPU
BENCH = False                      # time the kernels with do_bench (compiled Triton on a GPU; the gpu profile)
AUTOTUNE = False                   # autotune the matmul over your configuration space (compiled only)
SOFTMAX_BENCH = [4096, 4096]       # rows, cols of the timed softmax (these defaults, 32 MiB in fp16, are not timed; the gpu profile sets 65536 x 8192 = 1 GiB)
MATMUL_BENCH = [4096, 4096, 4096]  # M, N, K of the timed matmul
BENCH_DTYPE = "float16"
N_PROMPTS = 2                      # QC descriptions fed to the model in exercise 4
MAX_TOKENS = 16                    # each truncated to this many tokens

# %%
lab.seed_everything(SEED)
device = lab.pick_device(DEVICE)
if INTERPRET == "auto":
    interpret = device.type == "cpu"
elif isinstance(INTERPRET, bool):
    interpret = INTERPRET
else:
    raise ValueError(f"INTERPRET must be 'auto', True or False, got {INTERPRET!r}")
if not interpret and device.type == "cpu":
    raise RuntimeError("INTERPRET=False compiles Triton kernels for a GPU, but the device is the CPU: "
                       "use INTERPRET='auto' (or True) here")
if interpret:
    device = torch.device("cpu")   # the interpreter simulates programs on host memory
    os.environ["TRITON_INTERPRET"] = "1"
else:
    os.environ.pop("TRITON_INTERPRET", None)
if BENCH and interpret:
    raise ValueError("BENCH=True times compiled kernels on a GPU; the interpreter's timings mean nothing")
bench = bool(BENCH)

import triton                      # noqa: E402  (TRITON_INTERPRET is decided above)
import triton.language as tl       # noqa: E402

print(lab.describe_environment(PROFILE, device))
print(f"triton {triton.__version__} | {'interpreter (TRITON_INTERPRET=1): correctness only' if interpret else 'compiled'}"
      f" | benchmarks {'on' if bench else 'off'}")

# %% [markdown] tags=["zh"]
# 解释器有版本要求：循环上界是运行时值的内核（第 3、5 节都有）在 Triton 3.6 的解释器里配合 NumPy 2.4 会报错（`only 0-dimensional arrays can be converted to Python scalars`），3.7 起正常。下一个单元先用一个小内核探测这一点，失败时告诉你该装哪个版本；课程验证过的组合记录在 `env/matrix.toml` 的 CPU 条目里，这里在运行时读出来。

# %% [markdown] tags=["en"]
# The interpreter has a version floor: kernels whose loop bound is a run-time value (sections 3 and 5 have them) fail in Triton 3.6's interpreter beside NumPy 2.4 (`only 0-dimensional arrays can be converted to Python scalars`) and work from 3.7. The next cell probes exactly that with a tiny kernel and, if it fails, says what to install; the pairs the course verified are recorded in the CPU entries of `env/matrix.toml`, read here at run time.

# %%
def tested_triton_pairs():
    """{environment: (torch pin, triton pin)} for the CPU entries of env/matrix.toml (empty when not found)."""
    from rocmlab.freshness import releases
    try:
        entries = releases.load_matrix()
    except releases.MatrixError as err:
        print(f"(env/matrix.toml not readable here: {err})")
        return {}
    return {e.name: (e.pin("torch"), e.pin("triton")) for e in entries if e.kind == "cpu"}


@triton.jit
def _probe_loop_kernel(out_ptr, n):
    acc = 0
    for i in range(0, n, 2):          # a loop whose bound is a run-time value
        acc += i
    tl.store(out_ptr, acc)


PAIRS = tested_triton_pairs()
print("verified torch / triton pairs:", PAIRS or "-")
_probe = torch.zeros(1, dtype=torch.int32, device=device)
try:
    _probe_loop_kernel[(1,)](_probe, 7)
except Exception as err:  # noqa: BLE001  (the interpreter raises assorted errors; report any of them)
    raise RuntimeError(
        f"triton {triton.__version__} cannot run a loop with a run-time bound here ({err!r}); "
        f"install triton 3.7 or newer, e.g. a verified pair from env/matrix.toml: {PAIRS or 'none found'}"
    ) from err
assert int(_probe.item()) == 0 + 2 + 4 + 6, _probe

# %% [markdown] tags=["zh"]
# ## 0 · Triton 的编程模型
#
# CUDA/HIP 让你为**一个线程**写代码；Triton 让你为**一个程序 (program)** 写代码，程序一次处理一整块 (block) 数据。`kernel[grid](...)` 启动 `grid` 个程序实例，每个实例用 `tl.program_id(axis)` 知道自己是第几个，用 `tl.arange(0, BLOCK)` 得到块内的偏移量向量。编译器再把这一块分给若干个 wavefront（AMD）或 warp（NVIDIA）中的线程——这一步你不写，但第 5 节会看到它的数量由 `num_warps` 决定。
#
# `BLOCK` 必须是编译期常量 (`tl.constexpr`)，而且是 2 的幂；数据长度一般不是 `BLOCK` 的整数倍，所以最后一块要用**掩码**：`tl.load(ptr + offs, mask=offs < n)` 只读合法位置，`tl.store(..., mask=...)` 只写合法位置。下面是一个完整的例子 `y = a·x`，先看它，再做练习 1。
#
# 测试用 `check_close` 比较结果：它先比形状和 dtype，再比数值，失败时说明违反了哪条规则。

# %% [markdown] tags=["en"]
# ## 0 · Triton's programming model
#
# CUDA/HIP has you write code for **one thread**; Triton has you write code for **one program**, which handles a whole block of data at once. `kernel[grid](...)` launches `grid` program instances; each learns its index from `tl.program_id(axis)` and gets the vector of offsets inside its block from `tl.arange(0, BLOCK)`. The compiler then spreads the block over the threads of some wavefronts (AMD) or warps (NVIDIA). You do not write that step, but section 5 shows that `num_warps` sets how many there are.
#
# `BLOCK` must be a compile-time constant (`tl.constexpr`) and a power of two. Data lengths are rarely a multiple of `BLOCK`, so the last block needs a **mask**: `tl.load(ptr + offs, mask=offs < n)` reads only valid positions and `tl.store(..., mask=...)` writes only valid positions. Here is a complete example, `y = a·x`; read it, then do exercise 1.
#
# Tests compare results with `check_close`: shape and dtype first, then values; a failure says which rule broke.

# %%
@triton.jit
def scale_kernel(x_ptr, y_ptr, a, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)                      # which block this program owns
    offs = pid * BLOCK + tl.arange(0, BLOCK)    # the element indices of that block
    mask = offs < n                             # the last block runs past n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, a * x, mask=mask)


def scale(x, a, block=128):
    y = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), block),)](x, y, a, x.numel(), BLOCK=block)
    return y


def check_close(got, want, *, rtol=1e-5, atol=1e-5, rule=""):
    """Assert got ≈ want (same shape and dtype); the message names the rule that broke."""
    where = f" [{rule}]" if rule else ""
    assert isinstance(got, torch.Tensor), f"应返回张量 / expected a tensor, got {type(got).__name__}{where}"
    assert got.shape == want.shape, f"形状不对 / wrong shape: got {tuple(got.shape)}, want {tuple(want.shape)}{where}"
    assert got.dtype == want.dtype, f"dtype 不对 / wrong dtype: got {got.dtype}, want {want.dtype}{where}"
    g, w = got.detach().double().cpu(), want.detach().double().cpu()
    bad = ~torch.isclose(g, w, rtol=rtol, atol=atol, equal_nan=False)
    if bad.any():
        i = tuple(int(v) for v in bad.nonzero()[0])
        raise AssertionError(f"数值不对 / wrong values: {int(bad.sum())} of {g.numel()} elements off; "
                             f"at {i}: got {g[i].item():.6g}, want {w[i].item():.6g} (rtol={rtol}, atol={atol}){where}")


def rel_error(got, want):
    """Relative Frobenius-norm error ||got - want|| / ||want||, in float64."""
    g, w = got.detach().double().cpu(), want.detach().double().cpu()
    return float((g - w).norm() / w.norm().clamp_min(1e-300))


_x = torch.randn(1000, device=device)
check_close(scale(_x, 3.0), 3.0 * _x, rule="scale example")
print("scale_kernel: 1000 elements, 8 programs of BLOCK=128, the last one masked: ok")

# %% [markdown] tags=["zh"]
# ### 速查：练习里用到的 Triton API
#
# | 写法 | 作用 |
# | --- | --- |
# | `offs = pid * BLOCK + tl.arange(0, BLOCK)` | 一维块的元素下标 |
# | `rows[:, None] * stride_r + cols[None, :] * stride_c` | 二维偏移：列向量加行向量，广播 (broadcast) 成 `(len(rows), len(cols))` 的地址块 |
# | `tl.load(ptr + offs, mask=offs < n, other=0.0)` | 只读掩码为真的位置，其余位置取 `other`（softmax 里用 `-float("inf")`） |
# | `x = tl.load(...).to(tl.float32)` | 读入后**立即**转成 fp32 再计算：Triton 解释器里 bf16 的所有运算都不对，不只是 `tl.dot` |
# | `tl.zeros((BM, BN), dtype=tl.float32)` | 新建一个累加器块 |
# | `tl.dot(x, y, acc)` | 返回 `acc + x @ y`：块矩阵乘并累加（`acc` 保持 fp32） |
# | `tl.max(x, axis=0)`、`tl.sum(x, axis=0)` | 沿某一维归约，得到少一维的结果 |
# | `tl.store(ptr + offs, y.to(out_ptr.dtype.element_ty), mask=...)` | 先转换成输出张量的 dtype 再写回 |
#
# 上游教程 [Triton tutorials (triton-lang.org)](https://triton-lang.org/main/getting-started/tutorials/index.html) 从向量加法、融合 softmax 讲到矩阵乘，和本实验的前三节一一对应，卡住时可以对照着读。

# %% [markdown] tags=["en"]
# ### Quick reference: the Triton API the exercises use
#
# | code | what it does |
# | --- | --- |
# | `offs = pid * BLOCK + tl.arange(0, BLOCK)` | element indices of a 1-D block |
# | `rows[:, None] * stride_r + cols[None, :] * stride_c` | 2-D offsets: a column vector plus a row vector broadcasts to a `(len(rows), len(cols))` block of addresses |
# | `tl.load(ptr + offs, mask=offs < n, other=0.0)` | reads only where the mask is true; elsewhere the value is `other` (softmax uses `-float("inf")`) |
# | `x = tl.load(...).to(tl.float32)` | convert to fp32 **right after** the load and compute in fp32: Triton's interpreter gets all bf16 arithmetic wrong, not just `tl.dot` |
# | `tl.zeros((BM, BN), dtype=tl.float32)` | a fresh accumulator block |
# | `tl.dot(x, y, acc)` | returns `acc + x @ y`: a block matrix product, accumulated (`acc` kept in fp32) |
# | `tl.max(x, axis=0)`, `tl.sum(x, axis=0)` | a reduction along one axis, one dimension fewer |
# | `tl.store(ptr + offs, y.to(out_ptr.dtype.element_ty), mask=...)` | cast to the output tensor's dtype, then write |
#
# The upstream [Triton tutorials (triton-lang.org)](https://triton-lang.org/main/getting-started/tutorials/index.html) go from vector add through fused softmax to matrix multiplication, matching this lab's first three sections; read them side by side when stuck.

# %% [markdown] tags=["zh"]
# **一个完整的二维例子。** 下面的内核只启动一个程序，处理一个块：它用二维偏移读入 `A` (M×K) 和 `B` (K×N)，块外的位置用 `other=0.0` 补零
#（补的零对乘积没有贡献），在 `tl.zeros` 建的 fp32 累加器上用 `tl.dot` 算出 `C = A·B`，把 `C` 转成输出的 dtype 写回，再沿 `axis=1`
# 求每行的最大值和总和。`tl.dot` 直接吃 fp16 输入（累加器是 fp32）；其他运算都先转成 fp32。练习 2–4 会用到这里的每一块：
# 练习 3 的矩阵乘把它推广到很多个块和一个沿 K 的循环。

# %% [markdown] tags=["en"]
# **A complete 2-D example.** The kernel below launches one program for one tile: it reads `A` (M×K) and `B` (K×N)
# with 2-D offsets, filling the positions outside the tile with `other=0.0` (zeros add nothing to a product), computes
# `C = A·B` with `tl.dot` into an fp32 accumulator made by `tl.zeros`, casts `C` to the output's dtype as it stores
# it, then takes each row's max and sum along `axis=1`. `tl.dot` takes fp16 inputs as they are (its accumulator is
# fp32); everything else is converted to fp32 first. Exercises 2–4 use every piece of it: exercise 3's matmul extends
# it to many tiles and a loop along K.

# %%
@triton.jit
def tile_example_kernel(a_ptr, b_ptr, c_ptr, stats_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    a_mask = (rm[:, None] < M) & (rk[None, :] < K)             # (BM, 1) & (1, BK) broadcast to (BM, BK)
    a = tl.load(a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak, mask=a_mask, other=0.0)
    b_mask = (rk[:, None] < K) & (rn[None, :] < N)
    b = tl.load(b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn, mask=b_mask, other=0.0)
    c_tile = tl.dot(a, b, tl.zeros((BM, BN), dtype=tl.float32))   # zeros + a @ b, accumulated in fp32
    c_mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c_tile.to(c_ptr.dtype.element_ty), mask=c_mask)
    row_max = tl.max(tl.where(c_mask, c_tile, -float("inf")), axis=1)   # (BM,): one value per row
    row_sum = tl.sum(c_tile, axis=1)                                      # the padded zeros add nothing
    tl.store(stats_ptr + rm * 2, row_max, mask=rm < M)
    tl.store(stats_ptr + rm * 2 + 1, row_sum, mask=rm < M)


def tile_example(a, b):
    """(A·B in a's dtype, [row max, row sum] of A·B in float32) for one tile of at most 32 × 32 × 16."""
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty(m, n, device=a.device, dtype=a.dtype)
    stats = torch.empty(m, 2, device=a.device, dtype=torch.float32)
    tile_example_kernel[(1,)](a, b, c, stats, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                              BM=32, BN=32, BK=16)
    return c, stats


_a = torch.randn(20, 10, device=device, dtype=torch.float16)
_b = torch.randn(24, 10, device=device, dtype=torch.float16).T   # a transposed view: the strides do the work
_c, _stats = tile_example(_a, _b)
_want = _a.double() @ _b.double()
check_close(_c, _want.to(torch.float16), rtol=1e-3, atol=1e-3, rule="tile example: A·B in fp16")
check_close(_stats, torch.stack([_want.max(dim=1).values, _want.sum(dim=1)], dim=1).float(), rtol=1e-3, atol=1e-3,
            rule="tile example: row max and row sum")
print(f"tile_example: C {tuple(_c.shape)} {_c.dtype}; row 0 max {_stats[0, 0]:.3f}, sum {_stats[0, 1]:.3f}: ok")

# %% [markdown] tags=["zh"]
# ## 1 · 向量加法与尾部掩码
#
# **要写的**：内核 `add_kernel` 和启动函数 `vector_add`。
#
# **约定**：
# - `vector_add(x, y, out=None, block=256)`：`x`、`y` 是形状相同的一维张量（同一设备、同一 dtype，浮点或整数都可以）；形状不同时抛出 `ValueError`。
# - 结果 `x + y` 写进 `out`（为 `None` 时新分配一个与 `x` 同形状、同 dtype 的张量），并返回这个 `out` 对象本身。
# - `block` 是每个程序处理的元素数（2 的幂）；启动 `ceil(n / block)` 个程序，第 `i` 个程序负责元素 `[i·block, (i+1)·block)`。
# - 绝不读写 `n` 之外的位置：测试把 `out` 做成一个更大缓冲区的前 `n` 个元素，检查后面的哨兵值没有被改动。
# - 隐藏检查会换长度（1、恰好整数倍、多一个）、`block` 和 dtype（float16、int32、float32），结果必须逐位精确。

# %% [markdown] tags=["en"]
# ## 1 · Vector add and tail masks
#
# **To write**: the kernel `add_kernel` and its launcher `vector_add`.
#
# **Contract**:
# - `vector_add(x, y, out=None, block=256)`: `x` and `y` are 1-D tensors of the same shape (same device, same dtype, floating or integer); a shape mismatch raises `ValueError`.
# - The result `x + y` goes into `out` (when `None`, a new tensor of `x`'s shape and dtype) and that very `out` object is returned.
# - `block` is the number of elements per program (a power of two); launch `ceil(n / block)` programs, program `i` owning elements `[i·block, (i+1)·block)`.
# - Never read or write past `n`: the test makes `out` the first `n` elements of a larger buffer and checks that the sentinel values after it are untouched.
# - Hidden checks vary the length (1, an exact multiple, one more), `block` and the dtype (float16, int32, float32); results must be exact.

# %% tags=["solution"] grade_id="07-add-sol-1"
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out[i] = x[i] + y[i] for the BLOCK elements of this program that are < n."""
    ### BEGIN SOLUTION
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)
    ### END SOLUTION


def vector_add(x, y, out=None, block=256):
    """x + y into `out` (allocated when None) with one program per `block` elements; returns `out`."""
    ### BEGIN SOLUTION
    if x.shape != y.shape or x.dim() != 1:
        raise ValueError(f"x and y must be 1-D tensors of one shape, got {tuple(x.shape)} and {tuple(y.shape)}")
    if out is None:
        out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, block),)](x, y, out, n, BLOCK=block)
    return out
    ### END SOLUTION


print(vector_add(torch.arange(5.0, device=device), torch.ones(5, device=device), block=4))

# %% tags=["test"] grade_id="07-add-1" points=2
def _padded(values, slack, fill):
    """`values` as the front of a longer buffer: a kernel that runs past n hits the fill, not foreign memory."""
    buf = torch.full((values.numel() + slack,), fill, device=values.device, dtype=values.dtype)
    buf[:values.numel()] = values
    return buf, buf[:values.numel()]


_x, _y = torch.randn(1000, device=device), torch.randn(1000, device=device)
(_, _xv), (_, _yv) = _padded(_x, 256, 0.0), _padded(_y, 256, 0.0)
_buf, _out = _padded(torch.zeros(1000, device=device), 256, -7.0)
_ret = vector_add(_xv, _yv, out=_out, block=256)
assert bool((_buf[1000:] == -7.0).all()), \
    "写到了 out[:n] 之外：最后一块要用 mask=offs < n / wrote past out[:n]: mask the last block with offs < n"
check_close(_buf[:1000], _x + _y, rule="1000 elements, block=256, into the given out")
assert _ret is _out, "应返回传入的 out 对象 / must return the given out object"
check_close(vector_add(_x, _y, block=1024), _x + _y, rule="a new out when none is given")
_i = torch.arange(-300, 300, device=device, dtype=torch.int32)
check_close(vector_add(_i, _i, block=64), 2 * _i, rtol=0, atol=0, rule="int32, exact")
try:
    vector_add(torch.ones(3, device=device), torch.ones(4, device=device))
except ValueError:
    pass
else:
    raise AssertionError("形状不同应抛出 ValueError / a shape mismatch must raise ValueError")

# %% [markdown] tags=["zh"]
# ## 2 · 融合、数值稳定的按行 softmax
#
# softmax(x)ᵢ = exp(xᵢ) / Σⱼ exp(xⱼ)。直接这样算，x 里有一个 100 在 fp32 下 `exp` 就溢出成 inf；减去行最大值 m 不改变结果（分子分母同乘 exp(−m)），而最大的指数变成 exp(0) = 1，永不溢出。这就是**数值稳定**的 softmax。
#
# **融合**的意思是一个程序读入一整行、在寄存器里做完 max、减法、exp、求和、除法，再写回一次：每个元素只读一次、写一次。让一行装进一个块，块宽 `BLOCK` 取不小于列数的最小 2 的幂（`triton.next_power_of_2`），多出来的位置用掩码读成 −inf（exp(−inf) = 0，不影响 max 和求和）。
#
# **要写的**：`softmax_kernel` 与 `softmax(x)`。
#
# **约定**：
# - `x` 是二维张量 (rows, cols)，dtype 为 float32 / float16 / bfloat16，**步长任意**（切片、转置都可能）：把行步长和列步长都传给内核。
# - 返回一个新的**连续**张量，形状和 dtype 与 `x` 相同，沿最后一维做 softmax；`tl.load` 之后立即转成 fp32、全程用 fp32 计算，最后舍入一次到 `x` 的 dtype（Triton 解释器里 bf16 的所有运算都不对，不只是 `tl.dot`）。
# - 一个程序处理一行（grid = 行数），`BLOCK = triton.next_power_of_2(cols)`。
# - 数值稳定：|x| 达到 1e4 时结果也没有 inf/nan。
# - 容差：float32 rtol=atol=1e-5；float16 1e-3；bfloat16 1e-2（相对 fp32 参考结果舍入到同一 dtype）。

# %% [markdown] tags=["en"]
# ## 2 · A fused, numerically stable row softmax
#
# softmax(x)ᵢ = exp(xᵢ) / Σⱼ exp(xⱼ). Computed like that, a single 100 in x overflows `exp` to inf in fp32. Subtracting the row maximum m changes nothing (numerator and denominator are both multiplied by exp(−m)), and the largest exponential becomes exp(0) = 1, which never overflows. That is the **numerically stable** softmax.
#
# **Fused** means one program reads a whole row, does max, subtract, exp, sum and divide in registers, and writes the row back once: every element is read once and written once. For one row to fit in one block, `BLOCK` is the smallest power of two not below the number of columns (`triton.next_power_of_2`); the extra positions are loaded as −inf through the mask (exp(−inf) = 0 changes neither the max nor the sum).
#
# **To write**: `softmax_kernel` and `softmax(x)`.
#
# **Contract**:
# - `x` is 2-D (rows, cols), float32 / float16 / bfloat16, with **any strides** (slices and transposes happen): pass both the row stride and the column stride to the kernel.
# - Return a new **contiguous** tensor of `x`'s shape and dtype holding the softmax along the last dim; convert to fp32 right after `tl.load`, compute in fp32 and round once to `x`'s dtype at the end (Triton's interpreter gets all bf16 arithmetic wrong, not just `tl.dot`).
# - One program per row (grid = number of rows), `BLOCK = triton.next_power_of_2(cols)`.
# - Numerically stable: |x| up to 1e4 gives no inf/nan.
# - Tolerances: float32 rtol=atol=1e-5; float16 1e-3; bfloat16 1e-2 (against the fp32 reference rounded to the same dtype).

# %% tags=["solution"] grade_id="07-softmax-sol-1"
@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, stride_xr, stride_xc, stride_or, stride_oc, BLOCK: tl.constexpr):
    """Softmax of row tl.program_id(0) of x into the same row of out; fp32 inside, stable."""
    ### BEGIN SOLUTION
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_xr + cols * stride_xc, mask=mask, other=-float("inf")).to(tl.float32)
    z = x - tl.max(x, axis=0)
    e = tl.exp(z)
    y = e / tl.sum(e, axis=0)
    tl.store(out_ptr + row * stride_or + cols * stride_oc, y.to(out_ptr.dtype.element_ty), mask=mask)
    ### END SOLUTION


def softmax(x):
    """Row softmax of a 2-D tensor with any strides: a new contiguous tensor, one program per row."""
    ### BEGIN SOLUTION
    if x.dim() != 2:
        raise ValueError(f"softmax expects a 2-D tensor, got shape {tuple(x.shape)}")
    n_rows, n_cols = x.shape
    out = torch.empty((n_rows, n_cols), device=x.device, dtype=x.dtype)
    softmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), x.stride(1), out.stride(0), out.stride(1),
                              BLOCK=triton.next_power_of_2(n_cols))
    return out
    ### END SOLUTION


print(softmax(torch.tensor([[1.0, 2.0, 3.0], [1000.0, 1000.0, 0.0]], device=device)))

# %% tags=["test"] grade_id="07-softmax-1" points=3
SOFTMAX_TOL = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1e-2}


def _softmax_ref(x):
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


_x = torch.randn(37, 100, device=device)
_got = softmax(_x)
check_close(_got, _softmax_ref(_x), rule="37x100 float32")
assert torch.allclose(_got.sum(dim=1), torch.ones(37, device=device), atol=1e-5), "每行之和应为 1 / each row must sum to 1"
_big = 1e4 * torch.randn(4, 50, device=device)
_got = softmax(_big)
assert bool(torch.isfinite(_got).all()), "|x|=1e4 时出现 inf/nan：先减去行最大值 / inf/nan at |x|=1e4: subtract the row max first"
check_close(_got, _softmax_ref(_big), rule="stable at |x|=1e4")
_wide = torch.randn(9, 128, device=device)
_got = softmax(_wide.t())
assert _got.is_contiguous(), "结果应是新的连续张量 / the result must be a new contiguous tensor"
check_close(_got, _softmax_ref(_wide.t()), rule="transposed input (column stride 128)")
_h16 = (3 * torch.randn(5, 300, device=device)).to(torch.float16)
check_close(softmax(_h16), _softmax_ref(_h16), rtol=1e-3, atol=1e-3, rule="float16, tolerance 1e-3")

# %% [markdown] tags=["zh"]
# ### 数据搬运：融合 vs eager
#
# eager PyTorch 写 `torch.exp(x - x.max(1, keepdim=True).values)` 这样的表达式时，每一步都是一个独立的内核，每一步都把中间结果写回显存、下一步再读出来。下面的 `eager_softmax` 把常见的五步写法列出来：
#
# | 步骤 | 读 | 写 |
# | --- | --- | --- |
# | 1. `m = x.max(dim=1)` | M·N | M |
# | 2. `z = x - m[:, None]` | M·N + M | M·N |
# | 3. `e = z.exp()` | M·N | M·N |
# | 4. `s = e.sum(dim=1)` | M·N | M |
# | 5. `y = e / s[:, None]` | M·N + M | M·N |
#
# （M 行 N 列，单位是元素，中间结果与 x 同 dtype。）融合内核只读 x 一次、写 y 一次。
#
# **要写的**：`softmax_traffic(n_rows, n_cols, elem_bytes)`。
#
# **约定**：返回 `{"eager": 字节, "fused": 字节, "ratio": eager / fused}`；eager 是上表五步读写之和乘以 `elem_bytes`，fused 是 2·M·N·`elem_bytes`；`n_rows`、`n_cols`、`elem_bytes` 任一小于 1 时抛出 `ValueError`。

# %% [markdown] tags=["en"]
# ### Data movement: fused vs eager
#
# When eager PyTorch evaluates something like `torch.exp(x - x.max(1, keepdim=True).values)`, every step is a kernel of its own, and every step writes its intermediate to memory for the next one to read back. `eager_softmax` below spells out the usual five steps:
#
# | step | read | write |
# | --- | --- | --- |
# | 1. `m = x.max(dim=1)` | M·N | M |
# | 2. `z = x - m[:, None]` | M·N + M | M·N |
# | 3. `e = z.exp()` | M·N | M·N |
# | 4. `s = e.sum(dim=1)` | M·N | M |
# | 5. `y = e / s[:, None]` | M·N + M | M·N |
#
# (M rows, N columns, in elements; intermediates in x's dtype.) The fused kernel reads x once and writes y once.
#
# **To write**: `softmax_traffic(n_rows, n_cols, elem_bytes)`.
#
# **Contract**: return `{"eager": bytes, "fused": bytes, "ratio": eager / fused}`; eager is the sum of the table's reads and writes times `elem_bytes`, fused is 2·M·N·`elem_bytes`; any of `n_rows`, `n_cols`, `elem_bytes` below 1 raises `ValueError`.

# %%
def eager_softmax(x):
    m = x.max(dim=1).values          # 1
    z = x - m[:, None]               # 2
    e = z.exp()                      # 3
    s = e.sum(dim=1)                 # 4
    return e / s[:, None]            # 5


_x = torch.randn(8, 100, device=device)
check_close(eager_softmax(_x), torch.softmax(_x, dim=1), rule="the five eager steps are a softmax")

# %% tags=["solution"] grade_id="07-traffic-sol-1"
def softmax_traffic(n_rows, n_cols, elem_bytes):
    """Bytes moved by the five eager steps and by the fused kernel: {"eager", "fused", "ratio"}."""
    ### BEGIN SOLUTION
    if min(n_rows, n_cols, elem_bytes) < 1:
        raise ValueError(f"n_rows, n_cols and elem_bytes must be >= 1, got {n_rows}, {n_cols}, {elem_bytes}")
    m, n = n_rows, n_cols
    reads = 5 * m * n + 2 * m
    writes = 3 * m * n + 2 * m
    eager = (reads + writes) * elem_bytes
    fused = 2 * m * n * elem_bytes
    return {"eager": eager, "fused": fused, "ratio": eager / fused}
    ### END SOLUTION


print(softmax_traffic(4096, 4096, 2))

# %% tags=["test"] grade_id="07-traffic-1" points=1
_t = softmax_traffic(4, 10, 4)
assert _t["fused"] == 2 * 4 * 10 * 4, f"融合内核读一次写一次 / fused reads once and writes once: {_t['fused']}"
assert _t["eager"] == (5 * 40 + 8 + 3 * 40 + 8) * 4, f"eager: 读 5MN+2M、写 3MN+2M / reads 5MN+2M, writes 3MN+2M: {_t['eager']}"
assert abs(_t["ratio"] - _t["eager"] / _t["fused"]) < 1e-12, f"ratio = eager / fused: {_t['ratio']}"
try:
    softmax_traffic(0, 10, 4)
except ValueError:
    pass
else:
    raise AssertionError("n_rows < 1 应抛出 ValueError / n_rows < 1 must raise ValueError")

# %% [markdown] tags=["zh"]
# 对大 N 而言比值趋近 4：eager 搬 8 遍数据，融合搬 2 遍。softmax 的计算量每个元素只有几次运算，它的时间几乎全花在搬数据上（第 6 节会用 roofline 证明这一点），所以少搬 4 倍的数据，在 GPU 上大致就快 4 倍。下面这个单元只为说明一件事：**解释器里的计时毫无意义**。同一个 softmax，解释器比 CPU 上的 PyTorch 慢几个数量级——这说的是 NumPy 模拟，不是任何 GPU。

# %% [markdown] tags=["en"]
# For large N the ratio tends to 4: eager moves the data 8 times, fused 2 times. Softmax does only a few operations per element, so its time goes almost entirely into moving data (section 6 proves it with a roofline), and moving 4 times less data makes it roughly 4 times faster on a GPU. The next cell makes one point only: **interpreter timings mean nothing**. The same softmax runs orders of magnitude slower in the interpreter than PyTorch on this CPU; that measures a NumPy simulation, not any GPU.

# %%
_x = torch.randn(64, 1000, device=device)
_ours = lab.time_it(lambda: softmax(_x), repeats=3, warmup=1, device=device)["median"]
_torch = lab.time_it(lambda: torch.softmax(_x, dim=1), repeats=3, warmup=1, device=device)["median"]
print(f"{'interpreter' if interpret else 'compiled'} softmax 64x1000: {_ours * 1e3:.3f} ms, torch: {_torch * 1e3:.3f} ms"
      + ("  <- a simulation on the CPU: says nothing about a GPU" if interpret else ""))

# %% [markdown] tags=["zh"]
# ## 3 · 用 `tl.dot` 写分块矩阵乘
#
# C = A·B，A 是 M×K，B 是 K×N。程序 (i, j) 负责 C 的一个 `BLOCK_M × BLOCK_N` 块：沿 K 每次取 A 的 `BLOCK_M × BLOCK_K` 和 B 的 `BLOCK_K × BLOCK_N` 两小块，`tl.dot` 相乘后累加进一个 fp32 累加器，最后一次写回。在 AMD Instinct 上 `tl.dot` 会被编译成 MFMA 矩阵指令（第 5 节）。
#
# 三个容易错的地方：(1) **累加器用 fp32**——fp16 的尾数只有 10 位，K 很长时在 fp16 里累加会丢掉小的部分和；(2) M、N、K 不是块的整数倍时，A、B 的越界部分要用掩码读成 0；(3) 地址用**步长**算（`a_ptr + 行·stride_am + 列·stride_ak`），转置视图 `w.t()` 不复制数据，只交换步长，按步长寻址它就自然正确。
#
# **要写的**：`matmul_kernel` 与 `matmul(a, b, block_m=32, block_n=32, block_k=32)`。
#
# **约定**：
# - 内核签名固定为 `matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K)`（后三个是 `tl.constexpr`）；grid 为 `(ceil(M/BLOCK_M), ceil(N/BLOCK_N))`，程序 (i, j) 计算行 `i·BLOCK_M…`、列 `j·BLOCK_N…` 的块。第 6 节的自动调优直接使用这个签名。
# - `a` (M, K)、`b` (K, N) 步长任意、dtype 相同：float32 或 float16；bfloat16 只在编译模式下测试（Triton 解释器的 `tl.dot` 把 bf16 的位模式当整数相乘，见 [triton-lang/triton#11584](https://github.com/triton-lang/triton/issues/11584)；解释器里其他 bf16 运算同样不对，所以其他练习都在 `tl.load` 之后立即转成 fp32）。内维不等时抛出 `ValueError`。
# - 返回新的连续张量 (M, N)，dtype 与 `a` 相同；累加用 fp32。块大小是不小于 16 的 2 的幂。
# - 容差（相对 Frobenius 误差，对照 float64 参考）：float32 ≤ 2e-3（允许 NVIDIA 上默认的 TF32），float16 ≤ 6e-4，bfloat16 ≤ 5e-3。在 fp16 里累加 K=4096 的正数时误差约 1e-3，超出容差。

# %% [markdown] tags=["en"]
# ## 3 · A tiled matmul with `tl.dot`
#
# C = A·B with A M×K and B K×N. Program (i, j) owns one `BLOCK_M × BLOCK_N` tile of C: walking along K, it takes a `BLOCK_M × BLOCK_K` tile of A and a `BLOCK_K × BLOCK_N` tile of B, multiplies them with `tl.dot`, adds the product to an fp32 accumulator, and writes the tile once at the end. On AMD Instinct `tl.dot` compiles to MFMA matrix instructions (section 5).
#
# Three places to go wrong: (1) **accumulate in fp32**: fp16 keeps 10 mantissa bits, and a long K summed in fp16 drops the small partial sums; (2) when M, N, K are not multiples of the tile, the out-of-range parts of A and B must be loaded as 0 through masks; (3) compute addresses from **strides** (`a_ptr + row·stride_am + col·stride_ak`): a transposed view `w.t()` copies nothing, it swaps the strides, and stride addressing handles it for free.
#
# **To write**: `matmul_kernel` and `matmul(a, b, block_m=32, block_n=32, block_k=32)`.
#
# **Contract**:
# - The kernel's signature is fixed: `matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K)` (the last three `tl.constexpr`); the grid is `(ceil(M/BLOCK_M), ceil(N/BLOCK_N))`, program (i, j) computing rows `i·BLOCK_M…` and columns `j·BLOCK_N…`. Section 6's autotuning uses this signature as is.
# - `a` (M, K) and `b` (K, N) have any strides and one dtype: float32 or float16; bfloat16 is tested on compiled Triton only (the interpreter's `tl.dot` multiplies bf16 bit patterns as integers, see [triton-lang/triton#11584](https://github.com/triton-lang/triton/issues/11584); the interpreter's other bf16 arithmetic is wrong too, which is why the other exercises convert to fp32 right after `tl.load`). Inner dimensions that differ raise `ValueError`.
# - Return a new contiguous (M, N) tensor in `a`'s dtype; accumulate in fp32. Block sizes are powers of two, at least 16.
# - Tolerances (relative Frobenius error against a float64 reference): float32 ≤ 2e-3 (allowing NVIDIA's default TF32), float16 ≤ 6e-4, bfloat16 ≤ 5e-3. Summing K=4096 positive values in fp16 errs by about 1e-3, beyond the tolerance.

# %% tags=["solution"] grade_id="07-matmul-sol-1"
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C[tile (i, j)] = A[rows of i, :] @ B[:, cols of j], accumulated in fp32."""
    ### BEGIN SOLUTION
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + ks
        a = tl.load(a_ptr + rows[:, None] * stride_am + k[None, :] * stride_ak,
                    mask=(rows[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(b_ptr + k[:, None] * stride_bk + cols[None, :] * stride_bn,
                    mask=(k[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))
    ### END SOLUTION


def matmul(a, b, block_m=32, block_n=32, block_k=32):
    """a @ b for 2-D tensors with any strides: a new contiguous tensor in a's dtype."""
    ### BEGIN SOLUTION
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul needs (M, K) @ (K, N), got {tuple(a.shape)} @ {tuple(b.shape)}")
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty((m, n), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n))
    matmul_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k)
    return c
    ### END SOLUTION


_a, _b = torch.randn(40, 24, device=device), torch.randn(24, 50, device=device)
print(f"40x24 @ 24x50: relative error {rel_error(matmul(_a, _b), _a.double() @ _b.double()):.2e}")

# %% tags=["test"] grade_id="07-matmul-1" points=3
MATMUL_TOL = {torch.float32: 2e-3, torch.float16: 6e-4, torch.bfloat16: 5e-3}


def _check_matmul(a, b, rule, **blocks):
    got = matmul(a, b, **blocks)
    assert got.shape == (a.shape[0], b.shape[1]) and got.dtype == a.dtype, \
        f"{rule}: 结果应为 ({a.shape[0]}, {b.shape[1]}) {a.dtype} / expected ({a.shape[0]}, {b.shape[1]}) {a.dtype}, got {tuple(got.shape)} {got.dtype}"
    assert got.is_contiguous(), f"{rule}: 结果应是连续张量 / the result must be contiguous"
    err = rel_error(got, a.double() @ b.double())
    assert err <= MATMUL_TOL[a.dtype], f"{rule}: 相对误差 {err:.2e} > {MATMUL_TOL[a.dtype]:.0e} / relative error too large"


_a = torch.randn(70, 50, device=device)
_check_matmul(_a, torch.randn(50, 90, device=device), "70x50 @ 50x90 float32 (not multiples of 32)")
_w = torch.randn(90, 50, device=device)
_check_matmul(_a, _w.t(), "B = w.t(): a transposed view, strides (1, 50)")
_pos_a, _pos_b = torch.rand(32, 4096, device=device).half(), torch.rand(4096, 32, device=device).half()
_check_matmul(_pos_a, _pos_b, "float16, K=4096 positive values: accumulate in fp32 (tolerance 6e-4)")
try:
    matmul(torch.randn(4, 5, device=device), torch.randn(6, 4, device=device))
except ValueError:
    pass
else:
    raise AssertionError("内维不等应抛出 ValueError / mismatched inner dims must raise ValueError")

# %% [markdown] tags=["zh"]
# ## 4 · 融合 RMSNorm 与 SwiGLU，换进课程模型
#
# Qwen2 的每个解码层做两次 RMSNorm，MLP 做 `down_proj(silu(gate_proj(x)) * up_proj(x))`（SwiGLU）。eager 实现里 RMSNorm 是平方、求均值、加 eps、开方倒数、两次乘法，好几个内核；SwiGLU 是 sigmoid、两次乘法。融合后各自只剩一个内核，数据各读写一次。
#
# RMSNorm：y = x / sqrt(mean(x², 最后一维) + eps) · weight。和 softmax 一样，一个程序处理一行，`BLOCK` 取不小于隐藏维的 2 的幂。
#
# **要写的**：`rmsnorm_kernel`、`rmsnorm(x, weight, eps)`，以及 `swiglu_kernel`、`swiglu(gate, up)`。
#
# **约定（rmsnorm）**：
# - `x` 形状为 (..., H)，float32 / float16 / bfloat16，**可能不连续**（转置、切片）；`weight` 形状为 (H,)。
# - 返回与 `x` 同形状、同 dtype 的新张量；`tl.load` 之后立即转成 fp32，用 fp32 计算 mean(x²)、归一化并乘 weight，最后舍入一次。
# - 容差：float32 rtol=atol=1e-5；float16 1e-3；bfloat16 1e-2。测试也会直接拿模型里的 RMSNorm 模块对照。
#
# **约定（swiglu）**：
# - `gate`、`up` 形状相同（任意维数），dtype 相同，可能不连续；形状不同时抛出 `ValueError`。
# - 返回 silu(gate)·up = gate·sigmoid(gate)·up，形状、dtype 与 `gate` 相同，`tl.load` 之后立即转成 fp32 计算；容差同上。

# %% [markdown] tags=["en"]
# ## 4 · Fused RMSNorm and SwiGLU, swapped into the course model
#
# Each Qwen2 decoder layer applies RMSNorm twice, and its MLP computes `down_proj(silu(gate_proj(x)) * up_proj(x))` (SwiGLU). In eager code RMSNorm is a square, a mean, an add, a reciprocal square root and two multiplies, several kernels; SwiGLU is a sigmoid and two multiplies. Fused, each becomes one kernel that reads and writes its data once.
#
# RMSNorm: y = x / sqrt(mean(x², last dim) + eps) · weight. As for softmax, one program per row, `BLOCK` the smallest power of two not below the hidden size.
#
# **To write**: `rmsnorm_kernel`, `rmsnorm(x, weight, eps)`, then `swiglu_kernel`, `swiglu(gate, up)`.
#
# **Contract (rmsnorm)**:
# - `x` has shape (..., H), float32 / float16 / bfloat16, and **may be non-contiguous** (transposed, sliced); `weight` has shape (H,).
# - Return a new tensor of `x`'s shape and dtype; convert to fp32 right after `tl.load`, compute mean(x²), the normalization and the weight product in fp32, rounding once at the end.
# - Tolerances: float32 rtol=atol=1e-5; float16 1e-3; bfloat16 1e-2. The test also compares against the model's own RMSNorm module.
#
# **Contract (swiglu)**:
# - `gate` and `up` have the same shape (any rank) and dtype and may be non-contiguous; different shapes raise `ValueError`.
# - Return silu(gate)·up = gate·sigmoid(gate)·up in `gate`'s shape and dtype, converted to fp32 right after `tl.load` and computed in fp32; same tolerances.

# %%
model, tokenizer = lab.load_model(MODEL, device=device, dtype="float32")
QC_PROMPTS = [row["description"] for row in lab.load_qc_reports("eval")[:N_PROMPTS]]
NORM_MODULES = [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]
MLP_MODULES = [m for m in model.modules() if type(m).__name__.endswith("MLP")]
print(f"{MODEL}: {len(NORM_MODULES)} RMSNorm modules ({type(NORM_MODULES[0]).__name__}), "
      f"{len(MLP_MODULES)} MLP modules ({type(MLP_MODULES[0]).__name__}), hidden {model.config.hidden_size}, "
      f"intermediate {model.config.intermediate_size}")


def stock_logits(prompts):
    batch = tokenizer(prompts, return_tensors="pt", padding=True, truncation=True, max_length=MAX_TOKENS).to(device)
    with torch.no_grad():
        return model(**batch).logits.float()


STOCK = stock_logits(QC_PROMPTS)
print("stock logits", tuple(STOCK.shape))

# %% tags=["solution"] grade_id="07-rmsnorm-sol-1"
@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, out_ptr, n_cols, stride_x, stride_out, eps, BLOCK: tl.constexpr):
    """One row: x / sqrt(mean(x^2) + eps) * w, in fp32, stored in out's dtype."""
    ### BEGIN SOLUTION
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    inv_rms = tl.math.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(out_ptr + row * stride_out + cols, (x * inv_rms * w).to(out_ptr.dtype.element_ty), mask=mask)
    ### END SOLUTION


def rmsnorm(x, weight, eps):
    """RMSNorm over the last dim of x (any shape, any layout); same shape and dtype as x."""
    ### BEGIN SOLUTION
    h = x.shape[-1]
    rows = x.reshape(-1, h)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    out = torch.empty(rows.shape, device=x.device, dtype=x.dtype)
    rmsnorm_kernel[(rows.shape[0],)](rows, weight, out, h, rows.stride(0), out.stride(0), eps,
                                     BLOCK=triton.next_power_of_2(h))
    return out.reshape(x.shape)
    ### END SOLUTION


_norm = NORM_MODULES[-1]
_h = torch.randn(2, 5, model.config.hidden_size, device=device)
print(f"rmsnorm vs the model's {type(_norm).__name__}: max |diff| "
      f"{(rmsnorm(_h, _norm.weight, _norm.variance_epsilon) - _norm(_h)).abs().max().item():.2e}")

# %% tags=["test"] grade_id="07-rmsnorm-1" points=2
NORM_TOL = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1e-2}


def _rmsnorm_ref(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


_x, _w = torch.randn(4, 7, 256, device=device), torch.randn(256, device=device)
check_close(rmsnorm(_x, _w, 1e-6), _rmsnorm_ref(_x, _w, 1e-6), rule="(4, 7, 256) float32")
with torch.no_grad():
    check_close(rmsnorm(_h, _norm.weight, _norm.variance_epsilon), _norm(_h), rule="the model's own RMSNorm")
_base = torch.randn(6, 5, 64, device=device)
_w64 = torch.randn(64, device=device)
check_close(rmsnorm(_base.transpose(0, 1), _w64, 1e-6), _rmsnorm_ref(_base.transpose(0, 1), _w64, 1e-6),
            rule="non-contiguous: transposed leading dims")
_x16, _w16 = torch.randn(3, 96, device=device).half(), torch.randn(96, device=device).half()
check_close(rmsnorm(_x16, _w16, 1e-5), _rmsnorm_ref(_x16, _w16, 1e-5), rtol=1e-3, atol=1e-3, rule="float16, tolerance 1e-3")

# %% tags=["solution"] grade_id="07-swiglu-sol-1"
@triton.jit
def swiglu_kernel(gate_ptr, up_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out = silu(gate) * up elementwise over n contiguous elements, in fp32."""
    ### BEGIN SOLUTION
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(gate_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (g * tl.sigmoid(g) * u).to(out_ptr.dtype.element_ty), mask=mask)
    ### END SOLUTION


def swiglu(gate, up):
    """silu(gate) * up for tensors of one shape and any layout; the result has gate's shape and dtype."""
    ### BEGIN SOLUTION
    if gate.shape != up.shape:
        raise ValueError(f"gate and up must have one shape, got {tuple(gate.shape)} and {tuple(up.shape)}")
    g, u = gate.contiguous(), up.contiguous()
    out = torch.empty_like(g)
    n, block = g.numel(), 1024
    swiglu_kernel[(triton.cdiv(n, block),)](g, u, out, n, BLOCK=block)
    return out
    ### END SOLUTION


_mlp = MLP_MODULES[0]
_h = torch.randn(2, 5, model.config.hidden_size, device=device)
with torch.no_grad():
    _ours = _mlp.down_proj(swiglu(_mlp.gate_proj(_h), _mlp.up_proj(_h)))
    print(f"MLP with swiglu vs the model's {type(_mlp).__name__}: max |diff| {(_ours - _mlp(_h)).abs().max().item():.2e}")

# %% tags=["test"] grade_id="07-swiglu-1" points=2
_g, _u = torch.randn(4, 7, 704, device=device), torch.randn(4, 7, 704, device=device)
check_close(swiglu(_g, _u), F.silu(_g) * _u, rule="(4, 7, 704) float32")
with torch.no_grad():
    check_close(_mlp.down_proj(swiglu(_mlp.gate_proj(_h), _mlp.up_proj(_h))), _mlp(_h), rtol=1e-4, atol=1e-5,
                rule="the model's MLP")
_gt, _ut = torch.randn(40, 30, device=device), torch.randn(30, 40, device=device)
check_close(swiglu(_gt.t(), _ut), F.silu(_gt.t()) * _ut, rule="non-contiguous: gate transposed")
try:
    swiglu(torch.ones(3, 4, device=device), torch.ones(4, 3, device=device))
except ValueError:
    pass
else:
    raise AssertionError("形状不同应抛出 ValueError / different shapes must raise ValueError")

# %% [markdown] tags=["zh"]
# ### 把内核换进模型
#
# 最后一步让内核真正为模型服务。PyTorch 模块被调用时执行的是 `module.forward`；给**实例**设置一个 `forward` 属性会盖过类上的方法，删掉这个属性又恢复原样——不需要改模型代码，也不影响同一类的其他实例。
#
# **要写的**：上下文管理器 `triton_kernels_in(model)`。
#
# **约定**：
# - 在 `with triton_kernels_in(model) as counts:` 内部，类名以 `RMSNorm` 结尾的每个模块计算 `rmsnorm(x, module.weight, module.variance_epsilon)`；类名以 `MLP` 结尾的每个模块计算 `module.down_proj(swiglu(module.gate_proj(x), module.up_proj(x)))`。
# - 在**调用时**按名字使用本笔记本的 `rmsnorm` 和 `swiglu`（测试会把它们临时换成计数的版本，检查内核确实被调用了）。
# - `counts` 是 `{"rmsnorm": 换掉的 RMSNorm 模块数, "mlp": 换掉的 MLP 模块数}`。
# - 离开 `with` 块时（包括块内抛出异常时）每个模块都恢复原样：之后的 logits 与换之前逐位相同。
# - 容差：同一批 prompt 的 float32 logits，|换后 − 原始| 的最大值 ≤ 1e-3 × (1 + 原始 logits 的最大绝对值)。

# %% [markdown] tags=["en"]
# ### Swapping the kernels into the model
#
# Last, make the kernels serve the model. Calling a PyTorch module runs `module.forward`; a `forward` attribute set on the **instance** shadows the class's method, and deleting the attribute restores it. No model code changes, and other instances of the class are untouched.
#
# **To write**: the context manager `triton_kernels_in(model)`.
#
# **Contract**:
# - Inside `with triton_kernels_in(model) as counts:`, every module whose class name ends in `RMSNorm` computes `rmsnorm(x, module.weight, module.variance_epsilon)`, and every module whose class name ends in `MLP` computes `module.down_proj(swiglu(module.gate_proj(x), module.up_proj(x)))`.
# - Look up this notebook's `rmsnorm` and `swiglu` by name **when called** (the test swaps in counting versions to check the kernels really run).
# - `counts` is `{"rmsnorm": RMSNorm modules swapped, "mlp": MLP modules swapped}`.
# - On leaving the `with` block (also when the block raises) every module is restored: logits afterwards are bit-identical to before.
# - Tolerance: float32 logits of the same prompts, max |swapped − stock| ≤ 1e-3 × (1 + max |stock logit|).

# %% tags=["solution"] grade_id="07-model-sol-1"
@contextlib.contextmanager
def triton_kernels_in(model):
    """Run the model's RMSNorm and MLP modules on the Triton kernels inside the with-block; yields the counts."""
    ### BEGIN SOLUTION
    def norm_forward(module):
        return lambda hidden: rmsnorm(hidden, module.weight, module.variance_epsilon)

    def mlp_forward(module):
        return lambda hidden: module.down_proj(swiglu(module.gate_proj(hidden), module.up_proj(hidden)))

    swapped, counts = [], {"rmsnorm": 0, "mlp": 0}
    try:
        for module in model.modules():
            name = type(module).__name__
            if name.endswith("RMSNorm"):
                module.forward, kind = norm_forward(module), "rmsnorm"
            elif name.endswith("MLP"):
                module.forward, kind = mlp_forward(module), "mlp"
            else:
                continue
            swapped.append(module)
            counts[kind] += 1
        yield counts
    finally:
        for module in swapped:
            del module.forward
    ### END SOLUTION


def model_tolerance(stock):
    return 1e-3 * (1 + stock.abs().max().item())


_stock_one = stock_logits(QC_PROMPTS[:1])
with triton_kernels_in(model) as _counts:
    _swapped = stock_logits(QC_PROMPTS[:1])
print(_counts, f"first prompt: max |swapped - stock| = {(_swapped - _stock_one).abs().max().item():.2e}, "
      f"tolerance {model_tolerance(_stock_one):.2e}")

# %% tags=["test"] grade_id="07-model-1" points=3
_want = {"rmsnorm": len(NORM_MODULES), "mlp": len(MLP_MODULES)}
with triton_kernels_in(model) as _counts:
    _swapped = stock_logits(QC_PROMPTS)
assert _counts == _want, f"应换掉 / expected to swap {_want}, got {_counts}"
_diff = (_swapped - STOCK).abs().max().item()
assert _diff <= model_tolerance(STOCK), \
    f"logits 差 {_diff:.3e} 超过容差 {model_tolerance(STOCK):.3e} / logits differ by more than the tolerance"
assert torch.equal(stock_logits(QC_PROMPTS), STOCK), "离开 with 后模型应恢复原样 / the model must be restored after the with-block"

# %% [markdown] tags=["zh"]
# 在 gpu 配置里这一段加载的是 Qwen2.5-0.5B-Instruct（24 层），同样用 float32 比较——这里比较的是内核，不是 bf16 的舍入。tiny 模型上的差别在 1e-6 量级，来自求和顺序不同。

# %% [markdown] tags=["en"]
# In the gpu profile this section loads Qwen2.5-0.5B-Instruct (24 layers), also compared in float32: the comparison is about the kernels, not bf16 rounding. On the tiny model the difference is around 1e-6, from a different summation order.

# %% [markdown] tags=["zh"]
# ## 5 · 在 AMD 上合法的启动配置
#
# **一个流传很广的错误说法："MI300X 的 wavefront 是 32。"** 不是。CDNA 架构（gfx90a MI200、gfx942 MI300、gfx950 MI350）的 wavefront 是 64 个 lane；RDNA（gfx10xx/11xx/12xx）默认 wave32。[ROCm GPU 规格表](https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html)的 Wavefront Size 列：MI300X、MI355X、MI250X 为 64，Radeon RX 7900 XTX 为 "32 or 64"；[HIP 文档](https://rocm.docs.amd.com/projects/HIP/en/latest/how-to/hip_cpp_language_extensions.html)写明 `warpSize` 在 gfx9 上为 64、gfx10 及以上为 32。
#
# **Triton 的视角**：`num_warps` 数的是 wavefront，不是"32 个线程"。Triton 的 AMD 后端（[`third_party/amd/backend/compiler.py`](https://github.com/triton-lang/triton/blob/main/third_party/amd/backend/compiler.py)，本实验读的是 3.9.0 版）按 gfx 主版本号决定宽度：`warp_size = 32 if gfx_major >= 10 else 64`，并把 workgroup 大小设为 `num_warps × warp_size`。所以在 MI300X 上 `num_warps=4` 是 **256** 个 lane，不是 128。
#
# **要写的**：`lanes_per_program(num_warps, arch)`。
#
# **约定**：返回一个程序的 lane 数 = `num_warps` × wavefront 宽度。`arch` 是 gfx 目标（可带 `:sramecc+` 之类的后缀）或 NVIDIA 的 `sm_XY`：gfx 主版本号（去掉 "gfx" 和最后两位后的数字，如 gfx942 → 9、gfx1100 → 11）小于 10 时宽 64，否则 32；`sm_*` 宽 32。`num_warps` 不是正的 2 的幂（Triton 的要求），或 `arch` 无法识别时，抛出 `ValueError`。

# %% [markdown] tags=["en"]
# ## 5 · A launch configuration space that is valid on AMD
#
# **A widespread myth: "MI300X's wavefront is 32."** It is not. CDNA parts (gfx90a MI200, gfx942 MI300, gfx950 MI350) run 64-lane wavefronts; RDNA (gfx10xx/11xx/12xx) runs wave32 by default. The Wavefront Size column of the [ROCm GPU specifications](https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html) reads 64 for MI300X, MI355X and MI250X and "32 or 64" for the Radeon RX 7900 XTX; the [HIP documentation](https://rocm.docs.amd.com/projects/HIP/en/latest/how-to/hip_cpp_language_extensions.html) states that `warpSize` is 64 on gfx9 and 32 on gfx10 and above.
#
# **Triton's view**: `num_warps` counts wavefronts, not "32 threads". Triton's AMD backend ([`third_party/amd/backend/compiler.py`](https://github.com/triton-lang/triton/blob/main/third_party/amd/backend/compiler.py), read at version 3.9.0 for this lab) picks the width from the gfx major version, `warp_size = 32 if gfx_major >= 10 else 64`, and sets the workgroup size to `num_warps × warp_size`. So on an MI300X `num_warps=4` is **256** lanes, not 128.
#
# **To write**: `lanes_per_program(num_warps, arch)`.
#
# **Contract**: return the lanes of one program = `num_warps` × the wavefront width. `arch` is a gfx target (feature suffixes like `:sramecc+` allowed) or NVIDIA's `sm_XY`: a gfx major version (the digits left after dropping "gfx" and the last two characters: gfx942 → 9, gfx1100 → 11) below 10 means width 64, else 32; `sm_*` means 32. A `num_warps` that is not a positive power of two (Triton requires one) or an unknown `arch` raises `ValueError`.

# %% tags=["solution"] grade_id="07-lanes-sol-1"
def lanes_per_program(num_warps, arch):
    """num_warps x the wavefront width of `arch` (64 on gfx9 CDNA/GCN, 32 on gfx10+ RDNA and on NVIDIA sm_*)."""
    ### BEGIN SOLUTION
    if not isinstance(num_warps, int) or num_warps < 1 or num_warps & (num_warps - 1):
        raise ValueError(f"num_warps must be a positive power of two, got {num_warps!r}")
    base = str(arch).split(":", 1)[0].strip().lower()
    if base.startswith("sm_") and base[3:].isdigit():
        return num_warps * 32
    major = base[3:-2]
    if not base.startswith("gfx") or not major.isdigit():
        raise ValueError(f"unknown GPU target {arch!r}: expected gfxNNN or sm_XY")
    return num_warps * (64 if int(major) < 10 else 32)
    ### END SOLUTION


for _arch in ("gfx942", "gfx950", "gfx90a:sramecc+:xnack-", "gfx1100", "sm_90"):
    print(f"{_arch:>24}: num_warps=4 -> {lanes_per_program(4, _arch)} lanes")

# %% tags=["test"] grade_id="07-lanes-1" points=1
assert lanes_per_program(4, "gfx942") == 256, \
    f"MI300X (gfx942) 是 wave64：num_warps=4 是 256 个 lane / MI300X is wave64: num_warps=4 is 256 lanes, got {lanes_per_program(4, 'gfx942')}"
assert lanes_per_program(4, "gfx1100") == 128, f"RDNA3 默认 wave32 / RDNA3 defaults to wave32, got {lanes_per_program(4, 'gfx1100')}"
try:
    lanes_per_program(3, "gfx942")
except ValueError:
    pass
else:
    raise AssertionError("num_warps=3 不是 2 的幂，应抛出 ValueError / num_warps=3 is not a power of two: must raise ValueError")

# %% [markdown] tags=["zh"]
# ### 从 CUDA 移植来的"32 个线程"
#
# 下面的 `row_sq_mean_ported` 是从一个 CUDA 内核移植来的：原作者一个 warp 处理一行，每个 lane 取一个元素，所以向量宽度写死成 `tl.arange(0, 32)`；而循环步长 `STEP` 用的是从设备查询到的 warp 宽度（就像 CUDA 代码里的 `warpSize`）。在 NVIDIA 或 RDNA 上 STEP=32，两处一致，结果正确；在 CDNA 上 STEP=64，每一步只读 32 个、却跳过 64 个——**一半的元素被漏掉**，结果错误。即使把 STEP 也写成 32 修好了正确性，`num_warps=1` 的程序在 CDNA 上有 64 个 lane，32 宽的向量让**一半的 lane 闲着**。
#
# 修法：向量宽度和步长用同一个 `tl.constexpr` 的 `BLOCK`，并且 `BLOCK` 至少等于程序的 lane 数。
#
# **要写的**：`block_for(n_cols, lanes)`、内核 `row_sq_mean_kernel` 与 `row_sq_mean(x, num_warps=1, wavefront=64)`。
#
# **约定**：
# - `block_for(n_cols, lanes)` = max(`lanes`, min(`triton.next_power_of_2(n_cols)`, 4096))：不窄于一个程序的 lane 数，也不超过 4096。
# - `row_sq_mean(x, num_warps, wavefront)`：`x` 二维 (rows, cols)，float32/float16/bfloat16，行步长任意（列不连续时先 `.contiguous()`）；返回 float32 张量 (rows,)，第 r 个元素是第 r 行的 mean(x²)，fp32 累加。
# - 一个程序处理一行，以 `num_warps` 启动，`BLOCK = block_for(cols, num_warps × wavefront)`；内核按 `BLOCK` 为步长循环整行，所以任何列数（包括超过 4096）都正确。
# - 容差：rtol=atol=1e-5（相对 float64 参考）。

# %% [markdown] tags=["en"]
# ### The "32 threads" ported from CUDA
#
# `row_sq_mean_ported` below was ported from a CUDA kernel whose author gave each row one warp and each lane one element, so the vector width is hard-coded as `tl.arange(0, 32)`; the loop step `STEP`, though, is the warp width queried from the device (like `warpSize` in the CUDA code). On NVIDIA or RDNA STEP=32, the two agree and the result is right; on CDNA STEP=64, every step reads 32 elements and skips 64: **half the elements are missed** and the result is wrong. Even with STEP also hard-coded to 32, which fixes correctness, a `num_warps=1` program has 64 lanes on CDNA and a 32-wide vector leaves **half the lanes idle**.
#
# The fix: one `tl.constexpr` `BLOCK` for both the vector width and the step, and `BLOCK` at least the program's lane count.
#
# **To write**: `block_for(n_cols, lanes)`, the kernel `row_sq_mean_kernel` and `row_sq_mean(x, num_warps=1, wavefront=64)`.
#
# **Contract**:
# - `block_for(n_cols, lanes)` = max(`lanes`, min(`triton.next_power_of_2(n_cols)`, 4096)): never narrower than a program's lanes, never above 4096.
# - `row_sq_mean(x, num_warps, wavefront)`: `x` is 2-D (rows, cols), float32/float16/bfloat16, any row stride (make it `.contiguous()` when the columns are not); return a float32 (rows,) tensor whose element r is mean(x²) of row r, accumulated in fp32.
# - One program per row, launched with `num_warps`, `BLOCK = block_for(cols, num_warps × wavefront)`; the kernel loops over the row in steps of `BLOCK`, so any number of columns (above 4096 too) is right.
# - Tolerance: rtol=atol=1e-5 (against a float64 reference).

# %%
@triton.jit
def row_sq_mean_ported(x_ptr, out_ptr, n_cols, stride_row, STEP: tl.constexpr):
    row = tl.program_id(0)
    lane = tl.arange(0, 32)                      # hard-coded: one element per lane of a 32-lane CUDA warp
    acc = tl.zeros([32], dtype=tl.float32)
    for start in range(0, n_cols, STEP):         # STEP = the device's warp width (warpSize)
        cols = start + lane
        v = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        acc += v * v
    tl.store(out_ptr + row, tl.sum(acc, axis=0) / n_cols)


def _run_ported(x, step):
    out = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
    row_sq_mean_ported[(x.shape[0],)](x, out, x.shape[1], x.stride(0), STEP=step, num_warps=1)
    return out


_x = torch.randn(4, model.config.hidden_size, device=device)
_want = _x.double().pow(2).mean(dim=1)
for _step, _where in ((32, "NVIDIA / RDNA (wave32)"), (64, "CDNA (wave64)")):
    print(f"ported kernel, STEP={_step} [{_where}]: relative error {rel_error(_run_ported(_x, _step), _want):.2f}")

# %% tags=["solution"] grade_id="07-wave32-sol-1"
def block_for(n_cols, lanes):
    """The BLOCK for a row of n_cols: a power of two, at least `lanes`, at most 4096."""
    ### BEGIN SOLUTION
    return max(lanes, min(triton.next_power_of_2(n_cols), 4096))
    ### END SOLUTION


@triton.jit
def row_sq_mean_kernel(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    """out[row] = mean(x[row, :]^2) in fp32, looping over the row in steps of BLOCK."""
    ### BEGIN SOLUTION
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + offs
        v = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        acc += v * v
    tl.store(out_ptr + row, tl.sum(acc, axis=0) / n_cols)
    ### END SOLUTION


def row_sq_mean(x, num_warps=1, wavefront=64):
    """Mean of squares of every row of a 2-D tensor, as float32 (rows,)."""
    ### BEGIN SOLUTION
    if x.stride(1) != 1:
        x = x.contiguous()
    n_rows, n_cols = x.shape
    out = torch.empty(n_rows, device=x.device, dtype=torch.float32)
    block = block_for(n_cols, num_warps * wavefront)
    row_sq_mean_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK=block, num_warps=num_warps)
    return out
    ### END SOLUTION


print(f"fixed kernel on CDNA (wave64): relative error {rel_error(row_sq_mean(_x, 1, 64), _want):.1e}")

# %% tags=["test"] grade_id="07-wave32-1" points=2
assert block_for(256, 64) == 256 and block_for(10, 64) == 64, \
    f"BLOCK 是 2 的幂且不小于 lane 数 / BLOCK is a power of two, at least the lanes: {block_for(256, 64)}, {block_for(10, 64)}"
for _cols in (model.config.hidden_size, 100):
    _x = torch.randn(6, _cols, device=device)
    check_close(row_sq_mean(_x, 1, 64), _x.double().pow(2).mean(dim=1).float(), rule=f"{_cols} columns, wave64")
_wide = torch.randn(4, 512, device=device)
check_close(row_sq_mean(_wide.t()[:, :3]), _wide.t()[:, :3].double().pow(2).mean(dim=1).float(), rule="non-contiguous columns")

# %% [markdown] tags=["zh"]
# ### 配置空间：块大小、MFMA、LDS
#
# 一个 Triton matmul 的启动配置除了 `BLOCK_M/N/K`、`num_warps`，在 AMD 上还有几个专用参数。以下说法都来自 [ROCm 的 Triton 内核优化指南](https://rocm.docs.amd.com/en/latest/how-to/rocm-for-ai/inference-optimization/workload.html#auto-tunable-kernel-configurations)和 Triton AMD 后端源码：
#
# - `matrix_instr_nonkdim`：选择 MFMA 指令的 M×N 尺寸，16 → 16×16（fp16 输入在 CDNA3 上是 `v_mfma_f32_16x16x16_f16`），32 → 32×32（`v_mfma_f32_32x32x8_f16`），0 由编译器决定（[AMD Instinct MI300 ISA 参考手册](https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/instruction-set-architectures/amd-instinct-mi300-cdna3-instruction-set-architecture.pdf)的 MFMA 一章；[AMD 矩阵指令计算器](https://github.com/ROCm/amd_matrix_instruction_calculator)列出每个 gfx 目标的全部形状）。指南指出 MI300X 上的 GEMM 通常 16 更快。块的 M、N 应是它的整数倍。
# - `waves_per_eu`：提示编译器压低 VGPR 用量，让每个执行单元 (EU/SIMD) 能驻留 n 个 wave，提高占用率；后端把它写成 LLVM 属性 `amdgpu-waves-per-eu`。0 表示不限制。
# - `num_stages`：AMD 后端的软件流水线（stream pipeliner，[triton-lang/triton#4148](https://github.com/triton-lang/triton/pull/4148)）的级数。指南的规则：单个 GEMM 取 2；两个 GEMM 融合（如 Flash Attention）取 1；GEMM 加逐元素算子取 2；没有 GEMM 取 1。
# - `kpack`：传给后端 matmul 加速 pass 的打包参数（默认 1）；在 gfx950 上后端会发出弃用警告并把它改回 1，所以 gfx950 上 `kpack=2` 的配置只是 `kpack=1` 的重复。
#
# **MFMA 和 `kpack` 只属于 CDNA（gfx9：MI100、MI200、MI300、MI350）。** RDNA3/RDNA4（gfx11xx、gfx12xx，Radeon）的矩阵指令是 WMMA，M×N 总是 16×16（fp16/bf16 是 16×16×16，wave32）（[GPUOpen：RDNA 3 上的 WMMA](https://gpuopen.com/learn/wmma_on_rdna3/)）；RDNA1/2（gfx10xx）没有矩阵指令。Triton 的 matmul 加速 pass（[`AccelerateAMDMatmul.cpp`](https://github.com/triton-lang/triton/blob/658b5b2b34eb26cde08d05bc0a7e544379a57efa/third_party/amd/lib/TritonAMDGPUTransforms/AccelerateAMDMatmul.cpp)）只把 `matrix_instr_nonkdim` 和 `kpack` 交给 CDNA 的 MFMA 规则，RDNA 的 WMMA 规则两个都不看：在 RDNA 上改它们只会得到重复的配置。`waves_per_eu` 是 LLVM 属性，两种架构都生效。
#
# **LDS (Local Data Share)**：流水线把 A、B 的块暂存在 LDS 里。[ROCm GPU 规格表](https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html)：每个 CU 的 LDS 在 gfx90a（MI210/MI250X）和 gfx942（MI300X/MI325X）上是 64 KiB，在 gfx950（MI350X/MI355X）上是 160 KiB。一个配置需要多少 LDS，我们用一个**保守**的估计：每一级流水线都放 A 的一块和 B 的一块，(BM·BK + BK·BN)·字节数·max(1, num_stages)。它是上界而不是精确值：AMD 自己的 GEMM 调优脚本（[ROCm/triton `tune_gemm.py`](https://github.com/ROCm/triton/blob/185b90b3ba4ebbc88dc6e4a55cccce2c5e7b2844/python/perf-kernels/tools/tune_gemm/tune_gemm.py) 的 `prune_configs`）按 (num_stages − 1) 份估计，而 Triton 3.9 的 AMD 后端在 gfx950 上默认开启异步拷贝（compiler.py 的 `is_async_copy_enabled`），实际分配了 num_stages 份——估计会随编译器版本过时。下面的练习之后，我们直接问编译器。
#
# **要写的**：`lds_bytes(cfg, elem_bytes)` 与 `valid_configs(candidates, arch, elem_bytes, lds_budget)`。
#
# **约定**：
# - 配置是字典，必有 `BLOCK_M`、`BLOCK_N`、`BLOCK_K`、`num_warps`、`num_stages`；AMD 专用键 `waves_per_eu`、`matrix_instr_nonkdim`、`kpack` 可选（缺省为 0、0、1）。
# - `lds_bytes(cfg, elem_bytes)` = (BLOCK_M·BLOCK_K + BLOCK_K·BLOCK_N)·elem_bytes·max(1, num_stages)，单位字节。
# - `valid_configs` 按输入顺序返回满足全部规则的配置（原字典对象，不修改）：
#   1. `lds_bytes(cfg, elem_bytes) ≤ lds_budget`；
#   2. `BLOCK_M × BLOCK_N ≥ lanes_per_program(num_warps, arch)`（每个 lane 至少一个输出元素。这是我们的规则：[`tune_gemm.py`](https://github.com/ROCm/triton/blob/185b90b3ba4ebbc88dc6e4a55cccce2c5e7b2844/python/perf-kernels/tools/tune_gemm/tune_gemm.py) 的 `prune_configs` 只用一个固定下限 BLOCK_M·BLOCK_N ≥ 64，正好一个 wave64 的 lane 数；我们把它推广到整个程序的 lane 数）；
#   3. CDNA 目标（gfx9xx）：`matrix_instr_nonkdim` ∈ {0, 16, 32}，为 16 或 32 时 `BLOCK_M`、`BLOCK_N` 都是它的整数倍；`kpack` ∈ {1, 2}，gfx950 上只能是 1；
#      RDNA 目标（gfx10xx 及以后）：`matrix_instr_nonkdim` 只能是 0、`kpack` 只能是 1（后端不看它们，其他值只会重复）；
#   4. 非 gfx 目标（如 `sm_90`）：配置里不能有 AMD 专用键——Triton 的 CUDA 后端会以 `KeyError` 拒绝不认识的关键字参数。

# %% [markdown] tags=["en"]
# ### The configuration space: block sizes, MFMA, LDS
#
# Beyond `BLOCK_M/N/K` and `num_warps`, a Triton matmul launch on AMD has a few parameters of its own. Every statement below comes from the [ROCm Triton kernel optimization guide](https://rocm.docs.amd.com/en/latest/how-to/rocm-for-ai/inference-optimization/workload.html#auto-tunable-kernel-configurations) and the Triton AMD backend source:
#
# - `matrix_instr_nonkdim`: picks the MFMA instruction's M×N size, 16 → 16×16 (for fp16 inputs on CDNA3, `v_mfma_f32_16x16x16_f16`), 32 → 32×32 (`v_mfma_f32_32x32x8_f16`), 0 lets the compiler choose (the MFMA chapter of the [AMD Instinct MI300 ISA reference guide](https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/instruction-set-architectures/amd-instinct-mi300-cdna3-instruction-set-architecture.pdf); AMD's [matrix instruction calculator](https://github.com/ROCm/amd_matrix_instruction_calculator) lists every shape per gfx target). The guide notes that for GEMMs on MI300X 16 usually wins. The tile's M and N should be multiples of it.
# - `waves_per_eu`: hints the compiler to cut VGPR use so that each execution unit (EU/SIMD) can hold n waves, raising occupancy; the backend emits it as the LLVM attribute `amdgpu-waves-per-eu`. 0 means no limit.
# - `num_stages`: the depth of the AMD backend's software pipeline (the stream pipeliner, [triton-lang/triton#4148](https://github.com/triton-lang/triton/pull/4148)). The guide's rules: 2 for a single GEMM; 1 for two fused GEMMs (Flash Attention); 2 for a GEMM fused with an elementwise op; 1 with no GEMM.
# - `kpack`: a packing parameter passed to the backend's matmul acceleration pass (default 1); on gfx950 the backend warns that it is deprecated and resets it to 1, so a `kpack=2` config on gfx950 only duplicates `kpack=1`.
#
# **MFMA and `kpack` belong to CDNA only (gfx9: MI100, MI200, MI300, MI350).** RDNA3/RDNA4 (gfx11xx, gfx12xx, Radeon) have WMMA matrix instructions, always 16×16 in M×N (16×16×16 for fp16/bf16, in wave32) ([GPUOpen: WMMA on RDNA 3](https://gpuopen.com/learn/wmma_on_rdna3/)); RDNA1/2 (gfx10xx) have none. Triton's matmul acceleration pass ([`AccelerateAMDMatmul.cpp`](https://github.com/triton-lang/triton/blob/658b5b2b34eb26cde08d05bc0a7e544379a57efa/third_party/amd/lib/TritonAMDGPUTransforms/AccelerateAMDMatmul.cpp)) hands `matrix_instr_nonkdim` and `kpack` to the CDNA MFMA rule only; its RDNA WMMA rule reads neither, so on RDNA changing them only duplicates a config. `waves_per_eu` is an LLVM attribute and applies on both.
#
# **LDS (Local Data Share)**: the pipeline stages tiles of A and B in LDS. The [ROCm GPU specifications](https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html) list 64 KiB of LDS per CU on gfx90a (MI210/MI250X) and gfx942 (MI300X/MI325X), and 160 KiB on gfx950 (MI350X/MI355X). For the LDS a config needs we use a **conservative** estimate: every pipeline stage holds one tile of A and one of B, (BM·BK + BK·BN)·bytes·max(1, num_stages). It is an upper bound, not the exact figure: AMD's own GEMM tuning script ([ROCm/triton `tune_gemm.py`](https://github.com/ROCm/triton/blob/185b90b3ba4ebbc88dc6e4a55cccce2c5e7b2844/python/perf-kernels/tools/tune_gemm/tune_gemm.py), `prune_configs`) counts (num_stages − 1) copies, while Triton 3.9's AMD backend turns on asynchronous copies by default on gfx950 (`is_async_copy_enabled` in compiler.py) and allocates num_stages of them: estimates go stale with the compiler. After the exercise we ask the compiler itself.
#
# **To write**: `lds_bytes(cfg, elem_bytes)` and `valid_configs(candidates, arch, elem_bytes, lds_budget)`.
#
# **Contract**:
# - A config is a dict that always has `BLOCK_M`, `BLOCK_N`, `BLOCK_K`, `num_warps`, `num_stages`; the AMD-only keys `waves_per_eu`, `matrix_instr_nonkdim`, `kpack` are optional (defaults 0, 0, 1).
# - `lds_bytes(cfg, elem_bytes)` = (BLOCK_M·BLOCK_K + BLOCK_K·BLOCK_N)·elem_bytes·max(1, num_stages), in bytes.
# - `valid_configs` returns, in input order, the configs (the same dict objects, unmodified) that meet every rule:
#   1. `lds_bytes(cfg, elem_bytes) ≤ lds_budget`;
#   2. `BLOCK_M × BLOCK_N ≥ lanes_per_program(num_warps, arch)` (at least one output element per lane. This rule is ours: `prune_configs` in [`tune_gemm.py`](https://github.com/ROCm/triton/blob/185b90b3ba4ebbc88dc6e4a55cccce2c5e7b2844/python/perf-kernels/tools/tune_gemm/tune_gemm.py) uses a fixed floor, BLOCK_M·BLOCK_N ≥ 64, exactly one wave64's lanes; we extend it to the whole program's lanes);
#   3. CDNA targets (gfx9xx): `matrix_instr_nonkdim` ∈ {0, 16, 32}, and when 16 or 32, `BLOCK_M` and `BLOCK_N` are multiples of it; `kpack` ∈ {1, 2}, and only 1 on gfx950;
#      RDNA targets (gfx10xx and later): `matrix_instr_nonkdim` only 0 and `kpack` only 1 (the backend ignores both; any other value only duplicates a config);
#   4. non-gfx targets (such as `sm_90`): no AMD-only key in the config, since Triton's CUDA backend rejects unknown keyword arguments with `KeyError`.

# %%
LDS_KIB_PER_CU = {"gfx90a": 64, "gfx942": 64, "gfx950": 160}   # ROCm GPU specifications, LDS (KiB) column
AMD_ONLY_KEYS = ("waves_per_eu", "matrix_instr_nonkdim", "kpack")


def candidate_configs(amd=True, tiles=(64, 128, 256), block_ks=(32, 64, 128), warps=(4, 8), stages=(2,),
                      nonkdims=(16, 32), kpacks=(1, 2), waves=(2,)):
    """A GEMM search space (num_stages=2 by default: one GEMM); on AMD with the MFMA size, kpack and waves_per_eu."""
    space = []
    for bm, bn, bk, nw, ns in itertools.product(tiles, tiles, block_ks, warps, stages):
        cfg = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": nw, "num_stages": ns}
        if not amd:
            space.append(cfg)
            continue
        for nonk, kpack, wpe in itertools.product(nonkdims, kpacks, waves):
            space.append(cfg | {"matrix_instr_nonkdim": nonk, "kpack": kpack, "waves_per_eu": wpe})
    return space


print(len(candidate_configs()), "AMD candidates,", len(candidate_configs(amd=False)), "plain candidates")

# %% tags=["solution"] grade_id="07-configs-sol-1"
def lds_bytes(cfg, elem_bytes):
    """Conservative LDS bytes of a matmul config: one A tile and one B tile per pipeline stage."""
    ### BEGIN SOLUTION
    tiles = (cfg["BLOCK_M"] * cfg["BLOCK_K"] + cfg["BLOCK_K"] * cfg["BLOCK_N"]) * elem_bytes
    return tiles * max(1, cfg["num_stages"])
    ### END SOLUTION


def valid_configs(candidates, arch, elem_bytes, lds_budget):
    """The candidates that fit the LDS budget, feed every lane, and use valid AMD options (see the rules)."""
    ### BEGIN SOLUTION
    base = str(arch).split(":", 1)[0].lower()
    amd = base.startswith("gfx")
    keep = []
    for cfg in candidates:
        if lds_bytes(cfg, elem_bytes) > lds_budget:
            continue
        if cfg["BLOCK_M"] * cfg["BLOCK_N"] < lanes_per_program(cfg["num_warps"], arch):
            continue
        if amd:
            nonk, kpack = cfg.get("matrix_instr_nonkdim", 0), cfg.get("kpack", 1)
            if lanes_per_program(1, arch) == 32:  # RDNA: WMMA, neither option is read
                if nonk != 0 or kpack != 1:
                    continue
            elif nonk not in (0, 16, 32) or (nonk and (cfg["BLOCK_M"] % nonk or cfg["BLOCK_N"] % nonk)):
                continue
            elif kpack not in (1, 2) or (base == "gfx950" and kpack != 1):
                continue
        elif any(key in cfg for key in AMD_ONLY_KEYS):
            continue
        keep.append(cfg)
    return keep
    ### END SOLUTION


for _arch in ("gfx942", "gfx950"):
    _ok = valid_configs(candidate_configs(), _arch, 2, LDS_KIB_PER_CU[_arch] * 1024)
    print(f"{_arch}: {len(_ok)} of {len(candidate_configs())} fp16 configs valid; "
          f"largest tile {max(c['BLOCK_M'] * c['BLOCK_N'] for c in _ok)}, "
          f"largest LDS {max(lds_bytes(c, 2) for c in _ok) // 1024} KiB")

# %% tags=["test"] grade_id="07-configs-1" points=3.5
_big = {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 2, "matrix_instr_nonkdim": 16, "kpack": 1}
assert lds_bytes(_big, 2) == (256 * 64 + 64 * 256) * 2 * 2, f"LDS 估计：两级流水线各一份 A、B 块 / two stages of A and B tiles: {lds_bytes(_big, 2)}"
_small = dict(_big, BLOCK_K=32)
_kp2 = dict(_small, kpack=2)
assert valid_configs([_big, _small], "gfx942", 2, 64 * 1024) == [_small], "128 KiB 放不进 gfx942 的 64 KiB LDS / 128 KiB does not fit gfx942's 64 KiB"
assert valid_configs([_big, _small], "gfx950", 2, 160 * 1024) == [_big, _small], "gfx950 有 160 KiB LDS / gfx950 has 160 KiB"
assert valid_configs([_kp2], "gfx950", 2, 160 * 1024) == [], "gfx950 上 kpack 只能是 1 / kpack must be 1 on gfx950"
assert valid_configs([_kp2], "gfx942", 2, 64 * 1024) == [_kp2], "gfx942 上 kpack=2 合法 / kpack=2 is valid on gfx942"
_wmma = dict(_small, matrix_instr_nonkdim=0)
assert valid_configs([_small, _wmma, dict(_wmma, kpack=2)], "gfx1100", 2, 64 * 1024) == [_wmma], \
    "RDNA（gfx1100）只留 matrix_instr_nonkdim=0、kpack=1 / RDNA keeps only matrix_instr_nonkdim=0, kpack=1"
_tiny = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32, "num_warps": 8, "num_stages": 2}
assert valid_configs([_tiny], "gfx942", 2, 64 * 1024) == [], "16x16 的块喂不饱 8 个 wave64 / a 16x16 tile cannot feed 512 lanes"
assert valid_configs([_tiny, dict(_tiny, num_warps=4, kpack=1)], "sm_90", 2, 64 * 1024) == [_tiny], \
    "sm_90 上不能有 AMD 专用键 / no AMD-only keys on sm_90"

# %% [markdown] tags=["zh"]
# 每个留下来的配置都得算对。解释器不管 `num_warps` 和 AMD 专用参数（它们只影响编译），但能证明这些块大小在尺寸不整除时也正确；gpu 配置下第 6 节在真实硬件上对它们做自动调优。

# %% [markdown] tags=["en"]
# Every config that survives must also compute the right answer. The interpreter ignores `num_warps` and the AMD-only options (they only affect compilation), but it proves the tile sizes correct on sizes that do not divide evenly; in the gpu profile section 6 autotunes over them on the real hardware.

# %%
_a, _b = torch.randn(100, 72, device=device), torch.randn(72, 130, device=device)
_ok = valid_configs(candidate_configs(), "gfx942", 4, 64 * 1024)
_amd_options = interpret or torch.version.hip is not None     # CUDA's Triton rejects the AMD-only keywords
for _cfg in (_ok[0], _ok[len(_ok) // 2], _ok[-1]):
    _c = torch.empty(100, 130, device=device)
    _grid = (triton.cdiv(100, _cfg["BLOCK_M"]), triton.cdiv(130, _cfg["BLOCK_N"]))
    _extra = {k: v for k, v in _cfg.items() if k in AMD_ONLY_KEYS} if _amd_options else {}
    matmul_kernel[_grid](_a, _b, _c, 100, 130, 72, _a.stride(0), _a.stride(1), _b.stride(0), _b.stride(1),
                         _c.stride(0), _c.stride(1), BLOCK_M=_cfg["BLOCK_M"], BLOCK_N=_cfg["BLOCK_N"],
                         BLOCK_K=_cfg["BLOCK_K"], num_warps=_cfg["num_warps"], num_stages=_cfg["num_stages"], **_extra)
    print(f"{_cfg}: relative error {rel_error(_c, _a.double() @ _b.double()):.1e}")

# %% [markdown] tags=["zh"]
# ### 问编译器：真实的 LDS 用量
#
# Triton 可以不用 GPU、提前 (ahead of time) 为某个目标编译内核：`triton.compile(ASTSource(...), target=GPUTarget("hip", "gfx942", 64))`，编译结果的 `metadata.shared` 就是这个内核分配的 LDS 字节数。下面在一个子进程里（解释器模式不能同时编译）把**你的** `matmul_kernel` 为 gfx942 和 gfx950 各编译两个配置，和 `lds_bytes` 的估计对照。预期：估计不小于编译结果（它是上界）；gfx950 上的编译结果随流水线级数增长，gfx942 上则不然——同一份源码，不同架构、不同编译器版本，LDS 用量不同。在 gfx942 上估计偏松（16 对 64 KiB）：信任编译器的调优器可以放进更大的块；我们的筛选用这些配置换来"永远不会启动一个放不下的配置"。这一步只是演示，不计分；编译失败时只打印原因。

# %% [markdown] tags=["en"]
# ### Asking the compiler: the real LDS use
#
# Triton can compile a kernel for a target ahead of time, with no GPU: `triton.compile(ASTSource(...), target=GPUTarget("hip", "gfx942", 64))`, and the result's `metadata.shared` is the LDS the kernel allocates, in bytes. Below, in a subprocess (interpreter mode cannot compile in the same process), **your** `matmul_kernel` is compiled for gfx942 and gfx950 with two configs each and compared with `lds_bytes`. Expect the estimate never to be below the compiled figure (it is an upper bound); on gfx950 the compiled LDS grows with the pipeline depth, on gfx942 it does not: the same source, another architecture or compiler version, another LDS footprint. On gfx942 the estimate is loose (16 against 64 KiB): a tuner that trusts the compiler could admit bigger tiles; our filter gives those up in exchange for never launching a config that does not fit. This is a demonstration, not graded; a failed compile only prints why.

# %%
AOT_SCRIPT = """
import json, os, sys
os.environ.pop("TRITON_INTERPRET", None)
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
sys.path.insert(0, sys.argv[1])
from learner_matmul import matmul_kernel
sig = {name: ("constexpr" if name.startswith("BLOCK_") else "*fp16" if name.endswith("_ptr") else "i32")
       for name in matmul_kernel.arg_names}
out = []
for arch, cfg in json.loads(sys.argv[2]):
    blocks = {k: cfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")}
    kernel = triton.compile(ASTSource(fn=matmul_kernel, signature=sig, constexprs=blocks),
                            target=GPUTarget("hip", arch, 64),
                            options={"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]})
    out.append(kernel.metadata.shared)
print(json.dumps(out))
"""


def compiled_lds(kernel, jobs, timeout_s=240):
    """LDS bytes Triton allocates for `kernel` on each (arch, config) of `jobs`, compiled ahead of time in a subprocess."""
    source = inspect.getsource(getattr(kernel, "fn", kernel))
    with tempfile.TemporaryDirectory(prefix="lab07-aot-") as tmp:
        Path(tmp, "learner_matmul.py").write_text("import triton\nimport triton.language as tl\n\n\n" + source)
        env = {**os.environ, "TRITON_DEFAULT_FP_FUSION": "1", "TRITON_CACHE_DIR": str(Path(tmp, "cache"))}
        done = subprocess.run([sys.executable, "-c", AOT_SCRIPT, tmp, json.dumps(jobs)], capture_output=True,
                              text=True, timeout=timeout_s, env=env)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


_tile = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8}
_jobs = [(arch, dict(_tile, num_stages=st)) for arch in ("gfx942", "gfx950") for st in (2, 3)]
try:
    for (_arch, _cfg), _shared in zip(_jobs, compiled_lds(matmul_kernel, _jobs)):
        print(f"{_arch} 128x128x64 num_stages={_cfg['num_stages']}: compiled {_shared // 1024:4d} KiB, "
              f"estimate {lds_bytes(_cfg, 2) // 1024:4d} KiB, LDS per CU {LDS_KIB_PER_CU[_arch]} KiB")
except (RuntimeError, OSError, subprocess.TimeoutExpired, NotImplementedError) as err:
    print(f"ahead-of-time compile not available here: {err}")

# %% [markdown] tags=["zh"]
# ### HIP 与 hipify：改了什么，没改什么
#
# 如果你的算子是从 CUDA C++ 移植来的，工具是 [HIPIFY](https://rocm.docs.amd.com/projects/HIPIFY/en/latest/)（`hipify-clang`、`hipify-perl`）。它改写 API 名字和头文件；文档明言它不能自动转换所有代码。一个典型的 warp 求和：
#
# ```cpp
# // CUDA                                          // hipify 之后
# #include <cuda_runtime.h>                        #include <hip/hip_runtime.h>          // 改了
# cudaMalloc(&d, bytes);                           hipMalloc(&d, bytes);                 // 改了
# for (int o = 16; o > 0; o /= 2)                  for (int o = 16; o > 0; o /= 2)       // 没改：从 16 开始，只归约 32 个 lane
#   v += __shfl_down_sync(0xffffffff, v, o);         v += __shfl_down_sync(0xffffffff, v, o);  // 没改：32 位掩码
# unsigned votes = __ballot_sync(0xffffffff, p);   unsigned votes = __ballot_sync(0xffffffff, p); // 没改：32 位变量
# int n = __popc(votes);                           int n = __popc(votes);                // 没改
# ```
#
# 在 wave64 的 CDNA 上这三行都有问题：HIP 的 `*_sync` 函数要求 **64 位**掩码，32 位的 `0xffffffff` 会被 `static_assert` 拒绝编译（[ROCm/clr `amd_warp_sync_functions.h`](https://github.com/ROCm/clr/blob/develop/hipamd/include/hip/amd_detail/amd_warp_sync_functions.h)）；`__ballot` 返回 64 位，存进 `unsigned` 就丢掉了 lane 32–63 的投票，计数**出错**；从 16 开始的归约只合并 32 个 lane，[HIP 文档](https://rocm.docs.amd.com/projects/HIP/en/latest/how-to/hip_cpp_language_extensions.html#warp-cross-lane-functions)说得直白：假设 waveSize 为 32 的代码能在 wave64 上运行，但只用了一半的机器资源。正确的写法是从 `warpSize`（运行时值）出发、用 64 位掩码和 `__popcll`。Triton 把这些都藏在 `num_warps` 和编译器后面，这正是在 AMD 上写 Triton 比移植 CUDA 省事的地方——前提是你自己的代码里没有写死 32。

# %% [markdown] tags=["en"]
# ### HIP and hipify: what changes, what does not
#
# If your kernel comes from CUDA C++, the tool is [HIPIFY](https://rocm.docs.amd.com/projects/HIPIFY/en/latest/) (`hipify-clang`, `hipify-perl`). It rewrites API names and headers; its documentation says plainly that it cannot convert all code automatically. A typical warp sum:
#
# ```cpp
# // CUDA                                          // after hipify
# #include <cuda_runtime.h>                        #include <hip/hip_runtime.h>          // changed
# cudaMalloc(&d, bytes);                           hipMalloc(&d, bytes);                 // changed
# for (int o = 16; o > 0; o /= 2)                  for (int o = 16; o > 0; o /= 2)       // unchanged: starts at 16, reduces 32 lanes
#   v += __shfl_down_sync(0xffffffff, v, o);         v += __shfl_down_sync(0xffffffff, v, o);  // unchanged: 32-bit mask
# unsigned votes = __ballot_sync(0xffffffff, p);   unsigned votes = __ballot_sync(0xffffffff, p); // unchanged: 32-bit variable
# int n = __popc(votes);                           int n = __popc(votes);                // unchanged
# ```
#
# On wave64 CDNA each of the last three lines is a problem: HIP's `*_sync` functions require a **64-bit** mask, and a 32-bit `0xffffffff` is rejected at compile time by a `static_assert` ([ROCm/clr `amd_warp_sync_functions.h`](https://github.com/ROCm/clr/blob/develop/hipamd/include/hip/amd_detail/amd_warp_sync_functions.h)); `__ballot` returns 64 bits, and storing it in an `unsigned` drops the votes of lanes 32–63, so the count is **wrong**; a reduction starting at 16 combines 32 lanes, and the [HIP documentation](https://rocm.docs.amd.com/projects/HIP/en/latest/how-to/hip_cpp_language_extensions.html#warp-cross-lane-functions) is blunt: code that assumes a waveSize of 32 runs on wave64 but uses only half of the machine. The right code starts from `warpSize` (a run-time value), with 64-bit masks and `__popcll`. Triton hides all of this behind `num_warps` and the compiler, which is why writing Triton on AMD is easier than porting CUDA, as long as your own code hard-codes no 32.

# %% [markdown] tags=["zh"]
# ## 6 · 选做 (optional stretch)：你的算子的 roofline
#
# **这一节是选做**：它的练习单独计分（grade_id 以 `07-stretch-` 开头），不算在约 100 分钟的计分核心里，后面的内容也不依赖它——没做时下面只画屋顶，不画预测点。
#
# 一个内核每秒最多做 min(算力峰值, 算术强度 × 带宽峰值) 次运算，算术强度 (arithmetic intensity) = 运算数 / 搬运字节数（FLOP/B）。两条"屋顶"相交于**拐点 (ridge point)** = 算力峰值 / 带宽峰值：强度低于拐点的内核受带宽限制 (memory-bound)，高于拐点的受算力限制 (compute-bound)。这个判断是**算出来的**，不是猜的。
#
# - softmax：我们约定每个元素 5 次运算（max、减、exp、求和、除），字节数用第 2 节的 fused 流量；fp16 下强度 = 5 / 4 ≈ 1.25 FLOP/B。
# - matmul 的一个块：程序读 A 的 `BLOCK_M × K` 和 B 的 `K × BLOCK_N` 各一次、写 C 的块一次，做 2·BLOCK_M·BLOCK_N·K 次运算。
#
# **要写的**：`matmul_tile_traffic(block_m, block_n, k, elem_bytes)` 与 `roofline(flops, bytes_moved, peak_tflops, peak_gbs)`。
#
# **约定**：
# - `matmul_tile_traffic` 返回 `{"flops": 2·bm·bn·k, "bytes": (bm·k + k·bn + bm·bn)·elem_bytes}`。
# - `roofline` 返回 `{"intensity": flops / bytes（FLOP/B）, "ridge": 峰值算力 / 峰值带宽（FLOP/B，单位换算：TFLOPS = 1e12 FLOP/s，GB/s = 1e9 B/s）, "attainable_tflops": min(peak_tflops, intensity × peak_gbs / 1000), "bound": "memory"（intensity < ridge）或 "compute"}`。
# - `bytes_moved`、`peak_tflops`、`peak_gbs` 不为正、或 `flops` 为负时抛出 `ValueError`。

# %% [markdown] tags=["en"]
# ## 6 · Optional stretch: the roofline of your kernels
#
# **This section is optional**: its exercise is graded separately (grade_id starting with `07-stretch-`), outside the graded core of about 100 minutes, and nothing after it depends on it: without it the plot below shows the roofs and no predicted points.
#
# A kernel does at most min(peak compute, arithmetic intensity × peak bandwidth) operations per second, where arithmetic intensity = operations / bytes moved (FLOP/B). The two roofs meet at the **ridge point** = peak compute / peak bandwidth: a kernel below the ridge is memory-bound, above it compute-bound. The verdict is **derived**, not guessed.
#
# - softmax: we count 5 operations per element (max, subtract, exp, sum, divide) and the fused traffic of section 2; in fp16 the intensity is 5 / 4 ≈ 1.25 FLOP/B.
# - one matmul tile: the program reads A's `BLOCK_M × K` panel and B's `K × BLOCK_N` panel once, writes its C tile once, and does 2·BLOCK_M·BLOCK_N·K operations.
#
# **To write**: `matmul_tile_traffic(block_m, block_n, k, elem_bytes)` and `roofline(flops, bytes_moved, peak_tflops, peak_gbs)`.
#
# **Contract**:
# - `matmul_tile_traffic` returns `{"flops": 2·bm·bn·k, "bytes": (bm·k + k·bn + bm·bn)·elem_bytes}`.
# - `roofline` returns `{"intensity": flops / bytes (FLOP/B), "ridge": peak compute / peak bandwidth (FLOP/B; TFLOPS = 1e12 FLOP/s, GB/s = 1e9 B/s), "attainable_tflops": min(peak_tflops, intensity × peak_gbs / 1000), "bound": "memory" (intensity < ridge) or "compute"}`.
# - A `bytes_moved`, `peak_tflops` or `peak_gbs` that is not positive, or a negative `flops`, raises `ValueError`.

# %% tags=["solution"] grade_id="07-stretch-roofline-sol-1"
def matmul_tile_traffic(block_m, block_n, k, elem_bytes):
    """FLOPs and DRAM bytes of one program computing a block_m x block_n tile over depth k."""
    ### BEGIN SOLUTION
    return {"flops": 2 * block_m * block_n * k, "bytes": (block_m * k + k * block_n + block_m * block_n) * elem_bytes}
    ### END SOLUTION


def roofline(flops, bytes_moved, peak_tflops, peak_gbs):
    """Intensity, ridge point, attainable TFLOPS and the bound of a kernel on a machine."""
    ### BEGIN SOLUTION
    if bytes_moved <= 0 or peak_tflops <= 0 or peak_gbs <= 0 or flops < 0:
        raise ValueError(f"need flops >= 0 and positive bytes and peaks, got {flops}, {bytes_moved}, {peak_tflops}, {peak_gbs}")
    intensity = flops / bytes_moved
    ridge = peak_tflops * 1e12 / (peak_gbs * 1e9)
    return {"intensity": intensity, "ridge": ridge,
            "attainable_tflops": min(peak_tflops, intensity * peak_gbs / 1000),
            "bound": "memory" if intensity < ridge else "compute"}
    ### END SOLUTION


print(roofline(**{"flops": 5 * 4096 * 4096, "bytes_moved": softmax_traffic(4096, 4096, 2)["fused"]},
               peak_tflops=1307.4, peak_gbs=5300))

# %% tags=["test"] grade_id="07-stretch-roofline-1" points=2
_t = matmul_tile_traffic(128, 128, 4096, 2)
assert _t == {"flops": 2 * 128 * 128 * 4096, "bytes": (128 * 4096 * 2 + 128 * 128) * 2}, f"tile traffic: {_t}"
_r = roofline(1000, 800, peak_tflops=1307.4, peak_gbs=5300)
assert abs(_r["intensity"] - 1.25) < 1e-12 and abs(_r["ridge"] - 1307.4e12 / 5300e9) < 1e-9, _r
assert _r["bound"] == "memory" and abs(_r["attainable_tflops"] - 1.25 * 5.3) < 1e-9, \
    f"1.25 FLOP/B 远低于 MI300X 的拐点，受带宽限制 / far below MI300X's ridge: memory-bound, got {_r}"

# %% [markdown] tags=["zh"]
# ### 数据手册峰值
#
# 峰值来自课程的共享表 `rocmlab.lab.datasheets`（实验 01、02、08 共用这一份，每行附来源链接，下面的单元把它显示出来）。我们用每个设备的**稠密** FP16/BF16 矩阵峰值和显存带宽峰值；NVIDIA 的 H100/H200 数据手册只印"含稀疏"的 FP16 值，表里的稠密值是它的一半。表按 PyTorch 报告的产品名精确匹配，不在表中的 GPU 没有数字。
#
# 百分比的分母是**数据手册**峰值（不是扣除协议开销后的可达值）：softmax 受带宽限制，用带宽峰值；matmul 用 FP16 稠密矩阵峰值。gpu 配置测的 softmax（`SOFTMAX_BENCH = [65536, 8192]`，fp16）读 1 GiB、写 1 GiB，至少是 MI300X 256 MiB Infinity Cache（[ROCm GPU 规格表](https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html)的 L3 列）的 4 倍，测到的是显存而不是缓存。计时用 `triton.testing.do_bench`：先预热，再用设备事件计时多次，报告中位数和 20–80 百分位的范围；两者的范围不重叠才算真有差别。smoke 配置在 CPU 上没有对应的数据手册，下面以 MI300X 为参照机画出 roofline，只画预测，不画测量。

# %% [markdown] tags=["en"]
# ### Datasheet peaks
#
# The peaks come from the course's shared table `rocmlab.lab.datasheets` (labs 01, 02 and 08 use this one copy; each row links its sources, and the next cell shows it). We use each device's **dense** FP16/BF16 matrix peak and its peak memory bandwidth; NVIDIA's H100/H200 datasheets print the FP16 figure "with sparsity" only, and the table's dense figure is half of it. Rows match the product name PyTorch reports exactly; a GPU missing from the table gets no figures.
#
# A percentage's denominator is the **datasheet** peak (not the achievable figure after protocol overhead): bandwidth for softmax, which is memory-bound, and the dense FP16 matrix peak for matmul. The gpu profile's softmax (`SOFTMAX_BENCH = [65536, 8192]` in fp16) reads 1 GiB and writes 1 GiB, at least 4× MI300X's 256 MiB Infinity Cache (the L3 column of the [ROCm GPU specifications](https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html)), so it measures memory, not cache. Timing uses `triton.testing.do_bench`: warm-up, then many calls timed with device events; we report the median and the 20th–80th percentile range, and call a difference real only when the ranges do not overlap. The smoke profile's CPU has no datasheet; below it draws the roofline of an MI300X as the reference machine, with predictions only, no measurements.

# %%
from IPython.display import Markdown, display  # noqa: E402

from rocmlab.lab import datasheets  # noqa: E402

display(Markdown(datasheets.markdown_table()))
REFERENCE = "MI300X"


def roofline_peaks(gpu):
    """The roofline() keyword arguments of one device: dense FP16 matrix TFLOPS and memory GB/s."""
    figures = gpu.per_device()
    return {"peak_tflops": figures["fp16_dense_tflops"], "peak_gbs": figures["bandwidth_gbs"]}


device_name, device_row = datasheets.for_device(device)
device_peak = roofline_peaks(device_row) if device_row else None
peak_name, peak = ((device_row.key, device_peak) if device_row
                   else (REFERENCE, roofline_peaks(datasheets.by_key(REFERENCE))))
print(f"this device: {device_name} -> "
      + (f"datasheet row {device_row.key}" if device_row else f"no datasheet row; the roofline uses {REFERENCE}'s"))

rows, cols = SOFTMAX_BENCH
m_, n_, k_ = MATMUL_BENCH
elem = torch.empty((), dtype=getattr(torch, BENCH_DTYPE)).element_size()
SOFTMAX_FLOPS_PER_ELEMENT = 5


def tile_roofline(bm, bn):
    t = matmul_tile_traffic(bm, bn, k_, elem)
    return roofline(t["flops"], t["bytes"], **peak)


try:
    predicted = {
        "softmax": roofline(SOFTMAX_FLOPS_PER_ELEMENT * rows * cols, softmax_traffic(rows, cols, elem)["fused"], **peak),
        "matmul tile 128x128": tile_roofline(128, 128),
        "matmul tile 256x256": tile_roofline(256, 256),
        "matmul, each byte once": roofline(2 * m_ * n_ * k_, (m_ * k_ + k_ * n_ + m_ * n_) * elem, **peak),
    }
except NotImplementedError:
    predicted = {}
    print("the roofline stretch is not done: no predictions (optional)")
print(f"roofline of {peak_name} ({BENCH_DTYPE}; softmax {rows}x{cols}, matmul {m_}x{n_}x{k_}): "
      f"ridge {peak['peak_tflops'] * 1e3 / peak['peak_gbs']:.0f} FLOP/B")
for name, r in predicted.items():
    print(f"  {name:>40}: {r['intensity']:9.1f} FLOP/B -> {r['bound']}-bound, at most {r['attainable_tflops']:8.1f} TFLOPS")

# %% [markdown] tags=["zh"]
# 读法：softmax 的强度约 1 FLOP/B，比拐点低两个数量级——无论怎么优化计算，它的上限都是带宽，所以融合（少搬数据）才是正确的优化方向。单个 matmul 块的强度约等于 2·BM·BN/((BM+BN)·字节数)：128×128 的 fp16 块约 64 FLOP/B，256×256 约 128，**仍低于** MI300X 的拐点（约 247）。整个矩阵乘"每个字节只搬一次"时强度是 N/3 量级，远在拐点之上。两者之间的差距由缓存填补：同时运行的程序共享 A、B 的面板 (panel)，从显存真正读的字节远少于各块之和。这也是 GEMM 内核要调块大小、调程序的执行顺序的原因。

# %% [markdown] tags=["en"]
# How to read it: softmax sits near 1 FLOP/B, two orders of magnitude below the ridge. However the arithmetic is optimized, bandwidth caps it, so fusion (moving less data) is the optimization that counts. One matmul tile's intensity is about 2·BM·BN/((BM+BN)·bytes): about 64 FLOP/B for a 128×128 fp16 tile and 128 for 256×256, **still below** MI300X's ridge (about 247). The whole matmul with each byte moved once is of order N/3, far above it. Caches close the gap: programs running at the same time share panels of A and B, so the bytes really read from memory are far fewer than the sum over tiles. That is why GEMM kernels tune tile sizes and the order in which programs run.

# %%
def bench_ms(fn):
    """Median and the 20th-80th percentile spread of fn in ms: do_bench warms up, syncs and repeats with device events."""
    median, low, high = triton.testing.do_bench(fn, warmup=25, rep=100, quantiles=[0.5, 0.2, 0.8])
    return median, low, high


def record(kernel, label, timing, flops, moved=None):
    """One measurement: time with spread, TFLOPS, GB/s, and % of the datasheet peak that bounds the kernel."""
    med, low, high = timing
    out = {"kernel": kernel, "ms": med, "spread_ms": (low, high), "tflops": flops / (med * 1e-3) / 1e12}
    if moved is not None:
        out["gbs"] = moved / (med * 1e-3) / 1e9
    if device_peak:
        out["pct_peak"] = (100 * out["gbs"] / device_peak["peak_gbs"] if moved is not None
                           else 100 * out["tflops"] / device_peak["peak_tflops"])
    measured[label] = out
    rate = f"{out['gbs']:8.0f} GB/s" if moved is not None else f"{out['tflops']:8.1f} TFLOPS"
    pct = (f"{out['pct_peak']:5.1f} % of the {device_name} datasheet {'bandwidth' if moved is not None else 'FP16 dense'} peak"
           if device_peak else "(no datasheet entry for this GPU)")
    print(f"{label:>26}: median {med:.3f} ms (20-80 %: {low:.3f}-{high:.3f}) {rate}  {pct}")


def compare(first, second):
    """Say whether two measurements differ by more than their spreads."""
    a_, b_ = measured[first], measured[second]
    apart = a_["spread_ms"][1] < b_["spread_ms"][0] or b_["spread_ms"][1] < a_["spread_ms"][0]
    print(f"  {first} vs {second}: {a_['ms'] / b_['ms']:.2f}x the time, "
          + ("a real difference (the 20-80 % ranges do not overlap)" if apart else "within the spread: no real difference"))


measured = {}
if not bench:
    print("no measurement: " + ("the interpreter's timings mean nothing (a NumPy simulation on the CPU); "
                                "run the gpu profile on a ROCm or CUDA GPU" if interpret
                                else "BENCH is off (the gpu profile sets it, with sizes beyond the caches)"))
else:
    dtype = getattr(torch, BENCH_DTYPE)
    x = torch.randn(rows, cols, device=device, dtype=dtype)
    moved = softmax_traffic(rows, cols, elem)["fused"]
    flops = SOFTMAX_FLOPS_PER_ELEMENT * rows * cols
    record("softmax", "triton softmax", bench_ms(lambda: softmax(x)), flops, moved)
    record("softmax", "torch.softmax", bench_ms(lambda: torch.softmax(x, dim=-1)), flops, moved)
    compare("triton softmax", "torch.softmax")
    del x
    a = torch.randn(m_, k_, device=device, dtype=dtype)
    b = torch.randn(k_, n_, device=device, dtype=dtype)
    record("matmul", "triton matmul 128x128x32", bench_ms(lambda: matmul(a, b, 128, 128, 32)), 2 * m_ * n_ * k_)
    record("matmul", "torch.matmul", bench_ms(lambda: a @ b), 2 * m_ * n_ * k_)
    compare("triton matmul 128x128x32", "torch.matmul")

# %% [markdown] tags=["zh"]
# ### 自动调优：在你自己的配置空间里搜索
#
# gpu 配置（`AUTOTUNE=True`）把第 5 节 `valid_configs` 留下的配置交给 `triton.autotune`：对每个配置编译一次、用 do_bench 测时间，挑最快的那个。AMD 上 LDS 预算取规格表的每 CU 值；其他 GPU 取驱动报告的每个 workgroup 的共享内存上限（`max_shared_mem`）。目标架构不在 `LDS_KIB_PER_CU` 里时也用驱动报告的值。

# %% [markdown] tags=["en"]
# ### Autotuning over your own configuration space
#
# The gpu profile (`AUTOTUNE=True`) hands the configs that section 5's `valid_configs` keeps to `triton.autotune`, which compiles each once, times it with do_bench and keeps the fastest. On AMD the LDS budget is the specification table's per-CU figure; on other GPUs it is the per-workgroup shared-memory limit the driver reports (`max_shared_mem`), which is also used for an AMD target missing from `LDS_KIB_PER_CU`.

# %%
from rocmlab.lab.env import gpu_arch  # noqa: E402


def lds_budget_for(arch):
    reported = triton.runtime.driver.active.utils.get_device_properties(device.index or 0)["max_shared_mem"]
    table = LDS_KIB_PER_CU.get(arch)
    print(f"{arch}: LDS per CU from the specifications {table} KiB; driver reports {reported // 1024} KiB per workgroup")
    return table * 1024 if table else reported


def autotuned_matmul(configs):
    """The learner's matmul_kernel under triton.autotune over `configs`; returns (run(a, b), autotuner)."""
    tuned = triton.autotune(
        configs=[triton.Config({k: v for k, v in c.items() if k not in ("num_warps", "num_stages")},
                               num_warps=c["num_warps"], num_stages=c["num_stages"]) for c in configs],
        key=["M", "N", "K"])(matmul_kernel)

    def run(a, b):
        (m, k), n = a.shape, b.shape[1]
        c = torch.empty((m, n), device=a.device, dtype=a.dtype)
        grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]), triton.cdiv(n, meta["BLOCK_N"]))  # noqa: E731
        tuned[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
        return c

    return run, tuned


if AUTOTUNE and bench:
    arch = gpu_arch()
    # a narrower space than section 5's: every config is compiled and timed once
    space = valid_configs(candidate_configs(amd=arch.startswith("gfx"), tiles=(128, 256), block_ks=(32, 64), warps=(8,),
                                            stages=(1, 2), nonkdims=(16,), waves=(0, 2)), arch, elem, lds_budget_for(arch))
    print(f"autotuning over {len(space)} configs on {arch}")
    run, tuned = autotuned_matmul(space)
    check = run(a[:256, :512], b[:512, :192])
    assert rel_error(check, a[:256, :512].double() @ b[:512, :192].double()) <= MATMUL_TOL[a.dtype], "autotuned matmul is wrong"
    record("matmul", "triton matmul autotuned", bench_ms(lambda: run(a, b)), 2 * m_ * n_ * k_)
    print(f"  best config: {tuned.best_config}")
    compare("triton matmul autotuned", "torch.matmul")
else:
    print("autotuning is off: it needs compiled Triton on a GPU (the gpu profile sets AUTOTUNE=True)")

# %%
import matplotlib.pyplot as plt  # noqa: E402

_ridge = peak["peak_tflops"] * 1e3 / peak["peak_gbs"]
_xs = [2.0**e for e in range(-2, 14)]
_ax = lab.plot_lines({f"{peak_name} roof": (_xs, [min(peak["peak_tflops"], x * peak["peak_gbs"] / 1000) for x in _xs])},
                     title=f"roofline ({BENCH_DTYPE}, datasheet peaks of {peak_name})", xlabel="FLOP / byte",
                     ylabel="TFLOPS", logx=True, logy=True, marker="")
_ax.axvline(_ridge, color="gray", linestyle=":", label=f"ridge {_ridge:.0f} FLOP/B")
for _name, _r in predicted.items():
    _ax.scatter([_r["intensity"]], [_r["attainable_tflops"]], marker="^", label=f"{_name} (predicted)")
_AI_OF = ({"softmax": predicted["softmax"]["intensity"], "matmul": predicted["matmul, each byte once"]["intensity"]}
          if predicted else {})
for _name, _m in (measured.items() if predicted else ()):
    _ax.scatter([_AI_OF[_m["kernel"]]], [_m["tflops"]], marker="o", label=f"{_name} (measured)")
_ax.legend(fontsize=7)
plt.tight_layout()
plt.show()

# %% [markdown] tags=["zh"]
# **在真实 GPU 上这些数字意味着什么**：softmax 的实测带宽应达到带宽峰值的一大部分，而且与 `torch.softmax` 相当——两者都只读写一次；如果差很多，先看 `BLOCK` 是否过大导致寄存器溢出 (spill)。matmul 固定 128×128×32 的块通常明显慢于 `torch.matmul`（hipBLASLt/cuBLAS 经过大量调优）；自动调优在你的配置空间里能缩小差距。MI300X 上请尝试 `matrix_instr_nonkdim=16` 和 `32`、`waves_per_eu` 0–2，看看指南的建议是否成立；在 gfx950 上把 `BLOCK_K` 加大，利用 160 KiB 的 LDS。

# %% [markdown] tags=["en"]
# **What the numbers mean on a real GPU**: softmax should reach a large share of peak bandwidth and be close to `torch.softmax`, since both read and write once; if it is far off, check whether a large `BLOCK` spills registers. A fixed 128×128×32 matmul tile is usually well behind `torch.matmul` (hipBLASLt/cuBLAS are heavily tuned); autotuning over your configuration space narrows the gap. On an MI300X try `matrix_instr_nonkdim=16` against `32` and `waves_per_eu` 0–2 and see whether the guide's advice holds; on gfx950 raise `BLOCK_K` to use the 160 KiB of LDS.

# %% [markdown] tags=["zh"]
# ## 选做（不计分）· 残差相加 + RMSNorm 融合
#
# Qwen2 的解码层在 RMSNorm 之前先做残差相加 `h = x + residual`。把两步融合进一个内核：读 `x`、`residual` 各一次，写出新的残差 `h` 和归一化结果 `y`，省掉一次对 `h` 的读取。这一节不计分，后面的内容也不依赖它；下面的检查单元在你没实现时只打印一句话。
#
# **约定**：`add_rmsnorm(x, residual, weight, eps)` 返回 `(y, h)`：`h = x + residual`（与 `x` 同 dtype），`y = rmsnorm(h, weight, eps)`；形状 (..., H)，fp32 计算；容差同第 4 节。

# %% [markdown] tags=["en"]
# ## Optional stretch (ungraded) · fused residual add + RMSNorm
#
# A Qwen2 decoder layer adds the residual, `h = x + residual`, right before RMSNorm. Fuse both into one kernel: read `x` and `residual` once each, write the new residual `h` and the normalized `y`, saving one read of `h`. This section is not graded and nothing later depends on it; the check cell below only prints a line while it is not implemented.
#
# **Contract**: `add_rmsnorm(x, residual, weight, eps)` returns `(y, h)`: `h = x + residual` (in `x`'s dtype) and `y = rmsnorm(h, weight, eps)`; shape (..., H), computed in fp32; tolerances as in section 4.

# %% tags=["solution"] grade_id="07-stretch-sol-1"
@triton.jit
def add_rmsnorm_kernel(x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, n_cols, eps, BLOCK: tl.constexpr):
    """One contiguous row: h = x + r (stored), y = rmsnorm(h) * w (stored)."""
    ### BEGIN SOLUTION
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    base = row * n_cols + cols
    h = tl.load(x_ptr + base, mask=mask, other=0.0).to(tl.float32) + tl.load(r_ptr + base, mask=mask, other=0.0).to(tl.float32)
    h = h.to(h_ptr.dtype.element_ty)
    tl.store(h_ptr + base, h, mask=mask)
    hf = h.to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = hf * tl.math.rsqrt(tl.sum(hf * hf, axis=0) / n_cols + eps) * w
    tl.store(y_ptr + base, y.to(y_ptr.dtype.element_ty), mask=mask)
    ### END SOLUTION


def add_rmsnorm(x, residual, weight, eps):
    """(rmsnorm(x + residual), x + residual) in one kernel."""
    ### BEGIN SOLUTION
    h_dim = x.shape[-1]
    xs, rs = x.reshape(-1, h_dim).contiguous(), residual.reshape(-1, h_dim).contiguous()
    y, h = torch.empty_like(xs), torch.empty_like(xs)
    add_rmsnorm_kernel[(xs.shape[0],)](xs, rs, weight, y, h, h_dim, eps, BLOCK=triton.next_power_of_2(h_dim))
    return y.reshape(x.shape), h.reshape(x.shape)
    ### END SOLUTION

# %%
try:
    _x, _r = torch.randn(3, 5, 96, device=device), torch.randn(3, 5, 96, device=device)
    _w = torch.randn(96, device=device)
    _y, _h = add_rmsnorm(_x, _r, _w, 1e-6)
    check_close(_h, _x + _r, rule="stretch: h = x + residual")
    check_close(_y, _rmsnorm_ref(_x + _r, _w, 1e-6), rule="stretch: y = rmsnorm(h)")
    print("stretch: fused add + RMSNorm is correct")
except NotImplementedError:
    print("stretch not attempted (optional)")

# %% [markdown] tags=["zh"]
# ## 小结
#
# 你写出了课程模型需要的融合算子：带掩码的逐元素内核、数值稳定的按行 softmax（少搬约 4 倍数据）、fp32 累加的分块 matmul、RMSNorm 与 SwiGLU，并把它们换进了模型的前向计算、logits 与原模块一致。你知道了 CDNA 是 wave64、`num_warps=4` 在 MI300X 上是 256 个 lane，修掉了写死 32 的移植错误，按 LDS、MFMA 尺寸和 `kpack` 筛出了合法的配置空间，并用 roofline 推出谁受带宽限制、谁受算力限制。
#
# 在更大的 GPU 上：用 gpu 配置重跑，看 softmax 达到带宽峰值的多少、自动调优把 matmul 推到 FP16 峰值的多少。文档：[Triton 教程](https://triton-lang.org/main/getting-started/tutorials/index.html) · [ROCm 的 Triton 内核优化指南](https://rocm.docs.amd.com/en/latest/how-to/rocm-for-ai/inference-optimization/workload.html#triton-kernel-performance-optimization) · [AMD GPU 规格表](https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html)。

# %% [markdown] tags=["en"]
# ## Wrap-up
#
# You wrote the fused kernels the course model needs: a masked elementwise kernel, a numerically stable row softmax (about 4× less data moved), a tiled matmul with fp32 accumulation, RMSNorm and SwiGLU, and swapped them into the model's forward with logits matching the stock modules. You know that CDNA runs wave64 and `num_warps=4` is 256 lanes on an MI300X, fixed a hard-coded-32 porting bug, filtered a valid configuration space by LDS, MFMA size and `kpack`, and derived from a roofline which kernels are memory-bound and which compute-bound.
#
# On a bigger GPU: rerun in the gpu profile and see what share of peak bandwidth the softmax reaches and how close autotuning brings the matmul to the FP16 peak. Docs: [Triton tutorials](https://triton-lang.org/main/getting-started/tutorials/index.html) · [ROCm Triton kernel optimization guide](https://rocm.docs.amd.com/en/latest/how-to/rocm-for-ai/inference-optimization/workload.html#triton-kernel-performance-optimization) · [AMD GPU specifications](https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html).
