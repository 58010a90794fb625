"""Lab 02 (LLM inference and sound benchmarking): source shape, golden data, solution functions.

Fast tests read solutions/02-llm-inference directly; executing the notebook is left to
`rocmlab build --verify` and `rocmlab run` (tests/labs/test_every_lab.py).
"""

import json
import math
import statistics
from types import SimpleNamespace

import numpy as np
import pytest
from in_process import InProcess
from labsource import LabSource, definitions

SOURCE = LabSource("02-llm-inference")
LAB = SOURCE.folder
GOLDEN = json.loads((LAB / "data" / "metrics_golden.json").read_text(encoding="utf-8"))


def solution_namespace(*names):
    """Run the solution cells defining `names` in a fresh namespace (no model needed)."""
    import time

    import torch

    from rocmlab import lab

    ns = {"np": np, "math": math, "json": json, "time": time, "torch": torch, "lab": lab}
    return SOURCE.run_solutions(defining=names, namespace=ns)


def tags(cell) -> list[str]:
    return cell.metadata.get("tags", [])


# -- source shape --------------------------------------------------------------------------


def test_smoke_uses_the_offline_model_and_gpu_a_real_qwen():
    # that profile parameters exist in the parameters cell is checked for every lab by rocmlab.course.source
    profiles = SOURCE.lab.profiles
    assert profiles["smoke"].params["MODEL"] == "tiny-qwen-zh"
    assert profiles["gpu"].params["MODEL"] == "Qwen/Qwen2.5-0.5B-Instruct"


def test_grade_ids_unique_and_every_test_is_graded_by_its_checks():
    from rocmlab.harness import lab_checks

    assert all(grade_id.startswith("02-") for grade_id in SOURCE.graded)
    tests, solutions = SOURCE.tagged("test"), SOURCE.tagged("solution")
    for cell in tests:
        assert "HIDDEN TESTS" not in cell.source, cell.metadata  # graded rules live in checks.py
        assert int(cell.metadata["points"]) > 0, cell.metadata
    points = {cell.metadata["grade_id"]: float(cell.metadata["points"]) for cell in tests}
    checks = lab_checks(LAB / "checks.py", points)  # raises when a cell's checks do not add up to its points
    assert {c.grade_id for c in checks} == set(points)
    for cell in solutions:
        assert "### BEGIN SOLUTION" in cell.source and "### END SOLUTION" in cell.source, cell.metadata
    assert len(SOURCE.graded) == len(tests) + len(solutions), "duplicate grade_id"
    assert len(tests) == 11


def test_stretch_exercises_come_after_the_core_and_are_labelled():
    """Optional stretch cells are graded apart (02-stretch-*), after every core cell, under a stretch heading."""
    cells = SOURCE.cells
    ids = [cell.metadata.get("grade_id", "") for cell in cells]
    first_stretch = next(i for i, grade_id in enumerate(ids) if grade_id.startswith("02-stretch-"))
    assert not any(g and not g.startswith("02-stretch-") for g in ids[first_stretch:]), "core cell after a stretch one"
    headings = [cell.source for cell in cells[first_stretch - 4 : first_stretch] if cell.cell_type == "markdown"]
    assert any("选做" in text for text in headings) and any("Stretch" in text for text in headings)


def test_every_solution_cell_has_a_contract_in_both_languages_right_above():
    cells = SOURCE.cells
    for i, cell in enumerate(cells):
        if "solution" not in tags(cell):
            continue
        j = i
        while "solution" in tags(cells[j - 1]):  # several solution cells share one contract
            j -= 1
        zh, en = cells[j - 2], cells[j - 1]
        assert "zh" in tags(zh) and "约定" in zh.source, (cell.metadata, zh.metadata)
        assert "en" in tags(en) and "contract" in en.source, (cell.metadata, en.metadata)


def test_prose_comes_in_zh_en_pairs():
    zh, en = len(SOURCE.tagged("zh")), len(SOURCE.tagged("en"))
    assert zh == en and zh >= 15


# -- golden metrics ------------------------------------------------------------------------


