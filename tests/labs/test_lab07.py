"""Lab 07 (Triton kernels): its solutions against their meaning, in Triton's interpreter.

Fast tests load the solution cells straight from the lab source into a namespace built with
TRITON_INTERPRET=1 (kernels defined then run on the CPU), call them on inputs of their own,
run the graded test cells that need no model against them, and check that the student version
of each of those cells fails. The slow test runs the model-swap exercise on tiny-qwen-zh.
"""

from __future__ import annotations

import ast
import tomllib
from types import SimpleNamespace

import pytest
import torch
from labsource import REPO, LabSource, student
from labsource import definitions as cell_definitions
from packaging.requirements import Requirement
from packaging.version import Version

from rocmlab.freshness import releases

ROOT = REPO
SOURCE = LabSource("07-triton-kernels")
LAB = SOURCE.folder
# Graded cells that need no model: their test cells run here against a namespace without one.
MODEL_FREE = ("add", "softmax", "traffic", "matmul", "lanes", "wave32", "configs", "stretch-roofline")
TOPICS = {*MODEL_FREE, "rmsnorm", "swiglu", "model"}


@pytest.fixture(scope="module")
def notebook():
    return SOURCE.notebook


@pytest.fixture(scope="module")
def cells():
    return SOURCE.graded


@pytest.fixture(scope="module")
def interpreter():
    """TRITON_INTERPRET=1 while this module's kernels are defined and run (Triton reads it lazily)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "1")
        yield


def _literal_constant(node) -> bool:
    """An UPPER_CASE assignment of a literal (the cells' other constants need the notebook)."""
    try:
        ast.literal_eval(node.value)
    except ValueError:
        return False
    return True


def run_cell(source: str, name: str, namespace: dict) -> None:
    SOURCE.run(source, namespace=namespace, name=f"lab07 {name}")


def definitions(source: str) -> str:
    """Imports, functions (kernels included), classes and literal UPPER_CASE constants of a cell; no demos."""
    return cell_definitions(source, constants=_literal_constant)


def lab_namespace(notebook, cells, *, solutions=(), students=()):
    """The lab's helpers on the CPU in interpreter mode, plus the given solution cells (or their student versions)."""
    import triton
    import triton.language as tl

    namespace = {"__name__": "lab07_test"}
    code = [c for c in notebook.cells if c.cell_type == "code"]
    run_cell(code[0].source, "imports", namespace)
    namespace.update(
        triton=triton,
        tl=tl,
        device=torch.device("cpu"),
        interpret=True,
        MODEL="tiny-qwen-zh",
        model=SimpleNamespace(config=SimpleNamespace(hidden_size=256)),
    )
    for index, cell in enumerate(code[1:], start=1):
        tags = set(cell.metadata.get("tags", []))
        if not {"parameters", "solution", "test"} & tags:
            run_cell(definitions(cell.source), f"cell {index}", namespace)
    for topic in solutions:
        run_cell(definitions(cells[f"07-{topic}-sol-1"]), f"07-{topic}-sol-1", namespace)
    for topic in students:
        run_cell(definitions(student(cells[f"07-{topic}-sol-1"])), f"student 07-{topic}", namespace)
    return namespace


@pytest.fixture(scope="module")
def sol(notebook, cells, interpreter):
    return lab_namespace(notebook, cells, solutions=[*MODEL_FREE, "rmsnorm", "swiglu", "stretch"])


# ---------------------------------------------------------------- structure


def test_lab_toml_is_valid_and_every_profile_parameter_is_assigned():
    assert {"smoke", "gpu"} <= set(SOURCE.lab.profiles)
    assigned = SOURCE.parameter_names
    assert {"PROFILE", "DEVICE", "SEED", "MODEL", "INTERPRET"} <= assigned
    for name, profile in SOURCE.lab.profiles.items():
        assert not set(profile.params) - assigned, f"profile {name}: parameters not in the parameters cell"


def test_grade_ids_are_unique_paired_and_solutions_marked(notebook):
    ids = [c.metadata["grade_id"] for c in notebook.cells if c.metadata.get("grade_id")]
    assert len(ids) == len(set(ids)) and all(g.startswith("07-") for g in ids)
    topic = lambda g: g[3:].removesuffix("-1").removesuffix("-sol")  # noqa: E731
    with_solution = {topic(g) for g in ids if "-sol-" in g}
    with_test = {topic(g) for g in ids if "-sol-" not in g}
    assert with_test == TOPICS and with_solution == TOPICS | {"stretch"}, (
        "the fused add + RMSNorm stretch alone is ungraded"
    )
    for cell in notebook.cells:
        tags = cell.metadata.get("tags", [])
        if "solution" in tags:
            assert "### BEGIN SOLUTION" in cell.source and "### END SOLUTION" in cell.source
        if "test" in tags:
            assert int(cell.metadata["points"]) > 0


def test_checks_grade_every_test_cell_with_its_points_and_no_hidden_block_is_left(notebook):
    from rocmlab.harness import lab_checks

    points = {
        c.metadata["grade_id"]: float(c.metadata["points"])
        for c in notebook.cells
        if "test" in c.metadata.get("tags", [])
    }
    checks = lab_checks(LAB / "checks.py", points)  # LabError when a cell's checks do not add up to its points
    assert {c.grade_id for c in checks} == set(points)
    assert all(c.rule["en"] and c.rule["zh"] for c in checks)
    assert "BEGIN HIDDEN TESTS" not in (LAB / "lab.py").read_text(encoding="utf-8")


def test_prose_comes_in_zh_en_pairs_and_cites_the_amd_sources(notebook):
    prose = [c for c in notebook.cells if c.cell_type == "markdown"]
    tags = [tuple(c.metadata.get("tags", [])) for c in prose]
    assert tags.count(("zh",)) == tags.count(("en",)) >= 15
    for lang in ("zh", "en"):
        text = "\n".join(c.source for c in prose if lang in c.metadata.get("tags", []))
        for source in (
            "rocm.docs.amd.com/en/latest/reference/gpu-specs.html",
            "third_party/amd/backend/compiler.py",
            "inference-optimization/workload.html",
            "triton-lang/triton/pull/4148",
            "triton-lang/triton/issues/11584",
            "hipamd/include/hip/amd_detail/amd_warp_sync_functions.h",
            "projects/HIPIFY",
        ):
            assert source in text, f"{lang} prose does not cite {source}"


def test_triton_pins_run_the_interpreter_and_fit_the_cpu_kernels_extra():
    """Every CPU environment pins a Triton whose interpreter runs loops with run-time bounds (3.7+),
    within the range of the cpu-kernels extra (where Triton moved from the labs extra)."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["cpu-kernels"]
    (triton_req,) = [Requirement(r) for r in extra if Requirement(r).name == "triton"]
    for entry in (e for e in releases.load_matrix(ROOT / "env" / "matrix.toml") if e.kind == "cpu"):
        pinned = entry.pin("triton")
        assert pinned and Version(pinned) >= Version("3.7"), f"{entry.name}: triton {pinned}"
        assert triton_req.specifier.contains(pinned), f"{entry.name}: triton {pinned} outside {triton_req}"


# ---------------------------------------------------------------- the solutions


def test_the_worked_tile_example_shows_each_api_piece_before_the_first_exercise(notebook, sol):
    code = [c for c in notebook.cells if c.cell_type == "code"]
    first_exercise = next(i for i, c in enumerate(code) if "solution" in c.metadata.get("tags", []))
    (example,) = [i for i, c in enumerate(code) if "def tile_example_kernel" in c.source]
    assert example < first_exercise
    for piece in ("[:, None]", "other=0.0", "tl.zeros(", "tl.dot(", "axis=1", "c_tile.to(c_ptr.dtype.element_ty)"):
        assert piece in code[example].source, piece
    a, b = torch.randn(17, 9).half(), torch.randn(9, 30).half()
    c, stats = sol["tile_example"](a, b.T.contiguous().T)
    want = a.double() @ b.double()
    assert c.dtype == torch.float16 and torch.allclose(c.double(), want, rtol=1e-3, atol=1e-2)
    assert torch.allclose(stats.double(), torch.stack([want.max(1).values, want.sum(1)], 1), rtol=1e-3, atol=1e-3)


def test_vector_add_masks_the_tail_and_returns_out(sol):
    x, y = torch.arange(300.0), torch.ones(300)
    buf = torch.full((300 + 128,), -1.0)
    out = sol["vector_add"](x, y, out=buf[:300], block=128)
    assert out.data_ptr() == buf.data_ptr() and torch.equal(buf[:300], x + 1)
    assert bool((buf[300:] == -1.0).all())
    with pytest.raises(ValueError):
        sol["vector_add"](torch.ones(2), torch.ones(3))


def test_softmax_handles_strides_dtypes_and_large_values(sol):
    base = torch.randn(12, 70, dtype=torch.float64).float()
    for view in (base, base.t(), base[:, 5:40], base[::3]):
        torch.testing.assert_close(sol["softmax"](view), torch.softmax(view, dim=1))
    huge = torch.tensor([[1e4, -1e4, 0.0], [3e4, 3e4, 3e4]])
    torch.testing.assert_close(sol["softmax"](huge), torch.softmax(huge, dim=1))
    half = torch.randn(4, 33).half()
    torch.testing.assert_close(sol["softmax"](half), torch.softmax(half.float(), 1).half(), rtol=1e-3, atol=1e-3)


def test_softmax_traffic_counts_five_eager_passes(sol):
    t = sol["softmax_traffic"](2, 3, 2)
    assert t == {"eager": (5 * 6 + 2 * 2 + 3 * 6 + 2 * 2) * 2, "fused": 2 * 6 * 2, "ratio": t["eager"] / 24}
    with pytest.raises(ValueError):
        sol["softmax_traffic"](0, 3, 2)


def test_matmul_accumulates_in_fp32_on_transposed_and_ragged_inputs(sol):
    a = torch.rand(24, 2048).half()
    w = torch.rand(40, 2048).half()
    got = sol["matmul"](a, w.t(), block_m=16, block_n=32, block_k=256)
    assert got.dtype == torch.float16 and got.is_contiguous()
    assert sol["rel_error"](got, a.double() @ w.double().t()) < 6e-4
    x, y = torch.randn(33, 17), torch.randn(17, 45)
    assert sol["rel_error"](sol["matmul"](x, y, 16, 16, 16), x.double() @ y.double()) < 1e-5
    with pytest.raises(ValueError):
        sol["matmul"](torch.ones(2, 3), torch.ones(4, 2))


def test_rmsnorm_and_swiglu_match_their_definitions(sol):
    x = torch.randn(3, 4, 50)
    w = torch.randn(50)
    want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(sol["rmsnorm"](x, w, 1e-6), want)
    torch.testing.assert_close(sol["rmsnorm"](x.transpose(0, 1), w, 1e-6), want.transpose(0, 1))
    g, u = torch.randn(6, 10), torch.randn(10, 6)
    torch.testing.assert_close(sol["swiglu"](g.t(), u), torch.nn.functional.silu(g.t()) * u)
    with pytest.raises(ValueError):
        sol["swiglu"](torch.ones(2), torch.ones(3))
    y, h = sol["add_rmsnorm"](x, x, w, 1e-6)
    torch.testing.assert_close(h, 2 * x)
    torch.testing.assert_close(y, sol["rmsnorm"](2 * x, w, 1e-6))


@pytest.mark.parametrize(
    "num_warps, arch, lanes",
    [(4, "gfx942", 256), (1, "gfx90a:sramecc+:xnack-", 64), (8, "gfx950", 512), (4, "gfx1100", 128), (2, "sm_90", 64)],
)
def test_lanes_per_program_counts_wavefronts(sol, num_warps, arch, lanes):
    assert sol["lanes_per_program"](num_warps, arch) == lanes


def test_the_ported_kernel_misses_half_on_wave64_and_the_fix_does_not(sol):
    x = torch.randn(3, 256)
    want = x.double().pow(2).mean(dim=1)
    assert sol["rel_error"](sol["_run_ported"](x, 32), want) < 1e-6
    assert sol["rel_error"](sol["_run_ported"](x, 64), want) > 0.2
    for cols in (7, 256, 4100):
        x = torch.randn(2, cols)
        assert sol["rel_error"](sol["row_sq_mean"](x, 4, 64), x.double().pow(2).mean(dim=1)) < 1e-6
    assert [sol["block_for"](n, 64) for n in (1, 64, 65, 9000)] == [64, 64, 128, 4096]


def test_valid_configs_follow_lds_mfma_and_target_rules(sol):
    cfg = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 2, "kpack": 2}
    assert sol["lds_bytes"](cfg, 2) == 96 * 1024
    assert sol["valid_configs"]([cfg], "gfx942", 2, 64 * 1024) == []
    assert sol["valid_configs"]([cfg], "gfx950", 2, 160 * 1024) == []  # kpack=2 on gfx950
    assert sol["valid_configs"]([dict(cfg, kpack=1)], "gfx950", 2, 160 * 1024) == [dict(cfg, kpack=1)]
    assert sol["valid_configs"]([cfg], "sm_90", 2, 227 * 1024) == []  # an AMD-only key on NVIDIA
    wmma = dict(cfg, kpack=1, matrix_instr_nonkdim=0)
    rdna = [
        wmma,
        dict(wmma, matrix_instr_nonkdim=16),
        dict(wmma, kpack=2),
        {k: v for k, v in wmma.items() if k != "kpack"},
    ]
    assert sol["valid_configs"](rdna, "gfx1100", 2, 10**9) == [rdna[0], rdna[3]]  # WMMA reads neither option
    space = sol["candidate_configs"]()
    on_942 = sol["valid_configs"](space, "gfx942", 2, 64 * 1024)
    on_950 = sol["valid_configs"](space, "gfx950", 2, 160 * 1024)
    assert on_942 and on_950 and any(sol["lds_bytes"](c, 2) > 64 * 1024 for c in on_950)


def test_roofline_derives_the_bound(sol):
    r = sol["roofline"](5, 4, peak_tflops=1307.4, peak_gbs=5300)
    assert r["bound"] == "memory" and r["intensity"] == 1.25 and r["attainable_tflops"] == pytest.approx(6.625)
    assert sol["roofline"](1e6, 1, 1307.4, 5300)["bound"] == "compute"
    assert sol["matmul_tile_traffic"](2, 3, 4, 2) == {"flops": 48, "bytes": (8 + 12 + 6) * 2}
    with pytest.raises(ValueError):
        sol["roofline"](1, 0, 1, 1)


@pytest.mark.slow
def test_the_lds_estimate_bounds_what_triton_compiles_for_gfx942_and_gfx950(sol):
    """Ahead-of-time compiles (no GPU needed): the conservative estimate is never below the compiled LDS."""
    jobs = [
        (arch, {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": 8, "num_stages": st})
        for arch in ("gfx942", "gfx950")
        for bm, bn, bk, st in ((256, 256, 64, 2), (128, 128, 64, 3), (128, 64, 32, 1))
    ]
    compiled = sol["compiled_lds"](sol["matmul_kernel"], jobs)
    for (arch, cfg), shared in zip(jobs, compiled):
        assert 0 < shared <= sol["lds_bytes"](cfg, 2), (arch, cfg, shared)


# ---------------------------------------------------------------- the graded cells, solution and student


@pytest.mark.parametrize("topic", MODEL_FREE)
def test_graded_cell_passes_on_the_solution_and_fails_on_the_student_version(notebook, cells, interpreter, topic):
    solved = lab_namespace(notebook, cells, solutions=MODEL_FREE)
    run_cell(cells[f"07-{topic}-1"], "07-{topic}-1", solved)
    others = [t for t in MODEL_FREE if t != topic]
    empty = lab_namespace(notebook, cells, solutions=others, students=[topic])
    # NotImplementedError itself, or Triton's InterpreterError wrapping it when a student kernel body runs
    with pytest.raises(Exception) as caught:
        run_cell(cells[f"07-{topic}-1"], "student 07-{topic}-1", empty)
    assert "NotImplementedError" in repr(caught.value) or isinstance(caught.value, NotImplementedError)


def test_the_matmul_cell_rejects_an_fp16_accumulator(notebook, cells, interpreter):
    """The pitfall the text names (K=4096 positive fp16 values summed in fp16: about 1e-3) fails the visible case."""
    namespace = lab_namespace(notebook, cells, solutions=[t for t in MODEL_FREE if t != "matmul"])
    source = cells["07-matmul-sol-1"]
    mutant = source.replace(
        "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)", "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)"
    )
    mutant = mutant.replace("acc = tl.dot(a, b, acc)", "acc += tl.dot(a, b).to(tl.float16)")
    assert mutant.count("float16") == 2, "the solution's accumulator lines moved: update this test"
    run_cell(definitions(mutant), "fp16 accumulator", namespace)
    with pytest.raises(AssertionError, match="relative error too large"):
        run_cell(cells["07-matmul-1"], "07-matmul-1 with an fp16 accumulator", namespace)


# ---------------------------------------------------------------- the course model (slow)


@pytest.mark.slow
def test_kernels_swapped_into_tiny_qwen_zh_pass_their_graded_cells(notebook, cells, interpreter):
    from rocmlab import lab

    ns = lab_namespace(notebook, cells, solutions=[*MODEL_FREE, "rmsnorm", "swiglu", "model"])
    model, tokenizer = lab.load_model("tiny-qwen-zh", device="cpu", dtype="float32")
    ns.update(model=model, tokenizer=tokenizer, MAX_TOKENS=16)
    ns["QC_PROMPTS"] = [row["description"] for row in lab.load_qc_reports("eval")[:2]]
    ns["NORM_MODULES"] = [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]
    ns["MLP_MODULES"] = [m for m in model.modules() if type(m).__name__.endswith("MLP")]
    ns["STOCK"] = ns["stock_logits"](ns["QC_PROMPTS"])
    ns["_norm"], ns["_mlp"] = ns["NORM_MODULES"][-1], ns["MLP_MODULES"][0]
    ns["_h"] = torch.randn(2, 3, model.config.hidden_size)
    for topic in ("rmsnorm", "swiglu", "model"):
        run_cell(cells[f"07-{topic}-1"], "07-{topic}-1", ns)
    assert not any("forward" in vars(m) for m in model.modules()), "the model is left as it was"


# ---------------------------------------------------------------- the reference kernel (slow)

# a learner who replaces the lab's model by one of its own: a module with no RMSNorm or MLP whose
# logits are all zero; its swap counts nothing and changes nothing, so every value its kernel
# computes agrees with every other (issue 47: "a reference computed in the kernel with the lab's model")
FAKE_MODEL = """
class _Zero(torch.nn.Module):
    config = model.config
    def forward(self, input_ids=None, attention_mask=None, **kw):
        return SimpleNamespace(logits=torch.zeros(*input_ids.shape, 8))
model = _Zero()
"""
TORCH_KERNELS = """
def rmsnorm(x, weight, eps):
    x32 = x.float()
    return (weight.float() * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps))).to(x.dtype)
