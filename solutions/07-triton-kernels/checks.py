"""Lab 07's hidden checks (Triton kernels), run by the trusted harness (rocmlab.harness).

Inputs are drawn here from the learner's variant and sent to the kernel as CPU tensors; the
expressions and the lab's kernel-side module (`in_kernel.py`) move them to the notebook's
`device` (and build non-contiguous views there). Every reference is computed here, in float64,
with this interpreter's own torch, or, for the course model, asked of the reference kernel.
"""

import torch
import torch.nn.functional as F

from rocmlab.assets.loaders import load_qc_reports
from rocmlab.check_compare import assert_close, assert_equal, learner_says
from rocmlab.harness import check, mistake

HALF_TOL = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1e-2}
MATMUL_TOL = {torch.float32: 2e-3, torch.float16: 6e-4, torch.bfloat16: 5e-3}


def _close(got, want, tol, what):
    """The dtype's tolerance as both rtol and atol (torch.isclose's rule), with shape and dtype."""
    assert_close(got, want, rtol=tol, atol=tol, what=what)


def _rel(got, want):
    return float((got.double() - want).norm() / want.norm().clamp_min(1e-300))


def _compiled(answer):
    """True when the learner's kernel ran on a GPU, read from where an answer tensor lived there
    (bf16 arithmetic is wrong in Triton's interpreter, which runs on the CPU)."""
    return not str(answer.rocmlab_layout["device"]).startswith("cpu")


# ---------------------------------------------------------------- 1 · vector add


def _add_inputs(variant):
    gen, rnd = variant.torch(), variant.random
    block = rnd.choice([64, 128, 512, 1024])
    for n in (1, block, block + 1, rnd.randint(2, 5000)):
        for dtype in (torch.float16, torch.int32, torch.float32):
            if dtype == torch.int32:
                x, y = (torch.randint(-1000, 1000, (n,), generator=gen, dtype=dtype) for _ in range(2))
            else:
                x, y = (torch.randn(n, generator=gen).to(dtype) for _ in range(2))
            yield n, block, dtype, x, y


@check(
    "07-add-1",
    points=1,
    en="vector_add writes x + y into out and returns it, for any length, block and dtype",
    zh="vector_add 把 x + y 写进 out 并返回它，任意长度、block 与 dtype",
)
def add_values(learner, variant):
    for n, block, dtype, x, y in _add_inputs(variant):
        buf, ret = learner.run("vector_add_into", x, y, block, 7, block)
        want = x + y
        assert_equal(buf[:n], want, what=f"out, n={n}, block={block}, {dtype}")
        assert_equal(ret, want, what=f"returned, n={n}, block={block}, {dtype}")
    x = torch.randn(variant.random.randint(300, 3000), generator=variant.torch())
    assert_equal(learner.eval("vector_add(x.to(device), x.to(device))", x=x), 2 * x, what="default block, new out")


@check(
    "07-add-1",
    points=0.5,
    en="vector_add never writes past n (the sentinel after out stays)",
    zh="vector_add 不写 n 之外的位置（out 之后的哨兵值不变）",
)
def add_tail(learner, variant):
    for n, block, dtype, x, y in _add_inputs(variant):
        buf, _ = learner.run("vector_add_into", x, y, block, 7, block)
        assert_equal(
            buf[n:], torch.full((block,), 7, dtype=dtype), what=f"the sentinel after out, n={n}, block={block}"
        )


@check(
    "07-add-1",
    points=0.5,
    en="vector_add raises ValueError when the shapes differ",
    zh="形状不一致时 vector_add 应抛出 ValueError",
)
def add_shapes(learner, variant):
    n = variant.random.randint(2, 300)
    for a, b in ((n, n + 1), (n + variant.random.randint(1, 9), n)):
        raised = learner.raised("vector_add(torch.ones(a, device=device), torch.ones(b, device=device))", a=a, b=b)
        assert raised is not None and raised.is_a("ValueError"), f"{a} vs {b}: {raised}"


# ---------------------------------------------------------------- 2 · softmax


def _softmax_ref(x):
    return torch.softmax(x.double(), dim=-1).to(x.dtype)


@check(
    "07-softmax-1",
    points=1,
    en="softmax matches the fp32 reference within the dtype's tolerance "
    "(fp32 1e-5, fp16 1e-3, bf16 1e-2; convert to fp32 right after tl.load)",
    zh="softmax 在各 dtype 的容差内与 fp32 参考一致（fp32 1e-5、fp16 1e-3、bf16 1e-2；tl.load 之后立即转 fp32）",
)
def softmax_values(learner, variant):
    gen, rnd = variant.torch(), variant.random
    shapes = [(1, 1), (rnd.randint(2, 9), rnd.randint(600, 2100)), (rnd.randint(2, 6), rnd.choice([64, 256, 1024]))]
    for shape in shapes:
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            x = (3 * torch.randn(*shape, generator=gen)).to(dtype)
            _close(learner.eval("softmax(x.to(device))", x=x), _softmax_ref(x), HALF_TOL[dtype], f"{shape} {dtype}")


