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
# # 实验 02 · 推理与基准测试
#
# 版本 {{version}} · 核心部分约 105 分钟，另有约 60 分钟的选做（optional stretch）练习 · 前置：实验 01（能用的 GPU 环境）、
# Python、PyTorch 基础。
#
# 大家都在比较 ROCm 与 CUDA 上的推理速度（TTFT、吞吐、“70B 一张 192 GB 卡放得下”），但很多数字是量错的。
# 本实验为质检系统的“报告生成”模型建立一个**可信的基准测试**。核心部分：
#
# 1. 按 vLLM 的定义从请求轨迹计算 TTFT、TPOT、ITL、E2EL、吞吐、分位数与 goodput；
# 2. 可复现的请求到达过程（Poisson / gamma）；
# 3. 手写带 KV cache 的生成循环，分别计时 prefill 与 decode；
# 4. 从模型配置计算 KV cache 显存；
# 5. roofline：带宽屋顶、算力屋顶与脊点，由此**推导**出 prefill 受算力限制、decode 受带宽限制；
# 6. 在自己的运行上回放一次负载并计算指标；
# 7. 面向 OpenAI 兼容服务器（vLLM on ROCm）的流式客户端，token 数取自服务器的 `usage`。
#
# 选做部分（单独计分，grade_id 以 `02-stretch-` 开头，核心内容不依赖它们）：静态批处理、参数量公式、
# Little 定律、带环境指纹的结果 JSON。冒烟（smoke）配置在 CPU 上用离线小模型跑通全部代码，gpu 配置做真实测量。

# %% [markdown] tags=["en"]
# # Lab 02 · LLM inference and sound benchmarking
#
# Version {{version}} · about 105 minutes for the core, plus about 60 minutes of optional stretch exercises ·
# prerequisites: lab 01 (a working GPU environment), Python, PyTorch basics.
#
# Everyone compares inference speed on ROCm and CUDA (TTFT, throughput, "70B fits on one 192 GB card"),
# and many of the numbers are measured wrongly. This lab builds a **trustworthy benchmark** for the
# report-writing model of our quality-inspection system. The core:
#
# 1. TTFT, TPOT, ITL, E2EL, throughputs, percentiles and goodput from request traces, as vLLM defines them;
# 2. a reproducible request arrival process (Poisson / gamma);
# 3. a hand-written generate loop with a KV cache, prefill and decode timed separately;
# 4. KV-cache memory from a model config;
# 5. the roofline: the memory roof, the compute roof and the ridge point, from which you **derive** that
#    prefill is compute-bound and decode memory-bound;
# 6. a load replayed on your own run, and its metrics;
# 7. a streaming client for an OpenAI-compatible server (vLLM on ROCm) that counts tokens from the
#    server's `usage`.
#
# Optional stretch (graded separately, grade_id starting `02-stretch-`; the core does not depend on it):
# static batching, the parameter-count formula, Little's law, and a results JSON with an environment
# fingerprint. The smoke profile runs all the code on a CPU with the offline tiny model; the gpu profile
# measures for real.

# %% [markdown] tags=["zh"]
# **自测与提交**：保存笔记本后，随时在终端运行 `rocmlab check 02-llm-inference.ipynb`（在笔记本所在的文件夹里），它运行每个测试单元格里的可见测试，
# 立即告诉你哪一条没通过。做完后在工作坊的 JupyterHub 上用 **Nbgrader › Assignment List** 提交（可以多次提交），
# 讲师收取 (collect) 后评分。成绩来自隐藏检查：每个练习的约定里写明的每一条规则都单独检查、单独计分，
# 输入是按你的种子另外生成的（其他请求轨迹、配置、提示词、脚本化的流和边界情况），所以要让函数对约定成立，
# 而不只是对可见测试成立。没通过的检查会告诉你它检查的是哪一条规则。

# %% [markdown] tags=["en"]
# **Self-check and submit**: save the notebook, then run `rocmlab check 02-llm-inference.ipynb` in a terminal, in the notebook's folder, at any time: it runs the
# visible tests in each test cell and tells you at once which one fails. When you are done, submit on the
# workshop's JupyterHub with **Nbgrader › Assignment List** (you may submit again); the instructor collects and
# grades. The grade comes from hidden checks: each rule stated in an exercise's contract is checked and scored on
# its own, on inputs drawn for you (other request traces, configs, prompts, scripted streams and edge cases), so
# make the function hold to the contract, not just to the visible tests. A failed check tells you which rule it
# checks.

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
DTYPE = "float32"          # gpu profile: "bfloat16"
MAX_NEW_TOKENS = 16
BATCH_SIZES = [1, 2, 4, 8]
N_REQUESTS = 8
REQUEST_RATE = 4.0         # requests per second in the replayed and streamed runs
STREAM_URL = ""            # "" = the lab's scripted loopback server; e.g. "http://127.0.0.1:8000" for vLLM
STREAM_MODEL = ""          # the model name a real server expects

# %%
import copy
import inspect
import json
import math
import platform
import socket
import threading
import time

import matplotlib.pyplot as plt
import numpy as np
import torch
import transformers

from rocmlab import lab

lab.seed_everything(SEED)
device = lab.pick_device(DEVICE)
dtype = getattr(torch, DTYPE)
if device.type == "cpu":
    # A small model on a CPU is bound by operator dispatch, not arithmetic: extra threads only add
    # synchronisation, and oversubscribe the cores when a grader runs many notebooks at once.
    torch.set_num_threads(1)
print(lab.describe_environment(PROFILE, device))

# %% [markdown] tags=["zh"]
# 加载模型：冒烟配置使用离线构建的 `tiny-qwen-zh`，gpu 配置使用 `Qwen/Qwen2.5-0.5B-Instruct`（本地路径、HF 缓存或镜像；
# 离线机器请先用 `hf download Qwen/Qwen2.5-0.5B-Instruct` 或 ModelScope 预取；`hf` 是 `huggingface_hub` 自带的命令行，
# 取代了旧的 `huggingface-cli`，见 [Hugging Face CLI 文档](https://huggingface.co/docs/huggingface_hub/guides/cli)）。
# 代码相同，只换参数。正确性检查使用 float32 的 `ref_model`：bf16 下批处理与逐条计算的低位差异可能让贪心解码在近似平局处分叉，
# 这是真实存在的现象（不是 bug），但会让“逐 token 相同”的检查失去意义。

# %% [markdown] tags=["en"]
# Load the model: `tiny-qwen-zh` (built offline) in smoke, `Qwen/Qwen2.5-0.5B-Instruct` in gpu (local path,
# HF cache or a mirror; on an offline box pre-fetch it with `hf download Qwen/Qwen2.5-0.5B-Instruct` or from
# ModelScope; `hf` is the command line that ships with `huggingface_hub` and replaces the older `huggingface-cli`,
# see the [Hugging Face CLI guide](https://huggingface.co/docs/huggingface_hub/guides/cli)). Same code, other
# parameters. Correctness checks use a float32 `ref_model`: in bf16 the low bits of a batched and a single
# computation differ, so greedy decoding may fork at a near-tie. That is a real effect, not a bug, but it would
# make a token-for-token check meaningless.

# %%
model, tok = lab.load_model(MODEL, device=device, dtype=dtype)
model.eval()
ref_model = model if dtype == torch.float32 else copy.deepcopy(model).float().eval()
EOS, PAD = tok.eos_token_id, tok.pad_token_id

reports = lab.load_qc_reports("eval")
PROMPT_TEXTS = [r["description"] + "\n" for r in reports]  # plain completion prompts: the report follows
PROMPTS = [tok(text)["input_ids"] for text in PROMPT_TEXTS]
print(f"{type(model).__name__}: {sum(p.numel() for p in model.parameters()):,} parameters, "
      f"{len(PROMPTS)} prompts, lengths {min(map(len, PROMPTS))}-{max(map(len, PROMPTS))} tokens")

# transformers 5 renamed the forward argument past_key_values -> cache; this helper hides the rename.
CACHE_ARG = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def forward(m, input_ids, cache=None, **kwargs):
    """One forward pass with the KV cache on; returns (logits, cache)."""
    kwargs[CACHE_ARG] = cache
    out = m(input_ids=input_ids, use_cache=True, **kwargs)
    return out.logits, getattr(out, "cache", None) or out.past_key_values


def reference_greedy(m, prompt_ids, max_new_tokens, eos_token_id=EOS):
    """Greedy tokens from `model.generate` (model defaults such as repetition_penalty switched off)."""
    ids = torch.tensor([prompt_ids], device=m.device)
    out = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                     min_new_tokens=0, do_sample=False, repetition_penalty=1.0, num_beams=1,
                     eos_token_id=eos_token_id, pad_token_id=PAD)
    return out[0, len(prompt_ids):].tolist()

# %% [markdown] tags=["zh"]
# ## 1 · 指标：与 vLLM 的定义一致
#
# 一条请求轨迹记录：`prompt_len`、`output_len`、`ttft`（发出请求到第一个 token 到达，秒）、`itl`（之后每两个事件
# 之间的间隔列表）、`latency`（到最后一个 token，即 E2EL）、`success`，流式客户端还记下生成的文本 `text`。
# 定义取自 vLLM 的 `calculate_metrics`（[`vllm/benchmarks/serve.py`](https://github.com/vllm-project/vllm/blob/main/vllm/benchmarks/serve.py)，
# 即 `vllm bench serve`）。常见错误：把第一个 token 算进 TPOT；把失败请求算进吞吐；用平均延迟的倒数当吞吐；
# 把流式事件数当 token 数——一个事件可能带几个 token（vLLM 的注释：“multiple output tokens may be bundled together”），
# 所以 vLLM 用服务器报告的 token 数，没有时重新分词 (re-tokenize) 生成的文本。
#
# **练习 1 的约定**：`compute_metrics(traces, duration_s, *, percentiles=(50, 90, 99), slo_ms=None, tokenize=None)`
#
# - 只统计 `success` 为真的请求；`completed` 为其个数，`failed` 为其余个数。
# - 成功请求的 `output_len` 为 None 或 0 时（服务器没报告 token 数），用 `len(tokenize(trace["text"]))` 代替；
#   此时 `tokenize` 为 None 则抛出 `ValueError`，信息中写出该请求的序号。
# - **TPOT = (latency − ttft)/(output_len − 1)，只对 output_len > 1 的请求计算**。
# - **ITL 把所有成功请求的间隔合并成一个列表**再求统计量（不先按请求平均）。
# - 吞吐 = 总数 / `duration_s`（整个测试的墙钟时长，秒，必须 > 0，否则 `ValueError`）：`request_throughput`、
#   `output_throughput`（输出 token）、`total_token_throughput`（输入 + 输出）。
# - 对 ttft、tpot、itl、e2el 四项（e2el 即 latency）各给出毫秒值：`mean_<m>_ms`、`median_<m>_ms`、`std_<m>_ms`
#   （总体标准差，`np.std`）与每个分位数 `p<P>_<m>_ms`（`np.percentile` 线性插值；P 是整数时写成 `p99`，否则 `p99.9`）；
#   空列表按 `[0]` 计算。
# - 返回字典还有 `completed`、`failed`、`total_input`、`total_output`、`duration_s`。
# - goodput：`slo_ms` 为 None 时 `request_goodput` 为 None；否则是同时满足所有给出的 SLO（键只能是 `"ttft"`、`"tpot"`、
#   `"e2el"`，毫秒，否则 `ValueError`）的成功请求数 / `duration_s`；output_len ≤ 1 的请求其 TPOT 按 0 计。

