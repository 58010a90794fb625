"""Lab 08 (low-precision inference): source shape, the solution functions, and the power of the graded tests.

Fast tests read solutions/08-low-precision/lab.py and run its solution cells against PyTorch's own float8
dtypes, hand-computed values and tiny random Qwen2 models. Then they run the lab's graded test cells, first on
the solution (they must pass) and then on deliberately wrong implementations, the mistakes the lab warns about
(each must fail), so that no graded test is one that cannot fail.
"""

import ast
import functools
import json
import math

import pytest
from labsource import LabSource
from lazy_imports import skip_unless_installed

torch = pytest.importorskip("torch")
skip_unless_installed("transformers")

SOURCE = LabSource("08-low-precision")
LAB = SOURCE.folder
FP8_DTYPES = {
    "e4m3fn": torch.float8_e4m3fn,
    "e4m3fnuz": torch.float8_e4m3fnuz,
    "e5m2": torch.float8_e5m2,
    "e5m2fnuz": torch.float8_e5m2fnuz,
}
# plain-cell helpers the graded tests use, taken from the lab source itself
PLAIN_DEFINITIONS = {
    "relative_error",
    "decoder_linears",
    "kv_cache_bytes",
    "PROJECTIONS",
    "QWEN25_05B",
    "QWEN25_7B",
    "max_concurrent_sequences",
}


def plain_definitions():
    """The named functions and constants of the plain code cells, as one module's source."""
    nodes = []
    for cell in SOURCE.code_cells:
        if "grade_id" in cell.metadata or "parameters" in cell.metadata.get("tags", []):
            continue
        for node in ast.parse(cell.source).body:
            names = {node.name} if isinstance(node, ast.FunctionDef) else set()
            if isinstance(node, ast.Assign):
                names = {t.id for t in node.targets if isinstance(t, ast.Name)}
            if names & PLAIN_DEFINITIONS:
                nodes.append(node)
    return ast.unparse(ast.Module(body=nodes, type_ignores=[]))


@pytest.fixture(scope="module")
def ns():
    """Every solution cell and the plain helpers run in one namespace (no model needed)."""
    import torch.nn.functional as F

    namespace = SOURCE.run_solutions(namespace={"torch": torch, "math": math, "json": json, "F": F})
    return SOURCE.run(plain_definitions(), namespace=namespace)


@pytest.fixture(scope="module")
def tokenizer():
    """A byte-level tokenizer (every UTF-8 byte is a token), no special tokens added by default."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    core = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=core)
    tok.add_special_tokens({"pad_token": "<|endoftext|>"})
    return tok


def tiny_model(seed=0, **overrides):
    import transformers

    shape = dict(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    torch.manual_seed(seed)
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**{**shape, **overrides})).eval()


@pytest.fixture(scope="module")
def small_model():
    return tiny_model()


@functools.cache
def eval_texts():
    from rocmlab.assets.loaders import load_qc_reports

    return tuple(r["description"] for r in load_qc_reports("eval"))[:20]


# (perplexity, model, tokenizer) -> base_ppl: every graded namespace is built on the module's one
# model and tokenizer, which no cell changes for good (weights_set restores what it sets); a
# perplexity of EVAL_TEXTS on them is a forward pass over 20 texts, scored once per function
_BASE_PPL = {}


def graded_namespace(ns, tokenizer, model, **replaced):
    """What the notebook has defined by the time its test cells run, with some functions replaced
    (``base_ppl`` aside: only the 08-ppl-1 test cell reads it, and ``run_test_cell`` scores it)."""
    namespace = dict(ns)
    namespace.update(
        _g=torch.Generator().manual_seed(1),
        model=model,
        tok=tokenizer,
        device=torch.device("cpu"),
        EVAL_TEXTS=list(eval_texts()),
        LINEARS=ns["decoder_linears"](model),
        FP8=torch.float8_e4m3fn,
        GEMM_DTYPE=torch.float8_e4m3fn,
    )
    namespace.update(replaced)
    return namespace


def base_ppl(namespace):
    """The notebook's base_ppl: its own perplexity (the solution's or a mistake's) of EVAL_TEXTS."""
    key = (namespace["perplexity"], namespace["model"], namespace["tok"])
    if key not in _BASE_PPL:
        _BASE_PPL[key] = namespace["perplexity"](namespace["model"], namespace["tok"], namespace["EVAL_TEXTS"])
    return _BASE_PPL[key]