def swiglu(gate, up):
    return torch.nn.functional.silu(gate) * up
"""


@pytest.fixture(scope="module")
def model_names(notebook, cells):
    """A namespace with the course model, the lab's data helpers and the solution's swap, on
    torch's own rmsnorm / swiglu (the Triton kernels have their own fast tests): the notebook as
    the reference kernel and an honest learner's kernel hold it after their runs."""
    from rocmlab import lab

    def names(solution: bool = True):
        model, tokenizer = lab.load_model("tiny-qwen-zh", device="cpu", dtype="float32")
        ns = {"torch": torch, "SimpleNamespace": SimpleNamespace, "lab": lab, "device": torch.device("cpu")}
        ns.update(model=model, tokenizer=tokenizer, MAX_TOKENS=16)
        ns["get_ipython"] = lambda: SimpleNamespace(user_ns=ns)
        run_cell("import contextlib\n" + TORCH_KERNELS, "torch kernels", ns)
        if solution:
            run_cell(definitions(cells["07-model-sol-1"]), "07-model-sol-1", ns)
        return ns

    return names


def _graded(names, reference_names, checks):
    from unittest import mock

    import IPython

    from rocmlab.harness import Learner, Reference, run_checks
    from rocmlab.lab.answers import evaluate

    class InProcess:
        def __init__(self, ns):
            self.ns = ns

        def ask(self, request):
            return evaluate(request, self.ns)

    # the kernel-side module rebinds the notebook's names in the kernel's user namespace
    with mock.patch.object(IPython, "get_ipython", lambda: SimpleNamespace(user_ns=names)):
        results = run_checks(
            checks, Learner(InProcess(names)), seed=47, reference=Reference(InProcess(reference_names))
        )
    return {r.name: r for r in results}