# %% [markdown] tags=["en"]
# ## 1 · Metrics, defined as vLLM defines them
#
# A request trace holds `prompt_len`, `output_len`, `ttft` (request sent to first token, seconds), `itl` (the
# gaps between later events), `latency` (to the last token: E2EL) and `success`; the streaming client also
# keeps the generated `text`. The definitions are vLLM's `calculate_metrics`
# ([`vllm/benchmarks/serve.py`](https://github.com/vllm-project/vllm/blob/main/vllm/benchmarks/serve.py),
# i.e. `vllm bench serve`). Common mistakes: counting the first token in TPOT; counting failed requests in
# throughput; taking the inverse of the mean latency as throughput; taking streamed events for tokens. An event
# can carry several tokens (vLLM's comment: "multiple output tokens may be bundled together"), so vLLM takes
# the token count the server reports and, without one, re-tokenizes the generated text.
#
# **Exercise 1 contract**: `compute_metrics(traces, duration_s, *, percentiles=(50, 90, 99), slo_ms=None, tokenize=None)`
#
# - Only requests with a true `success` count; `completed` is their number, `failed` the rest.
# - A successful request whose `output_len` is None or 0 (the server reported no count) counts
#   `len(tokenize(trace["text"]))` instead; with `tokenize` None that raises `ValueError` naming the request's index.
# - **TPOT = (latency − ttft)/(output_len − 1), only for requests with output_len > 1**.
# - **ITL pools the gaps of all successful requests into one list** before the statistics (no per-request average).
# - Throughput = a total / `duration_s` (the wall-clock duration of the whole run, seconds, > 0, else
#   `ValueError`): `request_throughput`, `output_throughput` (output tokens), `total_token_throughput` (input + output).
# - For each of ttft, tpot, itl and e2el (e2el is the latency), in milliseconds: `mean_<m>_ms`, `median_<m>_ms`,
#   `std_<m>_ms` (population standard deviation, `np.std`) and for each percentile `p<P>_<m>_ms` (`np.percentile`,
#   linear interpolation; P written `p99` when whole, else `p99.9`); an empty list counts as `[0]`.
# - The dict also has `completed`, `failed`, `total_input`, `total_output` and `duration_s`.
# - Goodput: with `slo_ms` None, `request_goodput` is None; otherwise it is the successful requests meeting every
#   SLO given (keys only `"ttft"`, `"tpot"`, `"e2el"`, milliseconds, else `ValueError`) / `duration_s`; a request
#   with output_len ≤ 1 has TPOT 0 there.

# %% tags=["solution"] grade_id="02-metrics-sol-1"
def compute_metrics(traces, duration_s, *, percentiles=(50, 90, 99), slo_ms=None, tokenize=None):
    """Serving metrics from request traces, with vLLM's definitions (rules and keys in the prose)."""
    ### BEGIN SOLUTION
    if not duration_s > 0:
        raise ValueError(f"duration_s must be > 0 seconds, got {duration_s!r}")
    unknown = set(slo_ms or {}) - {"ttft", "tpot", "e2el"}
    if unknown:
        raise ValueError(f"slo_ms keys must be among ttft, tpot, e2el; got {sorted(unknown)}")
    ok, output_lens = [], []
    for index, t in enumerate(traces):
        if not t["success"]:
            continue
        n = t["output_len"]
        if not n:
            if tokenize is None:
                raise ValueError(f"trace {index} reports no output_len: pass tokenize= to count its text")
            n = len(tokenize(t.get("text") or ""))
        ok.append(t)
        output_lens.append(n)
    tpot_of = [(t["latency"] - t["ttft"]) / (n - 1) if n > 1 else None for t, n in zip(ok, output_lens)]
    series = {"ttft": [t["ttft"] for t in ok],
              "tpot": [x for x in tpot_of if x is not None],
              "itl": [gap for t in ok for gap in t["itl"]],
              "e2el": [t["latency"] for t in ok]}
    total_in = sum(t["prompt_len"] for t in ok)
    total_out = sum(output_lens)
    out = {"completed": len(ok), "failed": len(traces) - len(ok), "total_input": total_in,
           "total_output": total_out, "duration_s": duration_s,
           "request_throughput": len(ok) / duration_s,
           "output_throughput": total_out / duration_s,
           "total_token_throughput": (total_in + total_out) / duration_s,
           "request_goodput": None}
    for name, values in series.items():
        ms = np.asarray(values or [0.0], dtype=float) * 1000
        out[f"mean_{name}_ms"] = float(ms.mean())
        out[f"median_{name}_ms"] = float(np.median(ms))
        out[f"std_{name}_ms"] = float(ms.std())
        for p in percentiles:
            word = str(int(p)) if int(p) == p else str(p)
            out[f"p{word}_{name}_ms"] = float(np.percentile(ms, p))
    if slo_ms:
        good = 0
        for t, tpot in zip(ok, tpot_of):
            value = {"ttft": t["ttft"], "tpot": tpot or 0.0, "e2el": t["latency"]}
            good += all(value[k] * 1000 <= limit for k, limit in slo_ms.items())
        out["request_goodput"] = good / duration_s
    return out
    ### END SOLUTION

# %% tags=["test"] grade_id="02-metrics-1" points=3
_traces = [
    {"prompt_len": 10, "output_len": 3, "ttft": 0.1, "itl": [0.05, 0.05], "latency": 0.2, "success": True},
    {"prompt_len": 20, "output_len": 1, "ttft": 0.3, "itl": [], "latency": 0.3, "success": True},
    {"prompt_len": 99, "output_len": 0, "ttft": 0.0, "itl": [], "latency": 0.0, "success": False},
]
_m = compute_metrics(_traces, 1.0)
assert (_m["completed"], _m["failed"], _m["total_input"], _m["total_output"]) == (2, 1, 30, 4), \
    f"失败请求不计入 / failed requests must not count: got {_m['completed']}, {_m['total_input']}, {_m['total_output']}"
assert math.isclose(_m["mean_tpot_ms"], 50.0), \
    f"TPOT 只对 output_len>1 的请求计算 / TPOT only for output_len > 1: expected 50 ms, got {_m['mean_tpot_ms']}"
assert math.isclose(_m["mean_ttft_ms"], 200.0) and math.isclose(_m["mean_e2el_ms"], 250.0), "ttft / e2el 的均值 / means of ttft and e2el"
assert math.isclose(_m["mean_itl_ms"], 50.0) and math.isclose(_m["p99_itl_ms"], 50.0), "ITL 合并后统计 / ITL pooled"
assert math.isclose(_m["request_throughput"], 2.0) and math.isclose(_m["total_token_throughput"], 34.0), \
    "吞吐 = 总数 / 墙钟时长 / throughput = total / wall-clock duration"
assert _m["request_goodput"] is None, "没有 SLO 时 goodput 为 None / goodput is None without SLOs"
_m = compute_metrics([{"prompt_len": 2, "output_len": None, "ttft": 0.1, "itl": [0.1], "latency": 0.2,
                       "success": True, "text": "焊缝气孔"}], 1.0, tokenize=list)
assert _m["total_output"] == 4, f"没有 output_len 时对 text 重新分词 / no output_len: re-tokenize the text; got {_m['total_output']}"
_m = compute_metrics(_traces, 2.0, percentiles=(99.9,), slo_ms={"ttft": 150})
assert math.isclose(_m["request_goodput"], 0.5), f"满足 SLO 的成功请求数 / duration_s / goodput: {_m['request_goodput']}"
assert "p99.9_ttft_ms" in _m, "非整数分位数写作 p99.9 / a non-integer percentile is keyed p99.9"
try:
    compute_metrics(_traces, 0.0)
except ValueError:
    pass
else:
    raise AssertionError("duration_s <= 0 应抛出 ValueError / duration_s <= 0 must raise ValueError")

# %% [markdown] tags=["zh"]
# ## 2 · 请求到达过程
#
# 在线服务的负载不是“一次把所有请求发出去”。vLLM 的 `--request-rate r --burstiness k` 让请求间隔服从
# gamma 分布，形状参数 k、尺度 θ = 1/(r·k)，均值恰为 1/r；k = 1 即 Poisson 过程（指数间隔），k < 1 更突发，
# k > 1 更均匀（变异系数 CV = 1/√k）。
#
# **练习 2 的约定**：`arrival_times(n, rate, *, burstiness=1.0, seed=0)` 返回 n 个请求的发送时刻（秒，float 的 numpy 数组），
# 第一个为 0。其余 n − 1 个间隔用**一次**调用
# `np.random.default_rng(seed).gamma(shape=burstiness, scale=1 / (rate * burstiness), size=n - 1)` 抽取后累加。
# `rate == float("inf")` 时全为 0。`n < 1`、`rate <= 0` 或 `burstiness <= 0` 时抛出 `ValueError`。

# %% [markdown] tags=["en"]
# ## 2 · Request arrivals
#
# Online load is not "send everything at once". vLLM's `--request-rate r --burstiness k` draws the gaps
# between requests from a gamma distribution with shape k and scale θ = 1/(r·k), so the mean gap is 1/r;
# k = 1 is a Poisson process (exponential gaps), k < 1 is burstier, k > 1 more even (coefficient of
# variation CV = 1/√k).
#
# **Exercise 2 contract**: `arrival_times(n, rate, *, burstiness=1.0, seed=0)` returns the send times of n
# requests (seconds, a float numpy array), the first at 0. The other n − 1 gaps come from **one** call,
# `np.random.default_rng(seed).gamma(shape=burstiness, scale=1 / (rate * burstiness), size=n - 1)`, accumulated.
# `rate == float("inf")` gives all zeros. `n < 1`, `rate <= 0` or `burstiness <= 0` raise `ValueError`.

# %% tags=["solution"] grade_id="02-arrivals-sol-1"
def arrival_times(n, rate, *, burstiness=1.0, seed=0):
    """Send times (seconds) of n requests: a float numpy array, the first at 0.

    The n - 1 gaps are drawn in one call,
    np.random.default_rng(seed).gamma(shape=burstiness, scale=1 / (rate * burstiness), size=n - 1),
    and accumulated. rate == float("inf") gives all zeros. n < 1, rate <= 0 or burstiness <= 0 raise
    ValueError.
    """
    ### BEGIN SOLUTION
    if n < 1:
        raise ValueError(f"n must be >= 1 request, got {n!r}")
    if not rate > 0:
        raise ValueError(f"rate must be > 0 requests/s, got {rate!r}")
    if not burstiness > 0:
        raise ValueError(f"burstiness must be > 0, got {burstiness!r}")
    if math.isinf(rate):
        return np.zeros(n)
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n - 1)
    return np.concatenate([[0.0], np.cumsum(gaps)])
    ### END SOLUTION

# %% tags=["test"] grade_id="02-arrivals-1" points=2
_a = arrival_times(20001, 4.0, seed=1)
assert len(_a) == 20001 and _a[0] == 0.0, "n 个到达时刻，第一个为 0 / n send times, the first at 0"
assert np.all(np.diff(_a) >= 0), "到达时刻单调不减 / send times must not decrease"
assert np.array_equal(_a, arrival_times(20001, 4.0, seed=1)), "同一 seed 必须可复现 / same seed, same times"
assert abs(np.diff(_a).mean() - 0.25) < 0.25 * 0.05, f"平均间隔应为 1/rate / mean gap 1/rate: {np.diff(_a).mean()}"
_ref = np.concatenate([[0.0], np.cumsum(np.random.default_rng(7).gamma(shape=0.5, scale=1 / (3.0 * 0.5), size=4))])
assert isinstance(_a, np.ndarray) and np.allclose(arrival_times(5, 3.0, burstiness=0.5, seed=7), _ref), \
    "间隔来自约定中的那一次 gamma 抽取 / the gaps come from the one gamma draw of the contract"
assert np.array_equal(arrival_times(3, float("inf")), np.zeros(3)), "rate 为 inf 时全为 0 / rate inf gives zeros"
try:
    arrival_times(0, 1.0)
except ValueError:
    pass
else:
    raise AssertionError("n < 1 应抛出 ValueError / n < 1 must raise ValueError")