def run_test_cell(grade_id, namespace):
    namespace = dict(namespace, base_ppl=base_ppl(namespace))
    SOURCE.run(SOURCE.graded[grade_id], namespace=namespace, name=grade_id)


# -- source shape --------------------------------------------------------------------------


def test_profiles_use_the_offline_model_in_smoke_and_a_real_qwen_on_gpu():
    profiles = SOURCE.lab.profiles
    assert profiles["smoke"].params["MODEL"] == "tiny-qwen-zh"
    assert profiles["gpu"].params["MODEL"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert profiles["gpu"].params["INT4_GROUP"] == 128


def test_graded_cells_are_well_formed():
    tests, solutions = SOURCE.tagged("test"), SOURCE.tagged("solution")
    assert len(SOURCE.graded) == len(tests) + len(solutions), "duplicate grade_id"
    assert all(grade_id.startswith("08-") for grade_id in SOURCE.graded)
    assert len(tests) >= 8
    for cell in tests:
        assert int(cell.metadata["points"]) > 0, cell.metadata
        assert "HIDDEN TESTS" not in cell.source, f"hidden tests live in checks.py now: {cell.metadata}"


def test_prose_comes_in_language_pairs():
    prose = [cell for cell in SOURCE.cells if cell.cell_type == "markdown"]
    assert len(SOURCE.tagged("zh")) == len(SOURCE.tagged("en")) == len(prose) // 2


# -- exercise 1: decoding FP8 bytes ---------------------------------------------------------


@pytest.mark.parametrize("fmt", sorted(FP8_DTYPES))
def test_decode_matches_torch_for_every_byte(ns, fmt):
    reference = torch.arange(256, dtype=torch.uint8).view(FP8_DTYPES[fmt]).float().tolist()
    for byte, want in enumerate(reference):
        got = ns["decode_fp8"](byte, fmt)
        if math.isnan(want):
            assert math.isnan(got), (fmt, byte)
        else:
            assert got == want and math.copysign(1, got) == math.copysign(1, want), (fmt, byte, got, want)


def test_decode_gives_the_published_extremes(ns):
    decode = ns["decode_fp8"]
    assert max(decode(b, "e4m3fn") for b in range(256) if not math.isnan(decode(b, "e4m3fn"))) == 448
    assert max(decode(b, "e4m3fnuz") for b in range(256) if not math.isnan(decode(b, "e4m3fnuz"))) == 240
    assert decode(0x7B, "e5m2") == decode(0x7F, "e5m2fnuz") == 57344
    assert decode(0x38, "e4m3fn") == 2 * decode(0x38, "e4m3fnuz") == 1.0
    with pytest.raises(ValueError):
        decode(0x100, "e4m3fn")
    with pytest.raises(ValueError):
        decode(1, "fp8")


# -- exercise 2: scaled quantization ---------------------------------------------------------


@pytest.mark.parametrize("fmt", sorted(FP8_DTYPES))
def test_a_static_scale_saturates_instead_of_overflowing(ns, fmt):
    dtype = FP8_DTYPES[fmt]
    q, scale = ns["quantize_fp8"](torch.tensor([[1e9, -1e9, 1.0]]), dtype, scale=torch.tensor(1.0))
    fmax = torch.finfo(dtype).max
    assert q.float().tolist() == [[fmax, -fmax, 1.0]] and scale.item() == 1.0


def test_per_channel_scales_each_row_to_the_format_maximum(ns):
    w = torch.randn(5, 64, generator=torch.Generator().manual_seed(0)) * torch.arange(1, 6).unsqueeze(1)
    q, scale = ns["quantize_fp8"](w, torch.float8_e4m3fnuz, granularity="channel")
    assert scale.shape == (5, 1) and torch.equal(q.float().abs().amax(1), torch.full((5,), 240.0))
    deq = ns["dequantize_fp8"](q, scale)
    assert ((deq - w).abs() <= w.abs() * 2**-4 + scale * 2**-10).all(), "E4M3 rounding: half a step of 2^-3"


# -- exercise 3: OCP checkpoint on gfx942 ----------------------------------------------------


def test_ocp_to_fnuz_keeps_every_value_and_leaves_the_input_alone(ns):
    bits = torch.arange(256, dtype=torch.uint8)
    q = bits.clone().view(torch.float8_e4m3fn)
    scale = torch.tensor(0.375)
    q_fnuz, scale_fnuz = ns["ocp_to_fnuz"](q, scale)
    assert torch.equal(q.view(torch.uint8), bits) and scale.item() == 0.375
    before, after = q.float() * scale, q_fnuz.float() * scale_fnuz
    finite = ~torch.isnan(before)
    assert torch.equal(after[finite], before[finite]) and torch.isnan(after[~finite]).all()
    assert q_fnuz.view(torch.uint8)[0x80] == 0 and not torch.isnan(after[0x80])


def test_fnuz_to_ocp_keeps_240_and_rounds_only_below_2_to_the_minus_6(ns):
    w = torch.randn(64, 48, generator=torch.Generator().manual_seed(5))
    q, scale = ns["quantize_fp8"](w, torch.float8_e4m3fnuz, granularity="channel")
    assert (q.float().abs().amax(dim=1) == 240).all(), "amax scaling puts ±240 (0x7F / 0xFF) in every row"
    assert torch.isnan(q.view(torch.float8_e4m3fn).float()).any(dim=1).all(), "reinterpreted, every row has a NaN"
    before = q.view(torch.uint8).clone()
    q_fn, scale_fn = ns["fnuz_to_ocp"](q, scale)
    assert (
        q_fn.dtype == torch.float8_e4m3fn and torch.equal(scale_fn, scale) and torch.equal(q.view(torch.uint8), before)
    )
    kept = q.float().abs() >= 2.0**-6
    assert torch.equal(q_fn.float()[kept], q.float()[kept])
    assert ((q_fn.float() - q.float()).abs() <= 2.0**-10).all()
    every_byte = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fnuz)
    converted = ns["fnuz_to_ocp"](every_byte, torch.tensor(1.0))[0].float()
    assert torch.isnan(converted[0x80]) and converted[0x7F] == 240 and converted[0xFF] == -240
    with pytest.raises(ValueError):
        ns["fnuz_to_ocp"](torch.ones(2).to(torch.float8_e4m3fn), torch.tensor(1.0))


