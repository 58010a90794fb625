"""tiny-qwen-zh: deterministic build, concurrent builds, cache repair, checkpoint format, loading.

Fast tests use one build of one or two pre-training steps; the tests that build again (same
seed, cache repair, two processes at once), the full recipe and the LoRA check are slow tests.
"""

import json
import shutil
import subprocess
import sys
import time

import pytest

from rocmlab.assets import tiny_model
from rocmlab.assets.cache import CacheError

QUICK = dict(steps=1, evaluate=False, log=None)
LORA_STEPS = 120  # batch 8, lr decayed linearly to 0; measured: 0/20 valid before, 20/20 after
LORA_LR = 5e-3


# The tests of the build machinery (seeding, cache, lock, repair) build a one-layer model on batches
# of 2: what they check does not depend on the model's size, and such a build costs a tenth of the
# real recipe's. The real recipe's shape is built once per run (conftest) and rebuilt once, below.
SMALL_SHAPE = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1
)
SMALL_BATCH = 2


@pytest.fixture
def small_recipe(monkeypatch):
    for key, value in SMALL_SHAPE.items():
        monkeypatch.setitem(tiny_model.MODEL_SHAPE, key, value)
    monkeypatch.setattr(tiny_model, "BATCH_SIZE", SMALL_BATCH)


@pytest.fixture(scope="module")
def quick_build(_quick_model_cache):
    path = tiny_model.ensure_tiny_model(_quick_model_cache, **QUICK)  # conftest built it: this finds it
    return _quick_model_cache, path, tiny_model.read_valid_manifest(path)


@pytest.mark.slow
def test_same_seed_same_weights_other_seed_differs(small_recipe, tmp_path):
    first = tiny_model.read_valid_manifest(tiny_model.ensure_tiny_model(tmp_path / "first", **QUICK))
    again = tiny_model.ensure_tiny_model(tmp_path / "a", **QUICK)
    other = tiny_model.ensure_tiny_model(tmp_path / "b", seed=1, **QUICK)
    assert first["parameters"] < 1_000_000  # the small recipe, not the course's
    assert tiny_model.read_valid_manifest(again)["weights_sha256"] == first["weights_sha256"]
    assert tiny_model.read_valid_manifest(other)["weights_sha256"] != first["weights_sha256"]


def test_checkpoint_is_a_small_qwen2_with_the_chat_template(quick_build):
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, path, manifest = quick_build
    assert {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"} <= set(manifest["files"])
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert sum(p.numel() for p in model.parameters()) < 10_000_000
    assert model.config.tie_word_embeddings
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    assert model.config.eos_token_id == tokenizer.eos_token_id
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "焊点发灰"}], tokenize=False, add_generation_prompt=True
    )
    assert text == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\n焊点发灰<|im_end|>\n<|im_start|>assistant\n"
    )
    with_system = tokenizer.apply_chat_template(
        [
            {"role": "system", "content": "质检"},
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": "y"},
        ],
        tokenize=False,
    )
    assert with_system == (
        "<|im_start|>system\n质检<|im_end|>\n<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\ny<|im_end|>\n"
    )
    sample = '主控板 BGA 区域虚焊 3 个焊点，ΔE 0.4 {"a": 1}<|im_end|>'
    raw = Tokenizer.from_file(str(path / "tokenizer.json"))
    assert tokenizer(sample).input_ids == raw.encode(sample).ids
    assert tokenizer.decode(tokenizer(sample).input_ids) == sample
    assert tokenizer.convert_ids_to_tokens(tokenizer("<|im_start|>").input_ids) == ["<|im_start|>"]


@pytest.mark.slow
def test_truncated_cache_is_rebuilt_to_the_same_weights(quick_build, tmp_path):
    """The course recipe's shape: the repair rebuilds, in this process, the weights conftest built."""
    _, built, original = quick_build
    path = tiny_model.model_dir(tmp_path, steps=QUICK["steps"])
    shutil.copytree(built, path)
    assert tiny_model.ensure_tiny_model(tmp_path, **QUICK) == path and tiny_model.read_valid_manifest(path)
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    assert tiny_model.read_valid_manifest(path) is None
    repaired = tiny_model.ensure_tiny_model(tmp_path, **QUICK)
    assert repaired == path
    assert tiny_model.read_valid_manifest(path)["weights_sha256"] == original["weights_sha256"]
    assert not list(path.parent.glob("*.building-*"))


