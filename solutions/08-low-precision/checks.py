"""Lab 08's hidden checks (low precision), run by the trusted harness (rocmlab.harness).

Inputs are drawn here from the learner's variant; FP8 bytes are built in the kernel from uint8
(a NaN byte keeps its sign that way) and come back as uint8 views (``in_kernel.py``), and every reference is
computed here with this interpreter's own torch. What needs the notebook's model (its perplexity,
its config and parameter count) is asked of the trusted reference kernel, which ran the lab's
solution: the learner's kernel answers only for the learner's functions on the check's inputs,
since any later cell of theirs may rebind ``model`` and ``tok``.
"""

import math

import torch

from rocmlab.assets.loaders import load_qc_reports
from rocmlab.check_compare import assert_close, assert_equal, label
from rocmlab.harness import check, mistake

FP8 = {
    "e4m3fn": torch.float8_e4m3fn,
    "e4m3fnuz": torch.float8_e4m3fnuz,
    "e5m2": torch.float8_e5m2,
    "e5m2fnuz": torch.float8_e5m2fnuz,
}
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def _tensor(got, what):
    assert isinstance(got, torch.Tensor), f"{what}: expected a tensor, got {type(got).__name__}"
    return got


def _raises_value_error(learner, expr, **values):
    raised = learner.raised(expr, **values)
    assert raised is not None and raised.is_a("ValueError"), f"{expr} with {sorted(values)}: {raised}"


# ---------------------------------------------------------------- 1 · decode


def _decoded(learner, fmt, order):
    got = learner.eval("[decode_fp8(b, f) for b in bs]", bs=order, f=fmt)
    assert isinstance(got, list) and len(got) == len(order), "decode_fp8: one value per byte"
    ref = torch.tensor(order, dtype=torch.uint8).view(FP8[fmt]).float().tolist()
    return zip(order, got, ref)


FN_BIAS_ON_FNUZ = """
def decode_fp8(byte, fmt):
    if fmt not in FP8_FIELDS:
        raise ValueError(fmt)
    if isinstance(byte, bool) or not isinstance(byte, int) or not 0 <= byte <= 255:
        raise ValueError(byte)
    exp_bits, man_bits = FP8_FIELDS[fmt]
    bias = 2 ** (exp_bits - 1) - 1  # the IEEE-style bias: right for fn and e5m2, one too small for fnuz
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
"""


@mistake(
    en="the OCP bias (7, 15) used on fnuz bytes, whose bias is one larger (8, 16): every fnuz value doubles",
    zh="对 fnuz 字节用了 OCP 的偏置（7、15），而 fnuz 的偏置大 1（8、16）：每个 fnuz 值都翻倍",
    code=FN_BIAS_ON_FNUZ,
)
@check(
    "08-fp8bits-1",
    points=1.5,
    en="decode_fp8 returns every finite byte's value (a Python float) in each of the four formats",
    zh="decode_fp8 对四种格式的每个有限字节返回正确的值（Python float）",
)
def decode_finite(learner, variant):
    order = list(range(256))
    variant.random.shuffle(order)
    for fmt in FP8:
        for byte, got, want in _decoded(learner, fmt, order):
            if math.isfinite(want) and not (want == 0 and math.copysign(1, want) < 0):
                assert type(got) is float and got == want, (
                    f"[[learner: format {fmt}]] 0x{byte:02X}: {got!r}, want {want!r}"
                )


@check(
    "08-fp8bits-1",
    points=1,
    en="decode_fp8 gives NaN, ±inf and −0.0 exactly where each format has them",
    zh="decode_fp8 在各格式规定的位置给出 NaN、±inf 与 −0.0",
)
def decode_specials(learner, variant):
    order = list(range(256))
    variant.random.shuffle(order)
    for fmt in FP8:
        for byte, got, want in _decoded(learner, fmt, order):
            if math.isfinite(want) and not (want == 0 and math.copysign(1, want) < 0):
                continue
            assert type(got) is float, f"[[learner: format {fmt}, not a float]] 0x{byte:02X}: {type(got).__name__}"
            if math.isnan(want):
                assert math.isnan(got), f"[[learner: format {fmt}, a NaN byte]] 0x{byte:02X}: {got!r}, want nan"
            else:
                assert got == want and math.copysign(1, got) == math.copysign(1, want), (
                    f"[[learner: format {fmt}, ±inf or −0.0]] 0x{byte:02X}: {got!r}"
                )


@check(
    "08-fp8bits-1",
    points=0.5,
    en="decode_fp8 raises ValueError for a byte that is not an int in 0..255 or an unknown format",
    zh="字节不是 0..255 的 int 或格式未知时 decode_fp8 应抛出 ValueError",
)
def decode_errors(learner, variant):
    rnd = variant.random
    cases = [
        (256 + rnd.randint(0, 100), "e4m3fn"),
        (-rnd.randint(1, 100), "e5m2"),
        (True, "e4m3fn"),
        (float(rnd.randint(0, 255)), "e4m3fnuz"),
        (rnd.randint(0, 255), rnd.choice(["e4m3", "fp8", "E4M3FN", "e5m2fn"])),
    ]
    for byte, fmt in cases:
        _raises_value_error(learner, "decode_fp8(b, f)", b=byte, f=fmt)


