"""Every lab's hidden checks against two learners who write none of the answers (issue 47): a
kernel with no names at all, and one whose later cells rebind the course's data and helpers to the
values a lazy check would take for evidence (no prompts, eos never produced, one rank, empty
profiles and records, a ``run_async`` that runs nothing, a ``Trace`` that records nothing, a
``backend_for`` that claims GPUs). Each must score the blank learner's 0: a check reads the run's
parameters and the course's data on the harness's side and asks the kernel only for answers to its
own inputs. The learners answer in this process (``answers.evaluate`` over their names), in an
empty work folder.
"""

import contextlib
import copy
import functools
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from forged_tokenizer import TwoTokens, two_token_sample

from rocmlab.assets.loaders import qc_signals
from rocmlab.course.catalog import SMOKE, parse_lab
from rocmlab.harness import (
    Learner,
    hidden_files,
    kernel_module,
    lab_constants,
    lab_parameters,
    load_checks,
    run_checks,
)
from rocmlab.lab.answers import evaluate

SOLUTIONS = Path(__file__).resolve().parents[2] / "solutions"
LABS = sorted(p.name for p in SOLUTIONS.iterdir() if (p / "checks.py").is_file())


FORGED_REPORT = {"defect_type": "x", "severity": "y", "disposition": "z"}


class _Trace:
    """A course ``Trace`` that records nothing."""

    def __init__(self, *args, **kwargs):
        self.events, self.spans = [], []

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def _nothing(*args, **kwargs):
    return []


# Course data and helpers as a lazy-minded learner's last cell leaves them: every value is one a
# check that trusted the kernel would pass on without the answer functions doing anything.
REBOUND = {
    # parameters
    "SEED": 0, "WORLD_SIZE": 1, "N_RANKS": 2, "EQUIV_STEPS": 0, "FT_STEPS": 0, "CRASH_AT": 0, "CKPT_EVERY": 1,
    "N_EVAL": 0, "MODEL": "nothing", "PROFILE": "nothing", "N_REQUESTS": 0, "MAX_NEW_TOKENS": 0,
    # course data
    "PROMPTS": [[1]], "EOS": -1, "PAD": 0, "PROFILE_ROWS": [], "CATEGORIES": {}, "LEVER_CHOICES": (None,),
    "METRIC_CHOICES": (None,), "ELASTIC_CFG": {}, "eval_records": [], "tuned_predictions": [], "qc_items": [],
    "KB": [], "KB_TOKENS": [], "golden_trace": [], "traces": [], "replay_duration": 1.0,
    # course helpers
    "run_async": _nothing, "retrieve": _nothing, "Trace": _Trace, "backend_for": lambda *a, **k: "nccl",
    "lab": SimpleNamespace(load_qc_reports=_nothing, seed_everything=_nothing), "tokenize_zh": _nothing,
    # evidence that agrees with the rebound data: a check that took the data from the kernel passed on it
    "JUDGEMENTS": {case: {} for case in "ABC"},  # each lever and metric None, "from" LEVER_CHOICES (None,)
    "single_losses": [0.5], "fsdp_ranks": [{"losses": [0.5]}],  # EQUIV_STEPS 1 on WORLD_SIZE 1
    "ft_result": SimpleNamespace(output="exitcode : -9"), "ft_ranks": [{"attempt": 1, "resumed_from": 0}],
}  # fmt: skip
REBOUND.update(EQUIV_STEPS=1, eval_records=[{"report": FORGED_REPORT}], tuned_predictions=[json.dumps(FORGED_REPORT)])


# Labs 05-07: the pieces, scaffolding and runs the notebook gives, rebound to what a check that read
# them from the kernel would have taken for evidence: no QC items or prompts, stages that never wait,
# an empty failure script, a golden run of nothing, an end-to-end run whose every signal is a dead
# letter, fine-tune records that agree with their own throughput, and a model swap that swaps nothing
# but reports the stock model's module counts.
def _no_wait_stage(name, ms, workers=1):
    async def fn(payload):
        return {**payload, "path": [*payload.get("path", []), name]}

    return SimpleNamespace(name=name, fn=fn, workers=workers)


@contextlib.contextmanager
def _swap_of_nothing(model):
    yield {"rmsnorm": 5, "mlp": 2}