@pytest.mark.slow
def test_partial_cache_is_rebuilt(small_recipe, tmp_path):
    path = tiny_model.ensure_tiny_model(tmp_path, **QUICK)
    original = tiny_model.read_valid_manifest(path)
    (path / tiny_model.MANIFEST).unlink()  # an interrupted build: files but no manifest
    assert tiny_model.read_valid_manifest(path) is None
    assert tiny_model.ensure_tiny_model(tmp_path, **QUICK) == path
    assert tiny_model.read_valid_manifest(path)["weights_sha256"] == original["weights_sha256"]
    assert not list(path.parent.glob("*.building-*"))


BUILD_SCRIPT = f"""
import json, os, sys
from rocmlab.assets import tiny_model
tiny_model.MODEL_SHAPE.update({SMALL_SHAPE!r})
tiny_model.BATCH_SIZE = {SMALL_BATCH}
path = tiny_model.ensure_tiny_model(sys.argv[1], steps=1, evaluate=False, log=None)
manifest = tiny_model.read_valid_manifest(path)
print(json.dumps({{"pid": os.getpid(), "built_by": manifest["built_by_pid"],
                  "sha": manifest["weights_sha256"], "path": str(path)}}))
"""


@pytest.mark.slow
def test_two_processes_building_at_once_build_once(tmp_path):
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BUILD_SCRIPT, str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=500)
            assert proc.returncode == 0, err[-2000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert results[0]["path"] == results[1]["path"] and results[0]["sha"] == results[1]["sha"]
    builders = {r["built_by"] for r in results}
    assert len(builders) == 1 and builders <= {r["pid"] for r in results}


def test_load_model_from_cache(quick_tiny_model):
    from rocmlab import lab

    path = tiny_model.model_dir(quick_tiny_model)
    started = time.perf_counter()
    model, tokenizer = lab.load_model(device="cpu")
    elapsed = time.perf_counter() - started
    print(f"cached tiny-qwen-zh loaded in {elapsed:.2f} s")
    assert not model.training and next(model.parameters()).device.type == "cpu"
    assert tokenizer.eos_token == "<|im_end|>"
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "划痕"}], add_generation_prompt=True, tokenize=False
    )
    ids = tokenizer(prompt, return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=4, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert out.shape[1] > ids.input_ids.shape[1]
    assert tiny_model.read_valid_manifest(path) is not None


def test_bad_arguments_and_unwritable_cache(tmp_path):
    with pytest.raises(ValueError, match="steps"):
        tiny_model.ensure_tiny_model(tmp_path, steps=0, evaluate=False, log=None)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(CacheError, match="ROCMLAB_CACHE"):
        tiny_model.ensure_tiny_model(blocker, **QUICK)


def test_a_build_waiting_for_another_says_so_and_gives_up_at_its_limit(tmp_path):
    from filelock import FileLock

    target = tiny_model.model_dir(tmp_path, steps=1)
    target.parent.mkdir(parents=True)
    said = []
    with FileLock(str(target) + ".lock"):  # another build holds it
        with pytest.raises(CacheError, match="waited 0 s for another process building"):
            tiny_model.ensure_tiny_model(tmp_path, steps=1, evaluate=False, log=said.append, lock_timeout_s=0.2)
    assert said == [f"another process is building {target.name}; waiting for it (up to 0 s)"]


def test_corpus_never_contains_eval_reports_or_json_answers():
    from rocmlab.assets.loaders import load_qc_reports

    corpus = "\n".join(tiny_model.corpus_documents(tiny_model.DEFAULT_SEED))
    for field in ("defect_type", "disposition", "root_cause"):
        assert f'"{field}"' not in corpus
    for row in load_qc_reports("eval")[:50]:
        assert row["description"] not in corpus
    assert load_qc_reports("train")[0]["description"] in corpus


def test_the_progress_line_estimates_the_remaining_time_from_the_mean_step():
    assert tiny_model.eta_text(0, 399, 0.0) == ""  # nothing timed yet: no guess
    assert tiny_model.eta_text(24, 399, 30.0) == ", ETA 7 min 49 s"  # 375 steps at 1.25 s
    assert tiny_model.eta_text(399, 399, 500.0) == ", ETA 0 s"


def test_the_build_uses_every_core_it_may_run_on(monkeypatch):
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2}, raising=False)
    assert tiny_model.build_threads() == 3