def _points():
    return {
        c.metadata["grade_id"]: float(c.metadata["points"])
        for c in SOURCE.notebook.cells
        if "test" in c.metadata.get("tags", [])
    }


@pytest.mark.slow
def test_model_checks_take_the_stock_model_from_the_reference_kernel(cells, model_names):
    """Cost: one course-model load per namespace (three), no lab run. The honest learner passes
    every model rule against the reference; the learner whose kernel holds a model of its own
    passed them all while the stock model was computed in its kernel, and now passes none of the
    model rules (its rmsnorm, torch's own, is right on the reference model's weights)."""
    from rocmlab.harness import lab_checks

    checks = [
        c for c in lab_checks(LAB / "checks.py", _points()) if c.grade_id == "07-model-1" or c.name == "rmsnorm_model"
    ]
    assert all(c.wants_reference for c in checks)
    reference, honest = model_names(), model_names()
    assert all(r.passed for r in _graded(honest, reference, checks).values())

    forger = model_names(solution=False)
    run_cell(FAKE_MODEL, "the learner's own model", forger)
    run_cell(
        "@contextlib.contextmanager\ndef triton_kernels_in(model):\n    yield {'rmsnorm': 0, 'mlp': 0}\n",
        "a swap of nothing",
        forger,
    )
    in_its_kernel = _graded(forger, forger, checks)  # the old design: the reference in the learner's kernel
    assert {n for n, r in in_its_kernel.items() if r.passed} >= {"model_counts", "model_calls", "model_logits"}
    against_reference = _graded(forger, reference, checks)
    # its rmsnorm is right: asked on the reference model's weights, whatever model its kernel holds
    assert [n for n, r in against_reference.items() if r.passed] == ["rmsnorm_model"]
    assert all(r.error == "" for r in against_reference.values())