# ---------------------------------------------------------------- 2 · scaled quantization


def _weights(variant, rows, cols):
    gen = variant.torch()
    w = torch.randn(rows, cols, generator=gen) * torch.rand(rows, 1, generator=gen) * 3
    w[variant.random.randrange(rows), variant.random.randrange(cols)] = 5.0 * variant.random.choice([-1, 1])
    return w


def _quantize(learner, w, dtype, **kwargs):
    return learner.run("quantize_bytes", w, dtype, kwargs)


@check(
    "08-fp8quant-1",
    points=1,
    en="quantize_fp8's scale is amax/fmax as float32: shape () per tensor, [out, 1] per channel",
    zh="quantize_fp8 的 scale 为 float32 的 amax/fmax：逐张量形状 ()，逐通道 [out, 1]",
)
def quant_scale(learner, variant):
    rnd = variant.random
    for dtype in FP8.values():
        for gran in ("tensor", "channel"):
            w = _weights(variant, rnd.randint(1, 20), rnd.randint(4, 48))
            _, qdtype, scale = _quantize(learner, w, dtype, granularity=gran)
            amax = w.abs().amax() if gran == "tensor" else w.abs().amax(1, keepdim=True)
            want = amax / torch.finfo(dtype).max
            _tensor(scale, "scale")
            assert qdtype == dtype, f"[[learner: {dtype}, per {gran}: q has another dtype]] q is {qdtype}"
            assert scale.dtype == torch.float32 and tuple(scale.shape) == tuple(want.shape), (
                f"[[learner: per {gran}: scale {scale.dtype} {tuple(scale.shape)}, want float32 {tuple(want.shape)}]]"
            )
            assert torch.allclose(scale, want, rtol=1e-6, atol=0), (
                f"[[learner: {dtype}, per {gran}]] scale is not amax / fmax"
            )


@check(
    "08-fp8quant-1",
    points=1,
    en="q = clamp(w / scale, −fmax, fmax).to(dtype): divide, clamp, then cast, also with a given scale (saturates, never inf/NaN)",
    zh="q = clamp(w / scale, −fmax, fmax).to(dtype)：先除、再 clamp、再转换，给定 scale 时同样饱和，绝不产生 inf/NaN",
)
def quant_values(learner, variant):
    rnd = variant.random
    for dtype in FP8.values():
        fmax = torch.finfo(dtype).max
        w = _weights(variant, rnd.randint(2, 12), rnd.randint(8, 40))
        for kwargs in ({"granularity": "channel"}, {"scale": torch.tensor(rnd.uniform(1e-3, 2e-2))}):
            bits, _, scale = _quantize(learner, w, dtype, **kwargs)
            s = kwargs.get("scale", w.abs().amax(1, keepdim=True) / fmax)
            want = (w / s).clamp(-fmax, fmax).to(dtype).view(torch.uint8)
            if "scale" not in kwargs:  # the learner's own scale, already checked above, decides the rounding here
                want = (w / _tensor(scale, "scale")).clamp(-fmax, fmax).to(dtype).view(torch.uint8)
            assert torch.equal(_tensor(bits, "q"), want), f"{dtype} {kwargs}: q differs"
            assert torch.isfinite(bits.view(dtype).float()).all(), f"{dtype}: inf/NaN in q"
        big = torch.tensor([[1e6, -1e6, 0.0, 1.0]])
        bits, _, _ = _quantize(learner, big, dtype, scale=torch.tensor(0.5))
        assert bits.view(dtype).float().tolist() == [[fmax, -fmax, 0.0, 2.0]], f"{dtype}: a static scale must saturate"


@check(
    "08-fp8quant-1",
    points=0.5,
    en="an all-zero row (or tensor) gets scale 1.0 and quantizes to zeros",
    zh="全零的行（或张量）scale 取 1.0，量化结果为 0",
    counts_with="quant_values",
)
def quant_zero(learner, variant):
    rnd = variant.random
    rows = rnd.randint(3, 8)
    w = torch.randn(rows, 16, generator=variant.torch())
    zero_rows = rnd.sample(range(rows), 2)
    w[zero_rows] = 0
    bits, _, scale = _quantize(learner, w, torch.float8_e4m3fn, granularity="channel")
    for r in zero_rows:
        assert scale[r].item() == 1.0 and int(bits[r].sum()) == 0, f"row {r}: scale {scale[r].item()}"
    bits, _, scale = _quantize(learner, torch.zeros(2, rnd.randint(2, 9)), rnd.choice(list(FP8.values())))
    assert scale.item() == 1.0 and int(bits.sum()) == 0, "an all-zero tensor"


@check(
    "08-fp8quant-1",
    points=0.5,
    en="quantize_fp8 raises ValueError for a w that is not 2-D, a non-FP8 dtype, another granularity or a scale ≤ 0",
    zh="w 不是二维、dtype 不是 FP8、粒度不对或 scale ≤ 0 时 quantize_fp8 应抛出 ValueError",
)
def quant_errors(learner, variant):
    n = variant.random.randint(2, 9)
    fn = torch.float8_e4m3fn
    cases = [
        {"w": torch.ones(n), "dt": fn, "kw": {}},
        {"w": torch.ones(2, n), "dt": torch.bfloat16, "kw": {}},
        {"w": torch.ones(2, n), "dt": fn, "kw": {"granularity": "row"}},
        {"w": torch.ones(2, n), "dt": fn, "kw": {"scale": torch.tensor(0.0)}},
        {"w": torch.ones(2, n), "dt": fn, "kw": {"scale": torch.tensor([[1.0], [-1.0]])}},
    ]
    for case in cases:
        _raises_value_error(learner, "quantize_fp8(w, dt, **kw)", **case)


