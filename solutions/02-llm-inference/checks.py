"""Lab 02's hidden checks, run by the trusted harness (rocmlab.harness), outside the learner's kernel.

References are computed here from the rules stated in the lab's prose. Where a rule is about the
loaded model (greedy tokens, the real KV cache, the real parameter count), the fact comes from the
trusted reference kernel (``reference``: the lab's solution, the same model on the same machine),
never from the learner's kernel, whose names any later cell may rebind. Inputs come from the
learner's seed (``variant``), beside fixed edge cases.
"""

import json
import math
import socket

import numpy as np

from rocmlab import course_data
from rocmlab.check_compare import is_close, learner_says
from rocmlab.harness import check, mistake

RTOL = 1e-9  # the references are computed from the same inputs, in float64


# ---------------------------------------------------------------- 02-metrics-1 (3 points)


def _word(p):
    return str(int(p)) if int(p) == p else str(p)


def ref_metrics(traces, duration_s, *, percentiles=(50, 90, 99), slo_ms=None, tokenize=None):
    """vLLM's calculate_metrics as the lab's contract states it, written again here."""
    ok, counts = [], []
    for t in traces:
        if not t["success"]:
            continue
        n = t["output_len"] or len(tokenize(t.get("text") or ""))
        ok.append(t)
        counts.append(n)
    tpots = [(t["latency"] - t["ttft"]) / (n - 1) if n > 1 else None for t, n in zip(ok, counts)]
    series = {
        "ttft": [t["ttft"] for t in ok],
        "tpot": [x for x in tpots if x is not None],
        "itl": [g for t in ok for g in t["itl"]],
        "e2el": [t["latency"] for t in ok],
    }
    total_in, total_out = sum(t["prompt_len"] for t in ok), sum(counts)
    out = {
        "completed": len(ok),
        "failed": len(traces) - len(ok),
        "total_input": total_in,
        "total_output": total_out,
        "duration_s": duration_s,
        "request_throughput": len(ok) / duration_s,
        "output_throughput": total_out / duration_s,
        "total_token_throughput": (total_in + total_out) / duration_s,
        "request_goodput": None,
    }
    for name, values in series.items():
        ms = np.asarray(values or [0.0], dtype=float) * 1000
        out[f"mean_{name}_ms"] = float(ms.mean())
        out[f"median_{name}_ms"] = float(np.median(ms))
        out[f"std_{name}_ms"] = float(ms.std())
        for p in percentiles:
            out[f"p{_word(p)}_{name}_ms"] = float(np.percentile(ms, p))
    if slo_ms:
        good = 0
        for t, tpot in zip(ok, tpots):
            value = {"ttft": t["ttft"], "tpot": tpot or 0.0, "e2el": t["latency"]}
            good += all(value[k] * 1000 <= limit for k, limit in slo_ms.items())
        out["request_goodput"] = good / duration_s
    return out


def _trace(rng, *, success=True, n=None):
    """A request trace; its events may bundle several tokens, so len(itl) need not be n - 1."""
    n = rng.randint(1, 14) if n is None else n
    events = rng.randint(1, n) if n else rng.randint(1, 4)
    ttft = round(rng.uniform(0.02, 0.9), 4)
    itl = [round(rng.uniform(0.004, 0.25), 4) for _ in range(events - 1)]
    return {
        "prompt_len": rng.randint(3, 300),
        "output_len": n,
        "ttft": ttft,
        "itl": itl,
        "latency": ttft + sum(itl),
        "success": success,
    }


def _traces(rng, count=None):
    out = [_trace(rng, success=rng.random() < 0.8) for _ in range(count or rng.randint(6, 30))]
    out[0]["success"] = True
    return out


def _percentiles(rng):
    return rng.choice([(50, 90, 99), (25, 75, 99.9), (50, 95), (10, 50, 90, 99, 99.9)])


def _metrics_case(learner, rng, keys, **kwargs):
    traces, duration = _traces(rng), round(rng.uniform(1.0, 30.0), 3)
    percentiles = _percentiles(rng)
    want = ref_metrics(traces, duration, percentiles=percentiles, **kwargs)
    got = learner.call("compute_metrics", traces, duration, percentiles=percentiles, **kwargs)
    assert isinstance(got, dict), f"a dict, got {type(got).__name__}"
    for key in keys(percentiles):
        assert key in got, f"missing key {key}"
        assert is_close(got[key], want[key], rtol=RTOL), f"{key}: expected {want[key]}, got {got[key]!r}"


def _stat_keys(name):
    return lambda ps: (
        [f"mean_{name}_ms", f"median_{name}_ms", f"std_{name}_ms"] + [f"p{_word(p)}_{name}_ms" for p in ps]
    )


@check(
    "02-metrics-1",
    points=0.5,
    en="only successful requests count: completed, failed, total_input, total_output",
    zh="只统计成功的请求：completed、failed、total_input、total_output",
)
def metrics_counts(learner, variant):
    rng = variant.random
    for _ in range(2):
        _metrics_case(learner, rng, lambda ps: ["completed", "failed", "total_input", "total_output"])


@mistake(
    en="TPOT divided by output_len (the first token counted twice) and taken for one-token requests too",
    zh="TPOT 除以 output_len（第一个 token 算了两次），一个 token 的请求也算进去",
    code="""
_right_compute_metrics = compute_metrics


def compute_metrics(traces, duration_s, *, percentiles=(50, 90, 99), slo_ms=None, tokenize=None):
    out = _right_compute_metrics(traces, duration_s, percentiles=percentiles, slo_ms=slo_ms, tokenize=tokenize)
    ok = [t for t in traces if t["success"]]
    lens = [t["output_len"] or len(tokenize(t.get("text") or "")) for t in ok]
    ms = np.asarray([(t["latency"] - t["ttft"]) / n for t, n in zip(ok, lens)] or [0.0]) * 1000
    out |= {"mean_tpot_ms": float(ms.mean()), "median_tpot_ms": float(np.median(ms)), "std_tpot_ms": float(ms.std())}
    for p in percentiles:
        out[f"p{int(p) if int(p) == p else p}_tpot_ms"] = float(np.percentile(ms, p))
    return out
""",
)
@check(
    "02-metrics-1",
    points=0.5,
    en="TPOT = (latency - ttft) / (output_len - 1), only for requests with output_len > 1",
    zh="TPOT = (latency − ttft)/(output_len − 1)，只对 output_len > 1 的请求计算",
)
def metrics_tpot(learner, variant):
    rng = variant.random
    for _ in range(2):
        _metrics_case(learner, rng, _stat_keys("tpot"))


@check(
    "02-metrics-1",
    points=0.25,
    en="ITL pools the gaps of all successful requests into one list",
    zh="ITL 把所有成功请求的间隔合并成一个列表再统计",
)
def metrics_itl(learner, variant):
    rng = variant.random
    for _ in range(2):
        _metrics_case(learner, rng, _stat_keys("itl"))


