"""Lab 03's reference recipe for the course's QC-report adapter: what ``python -m rocmlab.lab.qc_adapter``
trains once per machine (``rocmlab.lab.qc_adapter.ensure_qc_adapter`` loads this file from the checkout).

It holds lab 03's answers (its split, its answer-only loss, its padding), so it lives beside the lab's
hidden checks, not in the package a learner's kernel imports: ``solutions/`` is hidden from graded
kernels (``grading.preflight.course_view``) and closed to learners on a hub (``hub.install``).

The recipe: Qwen chat template, lab 03's system prompt and user turn, the answer as one line of JSON
ending with ``<|im_end|>`` in the loss, LoRA on all seven projections (rank per profile,
``qc_adapter.RECIPES``), AdamW with a linear decay, on lab 03's fit split of the ``qc_reports`` train
records, with lab 03's seeding and batch order. Its manifest keeps every step's loss, which lab 03's
learner loop must reproduce.
"""

from __future__ import annotations

import hashlib
import json
import time
import unicodedata
from pathlib import Path

from rocmlab.assets.cache import write_manifest
from rocmlab.lab.qc_adapter import ADAPTER_RECIPE, ANSWER_KEYS, MANIFEST, qc_messages, recipe_for

QWEN_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
LOG_EVERY = 40  # steps between progress lines
DEV_FRACTION = 0.1  # lab 03 holds this share of the train records out as its dev set
CPU_THREADS = 1  # lab 03's smoke setting: the tiny model is dispatch-bound, and a fixed count repeats exactly


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


def _sample(tokenizer, record, end_id):
    messages = qc_messages(record["product_line"], record["description"])
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    answer = json.dumps({k: record["report"][k] for k in ANSWER_KEYS}, ensure_ascii=False)
    answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"] + [end_id]
    return prompt_ids + answer_ids, [-100] * len(prompt_ids) + answer_ids


def train(model_name: str, out: Path, *, device, seed: int, log) -> None:
    """Train the adapter for ``model_name`` into ``out`` (created) and write its manifest."""
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
    }
    manifest = write_manifest(out, MANIFEST, manifest, hashes=False)  # sizes: the format cached adapters have
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
