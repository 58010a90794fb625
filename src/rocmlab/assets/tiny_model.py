"""Build tiny-qwen-zh offline: a byte-level BPE tokenizer and a small Qwen2 model, pre-trained
briefly on the course corpus, saved as a Hugging Face checkpoint and cached.

The corpus is the train split of qc_reports written as prose, the knowledge base, and
knowledge-base questions in chat form; never the JSON report format, so fine-tuning has
something to teach. The eval split is held out and used for the perplexity in the manifest.
Same seed, step count, library versions and thread count give the same weights hash.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from contextlib import contextmanager
from pathlib import Path

from . import cache
from .cache import cache_root, sha256_file, write_manifest
from .corpus import corpus_documents, eval_documents
from .tiny_tokenizer import SPECIAL_TOKENS, make_tokenizer_config_portable, train_tokenizer, wrap_tokenizer

MODEL_NAME = "tiny-qwen-zh"
RECIPE_VERSION = 5  # bump on any change to the corpus, tokenizer, model, training recipe or thread count rule
DEFAULT_STEPS = 400  # 120 left the model at the edge: a LoRA learned the format on some CPUs, not others
DEFAULT_SEED = 0
SEQ_LEN = 128
BATCH_SIZE = 16
LEARNING_RATE = 3e-3  # the peak, after a linear warmup over the first tenth of the steps; cosine down to a tenth
BUILD_LIMIT_S = 2400  # 400 steps took 832 s on one loaded core and 2026 s on two cores at load 9-30
LOCK_TIMEOUT_S = BUILD_LIMIT_S  # a waiter waits as long as the build it waits for may take
LOG_EVERY = 25  # steps between progress lines
MANIFEST = "manifest.json"

MODEL_SHAPE = dict(
    hidden_size=256,
    intermediate_size=704,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
    rope_theta=10000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
)


# ---------------------------------------------------------------- training


def build_threads() -> int:
    """The cores this process may run on (its CPU affinity, which containers and taskset narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@contextmanager
def _deterministic_torch(seed: int, threads: int):
    import torch

    # Deterministic kernels with a fixed thread count: the same machine rebuilds the same bytes.
    # The thread count is recorded in the manifest, since another count may round differently.
    previous_threads = torch.get_num_threads()
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    was_filling = torch.utils.deterministic.fill_uninitialized_memory
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = False
    torch.manual_seed(seed)
    try:
        yield
    finally:
        torch.set_num_threads(previous_threads)
        torch.use_deterministic_algorithms(was_deterministic)
        torch.utils.deterministic.fill_uninitialized_memory = was_filling


def _token_stream(tokenizer, docs) -> list[int]:
    eot = tokenizer.token_to_id("<|endoftext|>")
    ids = []
    for encoding in tokenizer.encode_batch(docs):
        ids.extend(encoding.ids)
        ids.append(eot)
    return ids


def _windows(ids, length):
    """Every ``length``-token window of the token stream, as a view (no copy): a batch is an index into it."""
    import torch

    return torch.tensor(ids, dtype=torch.long).unfold(0, length, 1)


def make_model(vocab_size: int, special_ids: dict):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=vocab_size,
        bos_token_id=special_ids["<|endoftext|>"],
        eos_token_id=special_ids["<|im_end|>"],
        pad_token_id=special_ids["<|endoftext|>"],
        **MODEL_SHAPE,
    )
    return Qwen2ForCausalLM(config)


def pretrain(model, ids, *, steps: int, seed: int, log=None):
    """Next-token training on batches of random SEQ_LEN windows of the token stream; returns the final loss."""
    import torch

    windows = _windows(ids, SEQ_LEN)
    last_start = (len(ids) - 1) // SEQ_LEN * SEQ_LEN - SEQ_LEN  # recipe 5's range of window starts, kept
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, betas=(0.9, 0.95), weight_decay=0.01)
    warmup = max(1, steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: (
            min(1.0, (s + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / max(1, steps)))))
        ),
    )
    model.train()
    loss = float("nan")
    first_step_done = None
    for step in range(steps):
        batch = windows[torch.randint(0, last_start, (BATCH_SIZE,), generator=generator)]
        out = model(input_ids=batch, labels=batch)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        loss = out.loss.item()
        if first_step_done is None:
            first_step_done = time.perf_counter()  # the first step warms up caches: the ETA leaves it out
        if log and ((step + 1) % LOG_EVERY == 0 or step in (0, steps - 1)):
            log(
                f"  step {step + 1}/{steps} loss {loss:.3f}{eta_text(step, steps - 1, time.perf_counter() - first_step_done)}"
            )
    model.eval()
    return loss


def eta_text(done: int, total: int, elapsed_s: float) -> str:
    """``", ETA 4 min 40 s"``: what the ``total - done`` remaining steps take at the mean rate of the
    ``done`` steps timed in ``elapsed_s``; empty before any step was timed."""
    if done < 1:
        return ""
    return f", ETA {_duration(elapsed_s / done * max(0, total - done))}"


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"{seconds} s"