@check(
    "02-metrics-1",
    points=0.25,
    en="throughputs are totals divided by duration_s",
    zh="吞吐 = 总数 / duration_s",
)
def metrics_throughput(learner, variant):
    keys = ["duration_s", "request_throughput", "output_throughput", "total_token_throughput"]
    _metrics_case(learner, variant.random, lambda ps: keys)


@check(
    "02-metrics-1",
    points=0.5,
    en="mean, median, population std and each percentile of ttft and e2el in ms, keyed p99 or p99.9",
    zh="ttft 与 e2el 的均值、中位数、总体标准差和各分位数（毫秒），键名为 p99 或 p99.9",
)
def metrics_statistics(learner, variant):
    rng = variant.random
    for _ in range(2):
        _metrics_case(learner, rng, lambda ps: _stat_keys("ttft")(ps) + _stat_keys("e2el")(ps))


@check(
    "02-metrics-1",
    points=0.25,
    en="an empty list counts as [0] (no request with output_len > 1, no gaps)",
    zh="空列表按 [0] 计算（没有 output_len > 1 的请求、没有间隔）",
    counts_with="metrics_statistics",
)
def metrics_empty(learner, variant):
    rng = variant.random
    traces = [_trace(rng, n=1) for _ in range(rng.randint(1, 5))]
    for t in traces:
        t["itl"], t["latency"] = [], t["ttft"]
    got = learner.call("compute_metrics", traces, 2.0, percentiles=(50, 99))
    assert isinstance(got, dict)
    for name in ("tpot", "itl"):
        for key in _stat_keys(name)((50, 99)):
            assert is_close(got.get(key), 0.0, rtol=RTOL), f"{key}: expected 0.0, got {got.get(key)!r}"


@check(
    "02-metrics-1",
    points=0.25,
    en="goodput: None without SLOs, else successful requests meeting every SLO / duration_s",
    zh="goodput：没有 SLO 时为 None，否则为满足全部 SLO 的成功请求数 / duration_s",
)
def metrics_goodput(learner, variant):
    rng = variant.random
    traces, duration = _traces(rng), 5.0
    got = learner.call("compute_metrics", traces, duration)
    assert isinstance(got, dict) and "request_goodput" in got and got["request_goodput"] is None, "None without SLOs"
    for _ in range(3):
        keys = rng.sample(["ttft", "tpot", "e2el"], rng.randint(1, 3))
        slo = {
            k: float(rng.choice({"ttft": [200, 400, 600], "tpot": [40, 80, 150], "e2el": [600, 1200]}[k])) for k in keys
        }
        want = ref_metrics(traces, duration, slo_ms=slo)["request_goodput"]
        got = learner.call("compute_metrics", traces, duration, slo_ms=slo)
        assert isinstance(got, dict) and is_close(got.get("request_goodput"), want, rtol=RTOL), (
            f"slo {slo}: expected {want}"
        )


@check(
    "02-metrics-1",
    points=0.25,
    en="a successful request without output_len (None or 0) counts len(tokenize(text))",
    zh="没有 output_len（None 或 0）的成功请求用 len(tokenize(text)) 计数",
)
def metrics_retokenize(learner, variant):
    rng = variant.random
    words = ["焊缝", "气孔", "weld", "crack", "ok", "返修", "surface", "裂纹"]
    traces = _traces(rng, rng.randint(4, 10))
    for t in rng.sample(traces, 3):
        t["output_len"] = rng.choice([None, 0])
        t["text"] = " ".join(rng.choice(words) for _ in range(rng.randint(1, 12)))
    for t in traces:
        t.setdefault("text", "")
    want = ref_metrics(traces, 3.0, tokenize=str.split)
    got = learner.eval("compute_metrics(__t, 3.0, tokenize=str.split)", __t=traces)
    assert isinstance(got, dict)
    for key in ("total_output", "output_throughput", "mean_tpot_ms", "median_tpot_ms"):
        assert is_close(got.get(key), want[key], rtol=RTOL), f"{key}: expected {want[key]}, got {got.get(key)!r}"


@check(
    "02-metrics-1",
    points=0.25,
    en="ValueError for duration_s <= 0, for an uncountable request (naming its index) and for an unknown SLO key",
    zh="duration_s <= 0、无法计数的请求（信息写出序号）、未知的 SLO 键都抛出 ValueError",
)
def metrics_errors(learner, variant):
    rng = variant.random
    traces = [_trace(rng) for _ in range(rng.randint(3, 8))]
    for duration in (0.0, -rng.uniform(0.1, 5.0)):
        raised = learner.raised("compute_metrics(__t, __d)", __t=traces, __d=duration)
        assert raised is not None and raised.is_a("ValueError"), f"duration_s={duration}: {raised}"
    index = rng.randrange(1, len(traces))
    traces[index] = dict(traces[index], output_len=None, text="abc")
    raised = learner.raised("compute_metrics(__t, 1.0)", __t=traces)
    assert raised is not None and raised.is_a("ValueError"), f"no count, no tokenize: {raised}"
    assert str(index) in raised.message, f"the message names request {index}: {raised.message!r}"
    raised = learner.raised("compute_metrics(__t, 1.0, slo_ms={'latency': 100.0})", __t=[_trace(rng)])
    assert raised is not None and raised.is_a("ValueError"), f"unknown SLO key: {raised}"


# ---------------------------------------------------------------- 02-arrivals-1 (2 points)


@check(
    "02-arrivals-1",
    points=1,
    en="the first send time is 0, the rest accumulate one gamma draw from default_rng(seed), as a float array",
    zh="第一个发送时刻为 0，其余由 default_rng(seed) 的一次 gamma 抽取累加得到，返回 float 数组",
)
def arrivals_gamma(learner, variant):
    rng = variant.random
    for _ in range(3):
        n, rate = rng.randint(2, 400), round(rng.uniform(0.5, 40.0), 2)
        burstiness, seed = rng.choice([0.25, 0.5, 1.0, 2.0, 4.0]), rng.randint(0, 10**6)
        gaps = np.random.default_rng(seed).gamma(shape=burstiness, scale=1 / (rate * burstiness), size=n - 1)
        want = np.concatenate([[0.0], np.cumsum(gaps)])
        got = learner.call("arrival_times", n, rate, burstiness=burstiness, seed=seed)
        assert isinstance(got, np.ndarray) and got.dtype.kind == "f", f"a float numpy array, got {type(got).__name__}"
        assert got.shape == (n,) and np.allclose(got, want, rtol=1e-12, atol=0), f"n={n}, rate={rate}, seed={seed}"