# -- exercise 4: MXFP4 ------------------------------------------------------------------------


def test_mxfp4_round_trip_of_exact_values_is_lossless(ns):
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    x = torch.cat([grid, -grid] * 2).reshape(1, 32) * 2.0**-5
    codes, scales = ns["mxfp4_quantize"](x)
    assert scales.item() == 127 - 5
    assert torch.equal(ns["mxfp4_dequantize"](codes, scales), x)
    assert torch.equal(scales.view(torch.float8_e8m0fnu).float(), torch.tensor([[2.0**-5]]))


def test_mxfp4_blocks_follow_the_last_dimension(ns):
    x = torch.ones(2, 3, 64)
    x[1, 2, 32:] = 100.0
    codes, scales = ns["mxfp4_quantize"](x)
    assert codes.shape == x.shape and scales.shape == (2, 3, 2)
    assert scales[1, 2].tolist() == [127 - 2, 127 + 4] and scales[0, 0].tolist() == [125, 125]
    with pytest.raises(ValueError):
        ns["mxfp4_quantize"](torch.ones(4, 48))


# -- exercise 5: INT4 groups -----------------------------------------------------------------


def test_int4_groups_have_their_own_scale_and_zero_point(ns):
    w = torch.tensor([[-0.3, 0.0, 0.6, 0.3, 0.2, 0.4, 0.6, 0.8]])
    packed = ns["int4_group_quantize"](w, group_size=4)
    assert torch.allclose(packed["scale"], torch.tensor([[0.9 / 15, 0.8 / 15]]))
    assert packed["zero"].tolist() == [[5, 0]]
    assert torch.allclose(ns["int4_dequantize"](packed), w, atol=0.9 / 30 + 1e-6)
    with pytest.raises(ValueError):
        ns["int4_group_quantize"](torch.ones(2, 96), group_size=64)


# -- exercise 6: perplexity and bytes -------------------------------------------------------


