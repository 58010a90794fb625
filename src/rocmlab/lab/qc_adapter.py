"""Lab 03's QC-report LoRA adapter, built once per machine and cached: lab 03 and lab 06 use the same one.

Lab 03 teaches the recipe: its learner's loop runs the first steps and must reproduce this build's
losses, then it evaluates this build (on a CPU; on a GPU it trains every step itself). Lab 06's report
agent loads it. :func:`ensure_qc_adapter` trains the recipe (Qwen chat template, lab 03's system
prompt and user turn, the answer as one line of JSON ending with ``<|im_end|>`` in the loss, LoRA on
all seven projections (rank per profile, ``RECIPES``), AdamW with a linear decay) on lab 03's fit
split of the ``qc_reports`` train records, with lab 03's seeding and batch order, and caches the
result next to the course model under a key that names the base checkpoint, this recipe and the
seed. Its manifest keeps every step's loss. Several processes may ask at once: one builds under a
file lock, the others wait and reuse it.

:func:`qc_messages` is lab 03's prompt (``SYSTEM_PROMPT``, ``to_messages``); tests/lab/test_qc_adapter.py
checks it against lab 03's source so that the two cannot drift apart silently.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import unicodedata
from pathlib import Path

from rocmlab.errors import CommandFailed

ADAPTER_RECIPE = 3  # bump on any change to the prompt, the data selection or the training recipe
ANSWER_KEYS = ("defect_type", "location", "severity", "disposition", "root_cause", "action")
SYSTEM_PROMPT = "你是质检助手。把缺陷描述转换成 JSON 质检报告，字段：" + "、".join(ANSWER_KEYS) + "。"
QWEN_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
MANIFEST = "rocmlab-adapter.json"
LOCK_TIMEOUT_S = 900
LOG_EVERY = 40  # steps between progress lines
DEV_FRACTION = 0.1  # lab 03 holds this share of the train records out as its dev set
CPU_THREADS = 1  # lab 03's smoke setting: the tiny model is dispatch-bound, and a fixed count repeats exactly

# Lab 03's two profiles: the tiny offline model, and a real 0.5B-class model on a GPU.
RECIPES = {
    "tiny": {
        "r": 16,
        "alpha": 32,
        "steps": 320,
        "batch_size": 8,
        "lr": 5e-3,
        "warmup_fraction": 0.0,
        "dropout": 0.0,
        "max_len": 384,
    },
    "real": {
        "r": 8,
        "alpha": 16,
        "steps": 300,
        "batch_size": 16,
        "lr": 2e-4,
        "warmup_fraction": 0.1,
        "dropout": 0.05,
        "max_len": 384,
    },
}


def qc_messages(product_line: str, description: str, answer: dict | None = None) -> list[dict]:
    """Lab 03's chat turns for one defect description; with ``answer``, the assistant turn too."""
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"产品线：{product_line}\n缺陷描述：{description}"},
    ]
    if answer is not None:
        messages.append({"role": "assistant", "content": json.dumps(answer, ensure_ascii=False)})
    return messages


def _normal(text: str) -> str:
    return "".join(unicodedata.normalize("NFKC", text).split())


def in_dev_split(record_id: str, seed: int) -> bool:
    """Lab 03's split: a record is dev when the sha256 of ``seed:id`` falls below ``DEV_FRACTION``."""
    digest = hashlib.sha256(f"{seed}:{record_id}".encode()).hexdigest()
    return int(digest[:8], 16) / 16**8 < DEV_FRACTION


def training_records(seed: int = 0) -> list[dict]:
    """Lab 03's fit records: qc_reports train, first record per normalised description, none that
    also occurs in eval, none in lab 03's dev split for ``seed``; in file order."""
    from rocmlab.assets.loaders import load_qc_reports

    held_out = {_normal(r["description"]) for r in load_qc_reports("eval")}
    seen, kept = set(), []
    for record in load_qc_reports("train"):
        key = _normal(record["description"])
        if key not in seen and key not in held_out:
            seen.add(key)
            kept.append(record)
    return [r for r in kept if not in_dev_split(r["id"], seed)]