@check(
    "02-arrivals-1",
    points=0.5,
    en="rate = inf gives all zeros (and one request is [0.0])",
    zh="rate 为 inf 时全为 0（一个请求时为 [0.0]）",
    counts_with="arrivals_gamma",
)
def arrivals_edges(learner, variant):
    n = variant.random.randint(2, 50)
    got = learner.eval("arrival_times(__n, float('inf'))", __n=n)
    assert isinstance(got, np.ndarray) and got.shape == (n,) and not got.any(), f"got {got!r}"
    got = learner.call("arrival_times", 1, 3.0, seed=variant.random.randint(0, 99))
    assert isinstance(got, np.ndarray) and got.shape == (1,) and got[0] == 0.0, f"got {got!r}"


@check(
    "02-arrivals-1",
    points=0.5,
    en="n < 1, rate <= 0 or burstiness <= 0 raises ValueError",
    zh="n < 1、rate <= 0 或 burstiness <= 0 时抛出 ValueError",
)
def arrivals_errors(learner, variant):
    rng = variant.random
    cases = [
        (0, 1.0, 1.0),
        (-rng.randint(1, 5), 1.0, 1.0),
        (3, 0.0, 1.0),
        (3, -rng.uniform(0.1, 3), 1.0),
        (3, 2.0, 0.0),
        (3, 2.0, -0.5),
    ]
    for n, rate, k in cases:
        raised = learner.raised("arrival_times(__n, __r, burstiness=__k)", __n=n, __r=rate, __k=k)
        assert raised is not None and raised.is_a("ValueError"), f"n={n}, rate={rate}, burstiness={k}: {raised}"


# ---------------------------------------------------------------- the loaded model, asked by the checks


def _model():
    return PARAMETERS["MODEL"]  # noqa: F821 (the run's, from the harness)


def _eos():
    """The notebook's ``EOS``, from the run's model on the harness's side (the kernel's may be rebound)."""
    return course_data.eos_id(_model())


def _prompt(rng, *, low=4, high=40):
    """A prefix of one of the notebook's ``PROMPTS``, tokenized here from the course's data."""
    prompt = list(rng.choice(course_data.qc_prompts(_model())))
    return prompt[: rng.randint(min(low, len(prompt)), min(high, len(prompt)))]


def _greedy(reference, prompts, n, eos):
    """The reference kernel's ``model.generate`` greedy tokens of each prompt."""
    pad = course_data.pad_id(_model())
    refs = reference.run("greedy", prompts, n, eos, pad)
    decoded = type(refs) is list and len(refs) == len(prompts)
    assert decoded and all(type(r) is list and 0 < len(r) <= n and all(type(t) is int for t in r) for r in refs), (
        f"the reference greedy decoding of {len(prompts)} prompts: {refs!r}"
    )
    return refs


def _kv_run(learner, reference, prompt, n, eos):
    """The learner's KV loop on ``prompt`` (its record and keys), and the reference's tokens."""
    got, keys = learner.run("kv_loop", prompt, n, eos)
    return got, _greedy(reference, [prompt], n, eos)[0], keys


@check(
    "02-kvloop-1",
    points=1,
    en="the tokens equal model.generate's greedy output",
    zh="生成的 token 与 model.generate 的贪心输出逐个相同",
)
def kvloop_greedy(learner, variant, reference):
    rng = variant.random
    eos = _eos()
    for _ in range(2):
        prompt = _prompt(rng)
        got, ref, _ = _kv_run(learner, reference, prompt, rng.randint(4, 12), eos)
        assert got.get("tokens") == ref, f"expected {ref}, got {got.get('tokens')!r}"


def _scripted_run(learner, rng, n):
    """The learner's KV loop for ``n`` tokens on a model whose passes answer tokens drawn here: the
    drawn ``right`` token of each pass only when the pass is the one the rule asks for, its
    ``wrong`` token otherwise (``_ScriptedModel`` in the kernel). Returns the prompt, the learner's
    record and the two token lists: the forward passes are judged by the tokens they produced."""
    model, prompt = _model(), _prompt(rng)
    eos = _eos()
    pool = [t for t in range(course_data.vocab_size(model)) if t not in (eos, course_data.pad_id(model))]
    drawn = rng.sample(pool, 2 * n)
    right, wrong = drawn[:n], drawn[n:]
    return prompt, learner.run("kv_loop_scripted", prompt, eos, right, wrong), right, wrong


def _passes_as_planned(prompt, got, right, wrong):
    """Which pass (if any) the learner's tokens show was not the one the rule asks for."""
    tokens = got.get("tokens") if isinstance(got, dict) else None
    assert type(tokens) is list, f"tokens {tokens!r}"
    for k, token in enumerate(tokens[: len(right)]):
        if k == 0:
            said = learner_says(
                "the first forward pass was not one pass over the whole prompt, shape (1, prompt length)",
                "第一次前向不是对整个提示词的一次前向，形状应为 (1, 提示词长度)",
            )
        else:
            said = learner_says(
                f"decode step {k} did not feed one token, shape (1, 1), with the cache the pass before returned",
                f"第 {k} 个 decode 步没有只输入一个 token（形状 (1, 1)）并传入上一次前向返回的 cache",
            )
        assert token != wrong[k], f"{said}prompt of {len(prompt)}, pass {k + 1}"
        assert token == right[k], (
            learner_says(
                f"token {k + 1} is not the argmax of the last position of forward pass {k + 1}'s logits",
                f"第 {k + 1} 个 token 不是第 {k + 1} 次前向 logits 最后一个位置的 argmax",
            )
            + f"got {token}"
        )
    assert len(tokens) == len(right), f"{len(tokens)} tokens for max_new_tokens={len(right)}"


@check(
    "02-kvloop-1",
    points=0.75,
    en="one prefill pass over the whole prompt, then one pass of a single token per step (KV cache reused)",
    zh="对整个提示词做一次 prefill，之后每步只输入一个 token（复用 KV cache）",
)
def kvloop_shapes(learner, variant):
    rng = variant.random
    prompt, got, right, wrong = _scripted_run(learner, rng, rng.randint(4, 10))
    _passes_as_planned(prompt, got, right, wrong)


@check(
    "02-kvloop-1",
    points=0.5,
    en="decoding stops right after eos_token_id, which is included",
    zh="生成出 eos_token_id 后立即停止，eos 计入结果",
)
def kvloop_eos(learner, variant, reference):
    rng = variant.random
    prompt, n = _prompt(rng), 12
    _, free, _ = _kv_run(learner, reference, prompt, n, _eos())
    candidates = [i for i, t in enumerate(free) if i >= 1 and free.index(t) == i]
    assert free, "the reference generated nothing"
    stop = free[rng.choice(candidates)] if candidates else free[0]
    got, ref, _ = _kv_run(learner, reference, prompt, n, stop)
    assert ref[-1] == stop, "the reference stops at the chosen eos"
    assert got.get("tokens") == ref, f"eos {stop}: expected {ref}, got {got.get('tokens')!r}"