# ---------------------------------------------------------------- 3 · OCP -> FNUZ


def _inputs_kept(order, scale, got):
    """A conversion (ocp_to_fnuz, fnuz_to_ocp) left the bytes and the scale passed in as they were."""
    q_after, scale_after = got[3], got[4]
    assert _tensor(q_after, "q").flatten().tolist() == order, "the input bytes were modified"
    assert torch.equal(_tensor(scale_after, "scale"), scale), "the input scale was modified"


def _rejects_dtypes(learner, variant, function, dtypes):
    """``function(q, scale)`` raises ValueError for a q of each of ``dtypes``."""
    n = variant.random.randint(2, 9)
    for dtype in dtypes:
        _raises_value_error(learner, f"{function}(torch.ones(n).to(dt), torch.tensor(1.0))", n=n, dt=dtype)


def _fnuz(learner, variant):
    order = list(range(256))
    variant.random.shuffle(order)
    scale = (torch.rand(256, 1, generator=variant.torch()) * 2 + 0.25).float()
    got = learner.run("fnuz_of_ocp_bytes", order, [256, 1], scale)
    return order, scale, got


@check(
    "08-fnuz-1",
    points=1,
    en="ocp_to_fnuz turns 0x80 (−0) into 0x00 and the NaNs 0x7F/0xFF into the fnuz NaN 0x80, as float8_e4m3fnuz",
    zh="ocp_to_fnuz 把 0x80（−0）变成 0x00，把 NaN 0x7F/0xFF 变成 fnuz 的 NaN 0x80，结果为 float8_e4m3fnuz",
)
def fnuz_specials(learner, variant):
    order, _, (bits, dtype, _, _, _) = _fnuz(learner, variant)
    assert dtype == torch.float8_e4m3fnuz, f"dtype {dtype}"
    out = _tensor(bits, "q_fnuz").flatten().tolist()
    for byte, new in zip(order, out):
        if byte in (0x7F, 0xFF):
            assert new == 0x80, f"0x{byte:02X} -> 0x{new:02X}"
        elif byte == 0x80:
            assert new == 0x00, f"0x80 -> 0x{new:02X}"


@check(
    "08-fnuz-1",
    points=1,
    en="every other byte is kept and the scale doubles (same shape), so each finite value dequantizes to the same number",
    zh="其余字节不变、scale 乘 2（形状不变），每个有限值反量化后完全相同",
)
def fnuz_values(learner, variant):
    order, scale, (bits, _, new_scale, _, _) = _fnuz(learner, variant)
    out = _tensor(bits, "q_fnuz").flatten().tolist()
    for byte, new in zip(order, out):
        if byte not in (0x7F, 0xFF, 0x80):
            assert new == byte, f"0x{byte:02X} -> 0x{new:02X}"
    _tensor(new_scale, "scale")
    assert tuple(new_scale.shape) == (256, 1) and torch.equal(new_scale.float(), scale * 2), "scale must double"
    fn = torch.tensor(order, dtype=torch.uint8).view(torch.float8_e4m3fn).float().reshape(256, 1) * scale
    fz = bits.view(torch.float8_e4m3fnuz).float().reshape(256, 1) * new_scale.float()
    finite = ~torch.isnan(fn)
    assert torch.equal(fz[finite], fn[finite]), "a finite value changed"


@check(
    "08-fnuz-1",
    points=0.5,
    en="ocp_to_fnuz leaves the q and scale passed in unmodified",
    zh="ocp_to_fnuz 不修改传入的 q 与 scale",
    counts_with="fnuz_values",
)
def fnuz_inputs(learner, variant):
    _inputs_kept(*_fnuz(learner, variant))


@check(
    "08-fnuz-1",
    points=0.5,
    en="ocp_to_fnuz raises ValueError when q is not float8_e4m3fn",
    zh="q 不是 float8_e4m3fn 时 ocp_to_fnuz 应抛出 ValueError",
)
def fnuz_errors(learner, variant):
    _rejects_dtypes(learner, variant, "ocp_to_fnuz", (torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float32))


# ---------------------------------------------------------------- 3b · FNUZ -> OCP

SMALLEST_SHARED = 2.0**-6  # fn and fnuz share every value from here up to fnuz's 240


def _ocp(learner, variant):
    """Every fnuz byte in rows of three: ±240 (0x7F / 0xFF) first, as amax scaling puts in every row, then two
    of the other 254 bytes, shuffled."""
    others = [b for b in range(256) if b not in (0x7F, 0xFF)]
    variant.random.shuffle(others)
    rows, cols = len(others) // 2, 3
    order = [b for i in range(rows) for b in (variant.random.choice((0x7F, 0xFF)), *others[2 * i : 2 * i + 2])]
    scale = (torch.rand(rows, 1, generator=variant.torch()) * 2 + 0.25).float()
    got = learner.run("ocp_of_fnuz_bytes", order, [rows, cols], scale)
    return order, scale, got