@check(
    "07-softmax-1",
    points=1,
    en="softmax handles any strides (slices, transposes) and returns a new contiguous tensor",
    zh="softmax 接受任意步长（切片、转置），返回新的连续张量",
)
def softmax_strides(learner, variant):
    gen, rnd = variant.torch(), variant.random
    rows, cols = rnd.randint(5, 12), rnd.choice([96, 128, 200])
    wide = torch.randn(rows, cols, generator=gen)
    lo, hi = rnd.randint(1, 10), rnd.randint(40, cols)
    views = {  # in_kernel.softmax_of_view builds the same view on the device
        "columns": wide[:, lo:hi],
        "transposed": wide.t(),
        "every other row": wide[::2],
        "transposed and cut": wide.t()[lo:hi, 1 : rows - 1],
    }
    for name, view in views.items():
        got = learner.run("softmax_of_view", wide, name, lo, hi, rows)
        _close(got, _softmax_ref(view), 1e-5, name)
        assert got.rocmlab_layout["contiguous"], f"{name}: the result is not contiguous"


@mistake(
    en="exp of the raw row, without subtracting the row max: exp overflows to inf at |x| = 1e4",
    zh="直接对原始行求 exp、没有先减去行最大值：|x| = 1e4 时 exp 溢出为 inf",
    code="""
@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, stride_xr, stride_xc, stride_or, stride_oc, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_xr + cols * stride_xc, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x)
    y = e / tl.sum(e, axis=0)
    tl.store(out_ptr + row * stride_or + cols * stride_oc, y.to(out_ptr.dtype.element_ty), mask=mask)
""",
)
@check(
    "07-softmax-1",
    points=1,
    en="softmax is numerically stable: no inf/nan at |x| = 1e4 (subtract the row max)",
    zh="softmax 数值稳定：|x| = 1e4 时没有 inf/nan（先减去行最大值）",
)
def softmax_stable(learner, variant):
    gen, rnd = variant.torch(), variant.random
    for dtype in (torch.float32, torch.float16):
        x = (1e4 * torch.randn(rnd.randint(2, 8), rnd.randint(20, 400), generator=gen)).to(dtype)
        got = learner.eval("softmax(x.to(device))", x=x)
        _close(got, _softmax_ref(x), HALF_TOL[dtype], f"|x|=1e4 {dtype}")  # an inf or nan fails it


# ---------------------------------------------------------------- 2 · traffic


@check(
    "07-traffic-1",
    points=0.5,
    en="softmax_traffic counts eager 5MN+2M reads, 3MN+2M writes and fused 2MN, times the bytes",
    zh="softmax_traffic：eager 读 5MN+2M、写 3MN+2M，fused 2MN，再乘字节数",
)
def traffic_counts(learner, variant):
    rnd = variant.random
    cases = [
        (1, 1, 2),
        (rnd.randint(2, 70000), rnd.randint(2, 9000), rnd.choice([1, 2, 4])),
        (rnd.randint(1, 50), rnd.randint(1, 50), 8),
    ]
    for m, n, e in cases:
        got = learner.call("softmax_traffic", m, n, e)
        eager, fused = (8 * m * n + 4 * m) * e, 2 * m * n * e
        assert got["eager"] == eager and got["fused"] == fused, (m, n, e, got)
        assert abs(got["ratio"] - eager / fused) < 1e-9 * (eager / fused), (m, n, e, got)


@check(
    "07-traffic-1",
    points=0.5,
    en="softmax_traffic raises ValueError when a size is below 1",
    zh="任一尺寸小于 1 时 softmax_traffic 应抛出 ValueError",
)
def traffic_errors(learner, variant):
    rnd = variant.random
    good = rnd.randint(1, 100)
    for args in ((0, good, 2), (good, rnd.randint(-5, 0), 2), (good, good, 0)):
        raised = learner.raised("softmax_traffic(*a)", a=args)
        assert raised is not None and raised.is_a("ValueError"), (args, raised)


# ---------------------------------------------------------------- 3 · matmul


def _matmul(learner, a_expr, b_expr, values, blocks=None):
    call = f"matmul({a_expr}, {b_expr}" + "".join(f", {k}={v}" for k, v in (blocks or {}).items()) + ")"
    got = learner.eval(call, **values)
    assert isinstance(got, torch.Tensor), f"matmul: expected a tensor, got {type(got).__name__}"
    return got


def _matmul_ok(got, want, dtype, what):
    assert tuple(got.shape) == tuple(want.shape) and got.dtype == dtype, f"{what}: {tuple(got.shape)} {got.dtype}"
    assert got.rocmlab_layout["contiguous"], f"{what}: not contiguous"
    err = _rel(got, want)
    assert err <= MATMUL_TOL[dtype], f"{what}: relative error {err:.2e} > {MATMUL_TOL[dtype]:.0e}"


def _blocks(rnd):
    return {"block_m": rnd.choice([16, 32, 64]), "block_n": rnd.choice([16, 32]), "block_k": rnd.choice([16, 32, 64])}