_E2E_IDS = [s["id"] for s in qc_signals(12, seed=0, kind="trace")]
REBOUND.update(
    qc_items=[{"description": "", "report": {}}] * 4, qc_messages=_nothing, qc_answer=lambda item, tokenizer: "",
    ft_runs={n: (None, [{"losses": [0.5] * 8, "tokens": 28, "elapsed": 1.0}] * n) for n in (1, 2)},
    throughput={n: 28.0 * n for n in (1, 2)},
    toy_stage=_no_wait_stage, toy_stages=lambda workers=1, ms=(): [], toy_items=_nothing, FAILURES={},
    golden_run=lambda *a, **k: (SimpleNamespace(value=SimpleNamespace(reports={}, dead_letters=[])), _Trace(), []),
    E2E=SimpleNamespace(
        value=SimpleNamespace(reports={}, dead_letters=[{"id": i, "stage": "report"} for i in _E2E_IDS]),
        leftover_tasks=[],
    ),
    triton_kernels_in=_swap_of_nothing,
)  # fmt: skip

# metrics.json as the lazy notebook writes it: its tuned scores from the rebound records, a base of 0
FORGED_METRICS = {
    "model": "tiny-qwen-zh", "world_size": 1, "steps": 0, "losses": [],
    "base": {"valid_json": 0.0, "exact_match": dict.fromkeys(("defect_type", "severity", "disposition"), 0.0)},
    "tuned": {"valid_json": 1.0, "exact_match": dict.fromkeys(("defect_type", "severity", "disposition"), 1.0)},
}  # fmt: skip


class InProcess:
    """A kernel answered by ``evaluate`` over ``names``, in this process."""

    def __init__(self, names):
        self.names = names

    def ask(self, request):
        return evaluate(request, self.names)


def _lab_params():
    return [pytest.param(lab, id=lab[:2]) for lab in LABS]


@functools.cache
def _lab_inputs(lab):
    """What load_checks reads beside a lab's checks.py (its source, hidden files, smoke parameters,
    kernel-side module, lab.py's constants), read once per lab: parsing lab.py for its parameters and
    constants was a third of this file's CPU, paid again by each of the 26 tests."""
    path = SOLUTIONS / lab / "checks.py"
    parameters = lab_parameters(path, parse_lab(path.parent).profile(SMOKE).parameters)
    return (
        path,
        path.read_text(encoding="utf-8"),
        hidden_files(path),
        parameters,
        kernel_module(path),
        lab_constants(path),
    )


def _score(lab, names):
    path, source, files, parameters, kernel, constants = copy.deepcopy(_lab_inputs(lab))
    checks = load_checks(source, str(path), files, parameters, kernel=kernel, constants=constants)
    results = run_checks(checks, Learner(InProcess(names)), 47)
    errors = [f"{r.name}: {r.error}" for r in results if r.error]
    return sum(r.points for r in results), [r.name for r in results if r.passed], errors