def test_perplexity_is_weighted_by_tokens(ns, tokenizer, small_model):
    model = small_model
    texts = ["焊缝气孔，需返工。" * 6, "划痕", "x", "来料检验发现毛刺"]
    nll, count = 0.0, 0
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text, add_special_tokens=False)["input_ids"][:40]
            if len(ids) < 2:
                continue
            batch = torch.tensor([ids])
            nll += float(model(input_ids=batch, labels=batch).loss) * (len(ids) - 1)
            count += len(ids) - 1
    assert ns["perplexity"](model, tokenizer, texts, max_tokens=40) == pytest.approx(math.exp(nll / count), rel=1e-5)
    with pytest.raises(ValueError):
        ns["perplexity"](model, tokenizer, ["x"])


@pytest.mark.parametrize("tied", [True, False])
def test_bf16_weight_bytes_count_every_parameter(ns, tied):
    model = tiny_model(tie_word_embeddings=tied)
    assert ns["weight_bytes"](model.config.to_dict(), "bf16") == 2 * sum(p.numel() for p in model.parameters())


def test_quantized_weight_bytes_of_qwen25_05b(ns):
    config, bf16 = ns["QWEN25_05B"], 2 * 494_032_768
    linear = 24 * (2 * 896 * 896 + 2 * 128 * 896 + 3 * 4864 * 896)
    assert ns["weight_bytes"](config, "fp8-channel") == bf16 - linear + 24 * 4 * (
        896 + 128 + 128 + 896 + 4864 + 4864 + 896
    )
    assert ns["weight_bytes"](config, "mxfp4") == bf16 - 2 * linear + linear * (0.5 + 1 / 32)
    assert ns["weight_bytes"](config, "int4") == bf16 - 2 * linear + linear * (0.5 + 2.5 / 128)


# -- exercise 7 and the stretch ------------------------------------------------------------


def test_concurrent_sequences(ns):
    seq = ns["max_concurrent_sequences"]
    assert seq(100, 10, 2, 5) == 9 and seq(100, 10, 2, 5, reserve_bytes=11) == 7 and seq(10, 20, 1, 1) == 0
    with pytest.raises(ValueError):
        seq(100, 10, 0, 5)


def test_w8a8_linear_equals_the_dequantized_product(ns):
    gen = torch.Generator().manual_seed(4)
    w, x = torch.randn(32, 64, generator=gen), torch.randn(8, 64, generator=gen) * 5
    q_w, s_w = ns["quantize_fp8"](w, torch.float8_e4m3fn, granularity="channel")
    q_x, s_x = ns["quantize_fp8"](x, torch.float8_e4m3fn, granularity="channel")
    want = ns["dequantize_fp8"](q_x, s_x) @ ns["dequantize_fp8"](q_w, s_w).t()
    assert torch.allclose(ns["fp8_linear"](x, q_w, s_w), want, rtol=1e-2, atol=1e-2 * float(want.abs().max()))


# -- the graded tests pass on the solution and catch the mistakes the lab warns about -----

GRADED = [
    "08-fp8bits-1",
    "08-fp8quant-1",
    "08-fnuz-1",
    "08-ocp-1",
    "08-mxfp4-1",
    "08-int4-1",
    "08-ppl-1",
    "08-memory-1",
    "08-stretch-w8a8-1",
]


@pytest.mark.parametrize("grade_id", GRADED)
def test_graded_cell_passes_on_the_solution(ns, tokenizer, small_model, grade_id):
    run_test_cell(grade_id, graded_namespace(ns, tokenizer, small_model))


def _decode_without_fnuz(ns):
    def decode(byte, fmt):
        return ns["decode_fp8"](byte, fmt.replace("fnuz", "fn") if fmt.startswith("e4m3") else fmt.replace("fnuz", ""))

    return decode


def _quantize_without_clamp(ns):
    def quantize(w, dtype, *, granularity="tensor", scale=None):
        q, s = ns["quantize_fp8"](w, dtype, granularity=granularity, scale=scale)
        return (w.float() / s).to(dtype), s  # the cast alone: NaN or inf where the scale is exceeded

    return quantize


def _vllm_style_fnuz(ns):
    def convert(q, scale):  # zeroes -0 but lets fn NaN become ±240, and writes into the caller's tensor
        bits = q.view(torch.uint8)
        bits[bits == 0x80] = 0
        return bits.view(torch.float8_e4m3fnuz), scale * 2

    return convert