def reference_metrics(traces, duration, percentiles, slo):
    """numpy restatement of vLLM's calculate_metrics, written apart from the lab's solution."""
    ok = [t for t in traces if t["success"]]
    tpot_all = np.array(
        [(t["latency"] - t["ttft"]) / (t["output_len"] - 1) if t["output_len"] > 1 else 0.0 for t in ok]
    )
    multi = np.array([t["output_len"] > 1 for t in ok], dtype=bool)
    series = {
        "ttft": np.array([t["ttft"] for t in ok]),
        "tpot": tpot_all[multi] if len(ok) else np.array([]),
        "itl": np.concatenate([np.array(t["itl"], dtype=float) for t in ok]) if ok else np.array([]),
        "e2el": np.array([t["latency"] for t in ok]),
    }
    out = {}
    for name, values in series.items():
        ms = (values if values.size else np.zeros(1)) * 1000
        out[f"mean_{name}_ms"] = ms.mean()
        out[f"std_{name}_ms"] = ms.std()
        out[f"median_{name}_ms"] = np.median(ms)
        for p in percentiles:
            out[f"p{int(p) if int(p) == p else p}_{name}_ms"] = np.percentile(ms, p)
    tin = sum(t["prompt_len"] for t in ok)
    tout = sum(t["output_len"] for t in ok)
    out.update(
        completed=len(ok),
        total_input=tin,
        total_output=tout,
        request_throughput=len(ok) / duration,
        output_throughput=tout / duration,
        total_token_throughput=(tin + tout) / duration,
    )
    if slo:
        limits = {k: v / 1000 for k, v in slo.items()}
        columns = {"ttft": series["ttft"], "tpot": tpot_all, "e2el": series["e2el"]}
        good = np.all([columns[k] <= v for k, v in limits.items()], axis=0)
        out["request_goodput"] = int(np.sum(good)) / duration
    return out


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=lambda c: c["name"])
def test_golden_values_match_an_independent_reference(case):
    ref = reference_metrics(case["traces"], case["duration_s"], case["percentiles"], case["slo_ms"])
    for key, value in ref.items():
        assert math.isclose(case["expected"][key], value, rel_tol=1e-9, abs_tol=1e-9), key


def test_golden_cases_cover_the_edge_cases():
    traces = [t for c in GOLDEN["cases"] for t in c["traces"]]
    assert any(not t["success"] for t in traces)
    assert any(t["success"] and t["output_len"] == 1 for t in traces)
    assert any(c["slo_ms"] for c in GOLDEN["cases"]) and any(not c["slo_ms"] for c in GOLDEN["cases"])
    assert any(any(not float(p).is_integer() for p in c["percentiles"]) for c in GOLDEN["cases"])
    single = next(c for c in GOLDEN["cases"] if c["name"] == "single-token-only")
    assert single["expected"]["mean_tpot_ms"] == 0.0


def test_golden_values_catch_common_mistakes():
    case = next(c for c in GOLDEN["cases"] if c["name"] == "mixed-40")
    ok = [t for t in case["traces"] if t["success"]]
    exp = case["expected"]
    # TPOT over every request (single-token ones as 0) instead of only output_len > 1
    wrong_tpot = (
        statistics.fmean(
            [(t["latency"] - t["ttft"]) / (t["output_len"] - 1) if t["output_len"] > 1 else 0.0 for t in ok]
        )
        * 1000
    )
    assert not math.isclose(wrong_tpot, exp["mean_tpot_ms"], rel_tol=1e-6)
    # TPOT that counts the first token: latency / output_len
    assert not math.isclose(
        statistics.fmean([t["latency"] / t["output_len"] for t in ok if t["output_len"] > 1]) * 1000,
        exp["mean_tpot_ms"],
        rel_tol=1e-6,
    )
    # ITL averaged per request first
    per_request = statistics.fmean([statistics.fmean(t["itl"]) for t in ok if t["itl"]]) * 1000
    assert not math.isclose(per_request, exp["mean_itl_ms"], rel_tol=1e-6)
    # failed requests counted / throughput from summed latencies
    assert exp["completed"] != len(case["traces"])
    assert not math.isclose(len(ok) / sum(t["latency"] for t in ok), exp["request_throughput"], rel_tol=1e-6)