@pytest.mark.parametrize("lab", _lab_params())
def test_an_empty_world_scores_the_blank_score(lab, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    score, passed, _ = _score(lab, {})
    assert score == 0, f"{lab}: a kernel with no names earns {score}: {passed}"


@pytest.mark.parametrize("lab", _lab_params())
def test_rebound_course_data_and_helpers_score_the_blank_score(lab, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "metrics.json").write_text(json.dumps(FORGED_METRICS), encoding="utf-8")
    score, passed, errors = _score(lab, dict(REBOUND))
    assert score == 0, f"{lab}: a learner who rebinds the course's data earns {score}: {passed}"
    assert not [e for e in errors if "rebound" in e], errors


# ---------------------------------------------------------------- labs 01, 02 and 04: evidence forged in the kernel
# (lab 04's device count: tests/labs/test_lab04.py, on the multi-gpu profile)


def _forges_timing_counters(fn, *, calls, repeats, warmup, start, stop):
    """Lab 01: times nothing and sets the call and mark counters a check once read back."""
    for method in (fn, start, stop):
        device = getattr(method, "__self__", None)
        if device is not None:
            device.calls, device.marks, device.stops = warmup + calls * repeats, repeats, repeats
    return 1.0


class _ForgedModel:
    """Lab 02: a ``ref_model`` that generates, caches and counts what the forged answers claim."""

    device = "cpu"
    config = SimpleNamespace(to_dict=lambda: {"num_hidden_layers": 1})

    def generate(self, ids, *, max_new_tokens, **kwargs):
        import torch

        return torch.cat([ids, torch.full((1, max_new_tokens), 7)], dim=1)

    def parameters(self):
        import torch

        return iter([torch.zeros(1234)])

    def register_forward_pre_hook(self, *args, **kwargs):
        return SimpleNamespace(remove=lambda: None)


def _desync_record():
    """Lab 04: the notebook's ``desync`` run rebound to what a run under the kit's variables returns
    (format: lab.run_torchrun's TorchrunResult; the line is torch's ProcessGroupWrapper report)."""
    line = "RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: ..."
    ranks = [SimpleNamespace(rank=r, returncode=1, output=line) for r in range(2)]
    return SimpleNamespace(timed_out=False, returncode=1, ranks=ranks, rank=lambda r: ranks[r])


def _hang_records(n=2):
    """Lab 04: the notebook's ``guarded`` and ``fixed`` runs rebound to what a right hang_tools.py
    gives (format: lab.run_torchrun's TorchrunResult; the line is gloo's, from pytorch's
    torch/csrc/distributed/c10d/ProcessGroupGloo.cpp, ProcessGroupGloo::monitoredBarrier)."""
    line = "[Rank 0]: Ranks 1 failed to pass monitoredBarrier in 5000 ms"
    failed = [SimpleNamespace(rank=r, returncode=1, output=line if r == 0 else "") for r in range(n)]
    passed = [SimpleNamespace(rank=r, returncode=0, output="") for r in range(n)]
    return {
        "guarded": SimpleNamespace(timed_out=False, returncode=1, ok=False, ranks=failed, rank=failed.__getitem__),
        "fixed": SimpleNamespace(timed_out=False, returncode=0, ok=True, ranks=passed, rank=passed.__getitem__),
    }


FORGED_EVIDENCE = {
    "01-rocm-setup": {"time_per_call": _forges_timing_counters},
    "04-collectives-rccl": {  # a run that reported a mismatch, though debug_env was never written
        "desync": _desync_record(), "desync_env": {"TORCH_NCCL_DESYNC_DEBUG": "1", "TORCH_DISTRIBUTED_DEBUG": "DETAIL"},
        **_hang_records(),  # a guarded run stopped by the barrier and a fixed run that passed, with no hang_tools.py
    },
    "02-llm-inference": {
        "ref_model": _ForgedModel(), "param_count": lambda config: 1234, "kv_cache_bytes": lambda *a, **k: 4096,
        "generate_with_kv_cache": lambda m, p, n, eos_token_id=None: {"tokens": [7] * n, "prompt_len": len(p)},
        "generate_static_batch": lambda m, ps, n, **k: [[7] * n for _ in ps],
    },
}  # fmt: skip


@pytest.mark.parametrize("lab", sorted(FORGED_EVIDENCE), ids=lambda lab: lab[:2])
def test_evidence_forged_in_the_kernel_scores_the_blank_score(lab, tmp_path, monkeypatch):
    """Counters and a model that the learner's kernel sets to agree with its answers."""
    monkeypatch.chdir(tmp_path)
    score, passed, _ = _score(lab, {**REBOUND, **FORGED_EVIDENCE[lab]})
    assert score == 0, f"{lab}: a learner who forges the kernel's evidence earns {score}: {passed}"


# ---------------------------------------------------------------- labs 03 and 08: forged evidence


class _LossZero:
    """Lab 08's ``model`` rebound: a loss of 0 whatever the input, so a perplexity of 1."""

    def parameters(self):
        import torch

        return iter([torch.zeros(1)])

    def __call__(self, input_ids, labels=None):
        import torch

        return SimpleNamespace(loss=torch.tensor(0.0))


class _Plain:
    """Lab 03's ``merged_model`` rebound: a class named as transformers' plain model, in eval mode."""

    training = False

    def named_parameters(self):
        return [("model.embed_tokens.weight", None)]

    def modules(self):
        return [self]


_Plain.__module__, _Plain.__qualname__ = "transformers.modeling_utils", "PreTrainedModel"


def _zeros_collate(samples, pad_id):
    import torch

    shape = (len(samples), max(len(s["input_ids"]) for s in samples))
    return {k: torch.zeros(shape, dtype=torch.long) for k in ("input_ids", "labels", "attention_mask")}


def _zeros_mxfp4(x, block_size=32):
    import torch

    scales = torch.zeros(*x.shape[:-1], x.shape[-1] // block_size, dtype=torch.uint8)
    return torch.zeros(x.shape, dtype=torch.uint8), scales


_PEFT_OF_ONE_LAYER = SimpleNamespace(  # LoRA's count of a model of no layers: 0, as the stub says
    base_model=SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(to_dict=lambda: {
        "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 0, "num_attention_heads": 2,
        "num_key_value_heads": 1, "vocab_size": 64,
    }))),
    get_nb_trainable_parameters=lambda: (0, 0),
)  # fmt: skip
FORGED_LOSSES = [3.0, 2.5, 2.0, 1.5, 1.0, 0.5]
FORGED_RECORD = {"product_line": "x", "description": "y", "report": dict.fromkeys(
    ("defect_type", "location", "severity", "disposition", "root_cause", "action"), "z"
)}  # fmt: skip
# Per lab: the notebook's objects rebound so that stub answers agree with evidence taken from the
# learner's kernel, and stubs that keep a rule a constant function keeps. Against main's checks
# before issue 47's last pass, lab 03's earned 5.5 points and lab 08's 3.
FORGED = {
    "03-lora-finetune-zh": {
        "tokenizer": TwoTokens(), "build_sft_sample": two_token_sample, "eval_records": [FORGED_RECORD],
        "peft_model": _PEFT_OF_ONE_LAYER, "lora_param_count": lambda config, r, targets=None: 0,
        "merged_model": _Plain(), "losses": FORGED_LOSSES, "STEPS_HERE": len(FORGED_LOSSES),
        "base_scores": {}, "tuned_scores": {}, "base_dev_loss": 2.0, "tuned_dev_loss": 1.0,
        "collate": _zeros_collate, "choose_attention": lambda *args: "sdpa",
    },
    "08-low-precision": {
        "tok": TwoTokens(), "model": _LossZero(), "perplexity": lambda *args, **kwargs: 1.0,
        "ocp_to_fnuz": lambda q, scale: (q, scale), "fnuz_to_ocp": lambda q, scale: (q, scale),
        "mxfp4_quantize": _zeros_mxfp4,
    },
}  # fmt: skip