def _fnuz_values(order):
    return torch.tensor(order, dtype=torch.uint8).view(torch.float8_e4m3fnuz).float()


@check(
    "08-ocp-1",
    points=1.5,
    en="fnuz_to_ocp returns float8_e4m3fn with the scale unchanged, and every value of magnitude 2^-6 or more "
    "(±240 in every row included) is kept exactly",
    zh="fnuz_to_ocp 返回 float8_e4m3fn、scale 不变，绝对值不小于 2^-6 的每个值（包括每行的 ±240）完全不变",
)
def ocp_values(learner, variant):
    order, scale, (bits, dtype, new_scale, _, _) = _ocp(learner, variant)
    assert dtype == torch.float8_e4m3fn, f"dtype {dtype}"
    _tensor(new_scale, "scale_fn")
    assert tuple(new_scale.shape) == tuple(scale.shape) and torch.equal(new_scale.float(), scale), (
        "the scale must not change"
    )
    got = _tensor(bits, "q_fn").flatten().view(torch.float8_e4m3fn).float()
    want = _fnuz_values(order)
    for byte, g, w in zip(order, got.tolist(), want.tolist()):
        if not math.isnan(w) and abs(w) >= SMALLEST_SHARED:
            assert g == w, f"fnuz 0x{byte:02X} = {w!r} became {g!r}"


@check(
    "08-ocp-1",
    points=0.5,
    en="values below 2^-6 round to the nearest fn value, ties to even, and the fnuz NaN (0x80) stays NaN",
    zh="2^-6 以下的值舍入到最近的 fn 值（平局取偶），fnuz 的 NaN（0x80）仍是 NaN",
)
def ocp_small_and_nan(learner, variant):
    order, _, (bits, _, _, _, _) = _ocp(learner, variant)
    got = _tensor(bits, "q_fn").flatten().view(torch.float8_e4m3fn).float()
    want = _fnuz_values(order).to(torch.float8_e4m3fn).float()
    for byte, g, w in zip(order, got.tolist(), want.tolist()):
        if math.isnan(w):
            assert math.isnan(g), f"fnuz 0x{byte:02X} (NaN) became {g!r}"
        elif abs(w) < SMALLEST_SHARED:
            assert g == w, f"fnuz 0x{byte:02X} became {g!r}, want {w!r}"


@check(
    "08-ocp-1",
    points=0.5,
    en="fnuz_to_ocp leaves the q and scale passed in unmodified",
    zh="fnuz_to_ocp 不修改传入的 q 与 scale",
    counts_with="ocp_values",
)
def ocp_inputs(learner, variant):
    _inputs_kept(*_ocp(learner, variant))


@check(
    "08-ocp-1",
    points=0.5,
    en="fnuz_to_ocp raises ValueError when q is not float8_e4m3fnuz",
    zh="q 不是 float8_e4m3fnuz 时 fnuz_to_ocp 应抛出 ValueError",
)
def ocp_errors(learner, variant):
    _rejects_dtypes(learner, variant, "fnuz_to_ocp", (torch.float8_e4m3fn, torch.float8_e5m2fnuz, torch.float32))


# ---------------------------------------------------------------- 4 · MXFP4


def _mx_ref(x, block):
    blocks = x.double().reshape(*x.shape[:-1], -1, block)
    amax = blocks.abs().amax(-1)
    flat = [(-127 if a == 0 else math.floor(math.log2(a)) - 2) for a in amax.flatten().tolist()]
    e = torch.tensor(flat, dtype=torch.int64).reshape(amax.shape).clamp(-127, 127)
    scales = (e + 127).to(torch.uint8)
    return _nearest_codes(x, scales, block), scales


def _mx_inputs(variant):
    gen, rnd = variant.torch(), variant.random
    shapes = [((rnd.randint(1, 5), 96), 32), ((2, rnd.randint(1, 3), 64), 16), ((rnd.randint(1, 4), 128), 64)]
    for shape, block in shapes:
        scale = torch.exp2(torch.randint(-8, 8, (*shape[:-1], 1), generator=gen).float())
        yield torch.randn(*shape, generator=gen) * scale, block
    ties = torch.tensor([4.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -2.5, 7.9, -7.9, 6.0, 0.1, 0.0, 1.0] * 2)
    yield (ties[torch.randperm(32, generator=gen)] * 2.0 ** rnd.randint(-6, 6)).reshape(1, 32), 32
    edge = torch.zeros(3, 32)
    edge[0, 0], edge[0, 1], edge[1, 0] = 8.0 * (1 - 2**-24), 1.0, 1e-40
    edge[2] = 2.0**-20
    yield edge, 32


def _mx(learner, x, block):
    codes, scales = learner.eval("mxfp4_quantize(x, block_size=b)", x=x, b=block)
    return _tensor(codes, "codes"), _tensor(scales, "scales")