@check(
    "07-matmul-1",
    points=0.5,
    en="matmul is right in float32 (relative error ≤ 2e-3) on sizes that are not multiples of "
    "the tile, returning a new contiguous (M, N) tensor in a's dtype",
    zh="matmul 在 float32 下正确（相对误差 ≤ 2e-3），尺寸不是块的整数倍，返回 a 的 dtype 的连续 (M, N) 新张量",
)
def matmul_float32(learner, variant):
    gen, rnd = variant.torch(), variant.random
    for m, k, n in ((1, 16, 1), (rnd.randint(17, 90), rnd.randint(17, 80), rnd.randint(17, 100))):
        a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
        blocks = _blocks(rnd) if m > 1 else {"block_m": 16, "block_n": 16, "block_k": 16}
        got = _matmul(learner, "a.to(device)", "b.to(device)", {"a": a, "b": b}, blocks)
        _matmul_ok(got, a.double() @ b.double(), torch.float32, f"{m}x{k} @ {k}x{n}")


@check(
    "07-matmul-1",
    points=0.5,
    en="matmul addresses by strides: transposed and strided inputs are right",
    zh="matmul 按步长寻址：转置、跨步的输入也正确",
)
def matmul_strides(learner, variant):
    gen, rnd = variant.torch(), variant.random
    m, k, n = rnd.randint(20, 70), rnd.randint(20, 60), rnd.randint(20, 70)
    a, w = torch.randn(m, k, generator=gen), torch.randn(n, k, generator=gen)
    _matmul_ok(
        _matmul(learner, "a.to(device)", "w.to(device).t()", {"a": a, "w": w}),
        a.double() @ w.double().t(),
        torch.float32,
        "B = w.t()",
    )
    wide, b = torch.randn(m, 2 * k, generator=gen), torch.randn(k, n, generator=gen)
    _matmul_ok(
        _matmul(learner, "wide.to(device)[:, ::2]", "b.to(device)", {"wide": wide, "b": b}, _blocks(rnd)),
        wide[:, ::2].double() @ b.double(),
        torch.float32,
        "A with column stride 2",
    )
    at = torch.randn(k, m, generator=gen)
    _matmul_ok(
        _matmul(learner, "at.to(device).t()", "b.to(device)", {"at": at, "b": b}),
        at.double().t() @ b.double(),
        torch.float32,
        "A transposed",
    )


@check(
    "07-matmul-1",
    points=0.5,
    en="matmul in float16 stays within 6e-4 (bfloat16 within 5e-3, compiled Triton only)",
    zh="matmul 在 float16 下误差 ≤ 6e-4（bfloat16 ≤ 5e-3，只在编译模式下检查）",
)
def matmul_half(learner, variant):
    gen, rnd = variant.torch(), variant.random
    m, k, n = rnd.randint(20, 80), rnd.randint(20, 64), rnd.randint(20, 80)
    dtypes, compiled = [torch.float16, torch.bfloat16], None
    for dtype in dtypes:
        if dtype == torch.bfloat16 and not compiled:
            break
        a, w = torch.randn(m, k, generator=gen).to(dtype), torch.randn(n, k, generator=gen).to(dtype)
        got = _matmul(learner, "a.to(device)", "w.to(device).t()", {"a": a, "w": w}, _blocks(rnd))
        _matmul_ok(got, a.double() @ w.double().t(), dtype, f"{dtype}, B transposed")
        compiled = _compiled(got)


@check(
    "07-matmul-1",
    points=1,
    en="matmul accumulates in fp32: float16 with K=4096 positive values stays within 6e-4",
    zh="matmul 用 fp32 累加：K=4096 的 float16 正数相乘，误差仍 ≤ 6e-4",
)
def matmul_fp32_accumulator(learner, variant):
    gen = variant.torch()
    a, b = torch.rand(32, 4096, generator=gen).half(), torch.rand(4096, 32, generator=gen).half()
    got = _matmul(
        learner, "a.to(device)", "b.to(device)", {"a": a, "b": b}, {"block_m": 32, "block_n": 32, "block_k": 32}
    )
    _matmul_ok(got, a.double() @ b.double(), torch.float16, "K=4096 positive float16")


@check(
    "07-matmul-1",
    points=0.5,
    en="matmul raises ValueError when the inner dimensions differ",
    zh="内维不等时 matmul 应抛出 ValueError",
)
def matmul_shapes(learner, variant):
    rnd = variant.random
    m, k, n = rnd.randint(2, 9), rnd.randint(2, 9), rnd.randint(2, 9)
    raised = learner.raised(
        "matmul(torch.ones(m, k, device=device), torch.ones(k + d, n, device=device))",
        m=m,
        k=k,
        n=n,
        d=rnd.randint(1, 5),
    )
    assert raised is not None and raised.is_a("ValueError"), raised


# ---------------------------------------------------------------- 4 · RMSNorm and SwiGLU


def _rmsnorm_ref(x, w, eps):
    xd = x.double()
    return (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * w.double()).to(x.dtype)