@check(
    "02-kvloop-1",
    points=0.5,
    en="returns tokens, prompt_len, prefill_s > 0 and one positive decode_s per decode step (len(tokens) - 1)",
    zh="返回 tokens、prompt_len、大于 0 的 prefill_s，以及每个 decode 步一个正的 decode_s（共 len(tokens) − 1 个）",
)
def kvloop_record(learner, variant, reference):
    rng = variant.random
    prompt = _prompt(rng)
    got, _, keys = _kv_run(learner, reference, prompt, rng.randint(3, 9), _eos())
    assert keys is not None and {"tokens", "prompt_len", "prefill_s", "decode_s", "cache"} <= set(keys), f"keys {keys}"
    tokens, decode = got["tokens"], got["decode_s"]
    assert got["prompt_len"] == len(prompt), f"prompt_len {got['prompt_len']!r}, prompt of {len(prompt)}"
    assert isinstance(got["prefill_s"], float) and got["prefill_s"] > 0, f"prefill_s {got['prefill_s']!r}"
    assert isinstance(decode, list) and len(decode) == len(tokens) - 1, f"{len(tokens)} tokens, decode_s {decode!r}"
    assert all(isinstance(s, float) and s > 0 for s in decode), f"decode_s {decode!r}"


@check(
    "02-kvloop-1",
    points=0.25,
    en="max_new_tokens = 1 gives one token and no decode step",
    zh="max_new_tokens = 1 时只有一个 token、没有 decode 步",
)
def kvloop_one(learner, variant):
    prompt, got, right, wrong = _scripted_run(learner, variant.random, 1)
    _passes_as_planned(prompt, got, right, wrong)
    assert got.get("decode_s") == [], f"decode_s {got.get('decode_s')!r}"


# ---------------------------------------------------------------- 02-kvmem-1 (2 points)


def _config(rng, *, kv=True, head_dim=False):
    heads = rng.choice([8, 12, 14, 16, 32, 40, 64])
    dim = rng.choice([64, 80, 96, 128])
    config = {"num_hidden_layers": rng.randint(1, 96), "num_attention_heads": heads, "hidden_size": heads * dim}
    if kv:
        config["num_key_value_heads"] = rng.choice([d for d in (1, 2, 4, 8, heads) if heads % d == 0])
    if head_dim:
        config["hidden_size"] = heads * (dim + rng.choice([32, 64]))  # so that hidden // heads is not head_dim
        config["head_dim"] = dim
    return config


def _ref_kv(config, n, batch=1, elem=2):
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads") or heads
    dim = config.get("head_dim") or config["hidden_size"] // heads
    return 2 * config["num_hidden_layers"] * kv * dim * elem * n * batch


def _kv_bytes(learner, config, n, batch, elem):
    want = _ref_kv(config, n, batch, elem)
    got = learner.call("kv_cache_bytes", config, n, batch=batch, bytes_per_elem=elem)
    assert type(got) is int and got == want, f"{config}, n={n}, batch={batch}, {elem} B: expected {want}, got {got!r}"


@mistake(
    en="the attention heads counted for a GQA model's cache instead of num_key_value_heads",
    zh="GQA 模型的缓存按注意力头数算，而不是 num_key_value_heads",
    code="""
def kv_cache_bytes(config, n_tokens, *, batch=1, bytes_per_elem=2):
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    return 2 * config["num_hidden_layers"] * heads * head_dim * bytes_per_elem * n_tokens * batch
""",
)
@mistake(
    en="only the keys counted: the factor 2 for K and V left out",
    zh="只算了 K：漏掉了 K 与 V 的系数 2",
    code="""
def kv_cache_bytes(config, n_tokens, *, batch=1, bytes_per_elem=2):
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    return config["num_hidden_layers"] * kv_heads * head_dim * bytes_per_elem * n_tokens * batch
""",
)
@check(
    "02-kvmem-1",
    points=0.75,
    en="bytes = 2 x layers x KV heads x head_dim x bytes_per_elem x n_tokens x batch, an int",
    zh="字节数 = 2 × 层数 × KV 头数 × head_dim × 每元素字节数 × token 数 × batch，整数",
)
def kvmem_formula(learner, variant):
    rng = variant.random
    for _ in range(3):
        _kv_bytes(learner, _config(rng), rng.randint(1, 131072), rng.randint(1, 64), rng.choice([1, 2, 4]))


@check(
    "02-kvmem-1",
    points=0.25,
    en="num_key_value_heads missing or None means MHA (the attention heads)",
    zh="num_key_value_heads 缺省或为 None 时等于注意力头数（MHA）",
)
def kvmem_mha(learner, variant):
    rng = variant.random
    config = _config(rng, kv=False)
    _kv_bytes(learner, config, rng.randint(1, 4096), 1, 2)
    _kv_bytes(learner, config | {"num_key_value_heads": None}, rng.randint(1, 4096), 2, 4)


@check(
    "02-kvmem-1",
    points=0.25,
    en="an explicit head_dim wins over hidden_size // num_attention_heads; None means the quotient",
    zh="给出的 head_dim 优先于 hidden_size // num_attention_heads；为 None 时用该商",
)
def kvmem_head_dim(learner, variant):
    rng = variant.random
    config = _config(rng, head_dim=True)
    _kv_bytes(learner, config, rng.randint(1, 4096), rng.randint(1, 8), 2)
    _kv_bytes(learner, config | {"head_dim": None}, rng.randint(1, 4096), 1, 2)


@check(
    "02-kvmem-1",
    points=0.75,
    en="the formula matches the real KV cache of the loaded model",
    zh="公式与已加载模型的真实 KV cache 字节数一致",
)
def kvmem_real_cache(learner, variant, reference):
    prompt = _prompt(variant.random, low=3, high=60)
    config, real, elem = reference.run("real_cache", prompt)
    assert type(real) is int and real > 0 and type(config) is dict, f"the reference's cache: {real!r}"
    got = learner.call("kv_cache_bytes", config, len(prompt), bytes_per_elem=elem)
    assert got == real, f"{len(prompt)} tokens: the cache holds {real} bytes, the formula gives {got!r}"


# ---------------------------------------------------------------- 02-roofline-1 (2 points)


def _roof(learner, w, kv, ctx, batch, bw):
    want = batch * bw / (w + batch * ctx * kv)
    got = learner.call("decode_roofline", w, kv, ctx, batch, bw)
    assert isinstance(got, float) and math.isclose(got, want, rel_tol=1e-9), f"expected {want}, got {got!r}"