def _nearest_codes(x, scales, block):
    """The codes rule on its own: each element's nearest E2M1 code of x / 2^(scale byte − 127), for
    whatever scale bytes were chosen (the exponent rule is checked apart)."""
    blocks = x.double().reshape(*x.shape[:-1], -1, block)
    v = blocks / torch.exp2(scales.double() - 127).unsqueeze(-1)
    dist = (v.abs().clamp(max=6.0).unsqueeze(-1) - E2M1.double()).abs()
    best = dist.min(-1, keepdim=True).values
    idx = ((dist > best) * 100 + (torch.arange(8) % 2)).argmin(-1)  # among the nearest, the even code
    return (idx | torch.where(v < 0, 8, 0)).to(torch.uint8).reshape(x.shape)


MX_SCALE_CODE = """
def mxfp4_quantize(x, block_size=32):
    if x.shape[-1] % block_size:
        raise ValueError(block_size)
    blocks = x.float().reshape(*x.shape[:-1], x.shape[-1] // block_size, block_size)
    amax = blocks.abs().amax(dim=-1)
    shared = torch.where(amax > 0, SHARED_EXPONENT, torch.full_like(amax, -127)).clamp(-127, 127)
    v = blocks / torch.exp2(shared).unsqueeze(-1)
    magnitude = v.abs().clamp(max=6.0)
    step = torch.where(magnitude < 2, 0.5, torch.where(magnitude < 4, 1.0, 2.0))
    rounded = torch.round(magnitude / step) * step
    index = torch.bucketize(rounded, FP4_E2M1_VALUES.to(rounded.device))
    codes = (index | torch.where(v < 0, 8, 0)).to(torch.uint8).reshape(x.shape)
    return codes, (shared + 127).to(torch.uint8)
"""
# The spec's rule (OCP Microscaling Formats v1.0, section 6.3): X = 2^(floor(log2(amax)) - emax_elem), emax_elem = 2
# for E2M1. Its authors' reference code does the same: microsoft/microxcaling mx/mx_ops.py, `_shared_exponents` takes
# floor(log2(amax)) and `_quantize_mx` subtracts emax. Rounding up instead ("fit amax into 6") is the mistake below.
MX_CEIL = MX_SCALE_CODE.replace(
    "SHARED_EXPONENT",
    "torch.ceil(torch.log2(amax.clamp(min=1e-38) / 6))",  # "fit amax into 6": ceil, not floor − 2
)
MX_PER_TENSOR = MX_SCALE_CODE.replace(
    "amax = blocks.abs().amax(dim=-1)", "amax = blocks.abs().amax().expand(blocks.shape[:-1])  # one amax for all"
).replace("SHARED_EXPONENT", "torch.floor(torch.log2(amax.clamp(min=1e-38))) - 2")


@mistake(
    en="the shared exponent rounded up, ceil(log2(amax / 6)), instead of the spec's floor(log2 amax) − 2",
    zh="共享指数向上取整 ceil(log2(amax / 6))，而规范是 floor(log2 amax) − 2",
    code=MX_CEIL,
)
@check(
    "08-mxfp4-1",
    points=1,
    en="each block's scale byte is E8M0: floor(log2 amax) − 2 + 127, clamped to 0..254 (byte 0 for an all-zero block)",
    zh="每块的 scale 字节为 E8M0：floor(log2 amax) − 2 + 127，截到 0..254（全零块为 0）",
)
def mx_scales(learner, variant):
    for x, block in _mx_inputs(variant):
        _, scales = _mx(learner, x, block)
        want = _mx_ref(x, block)[1]
        assert scales.dtype == torch.uint8 and tuple(scales.shape) == tuple(want.shape), (
            f"[[learner: scales {scales.dtype} {tuple(scales.shape)}, want uint8 {tuple(want.shape)}]]"
        )
        assert torch.equal(scales, want), f"shape {tuple(x.shape)} block {block}: scale bytes differ"


@check(
    "08-mxfp4-1",
    points=1,
    en="each code is the nearest E2M1 value of x / 2^e, e from its block's scale byte (ties to the even code, "
    "|v| saturating at 6) with the sign in bit 3",
    zh="每个编码是 x / 2^e 最近的 E2M1 值，e 取自所在块的 scale 字节（平局取偶数编码，|v| 在 6 饱和），符号在第 3 位",
)
def mx_codes(learner, variant):
    for x, block in _mx_inputs(variant):
        codes, scales = _mx(learner, x, block)
        assert codes.dtype == torch.uint8 and tuple(codes.shape) == tuple(x.shape), (
            f"[[learner: codes {codes.dtype} {tuple(codes.shape)}, want uint8 {tuple(x.shape)}]]"
        )
        want_scales = _mx_ref(x, block)[1]
        if scales.dtype != torch.uint8 or tuple(scales.shape) != tuple(want_scales.shape):
            scales = want_scales  # the scale rule fails on its own: judge the rounding against the spec's scale
        assert torch.equal(codes, _nearest_codes(x, scales, block)), (
            f"shape {tuple(x.shape)} block {block}: codes differ"
        )