@check(
    "07-rmsnorm-1",
    points=1,
    en="rmsnorm matches x / sqrt(mean(x²) + eps) · weight within the dtype's tolerance, "
    "any leading shape (convert to fp32 right after tl.load)",
    zh="rmsnorm 在各 dtype 容差内等于 x / sqrt(mean(x²) + eps) · weight，前导维任意（tl.load 之后立即转 fp32）",
)
def rmsnorm_values(learner, variant):
    gen, rnd = variant.torch(), variant.random
    cases = [
        ((rnd.randint(2, 8), rnd.randint(500, 1100)), torch.float16, 1e-5),
        ((rnd.randint(2, 5), rnd.randint(40, 130)), torch.bfloat16, 1e-6),
        ((1, 1), torch.float32, 1e-6),
        ((2, 3, rnd.randint(2, 4), rnd.randint(20, 70)), torch.float32, 1e-2),
    ]
    for shape, dtype, eps in cases:
        x = (2 * torch.randn(*shape, generator=gen)).to(dtype)
        w = torch.randn(shape[-1], generator=gen).to(dtype)
        got = learner.eval("rmsnorm(x.to(device), w.to(device), eps)", x=x, w=w, eps=eps)
        _close(got, _rmsnorm_ref(x, w, eps), HALF_TOL[dtype], f"{shape} {dtype}")


@check(
    "07-rmsnorm-1",
    points=0.5,
    en="rmsnorm is right on non-contiguous inputs (transposed, sliced)",
    zh="rmsnorm 在不连续的输入（转置、切片）上也正确",
)
def rmsnorm_strides(learner, variant):
    gen, rnd = variant.torch(), variant.random
    h = rnd.choice([32, 64, 96])
    base, w = torch.randn(rnd.randint(3, 7), rnd.randint(3, 6), h, generator=gen), torch.randn(h, generator=gen)
    got = learner.eval("rmsnorm(base.to(device).transpose(0, 1), w.to(device), 1e-6)", base=base, w=w)
    _close(got, _rmsnorm_ref(base.transpose(0, 1), w, 1e-6), 1e-5, "transposed leading dims")
    wide = torch.randn(rnd.randint(2, 6), 2 * h, generator=gen)
    got = learner.eval("rmsnorm(wide.to(device)[:, ::2], w.to(device), 1e-6)", wide=wide, w=w)
    _close(got, _rmsnorm_ref(wide[:, ::2], w, 1e-6), 1e-5, "last dim with stride 2")


@check(
    "07-rmsnorm-1",
    points=0.5,
    en="rmsnorm agrees with the model's own RMSNorm modules",
    zh="rmsnorm 与模型自带的 RMSNorm 模块一致",
)
def rmsnorm_model(learner, variant, reference):
    """A module's weight and epsilon, and its output, from the reference kernel's model: the learner's
    kernel is asked for rmsnorm on those inputs only."""
    hidden = reference.eval("int(model.config.hidden_size)")
    for i in (0, variant.random.randint(1, 100)):
        h = torch.randn(3, hidden, generator=variant.torch())
        weight, eps, want = reference.run("rmsnorm_module", h, i)
        got = learner.eval("rmsnorm(h.to(device), w.to(device), eps)", h=h, w=weight, eps=eps)
        _close(got, want.to(weight.dtype), 1e-5, f"module {i}")


@check(
    "07-swiglu-1",
    points=1,
    en="swiglu returns silu(gate)·up in gate's shape and dtype within the dtype's tolerance "
    "(convert to fp32 right after tl.load)",
    zh="swiglu 返回 silu(gate)·up，形状与 dtype 同 gate，在 dtype 容差内（tl.load 之后立即转 fp32）",
)
def swiglu_values(learner, variant):
    gen, rnd = variant.torch(), variant.random
    cases = [
        ((rnd.randint(1, 9),), torch.float32),
        ((rnd.randint(2, 5), rnd.randint(500, 1500)), torch.float16),
        ((2, 3, rnd.randint(100, 200)), torch.bfloat16),
        ((1,), torch.float16),
    ]
    for shape, dtype in cases:
        g, u = (3 * torch.randn(*shape, generator=gen)).to(dtype), torch.randn(*shape, generator=gen).to(dtype)
        want = (F.silu(g.double()) * u.double()).to(dtype)
        _close(learner.eval("swiglu(g.to(device), u.to(device))", g=g, u=u), want, HALF_TOL[dtype], f"{shape} {dtype}")


@check("07-swiglu-1", points=0.5, en="swiglu is right on non-contiguous inputs", zh="swiglu 在不连续的输入上也正确")
def swiglu_strides(learner, variant):
    gen, rnd = variant.torch(), variant.random
    a, b = rnd.randint(10, 50), rnd.randint(10, 50)
    g, u = torch.randn(a, b, generator=gen), torch.randn(b, a, generator=gen)
    got = learner.eval("swiglu(g.to(device).t(), u.to(device))", g=g, u=u)
    _close(got, (F.silu(g.t().double()) * u.double()).float(), 1e-5, "gate transposed")


@check(
    "07-swiglu-1",
    points=0.5,
    en="swiglu raises ValueError when the shapes differ",
    zh="形状不一致时 swiglu 应抛出 ValueError",
)
def swiglu_shapes(learner, variant):
    a = variant.random.randint(2, 9)
    raised = learner.raised("swiglu(torch.ones(a, a + 1, device=device), torch.ones(a + 1, a, device=device))", a=a)
    assert raised is not None and raised.is_a("ValueError"), raised


# ---------------------------------------------------------------- 4 · the model swap