def _fnuz_scaled_by_max_ratio(ns):
    def convert(q, scale):
        q_fnuz, _ = ns["ocp_to_fnuz"](q, scale)
        return q_fnuz, scale * 448 / 240

    return convert


def _ocp_by_reinterpreting_bits(ns):
    def convert(q, scale):  # the mirror of ocp_to_fnuz: ±240 (0x7F / 0xFF) become fn NaN, in every row
        if q.dtype != torch.float8_e4m3fnuz:
            raise ValueError(q.dtype)
        return q.view(torch.float8_e4m3fn).clone(), scale / 2

    return convert


def _ocp_clamped_to_224(ns):
    def convert(q, scale):  # no NaN, but every row's maximum comes out as 224 x scale
        if q.dtype != torch.float8_e4m3fnuz:
            raise ValueError(q.dtype)
        raw = q.view(torch.uint8).clone()
        raw[raw == 0x7F], raw[raw == 0xFF], raw[raw == 0x80] = 0x7E, 0xFE, 0x7F
        return raw.view(torch.float8_e4m3fn), scale / 2

    return convert


def _ocp_rounding_small_values_down(ns):
    def convert(q, scale):  # values kept from 2^-6 up, but the small ones truncated instead of ties-to-even
        if q.dtype != torch.float8_e4m3fnuz:
            raise ValueError(q.dtype)
        v = q.float()
        small = v.abs() < 2.0**-6
        v[small] = torch.trunc(v[small] * 2**9) / 2**9
        return v.to(torch.float8_e4m3fn), scale.clone()

    return convert


def _mxfp4_with_float_log2(ns):
    def quantize(x, block_size=32):
        codes, scales = ns["mxfp4_quantize"](x, block_size)
        amax = x.float().reshape(*x.shape[:-1], -1, block_size).abs().amax(-1)
        e = torch.where(amax > 0, torch.floor(torch.log2(amax)) - 2, torch.full_like(amax, -127)).clamp(-127, 127)
        return codes, (e + 127).to(torch.uint8)

    return quantize