@check(
    "02-roofline-1",
    points=1,
    en="the bound is batch x bandwidth / (weight_bytes + batch x context_tokens x kv_bytes_per_token)",
    zh="上界 = batch × 带宽 / (权重字节数 + batch × 上下文 token 数 × 每 token KV 字节数)",
)
def roofline_decode_formula(learner, variant):
    rng = variant.random
    for _ in range(4):
        _roof(
            learner,
            rng.randint(10**8, 2 * 10**11),
            rng.randint(2**10, 2**19),
            rng.randint(1, 32768),
            rng.randint(1, 2048),
            rng.uniform(0.3e12, 8e12),
        )


@check(
    "02-roofline-1",
    points=0.5,
    en="with batch 1 and no context the bound is bandwidth / weight bytes",
    zh="batch 为 1、没有上下文时上界为 带宽 / 权重字节数",
)
def roofline_decode_weights(learner, variant):
    rng = variant.random
    _roof(learner, rng.randint(10**8, 2 * 10**11), rng.randint(2**10, 2**19), 0, 1, rng.uniform(0.3e12, 8e12))


@check(
    "02-roofline-1",
    points=0.5,
    en="a float, also for integer inputs",
    zh="返回浮点数，输入为整数时也是",
)
def roofline_decode_float(learner, variant):
    rng = variant.random
    _roof(learner, rng.randint(1000, 10**6), rng.randint(1, 100), rng.randint(1, 100), rng.randint(1, 64), 10**9)


# ---------------------------------------------------------------- 02-roofline-2 (3 points)


@check(
    "02-roofline-2",
    points=0.75,
    en="intensity = 2 x n_params x n_tokens / (n_params x bytes_per_param + kv_bytes)",
    zh="强度 = 2 × 参数量 × token 数 / (参数量 × 每参数字节数 + KV 字节数)",
)
def roofline_intensity(learner, variant):
    rng = variant.random
    for _ in range(4):
        n, tokens = rng.randint(10**6, 10**11), rng.randint(1, 8192)
        bpp, kv = rng.choice([0.5, 1, 2, 4]), rng.choice([0, rng.randint(1, 10**11)])
        want = 2 * n * tokens / (n * bpp + kv)
        got = learner.call("forward_intensity", n, tokens, bytes_per_param=bpp, kv_bytes=kv)
        assert isinstance(got, float) and math.isclose(got, want, rel_tol=1e-9), f"expected {want}, got {got!r}"


def _peak(rng):
    return rng.uniform(50e12, 2500e12), rng.uniform(0.5e12, 8e12)


@check(
    "02-roofline-2",
    points=0.5,
    en="ridge = peak_flops / bandwidth",
    zh="脊点 = peak_flops / bandwidth",
)
def roofline_ridge(learner, variant):
    rng = variant.random
    for _ in range(3):
        peak, bw = _peak(rng)
        got = learner.eval("roofline(__i, peak_flops=__p, bandwidth=__b)", __i=rng.uniform(1, 1000), __p=peak, __b=bw)
        assert isinstance(got, dict) and is_close(got.get("ridge"), peak / bw, rtol=RTOL), (
            f"expected {peak / bw}, got {got!r}"
        )


@check(
    "02-roofline-2",
    points=0.5,
    en="attainable_flops = min(peak_flops, intensity x bandwidth)",
    zh="attainable_flops = min(peak_flops, 强度 × bandwidth)",
)
def roofline_attainable(learner, variant):
    rng = variant.random
    peak, bw = _peak(rng)
    for intensity in (rng.uniform(0.1, 0.9) * peak / bw, rng.uniform(1.1, 50) * peak / bw):
        want = min(peak, intensity * bw)
        got = learner.eval("roofline(__i, peak_flops=__p, bandwidth=__b)", __i=intensity, __p=peak, __b=bw)
        assert isinstance(got, dict) and is_close(got.get("attainable_flops"), want, rtol=RTOL), (
            f"expected {want}, got {got!r}"
        )


@check(
    "02-roofline-2",
    points=0.75,
    en="bound is 'memory' below the ridge and 'compute' at or above it",
    zh="强度低于脊点时 bound 为 'memory'，等于或高于时为 'compute'",
)
def roofline_bound(learner, variant):
    rng = variant.random
    peak, bw = _peak(rng)
    ridge = peak / bw
    for intensity, want in (
        (ridge * rng.uniform(0.05, 0.95), "memory"),
        (ridge, "compute"),
        (ridge * rng.uniform(1.05, 20), "compute"),
    ):
        got = learner.eval("roofline(__i, peak_flops=__p, bandwidth=__b)", __i=intensity, __p=peak, __b=bw)
        assert isinstance(got, dict) and got.get("bound") == want, f"intensity/ridge {intensity / ridge:.3f}: {got!r}"


@check(
    "02-roofline-2",
    points=0.5,
    en="peak_flops or bandwidth not above 0 raises ValueError",
    zh="peak_flops 或 bandwidth 不大于 0 时抛出 ValueError",
)
def roofline_errors(learner, variant):
    rng = variant.random
    for peak, bw in ((0.0, 1e12), (-rng.uniform(1, 1e12), 1e12), (1e12, 0.0), (1e12, -rng.uniform(1, 1e12))):
        raised = learner.raised("roofline(1.0, peak_flops=__p, bandwidth=__b)", __p=peak, __b=bw)
        assert raised is not None and raised.is_a("ValueError"), f"peak {peak}, bandwidth {bw}: {raised}"


# ---------------------------------------------------------------- 02-stream-1 (3 points)

WORDS = ["焊缝", "气孔", "", "裂纹", "合格", "返修", "a", "bc", " 表面", "。"]


def _stream(learner, pieces, counts=None, *, ttft=0.0, itl=0.0, usage=True, max_tokens=64, chat=False, plen=0):
    got = learner.run(
        "stream",
        list(pieces),
        None if counts is None else list(counts),
        ttft=ttft,
        itl=itl,
        usage=usage,
        max_tokens=max_tokens,
        chat=chat,
        prompt="写一份质检报告",
        prompt_len=plen,
    )
    assert isinstance(got, dict), f"a dict, got {type(got).__name__}"
    return got


def _plan(counts, max_tokens):
    """(pieces sent, tokens sent): the scripted server's budget (a cut piece is sent whole, its count clipped)."""
    sent, used = 0, 0
    for count in counts:
        take = min(count, max_tokens - used)
        if take <= 0:
            break
        sent, used = sent + 1, used + take
    return sent, used


def _script(rng, n=None):
    pieces = [rng.choice(WORDS) for _ in range(n or rng.randint(3, 8))]
    pieces[0] = pieces[0] or "焊"
    return pieces, [rng.randint(1, 3) for _ in pieces]