@pytest.mark.parametrize("lab", [pytest.param(lab, id=lab[:2]) for lab in FORGED])
def test_forged_evidence_and_stubs_score_the_blank_score(lab, tmp_path, monkeypatch):
    import torch

    monkeypatch.chdir(tmp_path)
    metrics = {"losses": FORGED_LOSSES, "steps": len(FORGED_LOSSES)}
    (tmp_path / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    score, passed, _ = _score(lab, {"torch": torch, **FORGED[lab]})
    assert score == 0, f"{lab}: forged evidence earns {score}: {passed}"


# ---------------------------------------------------------------- lab 05: a fine-tune's records made up


def _tokens_as_the_course_data_gives(parameters, world):
    """Each rank's token count from step 1 on, as a learner can make it from the importable
    ``rocmlab.course_data`` without running a fine-tune."""
    import torch

    from rocmlab import course_data

    p, items = parameters, course_data.qc_train_items()
    tokens = [0] * world
    for step in range(1, p["FT_STEPS"]):
        order = torch.randperm(len(items), generator=torch.Generator().manual_seed(p["SEED"] * 7919 + step)).tolist()
        for rank in range(world):
            mine = order[rank * p["FT_BATCH"] : (rank + 1) * p["FT_BATCH"]]
            pieces = course_data.qc_pieces(p["MODEL"], [items[i] for i in mine])
            tokens[rank] += sum(min(len(a) + len(b), p["FT_MAX_LEN"]) for a, b in pieces)
    return tokens


def test_lab05_finetune_records_made_up_around_exact_tokens_score_the_blank_score(tmp_path, monkeypatch):
    """Lab 05: ``ft_runs`` whose token counts are exact (made from the course data), whose losses
    fall nicely and whose throughput agrees with its times, with no run behind them. Main's checks
    gave it both fine-tune rules (1 point); the grader now recomputes each rank's first loss."""
    lab = "05-distributed-training"
    monkeypatch.chdir(tmp_path)
    parameters = copy.deepcopy(_lab_inputs(lab)[3])
    runs = {}
    for world in parameters["SCALING_RANKS"]:
        losses = [3.0 - 0.25 * step for step in range(parameters["FT_STEPS"])]
        counts = _tokens_as_the_course_data_gives(parameters, world)
        runs[world] = (None, [{"losses": losses, "tokens": t, "elapsed": 2.0} for t in counts])
    throughput = {n: sum(r["tokens"] for r in ranks) / 2.0 for n, (_, ranks) in runs.items()}
    score, passed, _ = _score(lab, {"ft_runs": runs, "throughput": throughput})
    assert score == 0, f"{lab}: fine-tune records made up around exact tokens earn {score}: {passed}"