def _held_out_perplexity(model, tokenizer, *, seq_len: int = SEQ_LEN * 2) -> float:
    """Token-level perplexity of the held-out documents (each scored on its own, truncated to
    seq_len). Private and bound to its own documents: lab 08 asks the learner for a
    ``perplexity(model, tokenizer, texts)``, and this package is importable in their kernel."""
    import torch

    total_nll, total_tokens = 0.0, 0
    with torch.no_grad():
        for encoding in tokenizer.encode_batch(eval_documents()):
            ids = torch.tensor([encoding.ids[:seq_len]])
            if ids.shape[1] < 2:
                continue
            out = model(input_ids=ids, labels=ids)
            n = ids.shape[1] - 1
            total_nll += out.loss.item() * n
            total_tokens += n
    return math.exp(total_nll / max(1, total_tokens))


# ---------------------------------------------------------------- files and cache


def _save_quietly(model, out_dir: Path) -> None:
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(out_dir, safe_serialization=True)
    finally:
        if shown:
            hf_logging.enable_progress_bar()


def build_tiny_model(
    out_dir, *, steps: int = DEFAULT_STEPS, seed: int = DEFAULT_SEED, log=print, evaluate: bool = True
) -> dict:
    """Build the checkpoint into ``out_dir`` (created; must not exist) and return its manifest.

    ``evaluate=False`` skips the held-out perplexity (quick test builds).
    """
    import tokenizers
    import torch
    import transformers

    out_dir = Path(out_dir)
    log = log or (lambda message: None)
    started = time.perf_counter()
    docs = corpus_documents(seed)
    tokenizer = train_tokenizer(docs)
    special_ids = {tok: tokenizer.token_to_id(tok) for tok in SPECIAL_TOKENS}
    ids = _token_stream(tokenizer, docs)
    threads = build_threads()
    log(
        f"building {MODEL_NAME}: {len(docs)} documents, {len(ids)} tokens, vocab {tokenizer.get_vocab_size()}, "
        f"{steps} steps on {threads} thread(s)"
    )
    with _deterministic_torch(seed, threads):
        model = make_model(tokenizer.get_vocab_size(), special_ids)
        final_loss = pretrain(model, ids, steps=steps, seed=seed, log=log)
        eval_ppl = _held_out_perplexity(model, tokenizer) if evaluate else None
    model.generation_config.eos_token_id = [special_ids["<|im_end|>"], special_ids["<|endoftext|>"]]
    model.generation_config.pad_token_id = special_ids["<|endoftext|>"]
    model.generation_config.bos_token_id = special_ids["<|endoftext|>"]
    out_dir.mkdir(parents=True)
    _save_quietly(model, out_dir)
    wrap_tokenizer(tokenizer, MODEL_SHAPE["max_position_embeddings"]).save_pretrained(out_dir)
    make_tokenizer_config_portable(out_dir / "tokenizer_config.json")
    manifest = {
        "name": MODEL_NAME,
        "recipe_version": RECIPE_VERSION,
        "seed": seed,
        "steps": steps,
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_tokens": len(ids),
        "final_train_loss": round(final_loss, 4),
        "eval_perplexity_qc_reports": round(eval_ppl, 3) if evaluate else None,
        "weights_sha256": sha256_file(out_dir / "model.safetensors"),
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
        },
        "build_seconds": round(time.perf_counter() - started, 1),
        "build_threads": threads,
        "built_by_pid": os.getpid(),
    }
    manifest = write_manifest(out_dir, MANIFEST, manifest)
    log(
        f"built {MODEL_NAME} in {manifest['build_seconds']} s: {manifest['parameters'] / 1e6:.2f} M parameters, "
        f"final train loss {manifest['final_train_loss']}, eval perplexity {manifest['eval_perplexity_qc_reports']}"
    )
    return manifest


def _data_fingerprint() -> str:
    from rocmlab.assets import DATA_DIR

    digest = hashlib.sha256()
    for name in ("qc_reports_train.jsonl", "qc_reports_eval.jsonl", "qc_kb.jsonl", "qc_taxonomy.json"):
        digest.update(sha256_file(DATA_DIR / name).encode())
    return digest.hexdigest()[:10]


def model_dir(cache_dir=None, *, steps: int | None = None, seed: int | None = None) -> Path:
    steps = DEFAULT_STEPS if steps is None else steps
    seed = DEFAULT_SEED if seed is None else seed
    key = f"{MODEL_NAME}-r{RECIPE_VERSION}-s{seed}-n{steps}-{_data_fingerprint()}"
    return cache_root(cache_dir) / "models" / key


def read_valid_manifest(path: Path) -> dict | None:
    """The checkpoint's manifest if every file it lists is present with its size and hash, else None."""
    return cache.read_valid_manifest(path, MANIFEST)


def ensure_tiny_model(
    cache_dir=None,
    *,
    steps: int | None = None,
    seed: int | None = None,
    log=print,
    lock_timeout_s: float = LOCK_TIMEOUT_S,
    evaluate: bool = True,
) -> Path:
    """The cached checkpoint directory, built first if missing, partial or corrupt (``cache.build_once``)."""
    steps = DEFAULT_STEPS if steps is None else steps
    seed = DEFAULT_SEED if seed is None else seed
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    return cache.build_once(
        model_dir(cache_dir, steps=steps, seed=seed),
        lambda out: build_tiny_model(out, steps=steps, seed=seed, log=log, evaluate=evaluate),
        manifest=MANIFEST,
        what="model",
        lock_timeout_s=lock_timeout_s,
        log=log,
    )