def _int4_without_zero_in_range(ns):
    def quantize(w, group_size=128):
        o, i = w.shape
        g = w.float().reshape(o, i // group_size, group_size)
        lo, hi = g.amin(-1), g.amax(-1)
        scale = torch.where(hi > lo, (hi - lo) / 15, torch.ones_like(hi))
        zero = torch.clamp(torch.round(-lo / scale), 0, 15)
        q = torch.clamp(torch.round(g / scale.unsqueeze(-1)) + zero.unsqueeze(-1), 0, 15)
        return {"q": q.reshape(o, i).to(torch.uint8), "scale": scale, "zero": zero.to(torch.uint8)}

    return quantize


def _perplexity_mean_of_texts(ns):
    def ppl(model, tokenizer, texts, *, max_tokens=128):
        per_text = [
            ns["perplexity"](model, tokenizer, [t], max_tokens=max_tokens)
            for t in texts
            if len(tokenizer(t, add_special_tokens=False)["input_ids"]) >= 2
        ]
        if not per_text:
            raise ValueError("nothing to score")
        return sum(per_text) / len(per_text)

    return ppl


def _weight_bytes_without_biases(ns):
    def nbytes(config, fmt, *, group_size=128):
        heads, kv = config["num_attention_heads"], config.get("num_key_value_heads") or config["num_attention_heads"]
        head_dim = config.get("head_dim") or config["hidden_size"] // heads
        biases = 2 * config["num_hidden_layers"] * (heads * head_dim + 2 * kv * head_dim)
        return ns["weight_bytes"](config, fmt, group_size=group_size) - biases

    return nbytes


def _w8a8_without_activation_scale(ns):
    def linear(x, q_weight, weight_scale):
        q_x, _ = ns["quantize_fp8"](x, q_weight.dtype, granularity="channel")
        ones = torch.ones(x.shape[0], 1)
        return torch._scaled_mm(
            q_x, q_weight.t(), scale_a=ones, scale_b=weight_scale.t(), out_dtype=torch.bfloat16
        ).float()

    return linear


MUTANTS = [
    ("08-fp8bits-1", "decode_fp8", _decode_without_fnuz),
    ("08-fp8quant-1", "quantize_fp8", _quantize_without_clamp),
    ("08-fnuz-1", "ocp_to_fnuz", _vllm_style_fnuz),
    ("08-fnuz-1", "ocp_to_fnuz", _fnuz_scaled_by_max_ratio),
    ("08-ocp-1", "fnuz_to_ocp", _ocp_by_reinterpreting_bits),
    ("08-ocp-1", "fnuz_to_ocp", _ocp_clamped_to_224),
    ("08-ocp-1", "fnuz_to_ocp", _ocp_rounding_small_values_down),
    ("08-mxfp4-1", "mxfp4_quantize", _mxfp4_with_float_log2),
    ("08-int4-1", "int4_group_quantize", _int4_without_zero_in_range),
    ("08-ppl-1", "perplexity", _perplexity_mean_of_texts),
    ("08-memory-1", "weight_bytes", _weight_bytes_without_biases),
    ("08-stretch-w8a8-1", "fp8_linear", _w8a8_without_activation_scale),
]


class LocalChannel:
    """The harness's requests answered by rocmlab.lab.answers in this process, over a namespace (no kernel)."""

    def __init__(self, names):
        self.names = names

    def ask(self, request):
        from rocmlab.lab.answers import evaluate

        return evaluate(json.loads(json.dumps(request)), self.names)


@functools.cache
def lab_checks():
    """checks.py's checks, loaded once for the file's tests as the grader loads them once for a class
    (each load parses lab.py for its constants: 45 loads were a tenth of the file's CPU)."""
    from rocmlab.harness import load_checks

    path = LAB / "checks.py"
    return tuple(load_checks(path.read_text(encoding="utf-8"), str(path)))


def run_checks_of(grade_id, namespace, seed, reference=None):
    """The checks.py results of one graded cell, run through the harness's Learner against namespace;
    the trusted reference kernel's answers come from ``reference`` (the solution's names), or from
    namespace itself when it is the solution's."""
    from rocmlab import lab
    from rocmlab.harness import Learner, Reference, run_checks

    checks = [c for c in lab_checks() if c.grade_id == grade_id]
    assert checks, f"no check grades {grade_id}"
    trusted = Reference(LocalChannel({"lab": lab, **(namespace if reference is None else reference)}))
    return run_checks(checks, Learner(LocalChannel({"lab": lab, **namespace})), seed, reference=trusted)


def test_checks_points_add_up_to_each_cell():
    from rocmlab.harness import lab_checks

    points = {cell.metadata["grade_id"]: float(cell.metadata["points"]) for cell in SOURCE.tagged("test")}
    assert {c.grade_id for c in lab_checks(LAB / "checks.py", points)} == set(points)


@pytest.mark.parametrize("seed", [0, 7])
@pytest.mark.parametrize("grade_id", GRADED)
def test_checks_pass_on_the_solution(ns, tokenizer, small_model, grade_id, seed):
    results = run_checks_of(grade_id, graded_namespace(ns, tokenizer, small_model), seed)
    assert all(r.passed for r in results), [(r.name, r.detail) for r in results if not r.passed]


@pytest.mark.parametrize("grade_id,name,mutant", MUTANTS, ids=[m[2].__name__.strip("_") for m in MUTANTS])
def test_checks_reject_a_known_mistake(ns, tokenizer, small_model, grade_id, name, mutant):
    namespace = graded_namespace(ns, tokenizer, small_model, **{name: mutant(ns)})
    results = run_checks_of(grade_id, namespace, seed=3, reference=graded_namespace(ns, tokenizer, small_model))
    assert not all(r.passed for r in results), f"{mutant.__name__} passes every check of {grade_id}"


def listed_mistakes():
    """The @mistake entries of checks.py: (grade_id, check name, Mistake)."""
    from rocmlab.harness import mistakes_of

    checks = lab_checks()
    grade_ids = {c.name: c.grade_id for c in checks}
    return [(grade_ids[m.check], m.check, m) for m in mistakes_of(checks)]


MISTAKES = listed_mistakes()


def test_the_three_classic_mistakes_of_the_issue_are_listed():
    assert sorted(name for _, name, _ in MISTAKES) == ["decode_finite", "mx_layout", "mx_scales"]


def with_mistake(ns, item):
    """The solution namespace with the mistake's code defining its functions in place of the right ones."""
    namespace = dict(ns)
    exec(compile(item.code, f"<mistake on {item.check}>", "exec"), namespace)  # noqa: S102 (the course's own code)
    return namespace


@pytest.mark.parametrize("grade_id,name,item", MISTAKES, ids=[m[1] for m in MISTAKES])
def test_a_listed_mistake_fails_its_check_and_the_visible_test(ns, tokenizer, small_model, grade_id, name, item):
    namespace = graded_namespace(ns, tokenizer, small_model, **{})
    namespace = with_mistake(namespace, item)
    results = {r.name: r for r in run_checks_of(grade_id, namespace, seed=5)}
    assert not results[name].passed, f"{item.rule['en']}: passes {name}"
    with pytest.raises(AssertionError):
        run_test_cell(grade_id, namespace)


@pytest.mark.parametrize("seed", [1, 2])
def test_an_exponent_slip_fails_the_exponent_rule_alone(ns, tokenizer, small_model, seed):
    """The codes and layout rules are properties of the learner's own scales: ceil for floor breaks one rule."""
    (item,) = [m for _, name, m in MISTAKES if name == "mx_scales"]
    namespace = with_mistake(graded_namespace(ns, tokenizer, small_model), item)
    failed = sorted(r.name for r in run_checks_of("08-mxfp4-1", namespace, seed) if not r.passed)
    assert failed == ["mx_scales"]


def test_one_scale_per_tensor_is_blamed_on_the_blocking_not_the_rounding(ns, tokenizer, small_model):
    (item,) = [m for _, name, m in MISTAKES if name == "mx_layout"]
    namespace = with_mistake(graded_namespace(ns, tokenizer, small_model), item)
    failed = sorted(r.name for r in run_checks_of("08-mxfp4-1", namespace, seed=4) if not r.passed)
    assert failed == ["mx_layout", "mx_scales"]


def test_the_memory_figures_the_prose_states(ns):
    """Sections 6 and 7 state these (tests/labs/prose_numbers.toml lists them as asserted here): Qwen2.5-7B's
    weights shrink about 2.7× from bf16 to int4, the bf16 KV cache of 32 × 4096 tokens is half its bf16 weights,
    and FP8 weights free about 6.5 GB."""
    cfg = ns["QWEN25_7B"]

    def weights(fmt):
        return ns["weight_bytes"](cfg, fmt)

    assert round(weights("bf16") / weights("int4"), 1) == 2.7
    assert round(ns["kv_cache_bytes"](cfg, 4096, batch=32) / weights("bf16"), 1) == 0.5
    assert round((weights("bf16") - weights("fp8-channel")) / 1e9, 1) == 6.5


def test_fnuz_to_ocp_moves_exactly_the_sixteen_odd_multiples_of_2_to_the_minus_10(ns):
    """CHANGELOG 1.3.0 once said 14; with PyTorch 2.13 the value route moves ±1, 3, …, 15 × 2⁻¹⁰ and nothing else."""
    fnuz = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fnuz).reshape(256, 1)
    q_fn, _ = ns["fnuz_to_ocp"](fnuz, torch.ones(256, 1))
    before, after = fnuz.float().flatten(), q_fn.float().flatten()
    finite = ~torch.isnan(before)
    moved = sorted(before[finite & (after != before)].tolist())
    assert moved == sorted(s * k * 2.0**-10 for s in (-1, 1) for k in range(1, 16, 2))