@check(
    "02-stream-1",
    points=0.75,
    en="text joins the token events; output_len is usage's completion_tokens, not the number of events",
    zh="text 是各 token 事件文本的拼接；output_len 取 usage 的 completion_tokens，不是事件数",
)
def stream_text_usage(learner, variant):
    rng = variant.random
    pieces, counts = _script(rng)
    plen = rng.randint(1, 99)
    got = _stream(learner, pieces, counts, max_tokens=sum(counts) + rng.randint(0, 5), plen=plen)
    assert got.get("success") is True and got.get("error") is None, f"success and no error: {got}"
    assert got.get("text") == "".join(pieces), f"text {got.get('text')!r}"
    assert got.get("output_len") == sum(counts), f"usage says {sum(counts)}, got {got.get('output_len')!r}"
    assert got.get("prompt_len") == plen, "prompt_len as given"
    budget = rng.randint(1, sum(counts) - 1)
    sent, used = _plan(counts, budget)
    got = _stream(learner, pieces, counts, max_tokens=budget)
    assert got.get("text") == "".join(pieces[:sent]) and got.get("output_len") == used, f"max_tokens {budget}: {got}"


@check(
    "02-stream-1",
    points=0.5,
    en="an event with empty text is a token event; chat's opening role event is not",
    zh="空文本的事件也是 token 事件；chat 开头只带 role 的事件不是",
)
def stream_events(learner, variant):
    rng = variant.random
    pieces, counts = _script(rng, rng.randint(4, 8))
    pieces[rng.randrange(1, len(pieces))] = ""
    got = _stream(learner, pieces, counts)
    assert isinstance(got.get("itl"), list) and len(got["itl"]) == len(pieces) - 1, f"{len(pieces)} events: {got}"
    got = _stream(learner, pieces, counts, chat=True)
    assert isinstance(got.get("itl"), list) and len(got["itl"]) == len(pieces) - 1, f"chat, {len(pieces)} events: {got}"


@check(
    "02-stream-1",
    points=0.75,
    en="events are timestamped on arrival: ttft to the first, itl between, latency to the last token event",
    zh="事件到达时打时间戳：ttft 到第一个、itl 为相邻间隔、latency 到最后一个 token 事件",
)
def stream_timing(learner, variant):
    rng = variant.random
    n = rng.randint(5, 8)
    stall = rng.randrange(1, n - 2)
    ttft, long_gap = rng.choice([0.1, 0.15, 0.2]), 0.3
    gaps = [0.01] * (n - 1)
    gaps[stall] = long_gap
    got = _stream(learner, [f"t{i}" for i in range(n)], ttft=ttft, itl=gaps)
    itl, first, last = got.get("itl"), got.get("ttft"), got.get("latency")
    assert isinstance(itl, list) and len(itl) == n - 1 and all(isinstance(g, float) for g in itl), f"itl {itl!r}"
    assert isinstance(first, float) and ttft - 0.01 <= first < ttft + 0.75, f"ttft near {ttft}: {first!r}"
    assert int(np.argmax(itl)) == stall and itl[stall] >= long_gap - 0.01, f"a stall after event {stall + 1}: {itl}"
    assert isinstance(last, float) and math.isclose(last, first + sum(itl), rel_tol=1e-6), f"latency {last!r}"


@check(
    "02-stream-1",
    points=0.25,
    en="without a usage event output_len is None",
    zh="没有 usage 事件时 output_len 为 None",
)
def stream_no_usage(learner, variant):
    pieces, counts = _script(variant.random)
    got = _stream(learner, pieces, counts, usage=False)
    assert got.get("success") is True and "output_len" in got and got["output_len"] is None, f"got {got}"
    assert got.get("text") == "".join(pieces), f"text {got.get('text')!r}"


@check(
    "02-stream-1",
    points=0.25,
    en="chat=True posts to /v1/chat/completions and takes the text from delta.content",
    zh="chat=True 时发到 /v1/chat/completions，文本取自 delta.content",
)
def stream_chat(learner, variant):
    pieces, counts = _script(variant.random)
    got = _stream(learner, pieces, counts, chat=True)
    assert got.get("success") is True and got.get("text") == "".join(pieces), f"got {got}"
    assert got.get("output_len") == sum(counts), f"usage says {sum(counts)}: {got.get('output_len')!r}"


@check(
    "02-stream-1",
    points=0.5,
    en="a refused connection or an HTTP error is a failed trace with an error, not an exception",
    zh="连接被拒绝或 HTTP 错误时返回失败的轨迹并写明 error，不抛出异常",
    counts_with="stream_text_usage",
)
def stream_failures(learner, variant):
    with socket.socket() as sock:  # a port nobody listens on: bound here, then closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for url in (f"http://127.0.0.1:{port}", None):
        if url is None:
            got = learner.run(
                "stream",
                ["a"],
                None,
                ttft=0.0,
                itl=0.0,
                usage=True,
                max_tokens=4,
                chat=False,
                prompt="p",
                prompt_len=0,
                path="/nowhere",
            )
        else:
            got = learner.eval("stream_completion(__u, 'p', max_tokens=4, timeout_s=5.0)", __u=url)
        assert isinstance(got, dict) and got.get("success") is False, f"{url or 'HTTP 404'}: {got!r}"
        assert isinstance(got.get("error"), str) and got["error"], f"error says why: {got.get('error')!r}"


# ---------------------------------------------------------------- 02-stretch-batch-1 (3 points)

BATCH = "generate_static_batch(ref_model, __ps, __n, pad_token_id=__pad, eos_token_id=__eos)"


def _batch(learner, reference, rng, n, eos, ref_eos=None, rows=None):
    rows = rows or rng.randint(2, 4)
    prompts = []
    while len(prompts) < rows:
        p = _prompt(rng, low=3, high=30)
        if len(p) not in {len(q) for q in prompts}:
            prompts.append(p)
    got, refs = _batch_answer(learner, reference, prompts, n, eos, eos if ref_eos is None else ref_eos)
    return prompts, got, refs


def _batch_answer(learner, reference, prompts, n, eos, ref_eos):
    """The learner's batch of ``prompts``, and the reference kernel's greedy tokens of each."""
    got = learner.eval(BATCH, __ps=prompts, __n=n, __eos=eos, __pad=course_data.pad_id(_model()))
    return got, _greedy(reference, prompts, n, ref_eos)


@check(
    "02-stretch-batch-1",
    points=1.5,
    en="prompts of different lengths batched give each prompt's own greedy tokens",
    zh="不同长度的提示词一起批处理，结果与逐条贪心解码相同",
)
def batch_equal(learner, variant, reference):
    rng = variant.random
    _, got, refs = _batch(learner, reference, rng, rng.randint(4, 8), _eos())
    assert got == refs, f"expected {refs}, got {got!r}"


@check(
    "02-stretch-batch-1",
    points=1,
    en="each row is cut right after its own first eos_token_id (included)",
    zh="每条序列在自己的第一个 eos_token_id 之后截断（含 eos）",
)
def batch_eos(learner, variant, reference):
    rng = variant.random
    prompts, _, free = _batch(learner, reference, rng, 10, _eos(), rows=3)
    row = free[0]
    candidates = [i for i, t in enumerate(row) if i >= 1 and row.index(t) == i]
    stop = row[rng.choice(candidates)] if candidates else row[0]
    got, refs = _batch_answer(learner, reference, prompts, 10, stop, stop)
    assert refs[0][-1] == stop
    assert got == refs, f"eos {stop}: expected {refs}, got {got!r}"