# The learner's kernel is asked for logits only (in_kernel.swap_run), on inputs made here: the
# prompts' token ids (from the reference kernel's tokenizer) and, as "marked" kernels, rmsnorm /
# swiglu scaled by factors drawn here, the k-th call of each by its own factor. A swap that calls
# each kernel once per module's forward, looked up by name when called, gives the stock model's
# logits with each RMSNorm / MLP output scaled the same way, which the reference kernel computes
# with hooks on its own stock model (in_kernel.stock_model); a swap left in place after the block
# gives marked logits where stock ones are due. No count, flag or module listing the kernel
# computes for itself is evidence.
STOCK_TOL = 1e-5  # the learner's stock model against the reference's: the same weights and code


def _scales(rnd):
    """Factors far enough from 1 and from each other that a call out of place moves the logits."""
    return [round(rnd.choice([rnd.uniform(0.4, 0.7), rnd.uniform(1.4, 2.5)]), 3) for _ in range(rnd.randint(3, 5))]


def _model_run(learner, variant, reference):
    """The learner's run of the swap, and the reference kernel's stock and marked model on the same inputs."""
    picked = variant.random.choice([r["description"] for r in load_qc_reports("eval")])
    prompts = [
        "复检：" + picked,
        "来料检验：外壳" + variant.random.choice(["划伤", "变形", "色差"]),
    ]  # the second is padded
    norm_scales, mlp_scales = _scales(variant.random), _scales(variant.random)
    kinds, stock, marked, ids, mask = reference.run("stock_model", prompts, norm_scales, mlp_scales)
    names = ("counts", "stock", "swapped", "in_marked", "after")
    got = learner.run("swap_run", ids, mask, norm_scales, mlp_scales)
    assert isinstance(got, tuple) and len(got) == len(names), "the swap's results"
    marks = {"ids": ids, "mask": mask, "norm_scales": norm_scales, "mlp_scales": mlp_scales}
    return {"kinds": kinds, "reference": stock, "marked": marked, "marks": marks, **dict(zip(names, got, strict=True))}


def _near(got, stock, tol, what):
    """Within ``tol × (1 + max |stock|)`` everywhere: the lab's model tolerance."""
    assert_close(got, stock, rtol=0, atol=tol * (1 + stock.abs().max().item()), what=what)


@check(
    "07-model-1",
    points=0.5,
    en="triton_kernels_in yields the numbers of RMSNorm and MLP modules swapped",
    zh="triton_kernels_in 给出换掉的 RMSNorm 与 MLP 模块数",
    counts_with="model_calls",
)
def model_counts(learner, variant, reference):
    run = _model_run(learner, variant, reference)
    assert run["counts"] == run["kinds"], f"counts {run['counts']}, modules {run['kinds']}"


@check(
    "07-model-1",
    points=0.5,
    en="inside the block each RMSNorm and MLP calls the notebook's rmsnorm / swiglu once "
    "per forward, looked up when called",
    zh="块内每次前向中每个 RMSNorm、MLP 模块在调用时按名字各调用一次 rmsnorm / swiglu",
)
def model_calls(learner, variant, reference):
    run = _model_run(learner, variant, reference)
    _near(run["in_marked"], run["marked"], 1e-3, "logits with each call of rmsnorm / swiglu scaled by its own factor")


@check(
    "07-model-1",
    points=1,
    en="logits inside the block match the stock model within 1e-3 × (1 + max |stock logit|)",
    zh="块内的 logits 与原模型相差不超过 1e-3 × (1 + 原 logits 最大绝对值)",
    counts_with="model_calls",
)
def model_logits(learner, variant, reference):
    run = _model_run(learner, variant, reference)
    _near(run["swapped"], run["reference"], 1e-3, "logits")


@check(
    "07-model-1",
    points=1,
    en="every module is restored on leaving the block, also when the block raises",
    zh="离开 with 块时（包括块内抛出异常时）每个模块都恢复原样",
    counts_with="model_calls",
)
def model_restored(learner, variant, reference):
    run = _model_run(learner, variant, reference)
    _near(run["stock"], run["reference"], STOCK_TOL, "the notebook's model before the block")
    _near(run["after"], run["reference"], STOCK_TOL, "after the block, with rmsnorm / swiglu rebound (not restored)")
    # the block raises a KeyError naming a token drawn here: the kernel's answer must be that exception
    token = f"rocmlab-check-{variant.random.getrandbits(48):012x}"
    raised = learner.run_raised("raise_in_block", token)
    assert raised is not None and raised.is_a("KeyError") and token in raised.message, learner_says(
        "the block's KeyError did not reach the caller", "块内抛出的 KeyError 没有传到调用者"
    ) + str(raised)
    after_raise = learner.run("marked_logits", *run["marks"].values())
    _near(after_raise, run["reference"], STOCK_TOL, "after a raise, with rmsnorm / swiglu rebound (not restored)")


# ---------------------------------------------------------------- 5 · lanes, wave32, configs