def test_the_fn_bias_mistake_s_feedback_names_the_format_and_nothing_else(ns, tokenizer, small_model):
    from rocmlab.grading.feedback import learner_detail

    (item,) = [m for _, name, m in MISTAKES if name == "decode_finite"]
    namespace = with_mistake(graded_namespace(ns, tokenizer, small_model), item)
    (result,) = [r for r in run_checks_of("08-fp8bits-1", namespace, seed=2) if r.name == "decode_finite"]
    assert learner_detail(result.detail) in ("format e4m3fnuz", "format e5m2fnuz")


# -- evidence the learner's kernel cannot forge (issue 47) ---------------------------------


class _OneToken:
    """A ``tok`` rebound by a later cell: every text is the same two tokens."""

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [1, 2]}


class _LossOf:
    """A ``model`` rebound by a later cell: a loss of its choosing, whatever the input."""

    def __init__(self, loss):
        self.loss = loss

    def parameters(self):
        return iter([torch.zeros(1)])

    def __call__(self, input_ids, labels=None):
        return type("Out", (), {"loss": torch.tensor(self.loss)})()


def test_perplexity_is_scored_on_the_reference_kernels_model(ns, tokenizer, small_model):
    """A learner whose later cells rebind ``model`` and ``tok`` to a loss of 0 and whose perplexity
    is the constant 1.0 agrees with a reference taken in its own kernel; the lab's model disagrees."""
    honest = graded_namespace(ns, tokenizer, small_model)
    forger = {**honest, "tok": _OneToken(), "model": _LossOf(0.0), "perplexity": lambda *a, **k: 1.0}
    rules = ("ppl_weighted", "ppl_truncated")
    its_own = {r.name: r for r in run_checks_of("08-ppl-1", forger, seed=4, reference=forger)}
    assert all(its_own[name].passed for name in rules)  # the attack on a reference taken in its kernel
    against_the_lab = {r.name: r for r in run_checks_of("08-ppl-1", forger, seed=4, reference=honest)}
    assert sum(against_the_lab[name].points for name in rules) == 0
    assert not any(against_the_lab[name].error for name in rules)
    assert all(r.passed for r in run_checks_of("08-ppl-1", honest, seed=4, reference=honest))