# %%
_fig, _ax = plt.subplots(figsize=(7, 2.2))
for _row, _k in enumerate((0.25, 1.0, 4.0)):
    _t = arrival_times(40, 4.0, burstiness=_k, seed=SEED)
    _ax.plot(_t, np.full_like(_t, _row), "|", markersize=14, label=f"burstiness {_k}")
_ax.set_yticks([0, 1, 2], ["k=0.25", "k=1 (Poisson)", "k=4"])
_ax.set_xlabel("send time (s), 4 req/s")
plt.show()

# %% [markdown] tags=["zh"]
# ## 3 · 带 KV cache 的生成循环
#
# 生成分两个阶段：**prefill** 一次处理整个提示词（决定 TTFT），并把每层的 K、V 存入 KV cache；
# **decode** 每步只输入上一个 token，复用 cache（决定 TPOT/ITL）。生成 n 个 token 需要 1 次 prefill
# 加 n − 1 次 decode：最后一个 token 不必再前向。哪一段受算力、哪一段受带宽限制，第 5 节会推导。在 GPU 上计时前后都要同步（`lab.Timer` 会做），否则只量到
# kernel 的发射时间。下面的 `forward(m, ids, cache)` 返回 `(logits, cache)`。
#
# **练习 3 的约定**：`generate_with_kv_cache(m, prompt_ids, max_new_tokens, *, eos_token_id=None)` 贪心解码：先对整个
# `prompt_ids`（token id 列表）做一次前向 (prefill)，之后每步只输入上一个新 token、复用 cache。生成到 `max_new_tokens`
# 个 token 为止，或在生成出 `eos_token_id` 之后立即停止（eos 计入结果）。用 `lab.Timer(m.device)` 分别计时 prefill 和
# 每个 decode 步。返回字典：`tokens`（新 token 列表）、`prompt_len`、`prefill_s`（秒）、`decode_s`（每个 decode 步一个秒数，
# 共 `len(tokens) − 1` 个）、`cache`（最后一次前向后的 KV cache）。结果必须与 `model.generate` 的贪心输出逐 token 相同；
# 隐藏检查会逐次判定每次前向：prefill 一次 `(1, 提示词长度)`，之后每步 `(1, 1)` 并传入上一次前向返回的 cache；
# 生成最后一个 token 之后不再前向。

# %% [markdown] tags=["en"]
# ## 3 · A generate loop with a KV cache
#
# Generation has two phases: **prefill** runs the whole prompt once (it sets TTFT) and stores
# every layer's K and V in the KV cache; **decode** feeds only the last token each step and reuses the cache
# (it sets TPOT/ITL). n new tokens take 1 prefill and n − 1 decode steps: the last token needs no
# forward pass. Which phase is compute-bound and which memory-bound, section 5 derives. On a GPU, synchronize before and after timing (`lab.Timer` does), or you time kernel launches
# only. `forward(m, ids, cache)` above returns `(logits, cache)`.
#
# **Exercise 3 contract**: `generate_with_kv_cache(m, prompt_ids, max_new_tokens, *, eos_token_id=None)` decodes
# greedily: one forward pass over the whole `prompt_ids` (a list of token ids, the prefill), then each step feeds
# only the last new token and reuses the cache. It stops after `max_new_tokens` tokens, or right after it
# generates `eos_token_id` (the eos is included). Time the prefill and each decode step with `lab.Timer(m.device)`.
# Return a dict: `tokens` (the new ids), `prompt_len`, `prefill_s` (seconds), `decode_s` (one duration per decode
# step, `len(tokens) − 1` of them) and `cache` (the KV cache after the last pass). The tokens must equal
# `model.generate`'s greedy output; hidden checks judge each forward pass: the prefill once,
# `(1, prompt length)`, then `(1, 1)` per step with the cache the previous pass returned, and no pass after the
# last token.

# %% tags=["solution"] grade_id="02-kvloop-sol-1"
def generate_with_kv_cache(m, prompt_ids, max_new_tokens, *, eos_token_id=None):
    """Greedy decoding with a KV cache, prefill and decode timed apart (rules and keys in the prose)."""
    ### BEGIN SOLUTION
    with torch.no_grad():
        with lab.Timer(m.device) as t:
            logits, cache = forward(m, torch.tensor([prompt_ids], device=m.device))
            next_id = int(logits[0, -1].argmax())
        tokens, decode_s = [next_id], []
        while len(tokens) < max_new_tokens and next_id != eos_token_id:
            with lab.Timer(m.device) as step:
                logits, cache = forward(m, torch.tensor([[next_id]], device=m.device), cache)
                next_id = int(logits[0, -1].argmax())
            tokens.append(next_id)
            decode_s.append(step.seconds)
    return {"tokens": tokens, "prompt_len": len(prompt_ids), "prefill_s": t.seconds,
            "decode_s": decode_s, "cache": cache}
    ### END SOLUTION

# %% tags=["test"] grade_id="02-kvloop-1" points=3
_p = PROMPTS[0]
_r = generate_with_kv_cache(ref_model, _p, 12, eos_token_id=EOS)
_want = reference_greedy(ref_model, _p, 12)
assert _r["tokens"] == _want, f"贪心输出应与 model.generate 相同 / must equal model.generate:\n{_r['tokens']}\n{_want}"
assert len(_r["decode_s"]) == len(_r["tokens"]) - 1, "n 个 token = 1 次 prefill + (n-1) 次 decode / n tokens, n-1 decode steps"
assert _r["prompt_len"] == len(_p) and _r["prefill_s"] > 0 and all(s > 0 for s in _r["decode_s"])
_stop = _want[min(2, len(_want) - 1)]
_r = generate_with_kv_cache(ref_model, _p, 12, eos_token_id=_stop)
assert _r["tokens"] == _want[:_want.index(_stop) + 1], \
    f"生成出 eos 后立即停止，eos 计入 / stop right after eos, eos included: {_r['tokens']}"

# %%
_run = generate_with_kv_cache(model, PROMPTS[0], MAX_NEW_TOKENS)
print(f"prefill {len(PROMPTS[0])} tokens: {_run['prefill_s'] * 1e3:.2f} ms; "
      f"decode {len(_run['decode_s'])} steps: median {np.median(_run['decode_s']) * 1e3:.2f} ms/token")
print("output:", tok.decode(_run["tokens"]))

# %% [markdown] tags=["zh"]
# ## 4 · 显存：KV cache
#
# 每个 token 的 KV cache = 2（K 和 V）× 层数 × KV 头数 × head_dim × 每元素字节数。GQA（分组查询注意力）让多个
# 查询头共享一组 KV 头，KV 头数远小于注意力头数。配置来源（Hugging Face 上的 `config.json`：
# https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct/blob/main/config.json 、
# https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json ）：Qwen2.5-0.5B：24 层、hidden 896、14 个注意力头、
# 2 个 KV 头（head_dim 64）、intermediate 4864、词表 151936、共享嵌入；Llama-3-70B：80 层、hidden 8192、64 头、8 个 KV 头
# （head_dim 128）、intermediate 28672、词表 128256、不共享嵌入。

# %% [markdown] tags=["en"]
# ## 4 · Memory: the KV cache
#
# KV cache per token = 2 (K and V) × layers × KV heads × head_dim × bytes per element. GQA (grouped-query
# attention) lets several query heads share one KV head, so KV heads are far fewer than attention heads. Config
# sources (`config.json` on Hugging Face: https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct/blob/main/config.json,
# https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json): Qwen2.5-0.5B: 24 layers, hidden 896,
# 14 attention heads, 2 KV heads (head_dim 64), intermediate 4864, vocab 151936, tied embeddings; Llama-3-70B:
# 80 layers, hidden 8192, 64 heads, 8 KV heads (head_dim 128), intermediate 28672, vocab 128256, untied.

# %%
QWEN25_05B = {"model_type": "qwen2", "num_hidden_layers": 24, "hidden_size": 896, "num_attention_heads": 14,
              "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 151936,
              "tie_word_embeddings": True}
LLAMA3_70B = {"model_type": "llama", "num_hidden_layers": 80, "hidden_size": 8192, "num_attention_heads": 64,
              "num_key_value_heads": 8, "intermediate_size": 28672, "vocab_size": 128256,
              "tie_word_embeddings": False, "attention_bias": False}

# %% [markdown] tags=["zh"]
# **练习 4 的约定**：`kv_cache_bytes(config, n_tokens, *, batch=1, bytes_per_elem=2)` 返回 `batch` 条各 `n_tokens` 个 token 的
# 序列的 KV cache 字节数（整数）。`config` 是 Hugging Face 键名的字典：`num_hidden_layers`、`num_attention_heads`、
# `hidden_size`，可选 `num_key_value_heads`（缺省或为 None 时等于注意力头数，即 MHA）和 `head_dim`（缺省或为 None 时为
# `hidden_size // num_attention_heads`）。隐藏检查还会把公式和已加载模型的真实 cache 字节数对比。

# %% [markdown] tags=["en"]
# **Exercise 4 contract**: `kv_cache_bytes(config, n_tokens, *, batch=1, bytes_per_elem=2)` returns the KV-cache
# bytes (an integer) of `batch` sequences of `n_tokens` tokens each. `config` is a dict with Hugging Face keys:
# `num_hidden_layers`, `num_attention_heads`, `hidden_size`, optionally `num_key_value_heads` (missing or None
# means the attention heads, i.e. MHA) and `head_dim` (missing or None means `hidden_size // num_attention_heads`).
# Hidden checks also hold the formula against the real cache of the loaded model.

# %% tags=["solution"] grade_id="02-kvmem-sol-1"
def kv_cache_bytes(config, n_tokens, *, batch=1, bytes_per_elem=2):
    """Bytes of KV cache for `batch` sequences of `n_tokens` tokens, from a config dict (HF keys)."""
    ### BEGIN SOLUTION
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    return 2 * config["num_hidden_layers"] * kv_heads * head_dim * bytes_per_elem * n_tokens * batch
    ### END SOLUTION

# %%
def cache_nbytes(cache):
    """Bytes held by a transformers KV cache (any of its layouts across versions)."""
    if hasattr(cache, "layers"):
        pairs = [(layer.keys, layer.values) for layer in cache.layers]
    elif hasattr(cache, "key_cache"):
        pairs = list(zip(cache.key_cache, cache.value_cache))
    else:
        pairs = [tuple(kv[:2]) for kv in cache]
    return sum(t.numel() * t.element_size() for kv in pairs for t in kv)

# %% tags=["test"] grade_id="02-kvmem-1" points=2
assert kv_cache_bytes(QWEN25_05B, 1) == 12288, f"Qwen2.5-0.5B: bf16 下每 token 12 KiB / 12 KiB per token in bf16, got {kv_cache_bytes(QWEN25_05B, 1)}"
assert kv_cache_bytes(LLAMA3_70B, 1) == 327680, f"Llama-3-70B: bf16 下每 token 320 KiB / 320 KiB per token in bf16, got {kv_cache_bytes(LLAMA3_70B, 1)}"
_mha = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4}
assert kv_cache_bytes(_mha, 10, batch=3, bytes_per_elem=4) == 2 * 2 * 4 * 16 * 4 * 10 * 3, \
    "没有 num_key_value_heads 即 MHA；乘以 token 数与 batch / no num_key_value_heads means MHA; times tokens and batch"
assert type(kv_cache_bytes(_mha, 10)) is int, "返回整数 / returns an int"

# %% [markdown] tags=["zh"]
# **为什么 70B 放得进一张 MI300X，却放不进一张 80 GB 的卡？** 下表按 bf16 计算，容量以 GiB（2³⁰ 字节）计：数据手册印的“192 GB”显存是二进制单位（AMD 的 ROCm GPU 规格表写作 “VRAM (GiB)” 192；MI300X 向 rocm-smi 报告 205,822,885,888 字节，多于 192×10⁹），
# 显存容量取自课程的共享数据手册表 `rocmlab.lab.datasheets`（每行附来源）。Llama-3-70B 有 70,553,706,496 个参数
# （由它的 `config.json` 算出，选做练习 S2 会推导这个数），权重约 131 GiB（141×10⁹ 字节）：超过 80 GiB（H100 SXM / A100 80GB），必须用两张卡做
# 张量并行（TP=2），卡间通信和第二张卡都是成本；MI300X 有 192 GiB，一张卡放下权重后还剩约 60 GiB 给 KV cache
# （每 token 320 KiB，约 20 万个 token，还未扣除激活与运行时开销）。容量改变的是部署方案，不只是速度。