@mistake(
    en="a CUDA warp of 32 lanes assumed on every target: CDNA (gfx9) runs wave64",
    zh="按 CUDA 的习惯在所有目标上都假设 32 个 lane 的 warp：CDNA（gfx9）是 wave64",
    code="""
def lanes_per_program(num_warps, arch):
    if not isinstance(num_warps, int) or num_warps < 1 or num_warps & (num_warps - 1):
        raise ValueError(f"num_warps must be a positive power of two, got {num_warps!r}")
    base = str(arch).split(":", 1)[0].strip().lower()
    if not (base.startswith("sm_") or base.startswith("gfx")):
        raise ValueError(f"unknown GPU target {arch!r}")
    return num_warps * 32
""",
)
@check(
    "07-lanes-1",
    points=0.5,
    en="lanes_per_program is num_warps × 64 on gfx9 (CDNA), × 32 on gfx10+ (RDNA) and sm_*",
    zh="lanes_per_program 在 gfx9（CDNA）上为 num_warps × 64，gfx10+（RDNA）与 sm_* 上为 × 32",
)
def lanes_widths(learner, variant):
    rnd = variant.random
    archs = {
        "gfx90a:sramecc+:xnack-": 64,
        "gfx950": 64,
        "gfx908": 64,
        "gfx942": 64,
        "gfx1201": 32,
        "gfx1030": 32,
        "gfx1100": 32,
        "sm_90": 32,
        "sm_80": 32,
    }
    for arch, width in archs.items():
        warps = rnd.choice([1, 2, 4, 8, 16])
        got = learner.call("lanes_per_program", warps, arch)
        assert type(got) is int and got == warps * width, f"{warps}, {arch}: {got}"


@check(
    "07-lanes-1",
    points=0.5,
    en="lanes_per_program raises ValueError for a num_warps that is not a positive power of two or an unknown target",
    zh="num_warps 不是正的 2 的幂或目标无法识别时 lanes_per_program 应抛出 ValueError",
)
def lanes_errors(learner, variant):
    rnd = variant.random
    for args in (
        (rnd.choice([3, 5, 6, 12]), "gfx942"),
        (0, "gfx942"),
        (-4, "gfx1100"),
        (4, "cpu"),
        (4, "gfx"),
        (4, ""),
    ):
        raised = learner.raised("lanes_per_program(*a)", a=args)
        assert raised is not None and raised.is_a("ValueError"), (args, raised)


@check(
    "07-wave32-1",
    points=0.5,
    en="block_for is max(lanes, min(next_power_of_2(n_cols), 4096))",
    zh="block_for = max(lanes, min(next_power_of_2(n_cols), 4096))",
)
def wave32_block(learner, variant):
    rnd = variant.random
    cases = [(5000, 64), (3, 256), (1000, 32), (64, 64), (rnd.randint(1, 9000), rnd.choice([32, 64, 128, 256]))]
    for n, lanes in cases:
        want = max(lanes, min(1 << max(0, (n - 1).bit_length()), 4096))
        assert learner.call("block_for", n, lanes) == want, (n, lanes)


@check(
    "07-wave32-1",
    points=1,
    en="row_sq_mean is right (rtol = atol = 1e-5) for any number of columns, num_warps and wavefront",
    zh="row_sq_mean 对任意列数、num_warps 与 wavefront 都正确（rtol = atol = 1e-5）",
)
def wave32_values(learner, variant):
    gen, rnd = variant.torch(), variant.random
    for cols in (1, rnd.randint(2, 40), rnd.randint(4097, 6000)):
        for warps, wave in ((1, 32), (4, 64), (1, 64)):
            x = torch.randn(rnd.randint(2, 6), cols, generator=gen)
            got = learner.eval("row_sq_mean(x.to(device), nw, wave)", x=x, nw=warps, wave=wave)
            _close(got, x.double().pow(2).mean(dim=1).float(), 1e-5, f"{cols} columns, {warps} x {wave}")


@check(
    "07-wave32-1",
    points=0.5,
    en="row_sq_mean takes float16/bfloat16 and strided rows or columns, returning float32 "
    "(convert to fp32 right after tl.load)",
    zh="row_sq_mean 接受 float16/bfloat16 与跨步的行或列，返回 float32（tl.load 之后立即转 fp32）",
)
def wave32_layouts(learner, variant):
    gen, rnd = variant.torch(), variant.random
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.randn(3, rnd.randint(100, 400), generator=gen).to(dtype)
        _close(learner.eval("row_sq_mean(x.to(device))", x=x), x.double().pow(2).mean(dim=1).float(), 1e-5, str(dtype))
    wide = torch.randn(4, 512, generator=gen)
    cut = rnd.randint(50, 300)
    _close(
        learner.eval("row_sq_mean(w.to(device)[:, :c])", w=wide, c=cut),
        wide[:, :cut].double().pow(2).mean(dim=1).float(),
        1e-5,
        "strided rows",
    )
    _close(
        learner.eval("row_sq_mean(w.to(device).t()[:, :3])", w=wide),
        wide.t()[:, :3].double().pow(2).mean(dim=1).float(),
        1e-5,
        "non-contiguous columns",
    )


AMD_ONLY = ("waves_per_eu", "matrix_instr_nonkdim", "kpack")


def _lanes(warps, arch):
    base = arch.split(":")[0]
    return warps * (32 if base.startswith("sm_") or int(base[3:-2]) >= 10 else 64)


def _lds(cfg, elem):
    return (cfg["BLOCK_M"] + cfg["BLOCK_N"]) * cfg["BLOCK_K"] * elem * max(1, cfg["num_stages"])