def recipe_for(model: str) -> dict:
    """The recipe lab 03 uses for ``model``: its smoke profile for the course model, else its gpu profile."""
    return RECIPES["tiny" if model == "tiny-qwen-zh" else "real"]


def adapter_dir(model: str = "tiny-qwen-zh", *, seed: int = 0, cache_dir=None) -> Path:
    """Where the adapter for ``model`` is cached: keyed by the base checkpoint and the recipe."""
    from rocmlab.assets.tiny_model import MODEL_NAME, cache_root, model_dir
    from rocmlab.lab.models import resolve_model

    base = model_dir() if model == MODEL_NAME else Path(resolve_model(model))  # finds, never builds, the base
    return cache_root(cache_dir) / "adapters" / f"{base.name}-qc-lora-a{ADAPTER_RECIPE}-s{seed}"


def read_manifest(path: Path) -> dict | None:
    """The manifest of the adapter in ``path`` (its recipe, seed, every step's loss), or None when
    the folder holds no complete build."""
    return _valid(Path(path))


def _valid(path: Path) -> dict | None:
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        if not all((path / name).stat().st_size == size for name, size in manifest["files"].items()):
            return None
        return manifest
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def ensure_qc_adapter(
    model: str = "tiny-qwen-zh",
    *,
    device=None,
    seed: int = 0,
    cache_dir=None,
    log=print,
    lock_timeout_s: float = LOCK_TIMEOUT_S,
) -> Path:
    """The cached adapter folder for ``model`` (peft format), trained first when missing or partial."""
    from filelock import FileLock, Timeout

    from rocmlab.assets.tiny_model import make_world_readable

    target = adapter_dir(model, seed=seed, cache_dir=cache_dir)
    if _valid(target):
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CommandFailed(f"cannot create the adapter cache {target.parent}: {exc}; set ROCMLAB_CACHE") from exc
    try:
        with FileLock(str(target) + ".lock", timeout=lock_timeout_s):
            if _valid(target):
                return target
            shutil.rmtree(target, ignore_errors=True)
            staging = target.with_name(f"{target.name}.building-{os.getpid()}")
            shutil.rmtree(staging, ignore_errors=True)
            try:
                _train(model, staging, device=device, seed=seed, log=log)
                make_world_readable(staging)
                os.replace(staging, target)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    except Timeout:
        raise CommandFailed(
            f"waited {lock_timeout_s:.0f} s for another process building {target}; if none runs, delete {target}.lock"
        ) from None
    except OSError as exc:  # a cache this user may read but not write (a hub's, a grader's read-only view)
        raise CommandFailed(f"cannot build the adapter in {target.parent}: {exc}; set ROCMLAB_CACHE") from exc
    return target


def _sample(tokenizer, record, end_id):
    messages = qc_messages(record["product_line"], record["description"])
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    answer = json.dumps({k: record["report"][k] for k in ANSWER_KEYS}, ensure_ascii=False)
    answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"] + [end_id]
    return prompt_ids + answer_ids, [-100] * len(prompt_ids) + answer_ids