# %% [markdown] tags=["en"]
# **Why does 70B fit on one MI300X and not on one 80 GB card?** The table is for bf16, capacity in GiB (2³⁰
# bytes): the datasheets' "192 GB" of memory is binary (AMD's ROCm GPU specification table gives
# it as "VRAM (GiB)" 192, and an MI300X reports 205,822,885,888 bytes to rocm-smi,
# more than 192×10⁹), with memory sizes from the course's shared datasheet table `rocmlab.lab.datasheets` (each row
# cites its source). Llama-3-70B has 70,553,706,496 parameters (counted from its `config.json`; stretch
# exercise S2 derives that number), so its weights are about 131 GiB (141×10⁹ bytes): more than 80 GiB (H100 SXM / A100 80GB),
# so it needs two cards with tensor parallelism (TP=2), paying for the second card and the traffic between
# them. An MI300X has 192 GiB: after the weights about 60 GiB remain for the KV cache (320 KiB per token, about
# 200 thousand tokens, before activations and runtime overhead). Capacity changes the deployment plan, not just
# the speed.

# %%
from rocmlab.lab import datasheets

PARAMS = {"Qwen2.5-0.5B": 494_032_768, "Llama-3-70B": 70_553_706_496}   # from the configs (stretch S2)
CONFIGS = {"Qwen2.5-0.5B": QWEN25_05B, "Llama-3-70B": LLAMA3_70B}
for _name, _params in PARAMS.items():
    _w = _params * 2
    _kv = kv_cache_bytes(CONFIGS[_name], 1)
    for _key in ("H100 SXM", "MI300X"):
        _cap = datasheets.by_key(_key).memory_bytes
        _left = _cap - _w
        _fits = "fits" if _left > 0 else f"does not fit: needs {math.ceil(_w / _cap)}+ cards"
        _tokens = f"{_left / _kv:,.0f} KV tokens" if _left > 0 else "-"
        print(f"{_name:13s} weights {_w / 2**30:7.1f} GiB, KV {_kv / 1024:5.0f} KiB/token | {_key} {_cap / 2**30:g} GiB: {_fits}; {_tokens}")

# %% [markdown] tags=["zh"]
# ## 5 · Roofline：两个屋顶与脊点
#
# 一段计算能跑多快，受两个上限约束：算力屋顶（峰值 FLOPS）和带宽屋顶（显存带宽 × 算术强度）。**算术强度**
# (arithmetic intensity) = 浮点运算次数 / 从显存读写的字节数（FLOP/byte）。可达性能 = min(峰值 FLOPS, 强度 × 带宽)；
# 两个屋顶相交处是**脊点** (ridge point) = 峰值 FLOPS / 带宽：强度低于它受带宽限制，高于它受算力限制。
# MI300X：1307.4 TFLOPS（FP16/BF16 稠密）/ 5.3 TB/s ≈ 247 FLOP/byte（数字见共享数据手册表，来源为
# [AMD MI300X 数据手册](https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html)）。
#
# 先看带宽这一侧。batch 为 B、上下文为 L 时，一次 decode 步至少要从显存读一遍全部权重和所有序列的 KV cache：
# 每步字节数 = W + B·L·kv_per_token，所以 tokens/s ≤ B × 带宽 / 每步字节数。
#
# **练习 5a 的约定**：`decode_roofline(weight_bytes, kv_bytes_per_token, context_tokens, batch, bandwidth_bytes_per_s)`
# 返回上述上界（所有序列合计的 tokens/s，浮点数）：`batch × bandwidth / (weight_bytes + batch × context_tokens × kv_bytes_per_token)`。

# %% [markdown] tags=["en"]
# ## 5 · The roofline: two roofs and a ridge
#
# How fast a computation can run is capped by two roofs: the compute roof (peak FLOPS) and the memory roof
# (memory bandwidth × arithmetic intensity). **Arithmetic intensity** = floating-point operations / bytes moved
# to and from memory (FLOP/byte). Attainable performance = min(peak FLOPS, intensity × bandwidth); the roofs
# meet at the **ridge point** = peak FLOPS / bandwidth: below it a computation is memory-bound, above it
# compute-bound. MI300X: 1307.4 TFLOPS (FP16/BF16 dense) / 5.3 TB/s ≈ 247 FLOP/byte (figures from the shared
# datasheet table, sourced to [AMD's MI300X datasheet](https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html)).
#
# The memory side first. With batch B and context L, a decode step must at least read all weights and every
# sequence's KV cache once: bytes per step = W + B·L·kv_per_token, hence tokens/s ≤ B × bandwidth / bytes per step.
#
# **Exercise 5a contract**: `decode_roofline(weight_bytes, kv_bytes_per_token, context_tokens, batch,
# bandwidth_bytes_per_s)` returns that bound (tokens/s of all sequences together, a float):
# `batch × bandwidth / (weight_bytes + batch × context_tokens × kv_bytes_per_token)`.

# %% tags=["solution"] grade_id="02-roofline-sol-1"
def decode_roofline(weight_bytes, kv_bytes_per_token, context_tokens, batch, bandwidth_bytes_per_s):
    """Upper bound on decode tokens/s (all sequences together) when every step reads all weights
    and every sequence's KV cache once."""
    ### BEGIN SOLUTION
    bytes_per_step = weight_bytes + batch * context_tokens * kv_bytes_per_token
    return batch * bandwidth_bytes_per_s / bytes_per_step
    ### END SOLUTION

# %% tags=["test"] grade_id="02-roofline-1" points=2
_w70 = PARAMS["Llama-3-70B"] * 2
assert math.isclose(decode_roofline(_w70, 327680, 0, 1, 5.3e12), 5.3e12 / _w70), \
    "B=1、无上下文：带宽 / 权重字节数 / B=1, no context: bandwidth / weight bytes"
assert 37 < decode_roofline(_w70, 327680, 0, 1, 5.3e12) < 38, "bf16 的 70B 在 MI300X 上约 37 tokens/s / about 37 tokens/s"
assert math.isclose(decode_roofline(1000, 10, 5, 4, 10**6), 4 * 10**6 / (1000 + 4 * 5 * 10)), \
    "B × 带宽 / (W + B·L·kv) / B x bandwidth / (W + B L kv)"
assert isinstance(decode_roofline(1000, 10, 5, 4, 10**6), float), "返回浮点数 / returns a float"

# %% [markdown] tags=["zh"]
# 再把两个屋顶放在一起。一次前向处理 n 个 token（所有序列合计）时，每个权重对每个 token 做一次乘加：
# FLOPs ≈ 2 · 参数量 · n；读的字节 ≈ 参数量 · 每参数字节数（每个权重读一次）+ 读取的 KV cache 字节。
# 注意力本身的 FLOPs 不计入（下面会算出它在这里有多小）。prefill 一次处理整个提示词，n 是提示词长度；
# decode 每步每条序列只处理 1 个 token，n 是 batch 大小。
#
# **练习 5b 的约定**：
#
# - `forward_intensity(n_params, n_tokens, *, bytes_per_param=2, kv_bytes=0)` 返回上述算术强度（FLOP/byte，浮点数）：
#   `2 · n_params · n_tokens / (n_params · bytes_per_param + kv_bytes)`。
# - `roofline(intensity, *, peak_flops, bandwidth)` 返回字典：`"ridge"` = `peak_flops / bandwidth`（FLOP/byte），
#   `"attainable_flops"` = `min(peak_flops, intensity · bandwidth)`（FLOP/s），`"bound"` = 强度小于脊点时为 `"memory"`，
#   大于或等于时为 `"compute"`。`peak_flops` 或 `bandwidth` 不大于 0 时抛出 `ValueError`。

# %% [markdown] tags=["en"]
# Now both roofs together. A forward pass over n tokens (all sequences together) does one multiply-add per
# weight per token: FLOPs ≈ 2 · parameters · n; the bytes read ≈ parameters · bytes per parameter (each weight
# read once) + the KV-cache bytes read. Attention's own FLOPs are left out (below you compute how small they are
# here). Prefill handles the whole prompt at once, so n is the prompt length; decode handles one token per
# sequence per step, so n is the batch size.
#
# **Exercise 5b contract**:
#
# - `forward_intensity(n_params, n_tokens, *, bytes_per_param=2, kv_bytes=0)` returns that arithmetic intensity
#   (FLOP/byte, a float): `2 · n_params · n_tokens / (n_params · bytes_per_param + kv_bytes)`.
# - `roofline(intensity, *, peak_flops, bandwidth)` returns a dict: `"ridge"` = `peak_flops / bandwidth`
#   (FLOP/byte), `"attainable_flops"` = `min(peak_flops, intensity · bandwidth)` (FLOP/s), `"bound"` = `"memory"`
#   when the intensity is below the ridge, `"compute"` when it is at or above it. `peak_flops` or `bandwidth`
#   not above 0 raises `ValueError`.

# %% tags=["solution"] grade_id="02-roofline-sol-2"
def forward_intensity(n_params, n_tokens, *, bytes_per_param=2, kv_bytes=0):
    """FLOP per byte of one forward pass over n_tokens tokens (rules in the prose)."""
    ### BEGIN SOLUTION
    return 2 * n_params * n_tokens / (n_params * bytes_per_param + kv_bytes)
    ### END SOLUTION


def roofline(intensity, *, peak_flops, bandwidth):
    """{"ridge", "attainable_flops", "bound"} of the roofline model (rules in the prose)."""
    ### BEGIN SOLUTION
    if not (peak_flops > 0 and bandwidth > 0):
        raise ValueError(f"peak_flops and bandwidth must be > 0, got {peak_flops!r} and {bandwidth!r}")
    ridge = peak_flops / bandwidth
    return {"ridge": ridge, "attainable_flops": min(peak_flops, intensity * bandwidth),
            "bound": "compute" if intensity >= ridge else "memory"}
    ### END SOLUTION

# %% [markdown] tags=["zh"]
# 现在**推导**（不是断言）：把 Llama-3-70B（bf16）放到 MI300X 的两个屋顶下，算出 prefill（2048 个 token 的提示词）
# 和不同 batch 的 decode（2048 个 token 的上下文）各自的算术强度，看它们落在脊点的哪一边，并画在 roofline 图上。

# %% [markdown] tags=["en"]
# Now **derive** it (rather than assert it): put Llama-3-70B (bf16) under the MI300X's two roofs, compute the
# arithmetic intensity of a prefill (a 2048-token prompt) and of decode at several batch sizes (2048 tokens of
# context), see on which side of the ridge each lands, and plot them on the roofline.

# %%
MI300X = datasheets.by_key("MI300X")
PEAK_FLOPS, PEAK_BW = MI300X.fp16_dense_tflops * 1e12, MI300X.bandwidth_gbs * 1e9
N70, KV70 = PARAMS["Llama-3-70B"], kv_cache_bytes(LLAMA3_70B, 1)
CONTEXT = 2048
PHASES = {   # name -> (tokens in one forward pass, KV bytes it reads)
    f"prefill, {CONTEXT}-token prompt": (CONTEXT, 0),
    "decode, batch 1": (1, 1 * CONTEXT * KV70),
    "decode, batch 64": (64, 64 * CONTEXT * KV70),
    "decode, batch 1024": (1024, 1024 * CONTEXT * KV70),
}
derived = {}
for _phase, (_n, _kv) in PHASES.items():
    _i = forward_intensity(N70, _n, kv_bytes=_kv)
    derived[_phase] = roofline(_i, peak_flops=PEAK_FLOPS, bandwidth=PEAK_BW) | {"intensity": _i}
    print(f"{_phase:28s} intensity {_i:8.1f} FLOP/byte -> {derived[_phase]['bound']}-bound, "
          f"attainable {derived[_phase]['attainable_flops'] / 1e12:7.1f} TFLOPS")