def _valid(cfg, arch, elem, budget):
    base = arch.split(":")[0]
    if _lds(cfg, elem) > budget or cfg["BLOCK_M"] * cfg["BLOCK_N"] < _lanes(cfg["num_warps"], arch):
        return False
    if not base.startswith("gfx"):
        return not any(k in cfg for k in AMD_ONLY)
    nonk, kpack = cfg.get("matrix_instr_nonkdim", 0), cfg.get("kpack", 1)
    if _lanes(1, arch) == 32:  # RDNA: WMMA reads neither option
        return nonk == 0 and kpack == 1
    if nonk not in (0, 16, 32) or (nonk and (cfg["BLOCK_M"] % nonk or cfg["BLOCK_N"] % nonk)):
        return False
    return kpack in (1, 2) and not (base == "gfx950" and kpack != 1)


def _random_configs(rnd, count, amd_keys=True):
    out = []
    for _ in range(count):
        cfg = {
            "BLOCK_M": rnd.choice([16, 32, 64, 128, 256]),
            "BLOCK_N": rnd.choice([16, 32, 64, 128, 256]),
            "BLOCK_K": rnd.choice([16, 32, 64, 128]),
            "num_warps": rnd.choice([1, 2, 4, 8]),
            "num_stages": rnd.choice([0, 1, 2, 3]),
        }
        if amd_keys and rnd.random() < 0.7:
            cfg["matrix_instr_nonkdim"] = rnd.choice([0, 8, 16, 32])
            cfg["kpack"] = rnd.choice([1, 1, 2, 4])
            if rnd.random() < 0.5:
                cfg["waves_per_eu"] = rnd.choice([0, 1, 2])
        out.append(cfg)
    return out


def _filter(learner, cands, arch, elem, budget):
    got, after = learner.eval("(valid_configs(c, arch, e, b), c)", c=cands, arch=arch, e=elem, b=budget)
    assert after == cands, "valid_configs modified its candidates"
    return got


@check(
    "07-configs-1",
    points=0.5,
    en="lds_bytes = (BLOCK_M·BLOCK_K + BLOCK_K·BLOCK_N) · elem_bytes · max(1, num_stages)",
    zh="lds_bytes = (BLOCK_M·BLOCK_K + BLOCK_K·BLOCK_N) · elem_bytes · max(1, num_stages)",
)
def configs_lds(learner, variant):
    for cfg in _random_configs(variant.random, 6):
        elem = variant.random.choice([1, 2, 4])
        assert learner.call("lds_bytes", cfg, elem) == _lds(cfg, elem), cfg


@check(
    "07-configs-1",
    points=0.5,
    en="valid_configs drops configs whose LDS estimate exceeds the budget",
    zh="valid_configs 去掉 LDS 估计超出预算的配置",
)
def configs_budget(learner, variant):
    rnd = variant.random
    cands = [
        c
        for c in _random_configs(rnd, 40, amd_keys=False)
        if c["BLOCK_M"] * c["BLOCK_N"] >= _lanes(c["num_warps"], "gfx942")
    ]
    for arch, budget in (("gfx942", 64 * 1024), ("gfx950", 160 * 1024), ("gfx942", rnd.randint(8, 64) * 1024)):
        want = [c for c in cands if _lds(c, 2) <= budget]
        assert _filter(learner, cands, arch, 2, budget) == want, f"{arch}, budget {budget}"


@check(
    "07-configs-1",
    points=0.5,
    en="valid_configs drops configs whose tile has fewer elements than the program's lanes",
    zh="valid_configs 去掉输出块元素数少于程序 lane 数的配置",
)
def configs_lanes(learner, variant):
    cands = _random_configs(variant.random, 40, amd_keys=False)
    for arch in ("gfx942", "gfx1100", "sm_90"):
        want = [c for c in cands if c["BLOCK_M"] * c["BLOCK_N"] >= _lanes(c["num_warps"], arch)]
        assert _filter(learner, cands, arch, 1, 10**9) == want, arch


@check(
    "07-configs-1",
    points=0.5,
    en="on CDNA targets (gfx9xx): matrix_instr_nonkdim ∈ {0, 16, 32} dividing BLOCK_M and BLOCK_N, "
    "kpack ∈ {1, 2} and only 1 on gfx950",
    zh="CDNA 目标（gfx9xx）：matrix_instr_nonkdim ∈ {0, 16, 32} 且整除 BLOCK_M、BLOCK_N；kpack ∈ {1, 2}，gfx950 上只能是 1",
)
def configs_mfma(learner, variant):
    cands = [c for c in _random_configs(variant.random, 60) if c["BLOCK_M"] * c["BLOCK_N"] >= 512]
    for arch in ("gfx942", "gfx950", "gfx90a:sramecc+:xnack-"):
        want = [c for c in cands if _valid(c, arch, 1, 10**9)]
        assert _filter(learner, cands, arch, 1, 10**9) == want, arch


@check(
    "07-configs-1",
    points=0.5,
    en="on RDNA targets (gfx10xx and later): only matrix_instr_nonkdim 0 and kpack 1",
    zh="RDNA 目标（gfx10xx 及以后）：matrix_instr_nonkdim 只能是 0，kpack 只能是 1",
)
def configs_wmma(learner, variant):
    cands = [c for c in _random_configs(variant.random, 60) if c["BLOCK_M"] * c["BLOCK_N"] >= 256]
    for arch in ("gfx1100", "gfx1201", "gfx1030"):
        want = [c for c in cands if _valid(c, arch, 1, 10**9)]
        assert _filter(learner, cands, arch, 1, 10**9) == want, arch