# a learner who swaps nothing: it yields the right counts and writes them into the counters of any
# frame above it, so a check that counted calls in its kernel saw one call per module
COUNTS_WRITER = """
import sys
@contextlib.contextmanager
def triton_kernels_in(model):
    kinds = {k: sum(type(m).__name__.endswith(s) for m in model.modules()) for k, s in (("rmsnorm", "RMSNorm"), ("mlp", "MLP"))}
    frame = sys._getframe(1)
    while frame is not None:
        calls = frame.f_globals.get("_calls")
        if isinstance(calls, dict):
            calls.update(rmsnorm=kinds["rmsnorm"], swiglu=kinds["mlp"])
        frame = frame.f_back
    yield kinds
"""


@pytest.mark.slow
def test_calls_are_judged_by_marked_logits_not_by_counters_in_the_kernel(cells, model_names):
    """Cost: two course-model loads, no lab run. A swap of nothing gives the stock model's logits
    inside and after the block and can write any counter its kernel keeps: only kernels marked
    with the check's own factors tell it apart, and the rules true of doing nothing count with that
    one. It takes none of the cell's 3 points."""
    from rocmlab.harness import lab_checks

    checks = [c for c in lab_checks(LAB / "checks.py", _points()) if c.grade_id == "07-model-1"]
    reference, forger = model_names(), model_names(solution=False)
    run_cell(COUNTS_WRITER, "a swap of nothing that writes the counters", forger)
    results = _graded(forger, reference, checks)
    assert [n for n, r in results.items() if r.passed] == []
    assert "the largest |diff|" in results["model_calls"].detail  # the marked factors never reached its logits
    for name in ("model_counts", "model_logits", "model_restored"):  # true of a swap of nothing, alone
        assert results[name].detail.startswith("counts together with model_calls"), (name, results[name].detail)