_ridge = derived[f"prefill, {CONTEXT}-token prompt"]["ridge"]
print(f"MI300X ridge: {_ridge:.1f} FLOP/byte; KV reads cap decode at {2 * N70 / (CONTEXT * KV70):.0f} FLOP/byte "
      f"however large the batch, at {CONTEXT} tokens of context")
_attn = 4 * LLAMA3_70B["num_hidden_layers"] * CONTEXT * LLAMA3_70B["hidden_size"]   # QK^T and AV per token
print(f"attention FLOPs per token at {CONTEXT} context: {_attn / (2 * N70):.1%} of the weight FLOPs")

_xs = np.logspace(-1, 4, 200)
_fig, _ax = plt.subplots(figsize=(7, 3.8))
_ax.loglog(_xs, [roofline(x, peak_flops=PEAK_FLOPS, bandwidth=PEAK_BW)["attainable_flops"] / 1e12 for x in _xs],
           color="black", label="MI300X roofline (FP16/BF16 dense)")
_ax.axvline(_ridge, color="gray", linestyle=":", label=f"ridge {_ridge:.0f} FLOP/byte")
for _phase, _r in derived.items():
    _ax.plot(_r["intensity"], _r["attainable_flops"] / 1e12, "o", label=_phase)
_ax.set_xlabel("arithmetic intensity (FLOP/byte)")
_ax.set_ylabel("attainable TFLOPS")
_ax.legend(fontsize=7)
plt.show()

# %% tags=["test"] grade_id="02-roofline-2" points=3
assert math.isclose(roofline(1.0, peak_flops=1307.4e12, bandwidth=5.3e12)["ridge"], 1307.4 / 5.3), \
    "脊点 = 峰值 FLOPS / 带宽 / ridge = peak FLOPS / bandwidth"
assert math.isclose(forward_intensity(N70, 2048), 2048.0), "bf16、无 KV：强度等于 token 数 / bf16, no KV: intensity = tokens"
assert derived[f"prefill, {CONTEXT}-token prompt"]["bound"] == "compute", "prefill 应落在算力一侧 / prefill must come out compute-bound"
assert derived["decode, batch 1"]["bound"] == "memory", "decode 应落在带宽一侧 / decode must come out memory-bound"
assert roofline(10.0, peak_flops=100.0, bandwidth=5.0) == {"ridge": 20.0, "attainable_flops": 50.0, "bound": "memory"}, \
    "脊点以下：带宽屋顶 / below the ridge: the memory roof"
assert roofline(20.0, peak_flops=100.0, bandwidth=5.0)["bound"] == "compute", "恰在脊点算作 compute / at the ridge counts as compute"
assert math.isclose(forward_intensity(1000, 8, bytes_per_param=4, kv_bytes=4000), 16000 / 8000), \
    "字节 = 参数量 × 每参数字节数 + KV 字节 / bytes = params x bytes_per_param + KV bytes"
try:
    roofline(1.0, peak_flops=0.0, bandwidth=1.0)
except ValueError:
    pass
else:
    raise AssertionError("peak_flops <= 0 应抛出 ValueError / peak_flops <= 0 must raise ValueError")

# %% [markdown] tags=["zh"]
# 推导的结论：一次 2048 个 token 的 prefill 强度约 2048 FLOP/byte，远在脊点右侧，受算力限制；batch 1 的 decode 强度约 1，
# 远在左侧，受带宽限制。batch 变大时 decode 的强度随之变大，但每条序列的 KV cache 也要读：2K 上下文下，无论 batch 多大，
# 强度都停在脊点以下，所以长上下文的 decode 始终受带宽限制。提示词很短时 prefill 也会落在带宽一侧——“prefill 受算力限制”
# 是由提示词长度推出来的，不是定律。
#
# 与本机比较：已知 GPU 的带宽取自共享数据手册表（按产品名精确匹配）；CPU 或表中没有的 GPU 没有可引用的数字，下面用一次
# 大张量拷贝**估算**（CPU 上 256 MiB、GPU 上 2 GiB，大于常见末级缓存），只是量级参考。测得值只报告、不评分。

# %% [markdown] tags=["en"]
# The derived result: a 2048-token prefill has an intensity of about 2048 FLOP/byte, far right of the ridge, so
# it is compute-bound; a batch-1 decode step has about 1, far left, so it is memory-bound. A bigger batch raises
# decode's intensity, but every sequence's KV cache must be read too: at 2K context the intensity stays below the
# ridge however large the batch, so long-context decode stays memory-bound. A very short prompt puts prefill on
# the memory side as well: "prefill is compute-bound" follows from the prompt length; it is not a law.
#
# Compare with this machine: a known GPU's bandwidth comes from the shared datasheet table (exact product name);
# a CPU, or a GPU missing from the table, has no figure to cite, and below it is **estimated** from one large
# tensor copy (256 MiB on a CPU, 2 GiB on a GPU, beyond common last-level caches), an order of magnitude only.
# The measured rate is reported, not graded.

# %%
def device_bandwidth(dev):
    """(bytes/s, where the figure comes from): the datasheet peak of a known GPU, else an estimate
    from timing one large copy on the device (it reads and writes every byte once)."""
    name, spec = datasheets.for_device(dev)
    if spec is not None:
        return spec.per_device()["bandwidth_gbs"] * 1e9, f"{spec.key} datasheet ({spec.sources[0]})"
    mib = 2048 if dev.type == "cuda" else 256
    src = torch.empty(mib * 2**20, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    t = lab.time_it(lambda: dst.copy_(src), repeats=3, warmup=1, device=dev)
    del src, dst
    return 2 * mib * 2**20 / t["median"], f"{name} estimate: one {mib} MiB copy (read + write), not a datasheet figure"


bandwidth, bandwidth_source = device_bandwidth(device)
weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
kv_per_token = kv_cache_bytes(model.config.to_dict(), 1, bytes_per_elem=torch.finfo(dtype).bits // 8)
_ctx = len(PROMPTS[0]) + MAX_NEW_TOKENS // 2
measured = len(_run["decode_s"]) / sum(_run["decode_s"])
bound = decode_roofline(weight_bytes, kv_per_token, _ctx, 1, bandwidth)
roofline_record = {"bandwidth_bytes_per_s": bandwidth, "bandwidth_source": bandwidth_source,
                   "weight_bytes": weight_bytes, "kv_bytes_per_token": kv_per_token,
                   "bound_tokens_per_s": bound, "measured_tokens_per_s": measured,
                   "fraction_of_bound": measured / bound}
print(f"bandwidth {bandwidth / 1e9:,.0f} GB/s ({bandwidth_source})")
print(f"batch-1 decode: measured {measured:,.0f} tokens/s, roofline bound {bound:,.0f} tokens/s "
      f"({measured / bound:.1%} of it)")

# %% [markdown] tags=["zh"]
# 小模型在 CPU 上远达不到上界：每步的时间主要花在 Python 与算子调度开销上，而非读权重。在 GPU 上 0.5B 模型
# batch 1 同样受调度开销限制（这就是 vLLM 使用 CUDA/HIP Graph 的原因）；70B 模型才接近带宽上界。

# %% [markdown] tags=["en"]
# A small model on a CPU stays far below the bound: each step's time goes to Python and operator dispatch, not
# to reading weights. On a GPU a 0.5B model at batch 1 is also dispatch-bound (that is why vLLM uses CUDA/HIP
# graphs); a 70B model comes close to the bandwidth bound.

# %% [markdown] tags=["zh"]
# ## 6 · 在自己的运行上回放一次负载
#
# 按第 2 节的到达时刻回放 `N_REQUESTS` 个请求，由第 3 节的生成循环依次服务（单服务器、先来先服务），再用第 1 节计算指标。
# 模型真实运行，只有“排队等待”用虚拟时钟累加，所以很快。每个请求的 TTFT 包含排队时间，这与 vLLM 客户端从发出请求开始计时一致。

# %% [markdown] tags=["en"]
# Replay `N_REQUESTS` requests at the send times of section 2, served one after another by the generate loop of
# section 3 (one server, first come first served), then compute the metrics of section 1. The model really
# runs; only the waiting in the queue is added on a virtual clock, so it is quick. Each TTFT includes the
# queueing time, just as vLLM's client times from the moment the request is sent.

# %%
arrivals = arrival_times(N_REQUESTS, REQUEST_RATE, seed=SEED)
traces, intervals, free_at = [], [], 0.0
for _i, _sent in enumerate(arrivals):
    _prompt = PROMPTS[_i % len(PROMPTS)]
    _g = generate_with_kv_cache(model, _prompt, MAX_NEW_TOKENS, eos_token_id=EOS)
    _start = max(_sent, free_at)
    _first = _start + _g["prefill_s"]
    free_at = _first + sum(_g["decode_s"])
    traces.append({"prompt_len": len(_prompt), "output_len": len(_g["tokens"]), "ttft": _first - _sent,
                   "itl": list(_g["decode_s"]), "latency": free_at - _sent, "success": True})
    intervals.append((float(_sent), free_at))
replay_duration = free_at - arrivals[0]
serving = compute_metrics(traces, replay_duration, slo_ms={"ttft": 500, "tpot": 50})
print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in serving.items()}, indent=1))

# %% [markdown] tags=["zh"]
# ## 7 · 流式客户端（OpenAI 兼容接口）
#
# vLLM（包括 ROCm 版）提供 OpenAI 兼容的 `/v1/completions` 与 `/v1/chat/completions`。请求中 `"stream": true` 时，
# 服务器以 server-sent events 逐块返回：每个事件是一行 `data: {json}` 加空行，最后是 `data: [DONE]`。只有**在每个事件到达时
# 打时间戳**才能量出 TTFT 与 ITL；先读完整个响应再解析，所有间隔都会变成 0。
#
# **事件不是 token。** 一个事件可能带几个 token；增量反分词 (incremental detokenization) 时，一个汉字的 3 个 UTF-8 字节若被
# 拆进不同的 token，不完整的字节会被扣住，这个事件的文本是空串，字节随后面的事件一起发出。所以请求里加上
# `"stream_options": {"include_usage": true}`：服务器在 `[DONE]` 之前多发一个事件，其 `choices` 为空列表、`usage` 里有
# `prompt_tokens`、`completion_tokens`、`total_tokens`（[OpenAI API 参考：`stream_options`](https://platform.openai.com/docs/api-reference/chat/create)；
# vLLM 的实现见 [`completion/serving.py`](https://github.com/vllm-project/vllm/blob/main/vllm/entrypoints/openai/completion/serving.py)，
# 另有扩展 `continuous_usage_stats`，让每个事件都带上截至当时的 usage）。`vllm bench serve` 也这样做，服务器没给 usage 时
# 再对文本重新分词。chat 流的第一个事件只声明 `"role": "assistant"`（vLLM 在第一个输出就绪时发出），它不是 token。
# completions 的文本在 `choices[0].text`，chat 在 `choices[0].delta.content`。冒烟配置中实验会在本机回环地址启动一个按脚本
# 节奏发送的小服务器（`lab.ScriptedSSEServer`，行为同上），用它检验你的客户端。下面先看一句话的事件与 token。