@check(
    "07-configs-1",
    points=0.5,
    en="on non-gfx targets (sm_*) valid_configs drops every config with an AMD-only key",
    zh="非 gfx 目标（sm_*）上 valid_configs 去掉带 AMD 专用键的配置",
)
def configs_nvidia(learner, variant):
    cands = [c for c in _random_configs(variant.random, 40) if c["BLOCK_M"] * c["BLOCK_N"] >= 256]
    want = [c for c in cands if not any(k in c for k in AMD_ONLY)]
    assert _filter(learner, cands, "sm_90", 2, 10**9) == want


@check(
    "07-configs-1",
    points=0.5,
    en="valid_configs keeps the input order and leaves the candidates unmodified (an empty list gives [])",
    zh="valid_configs 保持输入顺序、不修改候选配置（空列表返回 []）",
)
def configs_order(learner, variant):
    rnd = variant.random
    cands = _random_configs(rnd, 80)
    budget = rnd.choice([64, 160]) * 1024
    want = [c for c in cands if _valid(c, "gfx942", 2, budget)]
    assert _filter(learner, cands, "gfx942", 2, budget) == want
    assert learner.call("valid_configs", [], "gfx942", 2, 65536) == []


# ---------------------------------------------------------------- 6 · roofline (optional stretch)


@check(
    "07-stretch-roofline-1",
    points=0.5,
    en="matmul_tile_traffic gives 2·bm·bn·k FLOPs and (bm·k + k·bn + bm·bn)·bytes",
    zh="matmul_tile_traffic 给出 2·bm·bn·k 次运算和 (bm·k + k·bn + bm·bn)·字节数",
)
def roofline_traffic(learner, variant):
    rnd = variant.random
    for bm, bn, k, e in (
        (1, 1, 1, 4),
        (rnd.choice([16, 64, 256]), rnd.choice([16, 64, 256]), rnd.randint(1, 9000), rnd.choice([1, 2, 4])),
    ):
        got = learner.call("matmul_tile_traffic", bm, bn, k, e)
        assert got == {"flops": 2 * bm * bn * k, "bytes": (bm * k + k * bn + bm * bn) * e}, (bm, bn, k, e, got)


def _roof(flops, moved, tflops, gbs):
    intensity, ridge = flops / moved, tflops * 1e12 / (gbs * 1e9)
    return intensity, ridge, min(tflops, intensity * gbs / 1000), "memory" if intensity < ridge else "compute"


def _roof_cases(rnd):
    tflops, gbs = rnd.uniform(100, 2500), rnd.uniform(1000, 8000)
    ridge = tflops * 1e3 / gbs
    return [
        (0, 10, tflops, gbs),
        (ridge * 1.01 * 1000, 1000, tflops, gbs),
        (ridge * 0.99 * 1000, 1000, tflops, gbs),
        (2 * 8192**3, 3 * 8192**2 * 2, tflops, gbs),
        (rnd.uniform(1, 1e6), rnd.uniform(1, 1e6), tflops, gbs),
    ]


@check(
    "07-stretch-roofline-1",
    points=0.5,
    en="roofline gives intensity = flops / bytes, ridge = peak FLOP/s ÷ peak B/s "
    "and attainable = min(peak, intensity × GB/s / 1000)",
    zh="roofline：intensity = flops / bytes，ridge = 峰值 FLOP/s ÷ "
    "峰值 B/s，attainable = min(峰值, intensity × GB/s / 1000)",
)
def roofline_numbers(learner, variant):
    for case in _roof_cases(variant.random):
        got = learner.call("roofline", *case)
        intensity, ridge, attainable, _ = _roof(*case)
        for key, want in (("intensity", intensity), ("ridge", ridge), ("attainable_tflops", attainable)):
            assert abs(got[key] - want) <= 1e-9 * max(1.0, abs(want)), (case, key, got[key], want)


@check(
    "07-stretch-roofline-1",
    points=0.5,
    en="roofline calls a kernel memory-bound below the ridge and compute-bound at or above it",
    zh="roofline：强度低于拐点为 memory，不低于拐点为 compute",
)
def roofline_bound(learner, variant):
    for case in _roof_cases(variant.random):
        assert learner.call("roofline", *case)["bound"] == _roof(*case)[3], case


@check(
    "07-stretch-roofline-1",
    points=0.5,
    en="roofline raises ValueError for non-positive bytes or peaks or negative flops",
    zh="bytes、峰值不为正或 flops 为负时 roofline 应抛出 ValueError",
)
def roofline_errors(learner, variant):
    rnd = variant.random
    for args in ((1, 0, 1, 1), (1, 1, 0, 1), (1, 1, 1, -rnd.randint(1, 9)), (-rnd.randint(1, 9), 1, 1, 1)):
        raised = learner.raised("roofline(*a)", a=args)
        assert raised is not None and raised.is_a("ValueError"), (args, raised)