def _train(model_name: str, out: Path, *, device, seed: int, log) -> None:
    import torch
    from peft import LoraConfig, get_peft_model

    from rocmlab.lab.env import pick_device, seed_everything
    from rocmlab.lab.models import load_model

    started = time.perf_counter()
    recipe = recipe_for(model_name)
    device = pick_device("auto" if device is None else str(device))
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(CPU_THREADS)
    try:
        model, tok = load_model(model_name, device=device)
        end_id = tok.convert_tokens_to_ids("<|im_end|>")
        samples = [_sample(tok, r, end_id) for r in training_records(seed)]
        samples = [s for s in samples if len(s[0]) <= recipe["max_len"]]
        seed_everything(seed)  # lab 03 seeds right before wrapping: the LoRA A matrices start alike
        config = LoraConfig(
            r=recipe["r"],
            lora_alpha=recipe["alpha"],
            lora_dropout=recipe["dropout"],
            bias="none",
            target_modules=list(QWEN_PROJECTIONS),
            task_type="CAUSAL_LM",
        )
        peft_model = get_peft_model(model, config)
        losses = _fit(peft_model, samples, recipe, tok.pad_token_id, device, seed, log)
        out.mkdir(parents=True)
        peft_model.save_pretrained(out)
    finally:
        torch.set_num_threads(threads)
    files = {p.name: p.stat().st_size for p in out.iterdir() if p.is_file()}
    manifest = {
        "base_model": model_name,
        "recipe": ADAPTER_RECIPE,
        **recipe,
        "seed": seed,
        "train_samples": len(samples),
        "device": device.type,
        "cpu_threads": CPU_THREADS if device.type == "cpu" else None,
        "first_loss": round(losses[0], 4),
        "last_loss": round(sum(losses[-5:]) / len(losses[-5:]), 4),
        "losses": losses,
        "build_seconds": round(time.perf_counter() - started, 1),
        "files": files,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    if log:
        log(
            f"built lab 03's QC adapter for {model_name} in {manifest['build_seconds']} s "
            f"({recipe['steps']} steps, loss {manifest['first_loss']} -> {manifest['last_loss']})"
        )


def _fit(peft_model, samples, recipe, pad_id, device, seed, log) -> list[float]:
    import torch
    import torch.nn.functional as F

    from rocmlab.assets.tiny_model import eta_text

    params = [p for p in peft_model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=recipe["lr"], weight_decay=0.0)
    steps, warmup = recipe["steps"], int(recipe["steps"] * recipe["warmup_fraction"])
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (steps - s) / (steps - warmup))
    )
    generator = torch.Generator().manual_seed(seed)
    order, losses = [], []
    peft_model.train()
    started = time.perf_counter()
    for step in range(steps):
        if len(order) < recipe["batch_size"]:
            order += torch.randperm(len(samples), generator=generator).tolist()
        chunk, order = order[: recipe["batch_size"]], order[recipe["batch_size"] :]
        longest = max(len(samples[i][0]) for i in chunk)
        ids = torch.tensor([samples[i][0] + [pad_id] * (longest - len(samples[i][0])) for i in chunk], device=device)
        labels = torch.tensor([samples[i][1] + [-100] * (longest - len(samples[i][1])) for i in chunk], device=device)
        mask = torch.tensor(
            [[1] * len(samples[i][0]) + [0] * (longest - len(samples[i][0])) for i in chunk], device=device
        )
        logits = peft_model(input_ids=ids, attention_mask=mask).logits
        loss = F.cross_entropy(
            logits[:, :-1].reshape(-1, logits.size(-1)).float(), labels[:, 1:].reshape(-1), ignore_index=-100
        )
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if log and ((step + 1) % LOG_EVERY == 0 or step + 1 == steps):
            log(
                f"  step {step + 1}/{steps} loss {losses[-1]:.3f}{eta_text(step + 1, steps, time.perf_counter() - started)}"
            )
    peft_model.eval()
    return losses


def load_qc_reporter(model: str = "tiny-qwen-zh", *, device=None, seed: int = 0, log=print):
    """``(model with lab 03's adapter, tokenizer)`` in eval mode, building the adapter when absent."""
    from peft import PeftModel

    from rocmlab.lab.models import load_model

    path = ensure_qc_adapter(model, device=device, seed=seed, log=log)
    base, tok = load_model(model, device=device)
    return PeftModel.from_pretrained(base, path).eval(), tok


def main(argv=None) -> int:
    """``python -m rocmlab.lab.qc_adapter``: build the course model's adapter into the cache (what
    ``rocmlab run`` does before labs 03 and 06; on a hub or a grading machine, after
    ``rocmlab assets build-model``, so that every learner's and grader's kernel finds it). On the
    CPU, as lab 03 checks it there; in $ROCMLAB_CACHE, else the user cache dir, beside the model."""
    import argparse

    argparse.ArgumentParser(prog="python -m rocmlab.lab.qc_adapter", description=main.__doc__).parse_args(argv)
    path = ensure_qc_adapter(device="cpu", log=print)
    print(f"lab 03's QC adapter: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