# %% [markdown] tags=["en"]
# ## 7 · A streaming client (OpenAI-compatible API)
#
# vLLM (the ROCm build too) serves OpenAI-compatible `/v1/completions` and `/v1/chat/completions`. With
# `"stream": true` the server answers with server-sent events: each event is a line `data: {json}` and a blank
# line, the last one `data: [DONE]`. Only **a timestamp taken as each event arrives** measures TTFT and ITL; read
# the whole body first and every gap becomes 0.
#
# **Events are not tokens.** An event can carry several tokens, and an incremental detokenizer holds back the
# bytes of an incomplete character: when the 3 UTF-8 bytes of a Chinese character fall into different tokens,
# the event's text is empty and the bytes go out with a later event. So the request adds
# `"stream_options": {"include_usage": true}`: the server sends one more event before `[DONE]`, with an empty
# `choices` list and a `usage` holding `prompt_tokens`, `completion_tokens` and `total_tokens`
# ([OpenAI API reference: `stream_options`](https://platform.openai.com/docs/api-reference/chat/create); vLLM's
# implementation is in [`completion/serving.py`](https://github.com/vllm-project/vllm/blob/main/vllm/entrypoints/openai/completion/serving.py),
# with an extension, `continuous_usage_stats`, that puts the usage so far on every event). `vllm bench serve`
# does the same and re-tokenizes the text when a server sends no usage. A chat stream's first event only
# announces `"role": "assistant"` (vLLM sends it when the first output is ready); it is not a token. Completions
# carry the text in `choices[0].text`, chat in `choices[0].delta.content`. In smoke the lab starts a small
# loopback server that sends on a scripted schedule (`lab.ScriptedSSEServer`, behaving as above) to check your
# client against. First, the events and tokens of one sentence.

# %%
from rocmlab.lab.sse import incremental_pieces

REPORT_TEXT = "焊缝表面发现蜂窝状气孔，建议返修。"
_ids = tok(REPORT_TEXT, add_special_tokens=False)["input_ids"]
_pieces = incremental_pieces(_ids, tok.decode)
print(f"{len(REPORT_TEXT)} characters, {len(_ids)} tokens, {sum(1 for p in _pieces if p)} events with text:")
print(_pieces)
# A server that flushes every two tokens sends half as many events, each carrying two tokens:
STREAM_PIECES = ["".join(_pieces[i:i + 2]) for i in range(0, len(_pieces), 2)]
STREAM_TOKENS = [len(_pieces[i:i + 2]) for i in range(0, len(_pieces), 2)]
print(list(zip(STREAM_PIECES, STREAM_TOKENS)))

# %% [markdown] tags=["zh"]
# **练习 7 的约定**：`stream_completion(base_url, prompt, *, max_tokens, model="", chat=False, prompt_len=0, timeout_s=30.0)`
#
# - 向 `base_url + "/v1/completions"` 发 POST（`chat=True` 时发到 `"/v1/chat/completions"`，提示词作为一条 user 消息
#   `messages=[{"role": "user", "content": prompt}]`），JSON 体含 `model`、`max_tokens`、`"stream": true`、
#   `"stream_options": {"include_usage": true}`、`"temperature": 0`。
# - 逐行读取；只处理以 `data:` 开头的行；`data: [DONE]` 结束。
# - **token 事件**：`choices` 非空，且第一项带文本字段——completions 的 `text`、chat 的 `delta.content`——即使是空串；
#   chat 里 `delta` 带 `role` 的开场事件不算。每个 token 事件**在到达时**打时间戳：`ttft` = 第一个 token 事件 − 开始，
#   `itl` = 相邻 token 事件的间隔列表，`latency` = 最后一个 token 事件 − 开始（秒；“开始”取发送请求之前）。
#   usage 事件和 `[DONE]` 不算 token 事件。
# - `text` = 所有 token 事件文本的拼接。
# - `output_len` = 流中最后一个 `usage` 对象的 `completion_tokens`；流中没有 usage 时为 None（第 1 节会重新分词）。
# - 返回字典：`prompt_len`（原样返回参数）、`output_len`、`ttft`、`itl`、`latency`、`success`、`text`、`error`。
#   `success` 为真当且仅当至少有一个 token 事件且没有出错；`error` 为 None 或一段说明。网络错误、HTTP 错误或坏 JSON
#   **不抛出异常**，而是 `success=False` 并写明 `error`。

# %% [markdown] tags=["en"]
# **Exercise 7 contract**: `stream_completion(base_url, prompt, *, max_tokens, model="", chat=False, prompt_len=0, timeout_s=30.0)`
#
# - POST to `base_url + "/v1/completions"` (with `chat=True` to `"/v1/chat/completions"`, the prompt as one user
#   message, `messages=[{"role": "user", "content": prompt}]`), a JSON body with `model`, `max_tokens`,
#   `"stream": true`, `"stream_options": {"include_usage": true}` and `"temperature": 0`.
# - Read line by line; only lines starting `data:` matter; `data: [DONE]` ends the stream.
# - **Token events**: `choices` is not empty and its first item has a text field, completions' `text` or chat's
#   `delta.content`, even an empty string; in chat the opening event whose `delta` carries `role` does not count.
#   Timestamp each token event **as it arrives**: `ttft` = first token event − start, `itl` = the gaps between
#   consecutive token events, `latency` = last token event − start (seconds; "start" is just before sending). The
#   usage event and `[DONE]` are not token events.
# - `text` = the token events' text, joined.
# - `output_len` = `completion_tokens` of the last `usage` object in the stream; None when the stream carried no
#   usage (section 1 then re-tokenizes).
# - Return a dict: `prompt_len` (the argument, as given), `output_len`, `ttft`, `itl`, `latency`, `success`,
#   `text`, `error`. `success` is true exactly when there was at least one token event and no error; `error` is
#   None or a message. A network error, an HTTP error or bad JSON **does not raise**: `success` is False and
#   `error` says why.