class _Config:
    def __init__(self, values):
        self.values = values

    def to_dict(self):
        return dict(self.values)


def test_bf16_bytes_are_checked_on_the_model_the_solution_loaded(ns, tokenizer, small_model):
    """A weight_bytes that is right on every config but the lab's model, with ``model`` rebound to a
    config it is right on, passed when the model's config and parameter count came from the kernel."""
    honest = graded_namespace(ns, tokenizer, small_model)
    lab_vocab = small_model.config.vocab_size

    def weight_bytes(config, fmt, *, group_size=128):
        right = ns["weight_bytes"](config, fmt, group_size=group_size)
        return right + 2 if config["vocab_size"] == lab_vocab else right

    qwen = ns["QWEN25_05B"]
    # 494,032,768 parameters as one stride-0 view of a single zero (numel is all the check counts; 2 GB not allocated)
    params = torch.zeros(1).expand(494_032_768)
    fake = type("Fake", (), {"config": _Config(qwen), "parameters": lambda self: iter([params])})()
    forger = {**honest, "weight_bytes": weight_bytes, "model": fake}
    its_own = {r.name: r for r in run_checks_of("08-memory-1", forger, seed=2, reference=forger)}
    assert its_own["memory_bf16"].passed
    result = {r.name: r for r in run_checks_of("08-memory-1", forger, seed=2, reference=honest)}["memory_bf16"]
    assert not result.passed and not result.error and "the lab's model" in result.detail


@pytest.mark.parametrize(
    "grade_id,stub,rule",
    [
        ("08-fnuz-1", {"ocp_to_fnuz": lambda q, scale: (q, scale)}, "fnuz_inputs"),
        ("08-ocp-1", {"fnuz_to_ocp": lambda q, scale: (q, scale)}, "ocp_inputs"),
        (
            "08-mxfp4-1",
            {"mxfp4_quantize": lambda x, block_size=32: (
                torch.zeros(x.shape, dtype=torch.uint8),
                torch.zeros(*x.shape[:-1], x.shape[-1] // block_size, dtype=torch.uint8),
            )},
            "mx_layout",
        ),
    ],
    ids=["inputs-kept", "ocp-inputs-kept", "layout-of-a-constant"],
)  # fmt: skip
def test_a_rule_a_stub_keeps_counts_only_with_the_values_it_qualifies(ns, tokenizer, small_model, grade_id, stub, rule):
    """Leaving the inputs alone and quantizing each block alone as within x are properties a stub
    has too: they count only with the values rule they qualify (``counts_with``)."""
    honest = graded_namespace(ns, tokenizer, small_model)
    results = {r.name: r for r in run_checks_of(grade_id, {**honest, **stub}, seed=6, reference=honest)}
    assert not results[rule].passed and "counts together with" in results[rule].detail
    assert sum(r.points for r in results.values()) == 0