@mistake(
    en="one scale for the whole tensor (its amax) instead of one per block of the last dimension",
    zh="整个张量只用一个 scale（全局 amax），而不是沿最后一维每块一个",
    code=MX_PER_TENSOR,
)
@check(
    "08-mxfp4-1",
    points=0.5,
    en="mxfp4_quantize forms blocks along the last dimension, for any leading shape and block_size: "
    "each block quantized alone gives the same codes and scale byte as within x",
    zh="mxfp4_quantize 沿最后一维分块，前导维与 block_size 任意：每块单独量化的编码与 scale 字节与在 x 中相同",
    counts_with="mx_codes",  # a property: a constant function has it too
)
def mx_layout(learner, variant):
    rnd = variant.random
    block = rnd.choice([8, 16, 32])
    x = torch.randn(2, 3, 4 * block, generator=variant.torch())
    x[1, 2, :block] *= 1000  # one loud block: it must not change its neighbours' scales
    codes, scales = _mx(learner, x, block)
    assert tuple(scales.shape) == (2, 3, 4) and tuple(codes.shape) == tuple(x.shape), (
        f"scales {tuple(scales.shape)}, codes {tuple(codes.shape)} for x {tuple(x.shape)}, block_size {block}"
    )
    alone = learner.eval(
        "[mxfp4_quantize(b.reshape(1, -1), block_size=n) for b in bs]",
        bs=list(x.reshape(-1, block)),
        n=block,
    )
    assert isinstance(alone, list) and len(alone) == 24, "one result per block"
    for k, (block_codes, block_scale) in enumerate(alone):
        i, j, b = k // 12, k // 4 % 3, k % 4
        assert torch.equal(_tensor(block_scale, "scales").flatten(), scales[i, j, b : b + 1]), (
            f"block {(i, j, b)}: its scale byte alone differs from within x"
        )
        assert torch.equal(_tensor(block_codes, "codes").flatten(), codes[i, j, b * block : (b + 1) * block]), (
            f"block {(i, j, b)}: its codes alone differ from within x"
        )


@check(
    "08-mxfp4-1",
    points=0.5,
    en="mxfp4_quantize raises ValueError when the last dimension is not a multiple of block_size",
    zh="最后一维不是 block_size 的整数倍时 mxfp4_quantize 应抛出 ValueError",
)
def mx_errors(learner, variant):
    rnd = variant.random
    block = rnd.choice([16, 32])
    _raises_value_error(
        learner,
        "mxfp4_quantize(torch.ones(2, n), block_size=b)",
        n=block * rnd.randint(1, 4) + rnd.randint(1, block - 1),
        b=block,
    )


# ---------------------------------------------------------------- 5 · INT4