@pytest.mark.slow
def test_full_recipe_build_and_perplexity():
    path = tiny_model.ensure_tiny_model()  # the real cache: built once, shared with the LoRA test
    manifest = tiny_model.read_valid_manifest(path)
    print(f"full build: {manifest['build_seconds']} s, eval perplexity {manifest['eval_perplexity_qc_reports']}")
    # An untrained model sits near the vocabulary size (4096); training must bring it far below.
    assert manifest["eval_perplexity_qc_reports"] < 100
    assert manifest["parameters"] < 10_000_000


REPORT_KEYS = {"defect_type", "location", "severity", "disposition", "root_cause", "action"}
SYSTEM = "你是质检助手。把缺陷描述转换成 JSON 质检报告。"


def _prompt(tokenizer, row):
    return tokenizer.apply_chat_template(
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": row["description"]}],
        tokenize=False,
        add_generation_prompt=True,
    )


def _is_valid_report(text):
    try:
        obj = json.loads(text)
    except ValueError:
        return False
    return isinstance(obj, dict) and set(obj) == REPORT_KEYS and all(isinstance(v, str) for v in obj.values())


def _valid_json_rate(model, tokenizer, rows):
    import torch

    model.eval()
    valid = 0
    with torch.no_grad():
        for row in rows:
            enc = tokenizer(_prompt(tokenizer, row), return_tensors="pt")
            out = model.generate(**enc, max_new_tokens=160, do_sample=False, pad_token_id=tokenizer.pad_token_id)
            valid += _is_valid_report(tokenizer.decode(out[0, enc.input_ids.shape[1] :], skip_special_tokens=True))
    return valid / len(rows)


def _lora_fine_tune(model, tokenizer, rows, *, steps, lr, batch_size=8, seed=0):
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    config = LoraConfig(
        r=16,
        lora_alpha=32,
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    )
    model = get_peft_model(model, config)
    examples = []
    for row in rows:
        prompt = tokenizer(_prompt(tokenizer, row)).input_ids
        answer = tokenizer(json.dumps(row["report"], ensure_ascii=False) + tokenizer.eos_token).input_ids
        examples.append((prompt + answer, [-100] * len(prompt) + answer))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / steps)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        batch = [examples[i] for i in torch.randint(0, len(examples), (batch_size,), generator=generator).tolist()]
        width = max(len(ids) for ids, _ in batch)
        pad = tokenizer.pad_token_id
        input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in batch])
        labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in batch])
        mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in batch])
        model(input_ids=input_ids, attention_mask=mask, labels=labels).loss.backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
    return model


@pytest.mark.slow
def test_short_lora_fine_tune_raises_valid_json_rate():
    import torch

    from rocmlab import lab
    from rocmlab.assets.loaders import load_qc_reports

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, tokenizer = lab.load_model(device="cpu")
        held_out = load_qc_reports("eval")[:20]
        base = _valid_json_rate(model, tokenizer, held_out)
        tuned_model = _lora_fine_tune(model, tokenizer, load_qc_reports("train"), steps=LORA_STEPS, lr=LORA_LR)
        tuned = _valid_json_rate(tuned_model, tokenizer, held_out)
    finally:
        torch.set_num_threads(threads)
    print(f"valid-JSON rate on {len(held_out)} held-out reports: base {base:.0%}, after LoRA {tuned:.0%}")
    assert tuned >= base + 0.5


def test_tokenizer_config_loads_in_both_transformers_generations(tmp_path):
    import json

    from rocmlab.assets.tiny_model import make_tokenizer_config_portable

    path = tmp_path / "tokenizer_config.json"
    path.write_text(
        json.dumps(
            {
                "tokenizer_class": "TokenizersBackend",
                "extra_special_tokens": ["<|im_start|>"],
                "eos_token": "<|im_end|>",
            }
        )
    )
    make_tokenizer_config_portable(path)
    config = json.loads(path.read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert config["additional_special_tokens"] == ["<|im_start|>"] and "extra_special_tokens" not in config
    assert config["eos_token"] == "<|im_end|>"
    assert config["model_input_names"] == ["input_ids", "attention_mask"]