# -- solution functions ----------------------------------------------------------------------


def test_solution_metrics_reproduce_golden():
    compute_metrics = solution_namespace("compute_metrics")["compute_metrics"]
    for case in GOLDEN["cases"]:
        got = compute_metrics(
            case["traces"], case["duration_s"], percentiles=case["percentiles"], slo_ms=case["slo_ms"]
        )
        for key, value in case["expected"].items():
            assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-9) if value is not None else got[key] is None, (
                case["name"],
                key,
            )
    with pytest.raises(ValueError, match="slo_ms"):
        compute_metrics(case["traces"], 1.0, slo_ms={"latency": 1})


def test_solution_metrics_retokenize_a_trace_without_a_count_as_vllm_does():
    compute_metrics = solution_namespace("compute_metrics")["compute_metrics"]
    traces = [
        {
            "prompt_len": 2,
            "output_len": None,
            "ttft": 0.1,
            "itl": [0.1] * 3,
            "latency": 0.4,
            "success": True,
            "text": "abcd",
        },
        {"prompt_len": 2, "output_len": 0, "ttft": 0.1, "itl": [], "latency": 0.1, "success": True, "text": "a"},
        {"prompt_len": 2, "output_len": None, "ttft": 0.0, "itl": [], "latency": 0.0, "success": False},
    ]
    got = compute_metrics(traces, 1.0, tokenize=list)
    assert got["total_output"] == 5 and got["completed"] == 2
    assert got["mean_tpot_ms"] == pytest.approx(100.0)
    with pytest.raises(ValueError, match="trace 0"):
        compute_metrics(traces, 1.0)


def test_solution_memory_math_on_published_configs():
    ns = solution_namespace("kv_cache_bytes", "param_count", "decode_roofline", "forward_intensity", "roofline")
    qwen = {
        "model_type": "qwen2",
        "num_hidden_layers": 24,
        "hidden_size": 896,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "intermediate_size": 4864,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    }
    llama = {
        "model_type": "llama",
        "num_hidden_layers": 80,
        "hidden_size": 8192,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "intermediate_size": 28672,
        "vocab_size": 128256,
        "tie_word_embeddings": False,
    }
    assert ns["kv_cache_bytes"](qwen, 1) == 2 * 24 * 2 * 64 * 2
    assert ns["kv_cache_bytes"](llama, 1) == 2 * 80 * 8 * 128 * 2
    assert ns["param_count"](qwen) == 494_032_768
    weights = ns["param_count"](llama) * 2
    assert 80e9 < weights < 192e9, "70B in bf16: over one 80 GB card, under one 192 GB MI300X"
    assert ns["decode_roofline"](weights, 327680, 0, 1, 5.3e12) == pytest.approx(5.3e12 / weights)


def test_solution_roofline_puts_prefill_and_decode_on_either_side_of_the_mi300x_ridge():
    from rocmlab.lab import datasheets

    ns = solution_namespace("forward_intensity", "roofline")
    mi300x = datasheets.by_key("MI300X")
    peak, bw = mi300x.fp16_dense_tflops * 1e12, mi300x.bandwidth_gbs * 1e9
    n70 = 70_553_706_496
    prefill = ns["roofline"](ns["forward_intensity"](n70, 2048), peak_flops=peak, bandwidth=bw)
    decode = ns["roofline"](ns["forward_intensity"](n70, 1, kv_bytes=2048 * 327680), peak_flops=peak, bandwidth=bw)
    assert prefill["ridge"] == pytest.approx(246.68, abs=0.01)
    assert (prefill["bound"], decode["bound"]) == ("compute", "memory")
    assert prefill["attainable_flops"] == peak and decode["attainable_flops"] < bw * 1.01
    with pytest.raises(ValueError):
        ns["roofline"](1.0, peak_flops=peak, bandwidth=0)