# %% tags=["solution"] grade_id="02-stream-sol-1"
def stream_completion(base_url, prompt, *, max_tokens, model="", chat=False, prompt_len=0, timeout_s=30.0):
    """One streaming request, every token event timed on arrival (rules and keys in the prose)."""
    ### BEGIN SOLUTION
    import urllib.request

    body = {"model": model, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}, "temperature": 0.0}
    if chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    path = "/v1/chat/completions" if chat else "/v1/completions"
    request = urllib.request.Request(base_url.rstrip("/") + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    trace = {"prompt_len": prompt_len, "output_len": None, "ttft": 0.0, "itl": [], "latency": 0.0,
             "success": False, "text": "", "error": None}
    pieces, start, last = [], time.perf_counter(), None
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            for raw in response:
                line = raw.decode("utf-8").strip()
                if not line.startswith("data:"):
                    continue
                data = line[len("data:"):].strip()
                if data == "[DONE]":
                    break
                now = time.perf_counter()
                event = json.loads(data)
                if isinstance(event.get("usage"), dict):
                    trace["output_len"] = event["usage"].get("completion_tokens")
                choices = event.get("choices") or []
                if not choices:
                    continue
                if chat:
                    delta = choices[0].get("delta") or {}
                    piece = None if "role" in delta else delta.get("content")
                else:
                    piece = choices[0].get("text")
                if not isinstance(piece, str):
                    continue
                if last is None:
                    trace["ttft"] = now - start
                else:
                    trace["itl"].append(now - last)
                last = now
                pieces.append(piece)
    except (OSError, ValueError) as err:
        trace["error"] = f"{type(err).__name__}: {err}"
        return trace
    trace.update(text="".join(pieces), success=last is not None,
                 latency=(last - start) if last is not None else 0.0)
    if last is None:
        trace["error"] = "the stream carried no token event"
    return trace
    ### END SOLUTION

# %% tags=["test"] grade_id="02-stream-1" points=3
_script, _counts = ["焊缝", "", "气孔需", "返工"], [2, 1, 2, 2]     # the empty piece holds back half a character
with lab.ScriptedSSEServer(_script, tokens_per_piece=_counts, ttft_s=0.25, itl_s=0.04) as _srv:
    _s = stream_completion(_srv.base_url, "写报告", max_tokens=32, prompt_len=3)
assert _s["success"] and _s["text"] == "".join(_script), f"文本是所有 token 事件的拼接 / text joins every token event: {_s}"
assert _s["output_len"] == sum(_counts) == 7, \
    f"token 数取自 usage，不是事件数 / the token count comes from usage, not from events: got {_s['output_len']}"
assert len(_s["itl"]) == len(_script) - 1, \
    f"空文本的事件也是 token 事件：4 个事件有 3 个间隔 / an empty piece is a token event too: 4 events give 3 gaps, got {len(_s['itl'])}"
assert 0.24 <= _s["ttft"] < 0.25 + 0.75, f"TTFT 应接近脚本的 0.25 s / TTFT near the scripted 0.25 s: {_s['ttft']:.3f}"
assert 0.035 <= float(np.mean(_s["itl"])) < 0.04 + 0.1, \
    f"ITL 应接近 0.04 s（在事件到达时打时间戳）/ ITL near 0.04 s (timestamp on arrival): {_s['itl']}"
assert math.isclose(_s["latency"], _s["ttft"] + sum(_s["itl"]), rel_tol=1e-6), "latency 到最后一个 token 事件 / latency ends at the last token event"
assert _s["prompt_len"] == 3 and _s["error"] is None, "prompt_len 原样返回，成功时 error 为 None / prompt_len as given, error None"
assert not _srv.running, "服务器已停止 / the server is stopped"
with lab.ScriptedSSEServer(["质检", "合格"], usage=False, ttft_s=0.0, itl_s=0.0) as _srv:
    _c = stream_completion(_srv.base_url, "写报告", max_tokens=8, chat=True)
    _dead_port = _srv.port
assert _c["text"] == "质检合格" and len(_c["itl"]) == 1, \
    f"chat：文本取自 delta.content，role 事件不算 token 事件 / chat: delta.content, the role event is no token event: {_c}"
assert _c["output_len"] is None, "没有 usage 时 output_len 为 None / without usage output_len is None"
_d = stream_completion(f"http://127.0.0.1:{_dead_port}", "写报告", max_tokens=4, timeout_s=2)
assert _d["success"] is False and _d["error"], f"连接被拒绝：失败的轨迹，不抛异常 / a refused connection is a failed trace: {_d}"

# %% [markdown] tags=["zh"]
# 用流式客户端做一次小型在线压测：按第 2 节的到达时刻在线程中发出 `N_REQUESTS` 个请求，再用第 1 节计算指标（服务器没给
# usage 时由 `tokenize` 重新分词）。`STREAM_URL` 为空时使用本地脚本服务器（上面那句话，每个事件带两个 token，TTFT 0.2 s、
# 事件间隔 30 ms）；gpu 配置下可以指向真实的 vLLM（`vllm serve Qwen/Qwen2.5-0.5B-Instruct`，ROCm 镜像 `rocm/vllm`）。
# 服务器在 `finally` 中一定会被停止。最后比较三种“输出长度”：有文本的事件数、所有事件数、服务器的 token 数。

# %% [markdown] tags=["en"]
# A small online load test with the streaming client: send `N_REQUESTS` requests from threads at the send times
# of section 2, then compute the metrics of section 1 (re-tokenizing with `tokenize` when a server sends no
# usage). With an empty `STREAM_URL` the local scripted server is used (the sentence above, two tokens per
# event, TTFT 0.2 s, 30 ms between events); in the gpu profile point it at a real vLLM
# (`vllm serve Qwen/Qwen2.5-0.5B-Instruct`, ROCm image `rocm/vllm`). The server is always stopped in `finally`.
# At the end, three "output lengths" side by side: events with text, all events, and the server's token count.

# %%
def run_stream_load(base_url, prompts, send_times, *, max_tokens, model=""):
    """Send each prompt at its send time from its own thread; returns (traces, wall-clock duration)."""
    results = [None] * len(prompts)
    t0 = time.perf_counter()

    def one(i):
        time.sleep(max(0.0, send_times[i] - (time.perf_counter() - t0)))
        results[i] = stream_completion(base_url, prompts[i], max_tokens=max_tokens, model=model,
                                       prompt_len=len(tok(prompts[i])["input_ids"]))

    threads = [threading.Thread(target=one, args=(i,), name=f"lab02-client-{i}") for i in range(len(prompts))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    return [r for r in results if r is not None], time.perf_counter() - t0


def count_tokens(text):
    return tok(text, add_special_tokens=False)["input_ids"]


_stream_prompts = [PROMPT_TEXTS[i % len(PROMPT_TEXTS)] for i in range(N_REQUESTS)]
_server = None if STREAM_URL else lab.ScriptedSSEServer(
    STREAM_PIECES, tokens_per_piece=STREAM_TOKENS, ttft_s=0.2, itl_s=0.03, max_lifetime_s=120,
    count_tokens=lambda text: len(count_tokens(text)))
_stream_port = None
try:
    _url = STREAM_URL or _server.start().base_url
    _stream_port = _server.port if _server is not None else None
    stream_traces, stream_duration = run_stream_load(_url, _stream_prompts, arrivals, max_tokens=MAX_NEW_TOKENS,
                                                     model=STREAM_MODEL)
finally:
    if _server is not None:
        _server.stop()
stream_metrics = compute_metrics(stream_traces, stream_duration, tokenize=count_tokens)
print(f"{stream_metrics['completed']} ok, {stream_metrics['failed']} failed in {stream_duration:.2f} s | "
      f"TTFT p50 {stream_metrics['median_ttft_ms']:.0f} ms, TPOT mean {stream_metrics['mean_tpot_ms']:.1f} ms, "
      f"ITL p99 {stream_metrics['p99_itl_ms']:.1f} ms, {stream_metrics['output_throughput']:.0f} tokens/s")
_t = next(t for t in stream_traces if t["success"])
print(f"one request: {len(_t['text'])} characters, {len(_t['itl']) + 1} events, "
      f"usage says {_t['output_len']} tokens, re-tokenized {len(count_tokens(_t['text']))}")

# %%
_left = [t.name for t in threading.enumerate() if t.name.startswith("rocmlab-sse")]
assert not lab.active_sse_servers() and not _left, f"SSE server still running: {_left}"
if _stream_port is not None:
    with socket.socket() as _sock:
        _sock.settimeout(1.0)
        assert _sock.connect_ex(("127.0.0.1", _stream_port)) != 0, f"port {_stream_port} still accepts connections"
print("all SSE servers stopped")

# %% [markdown] tags=["zh"]
# 用 TPOT 时，分母是 token 数：若把事件数当 token 数，每个事件带两个 token 时 TPOT 会被高估一倍。TPOT 和输出吞吐都依赖
# 正确的 token 数，而 ITL 是事件之间的间隔，本身就按事件统计。
#
# ## 小结
#
# 你建立了一个可信的 LLM 基准：与 vLLM 一致的指标定义、可复现的负载、分别计时的 prefill/decode、由配置推出的 KV cache 显存、
# 两个屋顶与脊点的 roofline 以及由它推出的“prefill 受算力、decode 受带宽限制”，还有按服务器 usage 计数的流式客户端。
# 在更大的 GPU 上可以试：用 `vllm bench serve` 对同一模型在 ROCm 与 CUDA 上测量，并用本实验的定义核对它的输出；
# 把 `CONTEXT` 和 batch 换成你的负载，看 decode 离脊点多远。参考：vLLM 基准文档
# （https://docs.vllm.ai/en/latest/contributing/benchmarks.html）、ROCm 上的 vLLM 推理文档
# （https://rocm.docs.amd.com/en/latest/how-to/rocm-for-ai/inference/index.html）。下面是选做部分。

# %% [markdown] tags=["en"]
# TPOT divides by the token count: take events for tokens and, with two tokens per event, TPOT comes out twice
# too high. TPOT and output throughput both need the right token count, while ITL is the gap between events and
# is counted per event by definition.
#
# ## Wrap-up
#
# You built a trustworthy LLM benchmark: metric definitions that match vLLM, a reproducible load, prefill and
# decode timed apart, KV-cache memory from the config, a roofline with both roofs and its ridge point and, from
# it, "prefill compute-bound, decode memory-bound" derived, and a streaming client that counts tokens from the
# server's usage. On a bigger GPU: measure one model with `vllm bench serve` on ROCm and CUDA and check its
# output against this lab's definitions; set `CONTEXT` and the batch to your workload and see how far decode sits
# from the ridge. References: vLLM benchmark docs (https://docs.vllm.ai/en/latest/contributing/benchmarks.html),
# vLLM inference on ROCm (https://rocm.docs.amd.com/en/latest/how-to/rocm-for-ai/inference/index.html). The
# optional stretch follows.

# %% [markdown] tags=["zh"]
# ## 选做 S1 · 静态批处理
#
# 一次 decode 步要把全部权重从显存读一遍，批里有 1 条还是 16 条请求几乎一样贵，所以批处理能把吞吐成倍提高
# （第 5 节：batch 抬高了 decode 的算术强度）。不同长度的提示词要**左填充**（left padding），让每条序列的最后一个位置都是
# 真实 token；注意力掩码屏蔽填充，`position_ids` 从每条序列的第一个真实 token 数起（`cumsum(mask) − 1`）。
#
# **选做 S1 的约定**：`generate_static_batch(m, prompts, max_new_tokens, *, pad_token_id, eos_token_id=None)` 对多个提示词
# （token id 列表）一起贪心解码：左填充、注意力掩码、position ids、共用一个 KV cache，用 `forward(m, ids, cache, ...)`。
# 返回每个提示词一个新 token 列表，各自在自己的第一个 `eos_token_id` 之后截断（含 eos）或到 `max_new_tokens` 为止。
# 结果必须与逐条调用 `model.generate` 的贪心输出逐 token 相同（隐藏检查用不同长度、不同 eos 检查）。

# %% [markdown] tags=["en"]
# ## Stretch S1 · Static batching
#
# One decode step reads all the weights from memory once, whether the batch holds 1 request or 16, so batching
# multiplies throughput (section 5: the batch raises decode's arithmetic intensity). Prompts of different lengths
# are **left-padded**, so that every row ends on a real token; the attention mask hides the padding and
# `position_ids` count from each row's first real token (`cumsum(mask) − 1`).
#
# **Stretch S1 contract**: `generate_static_batch(m, prompts, max_new_tokens, *, pad_token_id, eos_token_id=None)`
# decodes several prompts (lists of token ids) greedily together: left padding, attention mask, position ids, one
# shared KV cache, through `forward(m, ids, cache, ...)`. It returns one list of new tokens per prompt, each cut
# right after its own first `eos_token_id` (included) or at `max_new_tokens`. The result must equal
# `model.generate`'s greedy output one prompt at a time, token for token (hidden checks vary lengths and eos).

# %% tags=["solution"] grade_id="02-stretch-batch-sol-1"
def generate_static_batch(m, prompts, max_new_tokens, *, pad_token_id, eos_token_id=None):
    """Greedy decoding of several prompts together, left-padded (rules in the prose)."""
    ### BEGIN SOLUTION
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, p in enumerate(prompts):
        ids[row, width - len(p):] = torch.tensor(p)
        mask[row, width - len(p):] = 1
    ids, mask = ids.to(m.device), mask.to(m.device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    results = [[] for _ in prompts]
    done = [False] * len(prompts)
    with torch.no_grad():
        logits, cache = forward(m, ids, attention_mask=mask, position_ids=positions)
        for step in range(max_new_tokens):
            next_ids = logits[:, -1].argmax(-1)
            for row, token in enumerate(next_ids.tolist()):
                if not done[row]:
                    results[row].append(token)
                    done[row] = token == eos_token_id
            if all(done) or step == max_new_tokens - 1:
                break
            mask = torch.cat([mask, mask.new_ones(len(prompts), 1)], dim=1)
            positions = positions[:, -1:] + 1
            logits, cache = forward(m, next_ids[:, None], cache, attention_mask=mask,
                                    position_ids=positions)
    return results
    ### END SOLUTION

# %% tags=["test"] grade_id="02-stretch-batch-1" points=3
_ps = [PROMPTS[0], PROMPTS[1][:5], PROMPTS[2]]
assert len({len(p) for p in _ps}) > 1, "the check needs prompts of different lengths"
_b = generate_static_batch(ref_model, _ps, 8, pad_token_id=PAD, eos_token_id=EOS)
_one = [reference_greedy(ref_model, p, 8) for p in _ps]
assert _b == _one, f"批处理应与逐条贪心相同 / batched must equal one-at-a-time:\n{_b}\n{_one}"
_b = generate_static_batch(ref_model, _ps[:2], 5, pad_token_id=PAD)
assert [len(r) for r in _b] == [5, 5], f"没有 eos 时每条恰好 max_new_tokens 个 / without eos, exactly max_new_tokens each: {_b}"

# %% [markdown] tags=["zh"]
# 测量吞吐与批大小的关系（固定生成 `MAX_NEW_TOKENS` 个 token，不因 eos 提前停止）。延迟 = 整批完成的时间；
# 吞吐 = 批大小 × 新 token 数 / 延迟。预热一次、取中位数。

# %% [markdown] tags=["en"]
# Throughput against batch size (a fixed `MAX_NEW_TOKENS` new tokens, no early stop at eos). Latency = time for
# the whole batch; throughput = batch size × new tokens / latency. One warm-up run, median of the rest.

# %%
batching = []
for bs in BATCH_SIZES:
    _batch = [PROMPTS[i % len(PROMPTS)] for i in range(bs)]
    _t = lab.time_it(lambda b=_batch: generate_static_batch(model, b, MAX_NEW_TOKENS, pad_token_id=PAD),
                     repeats=2, warmup=1, device=device)
    batching.append({"batch_size": bs, "seconds": _t["median"], "tokens": bs * MAX_NEW_TOKENS,
                     "tokens_per_s": bs * MAX_NEW_TOKENS / _t["median"]})
    print(f"batch {bs:3d}: {_t['median'] * 1e3:8.1f} ms  {batching[-1]['tokens_per_s']:9.1f} tokens/s")

_fig, (_ax1, _ax2) = plt.subplots(1, 2, figsize=(10, 3.5))
_xs = [b["batch_size"] for b in batching]
lab.plot_lines({"latency": (_xs, [b["seconds"] * 1e3 for b in batching])}, ax=_ax1, logx=True,
               title="batch latency", xlabel="batch size", ylabel="ms")
lab.plot_lines({"throughput": (_xs, [b["tokens_per_s"] for b in batching])}, ax=_ax2, logx=True,
               title="decode throughput", xlabel="batch size", ylabel="tokens/s")
plt.tight_layout()
plt.show()

# %% [markdown] tags=["zh"]
# 在真实 GPU 上（gpu 配置）吞吐随批大小近似线性增长，而延迟几乎不变，直到算力或 KV cache 成为瓶颈；在 CPU 上
# 曲线要平得多。静态批的缺点：整批等最慢的请求。vLLM 的连续批处理（continuous batching）每步都可以加入新请求。

# %% [markdown] tags=["en"]
# On a real GPU (gpu profile) throughput grows almost linearly with batch size while latency barely moves, until
# compute or the KV cache becomes the limit; on a CPU the curve is much flatter. Static batching's weakness:
# the whole batch waits for its slowest request. vLLM's continuous batching admits new requests at every step.

# %% [markdown] tags=["zh"]
# ## 选做 S2 · 由配置数参数
#
# 参数量：嵌入 V·h（未共享时 lm_head 再加 V·h），每层 q/k/v/o 投影、MLP 三个矩阵（gate/up/down，各 h × intermediate）、
# 两个 RMSNorm（各 h），最后一个 norm（h）。
#
# **选做 S2 的约定**：`param_count(config)` 返回 Qwen2 / Llama 结构解码器的参数量（整数）。`config` 的键同第 4 节，另有
# `intermediate_size`、`vocab_size`、`tie_word_embeddings`（真时 lm_head 与嵌入共享）、`model_type`、`attention_bias`。
# 每层：q 投影 h × (头数·head_dim)，k、v 投影各 h × (KV 头数·head_dim)，o 投影 (头数·head_dim) × h；q/k/v 带偏置当且仅当
# `model_type == "qwen2"` 或 `attention_bias` 为真（偏置长度等于各自的输出维）；MLP 3 · h · intermediate；两个 norm 各 h。
# 隐藏检查还会用已加载模型的真实参数量检查。

# %% [markdown] tags=["en"]
# ## Stretch S2 · Parameters from the config
#
# Parameters: embedding V·h (plus V·h for lm_head unless tied); per layer the q/k/v/o projections, the three MLP
# matrices (gate/up/down, h × intermediate each) and two RMSNorms (h each); a final norm (h).
#
# **Stretch S2 contract**: `param_count(config)` returns the parameter count (an integer) of a Qwen2 / Llama style
# decoder. `config` has the keys of section 4 plus `intermediate_size`, `vocab_size`, `tie_word_embeddings` (true:
# lm_head shares the embedding), `model_type` and `attention_bias`. Per layer: q projection h × (heads·head_dim),
# k and v projections h × (KV heads·head_dim) each, o projection (heads·head_dim) × h; q/k/v carry a bias exactly
# when `model_type == "qwen2"` or `attention_bias` is true (each bias as long as its output); the MLP 3 · h ·
# intermediate; two norms of h. Hidden checks also hold it against the loaded model's real parameter count.

# %% tags=["solution"] grade_id="02-stretch-params-sol-1"
def param_count(config):
    """Parameters of a Qwen2 / Llama style decoder from its config dict (rules in the prose)."""
    ### BEGIN SOLUTION
    h, heads = config["hidden_size"], config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or h // heads
    bias = config.get("model_type") == "qwen2" or bool(config.get("attention_bias"))
    q, kv = heads * head_dim, kv_heads * head_dim
    attention = h * q + 2 * h * kv + q * h + (q + 2 * kv if bias else 0)
    layer = attention + 3 * h * config["intermediate_size"] + 2 * h
    embed = config["vocab_size"] * h
    return (config["num_hidden_layers"] * layer + h + embed
            + (0 if config.get("tie_word_embeddings") else embed))
    ### END SOLUTION

# %% tags=["test"] grade_id="02-stretch-params-1" points=2
_got = param_count(QWEN25_05B)
assert _got == 494_032_768, f"Qwen2.5-0.5B 有 494,032,768 个参数 / has 494,032,768 parameters, got {_got:,}"
_got = param_count(LLAMA3_70B)
assert _got == PARAMS["Llama-3-70B"], f"Llama-3-70B 有 70,553,706,496 个参数 / has 70,553,706,496 parameters, got {_got:,}"
assert param_count(LLAMA3_70B | {"attention_bias": True}) == PARAMS["Llama-3-70B"] + 80 * (8192 + 2 * 1024), \
    "attention_bias 为真时 q/k/v 带偏置 / attention_bias adds q/k/v biases"

# %% [markdown] tags=["zh"]
# ## 选做 S3 · Little 定律
#
# **Little 定律**：稳态下系统中的平均请求数 L = 到达率 λ × 平均停留时间 W。例如 64 个并发、每个请求 2 s，吞吐就是
# 32 请求/s。把要求的并发数与测得的吞吐、延迟对照，可以发现压测工具本身是否成了瓶颈。下面在第 6 节的回放上检验它。
#
# **选做 S3 的约定**：`mean_concurrency(intervals)` 返回一组请求区间在 [最早开始, 最晚结束] 上的**时间平均并发数**（浮点数）。
# `intervals` 是 `(start, end)` 秒的列表，`end >= start`，顺序任意；空闲间隙也算在时长里。列表为空或总时长为 0 时抛出 `ValueError`。

# %% [markdown] tags=["en"]
# ## Stretch S3 · Little's law
#
# **Little's law**: at steady state the mean number of requests in the system L = arrival rate λ × mean time in
# the system W. With 64 in flight at 2 s each, throughput is 32 requests/s. Holding the concurrency you asked for
# against measured throughput and latency shows whether the load generator itself became the bottleneck. Below
# you check it on the replay of section 6.
#
# **Stretch S3 contract**: `mean_concurrency(intervals)` returns the **time-averaged number of requests in flight**
# (a float) over [earliest start, latest end]. `intervals` is a list of `(start, end)` in seconds, `end >= start`,
# in any order; idle gaps count in the span. An empty list or a zero span raises `ValueError`.

# %% tags=["solution"] grade_id="02-stretch-little-sol-1"
def mean_concurrency(intervals):
    """Time-averaged number of requests in flight over [earliest start, latest end] (rules in the prose)."""
    ### BEGIN SOLUTION
    if not intervals:
        raise ValueError("mean_concurrency needs at least one (start, end) interval")
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    first, last = events[0][0], events[-1][0]
    if last <= first:
        raise ValueError("the intervals span zero time; no average concurrency")
    area, in_flight, prev = 0.0, 0, first
    for t, step in events:
        area += in_flight * (t - prev)
        in_flight, prev = in_flight + step, t
    return area / (last - first)
    ### END SOLUTION

# %%
littles_law = {"mean_concurrency": mean_concurrency(intervals),
               "throughput_x_latency": serving["request_throughput"] * serving["mean_e2el_ms"] / 1000}
print(littles_law)

# %% tags=["test"] grade_id="02-stretch-little-1" points=2
assert math.isclose(mean_concurrency([(0, 2), (1, 3)]), 4 / 3), "两个重叠的请求，跨度 3 s：4/3 / two overlapping requests over 3 s: 4/3"
assert math.isclose(littles_law["mean_concurrency"], littles_law["throughput_x_latency"], rel_tol=1e-9), \
    f"Little 定律 L = λW 在自己的运行上应成立 / L = λW must hold on your run: {littles_law}"
assert math.isclose(mean_concurrency([(2, 3), (0, 1)]), 2 / 3), "空闲间隙也算在时长里 / idle gaps count in the span"
try:
    mean_concurrency([])
except ValueError:
    pass
else:
    raise AssertionError("空列表应抛出 ValueError / an empty list must raise ValueError")

# %% [markdown] tags=["zh"]
# ## 选做 S4 · 结果 JSON
#
# 一个基准数字离开了环境就没有意义：同一模型在不同 ROCm、不同 PyTorch 版本下可能差很多。结果文件要带**环境指纹**，
# 并且**总数自洽**：请求数、token 总数与各项吞吐必须能互相推出。
#
# **选做 S4 的约定**：
#
# - `environment_fingerprint(dev)` 返回字典：`python`、`torch`、`hip`、`cuda`（不是该构建时为 None）、`transformers`、
#   `device`（`str(dev)`）、`device_name`、`gpu_arch`（ROCm 上为 gfx 目标、去掉特性后缀；CUDA 上为 `sm_XY`；CPU 上为 None）、
#   `os`、`line`（`lab.describe_environment(PROFILE, dev)`）。
# - `build_results(*, traces, duration_s, roofline, fingerprint)` 返回可直接写成 JSON 的字典：`lab`（`"02-llm-inference"`）、
#   `profile`、`model`、`dtype`、`environment`（即 `fingerprint`）、`serving`（`compute_metrics(traces, duration_s)`）、
#   `requests`（每条轨迹一项：`prompt_len`、`output_len`、`ttft_s`、`latency_s`、`success`）、`roofline`（数值转成 float，
#   其他值原样）。

# %% [markdown] tags=["en"]
# ## Stretch S4 · The results JSON
#
# A benchmark number means nothing without its environment: one model can differ a lot between two ROCm or two
# PyTorch releases. The results file carries an **environment fingerprint**, and its **totals add up**: request
# counts, token totals and throughputs must follow from one another.
#
# **Stretch S4 contract**:
#
# - `environment_fingerprint(dev)` returns a dict: `python`, `torch`, `hip`, `cuda` (None when not that build),
#   `transformers`, `device` (`str(dev)`), `device_name`, `gpu_arch` (the gfx target without feature suffixes on
#   ROCm, `sm_XY` on CUDA, None on a CPU), `os`, `line` (`lab.describe_environment(PROFILE, dev)`).
# - `build_results(*, traces, duration_s, roofline, fingerprint)` returns a JSON-ready dict: `lab`
#   (`"02-llm-inference"`), `profile`, `model`, `dtype`, `environment` (the `fingerprint`), `serving`
#   (`compute_metrics(traces, duration_s)`), `requests` (one entry per trace: `prompt_len`, `output_len`, `ttft_s`,
#   `latency_s`, `success`), `roofline` (numbers as floats, other values as given).

# %% tags=["solution"] grade_id="02-stretch-results-sol-1"
def environment_fingerprint(dev):
    """The environment fingerprint of a results file (keys in the prose)."""
    ### BEGIN SOLUTION
    gpu = dev.type == "cuda"
    arch = None
    if gpu:
        props = torch.cuda.get_device_properties(dev)
        gcn = getattr(props, "gcnArchName", "") or ""
        arch = gcn.split(":", 1)[0] if torch.version.hip and gcn else f"sm_{props.major}{props.minor}"
    return {"python": platform.python_version(), "torch": torch.__version__,
            "hip": getattr(torch.version, "hip", None), "cuda": getattr(torch.version, "cuda", None),
            "transformers": transformers.__version__, "device": str(dev),
            "device_name": torch.cuda.get_device_name(dev) if gpu else platform.processor() or "cpu",
            "gpu_arch": arch, "os": platform.platform(), "line": lab.describe_environment(PROFILE, dev)}
    ### END SOLUTION

# %% tags=["solution"] grade_id="02-stretch-results-sol-2"
def build_results(*, traces, duration_s, roofline, fingerprint):
    """The lab's results record, a JSON-ready dict (keys in the prose)."""
    ### BEGIN SOLUTION
    requests = [{"prompt_len": t["prompt_len"], "output_len": t["output_len"], "ttft_s": t["ttft"],
                 "latency_s": t["latency"], "success": t["success"]} for t in traces]
    return {"lab": "02-llm-inference", "profile": PROFILE, "model": MODEL, "dtype": DTYPE,
            "environment": fingerprint, "serving": compute_metrics(traces, duration_s),
            "requests": requests,
            "roofline": {k: float(v) if isinstance(v, (int, float)) else v for k, v in roofline.items()}}
    ### END SOLUTION

# %%
results = build_results(traces=traces, duration_s=replay_duration, roofline=roofline_record,
                        fingerprint=environment_fingerprint(device))
with open("lab02_results.json", "w", encoding="utf-8") as _f:
    json.dump(results, _f, ensure_ascii=False, indent=1, allow_nan=False)
print(results["environment"]["line"])
print({k: results["serving"][k] for k in ("completed", "total_output", "request_throughput", "output_throughput")})

# %% tags=["test"] grade_id="02-stretch-results-1" points=3
with open("lab02_results.json", encoding="utf-8") as _f:
    _res = json.load(_f)
_env = _res["environment"]
for _k in ("python", "torch", "hip", "cuda", "transformers", "device", "device_name", "gpu_arch", "os", "line"):
    assert _k in _env, f"环境指纹缺少 {_k} / the fingerprint lacks {_k}"
assert _env["torch"] == torch.__version__ and _env["hip"] == torch.version.hip and _env["cuda"] == torch.version.cuda, \
    "torch / hip / cuda 取自本进程的 torch / torch, hip and cuda come from this process's torch"
_sv, _rq = _res["serving"], _res["requests"]
assert _sv["completed"] == sum(r["success"] for r in _rq) == N_REQUESTS, "每条轨迹一项 / one request entry per trace"
assert _sv["total_output"] == sum(r["output_len"] for r in _rq if r["success"]), "token 总数应与逐请求记录一致 / totals must add up"
assert math.isclose(_sv["output_throughput"] * _sv["duration_s"], _sv["total_output"], rel_tol=1e-9), \
    "serving 是 compute_metrics 的结果 / serving is compute_metrics of the traces"