def _int4_ref(w, group):
    o, i = w.shape
    groups = w.float().reshape(o, i // group, group)
    lo, hi = groups.amin(-1).clamp(max=0), groups.amax(-1).clamp(min=0)
    scale = torch.where(hi > lo, (hi - lo) / 15, torch.ones_like(hi))
    zero = torch.clamp(torch.round(-lo / scale), 0, 15)
    q = torch.clamp(torch.round(groups / scale.unsqueeze(-1)) + zero.unsqueeze(-1), 0, 15)
    return q.reshape(o, i).to(torch.uint8), scale, zero.to(torch.uint8)


def _int4_inputs(variant):
    gen, rnd = variant.torch(), variant.random
    for rows, group, n_groups in ((rnd.randint(2, 9), 128, 2), (3, 32, rnd.randint(1, 4)), (2, 64, 1)):
        w = torch.randn(rows, group * n_groups, generator=gen) * 0.05
        w[0, rnd.randrange(group * n_groups)] = rnd.choice([-1.0, 1.0])  # an outlier
        yield w, group
    yield (torch.randn(4, 64, generator=gen) * 0.1).to(torch.bfloat16), 32


def _int4(learner, w, group):
    got = learner.eval("int4_group_quantize(w, group_size=g)", w=w, g=group)
    assert isinstance(got, dict) and set(got) == {"q", "scale", "zero"}, (
        f"keys {sorted(got) if isinstance(got, dict) else got}"
    )
    return got


@check(
    "08-int4-1",
    points=1,
    en="each group's scale is (hi − lo)/15 (float32) and its zero-point round(−lo/scale) (uint8), the range including 0",
    zh="每组 scale = (hi − lo)/15（float32），零点 = round(−lo/scale)（uint8），区间包含 0",
)
def int4_scales(learner, variant):
    for w, group in _int4_inputs(variant):
        got = _int4(learner, w, group)
        _, scale, zero = _int4_ref(w, group)
        assert_close(got["scale"], scale, rtol=1e-6, atol=0, what=label("scale", group_size=group))
        assert_equal(got["zero"], zero, what=label("zero", group_size=group))


@check(
    "08-int4-1",
    points=1,
    en="q = clamp(round(w / scale) + zero, 0, 15) as uint8, w computed in float32",
    zh="q = clamp(round(w / scale) + zero, 0, 15)，uint8，w 用 float32 计算",
)
def int4_codes(learner, variant):
    for w, group in _int4_inputs(variant):
        got = _int4(learner, w, group)
        o, i = w.shape
        scale = _tensor(got["scale"], "scale").float()
        zero = _tensor(got["zero"], "zero").float()
        groups = w.float().reshape(o, i // group, group)
        want = torch.clamp(torch.round(groups / scale.unsqueeze(-1)) + zero.unsqueeze(-1), 0, 15).reshape(o, i)
        assert _tensor(got["q"], "q").dtype == torch.uint8 and torch.equal(got["q"], want.to(torch.uint8)), "q differs"
        assert torch.equal(got["q"], _int4_ref(w, group)[0]), "q differs from the reference"


@check(
    "08-int4-1",
    points=0.5,
    en="an all-zero group gets scale 1.0; a group of one sign keeps 0 in its range (zero-point 0 or 15)",
    zh="全零组的 scale 为 1.0；同号的组区间仍包含 0（零点为 0 或 15）",
    counts_with="int4_codes",
)
def int4_edges(learner, variant):
    group = variant.random.choice([8, 16])
    edge = torch.zeros(3, group)
    edge[1] = variant.random.uniform(0.1, 2.0)
    edge[2] = -torch.linspace(0.1, variant.random.uniform(0.5, 3.0), group)
    got = _int4(learner, edge, group)
    q, scale, zero = _int4_ref(edge, group)
    assert_equal(got["q"], q, what="q of the edge groups")
    assert_equal(got["zero"], zero, what="zero of the edge groups")
    assert_close(got["scale"], scale, rtol=1e-6, atol=0, dtype=False, what="scale of the edge groups")


@check(
    "08-int4-1",
    points=0.5,
    en="int4_group_quantize raises ValueError for a w that is not 2-D or an in_features not divisible by group_size",
    zh="w 不是二维或 in_features 不能被 group_size 整除时 int4_group_quantize 应抛出 ValueError",
)
def int4_errors(learner, variant):
    g = variant.random.choice([32, 64])
    _raises_value_error(learner, "int4_group_quantize(torch.ones(4, g + 4), group_size=g)", g=g)
    _raises_value_error(learner, "int4_group_quantize(torch.ones(g), group_size=g)", g=g)


# ---------------------------------------------------------------- 6a · perplexity


def _texts(variant):
    reports = [r["description"] for r in load_qc_reports("eval")]  # the course's, read here: not the kernel's `lab`
    assert len(reports) > 20, "no qc_reports eval descriptions"
    rnd = variant.random
    picked = rnd.sample([str(r) for r in reports], 14)
    return ["".join(picked[:6]), picked[6][:3], "焊", *picked[7:]]


def _ppl(learner, reference, texts, max_tokens):
    nll, n = reference.run("token_nll", texts, max_tokens)
    got = learner.eval("perplexity(model, tok, texts, max_tokens=m)", texts=texts, m=max_tokens)
    assert type(got) is float, f"perplexity returned {type(got).__name__}"
    want = math.exp(nll / n)
    assert_close(got, want, rtol=1e-4, atol=0, what=label("perplexity", max_tokens=max_tokens))


@check(
    "08-ppl-1",
    points=1,
    en="perplexity is token-weighted over texts of any length, skipping texts with fewer than 2 tokens (a float, 1e-4)",
    zh="perplexity 按 token 加权、长短不一的文本都对，少于 2 个 token 的文本不计（float，误差 1e-4）",
)
def ppl_weighted(learner, variant, reference):
    _ppl(learner, reference, _texts(variant), 128)


@check(
    "08-ppl-1",
    points=0.5,
    en="perplexity keeps only each text's first max_tokens tokens",
    zh="perplexity 只取每条文本的前 max_tokens 个 token",
)
def ppl_truncated(learner, variant, reference):
    _ppl(learner, reference, _texts(variant), variant.random.randint(5, 20))


@check(
    "08-ppl-1",
    points=0.5,
    en="perplexity raises ValueError when no text has a token to predict",
    zh="没有可预测的 token 时 perplexity 应抛出 ValueError",
)
def ppl_errors(learner, variant):
    for texts in ([], [""], [""] * variant.random.randint(2, 4)):
        _raises_value_error(learner, "perplexity(model, tok, texts)", texts=texts)


# ---------------------------------------------------------------- 6b · weight bytes

QWEN25_05B = {
    "num_hidden_layers": 24,
    "hidden_size": 896,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "intermediate_size": 4864,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
}


def _wb_ref(cfg, fmt, group=128):
    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or heads
    hd = cfg.get("head_dim") or h // heads
    inter = cfg["intermediate_size"]
    mats = [(heads * hd, h), (kv * hd, h), (kv * hd, h), (h, heads * hd), (inter, h), (inter, h), (h, inter)]
    per = {
        "bf16": lambda o, i: 2 * o * i,
        "fp8-tensor": lambda o, i: o * i + 4,
        "fp8-channel": lambda o, i: o * i + 4 * o,
        "mxfp4": lambda o, i: o * i * (0.5 + 1 / 32),
        "int4": lambda o, i: o * i * 0.5 + o * i / group * 2.5,
    }[fmt]
    rest = 2 * ((heads * hd + 2 * kv * hd) + 2 * h)
    emb = 2 * cfg["vocab_size"] * h * (1 if cfg.get("tie_word_embeddings") else 2)
    return cfg["num_hidden_layers"] * (sum(per(o, i) for o, i in mats) + rest) + emb + 2 * h


def _configs(rnd):
    heads = rnd.choice([4, 8, 16])
    head_dim = rnd.choice([32, 64, 128])
    yield QWEN25_05B
    yield {
        "num_hidden_layers": rnd.randint(1, 40),
        "hidden_size": heads * head_dim,
        "num_attention_heads": heads,
        "num_key_value_heads": rnd.choice([1, 2, heads]),
        "intermediate_size": 128 * rnd.randint(2, 40),
        "vocab_size": rnd.randint(1000, 200000),
        "tie_word_embeddings": rnd.random() < 0.5,
    }
    yield {
        "num_hidden_layers": rnd.randint(1, 8),
        "hidden_size": 256,
        "num_attention_heads": 4,
        "intermediate_size": 512,
        "vocab_size": rnd.randint(100, 5000),
        "tie_word_embeddings": False,
        "head_dim": 128,
    }


def _weight_bytes(learner, variant, formats):
    for cfg in _configs(variant.random):
        for fmt in formats:
            group = variant.random.choice([64, 128])
            got = learner.call("weight_bytes", cfg, fmt, group_size=group)
            want = _wb_ref(cfg, fmt, group)
            assert_close(got, want, rtol=1e-12, atol=0, what=label("weight_bytes", fmt=fmt, group_size=group))


@check(
    "08-memory-1",
    points=0.5,
    en="weight_bytes in bf16 is 2 bytes per parameter (GQA, head_dim and tied embeddings included)",
    zh="weight_bytes 的 bf16 为每个参数 2 字节（含 GQA、head_dim 与共享嵌入）",
)
def memory_bf16(learner, variant, reference):
    _weight_bytes(learner, variant, ["bf16"])
    # the lab's model as the solution loaded it: the learner's `model` may be rebound to one their formula fits
    config, params = reference.run("model_size")
    got = learner.call("weight_bytes", config, "bf16")
    assert got == 2 * params, f"[[learner: the lab's model]] {got} vs 2 x {params} parameters"


@check(
    "08-memory-1",
    points=0.5,
    en="fp8-tensor stores 1 byte per projection weight plus a 4-byte scale; fp8-channel one 4-byte scale per output row",
    zh="fp8-tensor 每个投影权重 1 字节加一个 4 字节 scale；fp8-channel 每个输出行一个 4 字节 scale",
)
def memory_fp8(learner, variant):
    _weight_bytes(learner, variant, ["fp8-tensor", "fp8-channel"])


@check(
    "08-memory-1",
    points=0.5,
    en="mxfp4 is half a byte per weight plus 1 byte per 32; int4 half a byte plus 2.5 bytes per group_size",
    zh="mxfp4 每权重半字节、每 32 个 1 字节；int4 每权重半字节、每 group_size 个 2.5 字节",
)
def memory_4bit(learner, variant):
    _weight_bytes(learner, variant, ["mxfp4", "int4"])


@check(
    "08-memory-1",
    points=0.5,
    en="weight_bytes raises ValueError for an unknown format or in_features not divisible by 32 (mxfp4) or group_size (int4)",
    zh="格式未知，或 in_features 不能被 32（mxfp4）或 group_size（int4）整除时 weight_bytes 应抛出 ValueError",
)
def memory_errors(learner, variant):
    rnd = variant.random
    _raises_value_error(learner, "weight_bytes(c, f)", c=QWEN25_05B, f=rnd.choice(["fp4", "int8", "FP8"]))
    _raises_value_error(learner, "weight_bytes(c, 'int4', group_size=g)", c=QWEN25_05B, g=rnd.choice([100, 300, 1000]))
    odd = dict(QWEN25_05B, intermediate_size=4864 + rnd.randint(1, 31))
    _raises_value_error(learner, "weight_bytes(c, 'mxfp4')", c=odd)


# ---------------------------------------------------------------- 8 · W8A8


@check(
    "08-stretch-w8a8-1",
    points=1,
    en="fp8_linear returns a float32 [M, N] within 1e-2 of the product of both dequantized operands (per-token activations)",
    zh="fp8_linear 返回 float32 的 [M, N]，与两个反量化操作数（激活逐 token 量化）的乘积相差 1e-2 以内",
)
def w8a8_product(learner, variant):
    gen, rnd = variant.torch(), variant.random
    for dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
        n, k, m = 16 * rnd.randint(2, 4), 16 * rnd.randint(1, 3), 16 * rnd.randint(1, 3)
        w = torch.randn(n, k, generator=gen) * 0.05
        w[rnd.randrange(n)] *= 40
        x = torch.randn(m, k, generator=gen) * torch.linspace(0.01, 30, m).unsqueeze(1)
        y = _tensor(learner.run("w8a8_output", w, x, dtype), "fp8_linear")
        assert y.dtype == torch.float32 and tuple(y.shape) == (m, n), f"{y.dtype} {tuple(y.shape)}"
        fmax = torch.finfo(dtype).max
        sw = w.abs().amax(1, keepdim=True) / fmax
        sx = x.abs().amax(1, keepdim=True) / fmax
        wq = (w / sw).clamp(-fmax, fmax).to(dtype).float() * sw
        xq = (x / sx).clamp(-fmax, fmax).to(dtype).float() * sx
        ref = xq @ wq.t()
        atol = 1e-2 * float(ref.abs().max())
        assert_close(y, ref, rtol=1e-2, atol=atol, what=label("fp8_linear vs the dequantized product", dtype=dtype))