@check(
    "02-stretch-batch-1",
    points=0.5,
    en="without eos_token_id every row has exactly max_new_tokens tokens",
    zh="没有 eos_token_id 时每条序列恰好 max_new_tokens 个 token",
)
def batch_max_tokens(learner, variant, reference):
    rng = variant.random
    n = rng.randint(3, 7)
    _, got, refs = _batch(learner, reference, rng, n, None, ref_eos=_eos())
    assert isinstance(got, list) and len(got) == len(refs), f"one list per prompt: {got!r}"
    for row, ref in zip(got, refs):
        assert isinstance(row, list) and len(row) == n and row[: len(ref)] == ref, f"expected {n} tokens from {ref}"


# ---------------------------------------------------------------- 02-stretch-params-1 (2 points)


def _ref_params(config):
    h, heads = config["hidden_size"], config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    dim = config.get("head_dim") or h // heads
    bias = config.get("model_type") == "qwen2" or bool(config.get("attention_bias"))
    q, kv = heads * dim, kv_heads * dim
    layer = h * q + 2 * h * kv + q * h + (q + 2 * kv if bias else 0) + 3 * h * config["intermediate_size"] + 2 * h
    embed = config["vocab_size"] * h
    return config["num_hidden_layers"] * layer + h + embed + (0 if config.get("tie_word_embeddings") else embed)


def _llama(rng):
    config = _config(rng)
    config.update(
        model_type="llama",
        intermediate_size=rng.randint(2, 40) * 256,
        vocab_size=rng.randint(1000, 160000),
        tie_word_embeddings=rng.random() < 0.5,
    )
    return config


def _params(learner, config):
    want = _ref_params(config)
    got = learner.call("param_count", config)
    assert type(got) is int and got == want, f"{config}: expected {want}, got {got!r}"


@check(
    "02-stretch-params-1",
    points=0.75,
    en="embedding, per-layer q/k/v/o, MLP and norms, and the final norm, for a Llama config",
    zh="Llama 配置：嵌入、每层 q/k/v/o、MLP 与 norm、最后的 norm",
)
def params_llama(learner, variant):
    rng = variant.random
    for _ in range(3):
        _params(learner, _llama(rng))


@check(
    "02-stretch-params-1",
    points=0.5,
    en="q/k/v carry a bias exactly for model_type 'qwen2' or a true attention_bias",
    zh="q/k/v 带偏置当且仅当 model_type 为 'qwen2' 或 attention_bias 为真",
)
def params_bias(learner, variant):
    rng = variant.random
    config = _llama(rng)
    _params(learner, config | {"attention_bias": True})
    _params(learner, config | {"model_type": "qwen2"})
    _params(learner, config | {"attention_bias": False})


@check(
    "02-stretch-params-1",
    points=0.25,
    en="an untied lm_head adds vocab_size x hidden_size",
    zh="不共享的 lm_head 再加 vocab_size × hidden_size",
)
def params_untied(learner, variant):
    config = _llama(variant.random)
    _params(learner, config | {"tie_word_embeddings": False})
    _params(learner, config | {"tie_word_embeddings": True})


@check(
    "02-stretch-params-1",
    points=0.5,
    en="the formula matches the loaded model's real parameter count",
    zh="公式与已加载模型的真实参数量一致",
    counts_with="params_llama",
)
def params_real_model(learner, variant, reference):
    config, real = reference.run("model_size")
    assert type(real) is int and real > 0 and type(config) is dict, f"the reference's model: {real!r}"
    got = learner.call("param_count", config)
    assert got == real, f"the model has {real} parameters, the formula gives {got!r}"


# ---------------------------------------------------------------- 02-stretch-little-1 (2 points)


def _ref_concurrency(intervals):
    start, end = min(s for s, _ in intervals), max(e for _, e in intervals)
    return sum(e - s for s, e in intervals) / (end - start)


def _concurrency(learner, intervals):
    want = _ref_concurrency(intervals)
    got = learner.call("mean_concurrency", intervals)
    assert isinstance(got, float) and math.isclose(got, want, rel_tol=1e-9), f"expected {want}, got {got!r}"


@check(
    "02-stretch-little-1",
    points=1,
    en="the time-averaged number in flight over [earliest start, latest end], intervals in any order",
    zh="[最早开始, 最晚结束] 上的时间平均并发数，区间顺序任意",
)
def little_overlap(learner, variant):
    rng = variant.random
    for _ in range(3):
        starts = [rng.uniform(0, 10) for _ in range(rng.randint(2, 60))]
        intervals = [(s, s + rng.choice([0.0, rng.uniform(0, 3)])) for s in starts]
        intervals[0] = (intervals[0][0], intervals[0][0] + 1.0)
        rng.shuffle(intervals)
        _concurrency(learner, intervals)


@check(
    "02-stretch-little-1",
    points=0.5,
    en="idle gaps count in the span",
    zh="空闲间隙也算在时长里",
)
def little_gaps(learner, variant):
    rng = variant.random
    t, intervals = 0.0, []
    for _ in range(rng.randint(2, 6)):
        length = rng.uniform(0.2, 2)
        intervals.append((t, t + length))
        t += length + rng.uniform(0.5, 3)
    rng.shuffle(intervals)
    _concurrency(learner, intervals)


@check(
    "02-stretch-little-1",
    points=0.5,
    en="an empty list or a zero span raises ValueError",
    zh="列表为空或总时长为 0 时抛出 ValueError",
)
def little_errors(learner, variant):
    t = round(variant.random.uniform(0, 100), 3)
    for intervals in ([], [(t, t)], [(t, t), (t, t)]):
        raised = learner.raised("mean_concurrency(__i)", __i=intervals)
        assert raised is not None and raised.is_a("ValueError"), f"{intervals}: {raised}"


# ---------------------------------------------------------------- 02-stretch-results-1 (3 points)


def _results(learner, rng):
    traces = _traces(rng, rng.randint(3, 8))
    duration = round(rng.uniform(1, 20), 3)
    roofline = {
        "bandwidth_bytes_per_s": rng.randint(10**9, 10**13),
        "bandwidth_source": "test",
        "ratio": 0.5,
        "weight_bytes": rng.randint(10**6, 10**9),
    }
    fingerprint = {"torch": f"2.{rng.randint(4, 12)}.0", "hip": None, "line": "x"}
    got = learner.call("build_results", traces=traces, duration_s=duration, roofline=roofline, fingerprint=fingerprint)
    assert isinstance(got, dict), f"a dict, got {type(got).__name__}"
    return traces, duration, roofline, fingerprint, got