# a learner whose swap restores every module but swallows what the block raises, in a kernel that
# claims the exception reached the caller: as the flag the kernel once computed (True), and as a
# KeyError of its own when asked for the block's exception (issue 47: a flag computed in the kernel)
SWALLOWING_SWAP = """
_restoring_swap = triton_kernels_in
@contextlib.contextmanager
def triton_kernels_in(model):
    with _restoring_swap(model) as counts:
        try:
            yield counts
        except KeyError:
            pass
"""


class _ClaimsTheRaise:
    """The swallowing learner's kernel, answering in this process, with its claim put in."""

    def __init__(self, names):
        self.names = names

    def ask(self, request):
        from rocmlab.lab.answers import decode, encode, evaluate

        if request.get("run") == "raise_in_block":
            return evaluate({"expr": "{}['check']", "values": {}}, self.names)  # a KeyError, not the check's
        reply = evaluate(request, self.names)
        answer = decode(reply)
        if request.get("run") == "swap_run" and isinstance(answer, tuple) and len(answer) == 7:
            return encode((*answer[:5], True, answer[6]))  # main's flag: "raised through"
        return reply


@pytest.mark.slow
def test_an_exception_the_swap_swallows_loses_the_restore_rule_whatever_the_kernel_claims(cells, model_names):
    """Cost: two course-model loads, no lab run. The swallowing swap restores every module, so the
    rules of the swap itself hold; the restore rule, which includes "also when the block raises",
    asks for the exception of a block that raises a token drawn by the check, and gets none."""
    from unittest import mock

    import IPython
    from in_process import InProcess

    from rocmlab.harness import Learner, Reference, lab_checks, run_checks

    checks = [c for c in lab_checks(LAB / "checks.py", _points()) if c.grade_id == "07-model-1"]
    reference, forger = model_names(), model_names()
    run_cell(SWALLOWING_SWAP, "a swap that swallows the block's exception", forger)
    with mock.patch.object(IPython, "get_ipython", lambda: SimpleNamespace(user_ns=forger)):
        results = run_checks(
            checks, Learner(_ClaimsTheRaise(forger)), seed=47, reference=Reference(InProcess(reference))
        )
    by_name = {r.name: r for r in results}
    assert {n for n, r in by_name.items() if r.passed} == {"model_counts", "model_calls", "model_logits"}
    assert "did not reach the caller" in by_name["model_restored"].detail, by_name["model_restored"].detail