def test_solution_param_count_matches_a_real_qwen2_module():
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
    )
    model = Qwen2ForCausalLM(config)
    ns = solution_namespace("param_count")
    assert ns["param_count"](config.to_dict()) == sum(p.numel() for p in model.parameters())


def test_solution_arrivals_and_concurrency():
    ns = solution_namespace("arrival_times", "mean_concurrency")
    times = ns["arrival_times"](1000, 5.0, burstiness=2.0, seed=3)
    assert times[0] == 0 and np.all(np.diff(times) >= 0)
    assert np.array_equal(times, ns["arrival_times"](1000, 5.0, burstiness=2.0, seed=3))
    assert ns["mean_concurrency"]([(0, 1), (0, 1)]) == 2.0


def test_solution_stream_client_counts_tokens_from_usage_not_events():
    from rocmlab.lab import ScriptedSSEServer, active_sse_servers

    stream = solution_namespace("stream_completion")["stream_completion"]
    with ScriptedSSEServer(["质检", "", "通过"], tokens_per_piece=[2, 1, 2], ttft_s=0.05, itl_s=0.05) as server:
        trace = stream(server.base_url, "p", max_tokens=8, prompt_len=3)
        chat = stream(server.base_url, "p", max_tokens=2, chat=True)
    assert trace["success"] and trace["text"] == "质检通过" and trace["output_len"] == 5 and len(trace["itl"]) == 2
    # The server sleeps before each piece, so piece k arrives no earlier than k sleeps after the request;
    # a single gap may be shorter when the previous piece was read late (a loaded machine).
    arrivals = np.cumsum([trace["ttft"], *trace["itl"]])
    assert all(arrivals >= [0.049, 0.099, 0.149]) and min(trace["itl"]) >= 0 and trace["prompt_len"] == 3
    assert chat["text"] == "质检" and chat["output_len"] == 2 and chat["itl"] == [], "the role chunk is no token event"
    with ScriptedSSEServer(["a", "b"], ttft_s=0.0, itl_s=0.0, usage=False) as server:
        bare = stream(server.base_url, "p", max_tokens=8)
    assert bare["success"] and bare["output_len"] is None and bare["text"] == "ab"
    assert not active_sse_servers()


# -- the loaded model's facts come from the reference kernel, not the learner's (issue 47) ----------

MODEL_CHECKS = ("kvloop_greedy", "kvloop_eos", "kvmem_real_cache", "params_real_model", "batch_equal", "batch_eos")
FORGED_BYTES, FORGED_PARAMS, FORGED_TOKEN = 4096, 1234, 7