@check(
    "02-stretch-results-1",
    points=0.75,
    en="requests: one entry per trace with prompt_len, output_len, ttft_s, latency_s, success",
    zh="requests：每条轨迹一项，含 prompt_len、output_len、ttft_s、latency_s、success",
)
def results_requests(learner, variant):
    traces, _, _, _, got = _results(learner, variant.random)
    want = [
        {
            "prompt_len": t["prompt_len"],
            "output_len": t["output_len"],
            "ttft_s": t["ttft"],
            "latency_s": t["latency"],
            "success": t["success"],
        }
        for t in traces
    ]
    assert got.get("requests") == want, f"expected {want}, got {got.get('requests')!r}"


@check(
    "02-stretch-results-1",
    points=0.75,
    en="serving is compute_metrics(traces, duration_s)",
    zh="serving 是 compute_metrics(traces, duration_s) 的结果",
)
def results_serving(learner, variant):
    traces, duration, _, _, got = _results(learner, variant.random)
    want, serving = ref_metrics(traces, duration), got.get("serving")
    assert isinstance(serving, dict) and set(serving) == set(want), f"keys {sorted(want)}"
    for key, value in want.items():
        assert (serving[key] is None) if value is None else is_close(serving[key], value, rtol=RTOL), (
            f"{key}: {serving[key]!r}"
        )


@check(
    "02-stretch-results-1",
    points=0.5,
    en="lab, profile, model and dtype; roofline numbers as floats, other values as given; the fingerprint as environment",
    zh="lab、profile、model、dtype；roofline 的数值转成 float、其他值原样；environment 即 fingerprint",
)
def results_fields(learner, variant):
    _, _, roofline, fingerprint, got = _results(learner, variant.random)
    want = ("02-llm-inference", *(PARAMETERS[k] for k in ("PROFILE", "MODEL", "DTYPE")))  # noqa: F821 (the run's)
    assert (got.get("lab"), got.get("profile"), got.get("model"), got.get("dtype")) == want, f"expected {want}"
    assert got.get("environment") == fingerprint, f"environment {got.get('environment')!r}"
    roof = got.get("roofline")
    assert isinstance(roof, dict) and set(roof) == set(roofline), f"roofline {roof!r}"
    for key, value in roofline.items():
        if isinstance(value, str):
            assert roof[key] == value, f"{key}: {roof[key]!r}"
        else:
            assert type(roof[key]) is float and roof[key] == float(value), f"{key}: a float, got {roof[key]!r}"


@check(
    "02-stretch-results-1",
    points=0.5,
    en="the fingerprint has every key; torch, hip, cuda, device and line are this machine's; gpu_arch None on a CPU",
    zh="指纹含全部键；torch、hip、cuda、device 与 line 取自本机；CPU 上 gpu_arch 为 None",
)
def results_fingerprint(learner, variant, reference):
    facts = reference.run("kernel_facts", PARAMETERS["PROFILE"])  # noqa: F821 (the run's)
    fp = learner.run("fingerprint")
    keys = {"python", "torch", "hip", "cuda", "transformers", "device", "device_name", "gpu_arch", "os", "line"}
    assert isinstance(fp, dict) and keys <= set(fp), f"keys {sorted(fp) if isinstance(fp, dict) else fp!r}"
    for key in ("torch", "hip", "cuda", "device", "line"):
        assert fp[key] == facts[key], f"{key}: expected {facts[key]!r}, got {fp[key]!r}"
    assert (fp["gpu_arch"] is None) == (facts["type"] != "cuda"), f"gpu_arch {fp['gpu_arch']!r} on {facts['type']}"


def _replay_arrivals():
    """Section 6's send times: ``arrival_times(N_REQUESTS, REQUEST_RATE, seed=SEED)``, made here."""
    p = PARAMETERS  # noqa: F821 (the run's, from the harness)
    n, rate = p["N_REQUESTS"], p["REQUEST_RATE"]
    gaps = np.random.default_rng(p["SEED"]).gamma(shape=1.0, scale=1 / rate, size=n - 1)
    return np.concatenate([[0.0], np.cumsum(gaps)]).tolist()


def _replay_served(requests, arrivals):
    """The replay's duration, after checking each request was served first come, first served by
    one server from its send time: it starts when it is sent or when the one before it ends, its
    first token comes after a prefill (ttft past that start), and it ends at send time + latency."""
    free_at = 0.0
    for i, (r, sent) in enumerate(zip(requests, arrivals, strict=True)):
        waited = max(sent, free_at) - sent
        assert r["success"] is True, f"request {i}: success {r['success']!r}"
        assert r["ttft_s"] > waited, f"request {i}: ttft_s {r['ttft_s']} within its {waited} s in the queue"
        assert r["latency_s"] >= r["ttft_s"], f"request {i}: latency_s {r['latency_s']} < ttft_s {r['ttft_s']}"
        free_at = sent + r["latency_s"]
    return free_at - arrivals[0]


@check(
    "02-stretch-results-1",
    points=0.5,
    en="lab02_results.json holds the replayed run: one entry per request, and its totals add up",
    zh="lab02_results.json 记录回放的运行：每个请求一项，总数自洽",
)
def results_file(learner, variant, reference):
    record = json.loads(learner.file("lab02_results.json").decode("utf-8"))
    requests, serving = record["requests"], record["serving"]
    ran = reference.get("traces")  # the reference's replay: the same prompts, the same greedy tokens
    assert type(ran) is list and len(ran) == PARAMETERS["N_REQUESTS"], f"the reference's replay: {ran!r}"  # noqa: F821
    assert isinstance(requests, list) and len(requests) == len(ran), (
        f"{len(ran)} requests, the file has {len(requests)}"
    )
    for i, (r, want) in enumerate(zip(requests, ran, strict=True)):
        lengths = (r["prompt_len"], r["output_len"])
        assert lengths == (want["prompt_len"], want["output_len"]), f"request {i}: (prompt_len, output_len) {lengths}"
    duration = _replay_served(requests, _replay_arrivals())
    traces = [
        {
            "prompt_len": r["prompt_len"],
            "output_len": r["output_len"],
            "ttft": r["ttft_s"],
            "latency": r["latency_s"],
            "itl": [(r["latency_s"] - r["ttft_s"]) / max(r["output_len"] - 1, 1)] * (r["output_len"] - 1),
            "success": True,
        }
        for r in requests
    ]
    want = ref_metrics(traces, duration)
    for key in (
        "completed",
        "total_input",
        "total_output",
        "duration_s",
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "mean_ttft_ms",
        "mean_tpot_ms",
        "mean_itl_ms",
    ):
        assert is_close(serving[key], want[key], rtol=1e-6), (
            f"{key}: file {serving[key]!r}, its requests give {want[key]}"
        )