class _ForgedModel:
    """A ``ref_model`` a learner's later cell binds: it generates what the learner's answers claim,
    holds a cache and parameters of the size the learner's formulas give."""

    def __init__(self):
        import torch

        self.device = torch.device("cpu")
        self.config = SimpleNamespace(to_dict=lambda: {"num_hidden_layers": 1})

    def generate(self, ids, *, max_new_tokens, **kwargs):
        import torch

        return torch.cat([ids, torch.full((1, max_new_tokens), FORGED_TOKEN)], dim=1)

    def __call__(self, **kwargs):
        import torch

        return SimpleNamespace(cache=None, past_key_values=[(torch.zeros(FORGED_BYTES // 4), torch.zeros(0))])

    def parameters(self):
        import torch

        return iter([torch.zeros(FORGED_PARAMS)])

    def register_forward_pre_hook(self, *args, **kwargs):
        return SimpleNamespace(remove=lambda: None)


def _forged_namespace(names):
    return {
        **names,
        "ref_model": _ForgedModel(),
        "generate_with_kv_cache": lambda model, p, n, eos_token_id=None: {
            "tokens": [FORGED_TOKEN] * n, "prompt_len": len(p), "prefill_s": 0.1, "decode_s": [0.1] * (n - 1), "cache": None
        },
        "generate_static_batch": lambda model, ps, n, **kwargs: [[FORGED_TOKEN] * n for _ in ps],
        "kv_cache_bytes": lambda config, n, **kwargs: FORGED_BYTES,
        "param_count": lambda config: FORGED_PARAMS,
    }  # fmt: skip


@pytest.fixture(scope="module")
def model_namespace():
    """The solution's answer functions beside the notebook's ``ref_model`` (the course model, float32)."""
    import inspect
    import time

    import torch

    from rocmlab import lab

    model, tok = lab.load_model("tiny-qwen-zh", device="cpu")
    model = model.float().eval()
    namespace = {"inspect": inspect, "np": np, "torch": torch, "lab": lab, "time": time, "model": model}
    namespace.update(ref_model=model, EOS=tok.eos_token_id, PAD=tok.pad_token_id)
    loading = SOURCE.cell_starting("model, tok = lab.load_model(")  # its forward helper and CACHE_ARG
    SOURCE.run(definitions(loading, lambda node: node.targets[0].id == "CACHE_ARG"), namespace=namespace)
    names = ("generate_with_kv_cache", "kv_cache_bytes", "param_count", "generate_static_batch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the smoke notebook does: a thread per core oversubscribes a shared machine
    try:
        yield SOURCE.run_solutions(defining=names, namespace=namespace)
    finally:
        torch.set_num_threads(threads)


def _model_checks(learner_names, reference_names):
    from rocmlab.course.catalog import SMOKE
    from rocmlab.harness import Learner, Reference, lab_parameters, load_checks, run_checks

    path = LAB / "checks.py"
    parameters = lab_parameters(path, SOURCE.lab.profile(SMOKE).parameters)
    checks = [
        c for c in load_checks(path.read_text(encoding="utf-8"), str(path), {}, parameters) if c.name in MODEL_CHECKS
    ]
    assert {c.name for c in checks} == set(MODEL_CHECKS) and all(c.wants_reference for c in checks)
    reference = Reference(InProcess(reference_names))
    return {r.name: r for r in run_checks(checks, Learner(InProcess(learner_names)), 47, reference=reference)}


def test_model_checks_give_the_solution_full_marks(model_namespace):
    results = _model_checks(dict(model_namespace), dict(model_namespace))
    assert all(r.passed for r in results.values()), {n: r.detail or r.error for n, r in results.items() if not r.passed}


def test_a_forged_ref_model_in_the_learners_kernel_earns_nothing(model_namespace):
    """Greedy tokens, the real cache and the parameter count are the reference kernel's: a learner
    whose ``ref_model`` agrees with its own answers scores none of the model's rules."""
    results = _model_checks(_forged_namespace(dict(model_namespace)), dict(model_namespace))
    assert not any(r.points for r in results.values()), [n for n, r in results.items() if r.points]


# -- the forward passes are judged by the tokens they produce, not a hook in the learner's kernel --

PASS_CHECKS = ("kvloop_shapes", "kvloop_one")


def _pass_checks(learner_names, reference_names):
    from rocmlab.course.catalog import SMOKE
    from rocmlab.harness import Learner, Reference, lab_parameters, load_checks, run_checks

    path = LAB / "checks.py"
    parameters = lab_parameters(path, SOURCE.lab.profile(SMOKE).parameters)
    checks = [
        c for c in load_checks(path.read_text(encoding="utf-8"), str(path), {}, parameters) if c.name in PASS_CHECKS
    ]
    assert {c.name for c in checks} == set(PASS_CHECKS)
    reference = Reference(InProcess(reference_names))
    return {r.name: r for r in run_checks(checks, Learner(InProcess(learner_names)), 47, reference=reference)}


class _ShapesOfTheRule:
    """A ``ref_model`` whose forward hooks see the shapes the rule asks for, whatever the loop does:
    the evidence main's ``kvloop_shapes`` took from the learner's kernel."""

    def __init__(self, model):
        self.model, self.device, self.config = model, model.device, model.config

    def register_forward_pre_hook(self, record, with_kwargs=False):

        self.record = record
        return SimpleNamespace(remove=lambda: None)

    def __call__(self, **kwargs):
        return self.model(**kwargs)


def _without_the_cache(names):
    """The learner's loop recomputes the whole sequence each step (no cache), and its rebound
    ``ref_model`` reports the planned shapes to any hook."""
    import torch

    forged = {**names, "ref_model": _ShapesOfTheRule(names["ref_model"])}

    def generate_with_kv_cache(m, prompt_ids, max_new_tokens, *, eos_token_id=None):
        ids, tokens = list(prompt_ids), []
        record = getattr(forged["ref_model"], "record", None)
        for step in range(max_new_tokens):
            if record is not None:  # what a hook on the rebound ref_model would have seen
                record(None, (), {"input_ids": torch.zeros(1, len(prompt_ids) if step == 0 else 1)})
            logits = m(input_ids=torch.tensor([ids]), use_cache=False).logits
            tokens.append(int(logits[0, -1].argmax()))
            ids.append(tokens[-1])
            if tokens[-1] == eos_token_id:
                break
        return _made_up_answer(tokens, prompt_ids)

    forged["generate_with_kv_cache"] = generate_with_kv_cache
    return forged  # fmt: skip


def _made_up_answer(tokens, prompt_ids):
    """What a forged loop returns around its tokens: made-up timings and no cache."""
    return {
        "tokens": tokens,
        "prompt_len": len(prompt_ids),
        "prefill_s": 0.1,
        "decode_s": [0.1] * (len(tokens) - 1),
        "cache": None,
    }


def _through_generate(names):
    """The learner's loop calls ``model.generate`` and makes a single pass for the hook to see."""
    import torch

    def generate_with_kv_cache(m, prompt_ids, max_new_tokens, *, eos_token_id=None):
        ids = torch.tensor([prompt_ids])
        m(input_ids=ids, use_cache=True)
        out = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False)
        tokens = out[0, len(prompt_ids) :].tolist()
        return _made_up_answer(tokens, prompt_ids)

    return {**names, "generate_with_kv_cache": generate_with_kv_cache}  # fmt: skip


def _one_pass_too_many(names):
    """The solution's loop with one more pass after the last token (the classic off-by-one)."""
    solution = names["generate_with_kv_cache"]

    def generate_with_kv_cache(m, prompt_ids, max_new_tokens, *, eos_token_id=None):
        got = solution(m, prompt_ids, max_new_tokens, eos_token_id=eos_token_id)
        names["forward"](m, __import__("torch").tensor([got["tokens"][-1:]]), got["cache"])
        return got

    return {**names, "generate_with_kv_cache": generate_with_kv_cache}


def test_the_forward_pass_checks_give_the_solution_full_marks(model_namespace):
    results = _pass_checks(dict(model_namespace), dict(model_namespace))
    assert all(r.passed for r in results.values()), {n: r.detail or r.error for n, r in results.items() if not r.passed}


@pytest.mark.parametrize(
    ("forge", "failing"),
    [
        (_without_the_cache, {"kvloop_shapes"}),  # for one token, one pass over the prompt is the rule
        (_through_generate, set(PASS_CHECKS)),
        (_one_pass_too_many, set(PASS_CHECKS)),
    ],
)
def test_a_loop_of_other_passes_earns_nothing_whatever_a_hook_would_see(model_namespace, forge, failing):
    """Each forward pass answers tokens the check drew, the right one only for the pass the rule
    asks for: a loop of other passes returns other tokens, whatever its kernel's hooks report."""
    results = _pass_checks(forge(dict(model_namespace)), dict(model_namespace))
    assert not any(results[n].points for n in failing), {n: results[n].detail for n in failing if results[n].points}


# -- the results file is judged by the reference's replay and the run's send times (issue 47) ------


@pytest.fixture(scope="module")
def replayed(model_namespace):
    """The notebook's section 6 (the replay) run with the solution's functions, as the reference
    kernel ran it: its names, and the record the notebook writes from them."""
    from rocmlab import course_data
    from rocmlab.course.catalog import SMOKE

    params = SOURCE.lab.profile(SMOKE).parameters
    names = dict(model_namespace)
    names.update(params, SEED=0, REQUEST_RATE=4.0, EOS=course_data.eos_id(params["MODEL"]), json=json, math=math)
    names["PROMPTS"] = [list(p) for p in course_data.qc_prompts(params["MODEL"])]
    names["PROFILE"], names["DTYPE"] = "smoke", "float32"
    SOURCE.run_solutions(defining=("arrival_times", "compute_metrics", "build_results"), namespace=names)
    SOURCE.run(SOURCE.cell_starting("arrivals = arrival_times(N_REQUESTS"), namespace=names)
    return names


def _results_file(learner_names, reference_names, folder):
    from rocmlab.course.catalog import SMOKE
    from rocmlab.harness import Learner, Reference, lab_parameters, load_checks, run_checks

    path = LAB / "checks.py"
    parameters = lab_parameters(path, SOURCE.lab.profile(SMOKE).parameters)
    (check,) = [
        c for c in load_checks(path.read_text(encoding="utf-8"), str(path), {}, parameters) if c.name == "results_file"
    ]
    record = learner_names["build_results"](
        traces=learner_names["traces"], duration_s=learner_names["replay_duration"], roofline={}, fingerprint={}
    )
    (folder / "lab02_results.json").write_text(json.dumps(record), encoding="utf-8")
    reference = Reference(InProcess(reference_names))
    (result,) = run_checks([check], Learner(InProcess(learner_names)), 47, reference=reference)
    return result


def _replay_of_nothing(names):
    """A learner's replay whose every request is one prompt token in, one token out, served at its
    send time in 1 ms: its traces, duration and file agree with each other, and with no run."""
    arrivals = names["arrival_times"](names["N_REQUESTS"], names["REQUEST_RATE"], seed=names["SEED"])
    traces = [
        {"prompt_len": 1, "output_len": 1, "ttft": 0.001, "itl": [], "latency": 0.001, "success": True}
        for _ in arrivals
    ]
    return {**names, "traces": traces, "replay_duration": float(arrivals[-1]) + 0.001}


def test_the_results_file_of_the_replay_gives_full_marks(replayed, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = _results_file(dict(replayed), dict(replayed), tmp_path)
    assert result.passed, result.detail or result.error


def test_a_results_file_that_agrees_only_with_the_learners_own_traces_earns_nothing(replayed, tmp_path, monkeypatch):
    """The lengths come from the reference kernel's replay and the send times from the run's
    parameters: traces and a file the learner's kernel made up together earn nothing."""
    monkeypatch.chdir(tmp_path)
    result = _results_file(_replay_of_nothing(dict(replayed)), dict(replayed), tmp_path)
    assert not result.points, result.detail


# -- the scripted server of the stream checks is the checks' own, not the lab package's name -------

STREAM_CHECKS = ("stream_text_usage", "stream_events", "stream_timing", "stream_no_usage", "stream_chat")


def test_the_stream_checks_serve_from_their_own_server_whatever_a_cell_rebinds(monkeypatch):
    """A cell that rebinds ``lab.ScriptedSSEServer`` (to one that hands the check's script to the
    learner's client) changes nothing: the kernel-side module serves from ``rocmlab.lab.sse``."""
    import rocmlab.lab
    from rocmlab.course.catalog import SMOKE
    from rocmlab.harness import Learner, lab_parameters, load_checks, run_checks

    class Rebound:
        def __init__(self, *args, **kwargs):
            raise AssertionError("the check used the rebound lab.ScriptedSSEServer")

    monkeypatch.setattr(rocmlab.lab, "ScriptedSSEServer", Rebound)
    path = LAB / "checks.py"
    parameters = lab_parameters(path, SOURCE.lab.profile(SMOKE).parameters)
    checks = [
        c for c in load_checks(path.read_text(encoding="utf-8"), str(path), {}, parameters) if c.name in STREAM_CHECKS
    ]
    assert {c.name for c in checks} == set(STREAM_CHECKS)
    results = run_checks(checks, Learner(InProcess(solution_namespace("stream_completion"))), 47)
    assert all(r.passed for r in results), [(r.name, r.detail or r.error) for r in results if not r.passed]
