"""Lab 03's QC-report LoRA adapter, built once per machine and cached: lab 03 and lab 06 use the same one.

Lab 03 teaches the recipe: its learner's loop runs the first steps and must reproduce this build's
losses, then it evaluates this build (on a CPU; on a GPU it trains every step itself). Lab 06's report
agent loads it (:func:`load_qc_reporter`). :func:`ensure_qc_adapter` finds it in the cache, under a key
that names the base checkpoint, the recipe and the seed, next to the course model; when it is missing
it trains lab 03's reference recipe, which lives with lab 03's hidden checks in the course checkout
(``solutions/03-lora-finetune-zh/course_adapter.py``: lab 03's answers are not in the package a
learner imports), written into the cache by ``rocmlab.assets.cache.build_once``.

:func:`qc_messages` is lab 03's prompt (``SYSTEM_PROMPT``, ``to_messages``), given to learners in both
labs; tests/lab/test_qc_adapter.py checks it against lab 03's source so that the two cannot drift apart.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from rocmlab.assets.cache import CacheError, build_once, cache_root, read_valid_manifest
from rocmlab.errors import RocmlabError

ADAPTER_RECIPE = 3  # bump on any change to the prompt, the data selection or the training recipe
ANSWER_KEYS = ("defect_type", "location", "severity", "disposition", "root_cause", "action")
SYSTEM_PROMPT = "你是质检助手。把缺陷描述转换成 JSON 质检报告，字段：" + "、".join(ANSWER_KEYS) + "。"
MANIFEST = "rocmlab-adapter.json"
LOCK_TIMEOUT_S = 900
BUILDER = Path("solutions") / "03-lora-finetune-zh" / "course_adapter.py"  # in the course checkout

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


def recipe_for(model: str) -> dict:
    """The recipe lab 03 uses for ``model``: its smoke profile for the course model, else its gpu profile."""
    return RECIPES["tiny" if model == "tiny-qwen-zh" else "real"]


def adapter_dir(model: str = "tiny-qwen-zh", *, seed: int = 0, cache_dir=None) -> Path:
    """Where the adapter for ``model`` is cached: keyed by the base checkpoint and the recipe."""
    from rocmlab.assets.tiny_model import MODEL_NAME, model_dir
    from rocmlab.lab.models import resolve_model

    base = model_dir() if model == MODEL_NAME else Path(resolve_model(model))  # finds, never builds, the base
    return cache_root(cache_dir) / "adapters" / f"{base.name}-qc-lora-a{ADAPTER_RECIPE}-s{seed}"


def read_manifest(path: Path) -> dict | None:
    """The manifest of the adapter in ``path`` (its recipe, seed, every step's loss), or None when
    the folder holds no complete build."""
    return read_valid_manifest(Path(path), MANIFEST)


def ensure_qc_adapter(
    model: str = "tiny-qwen-zh",
    *,
    device=None,
    seed: int = 0,
    cache_dir=None,
    log=print,
    lock_timeout_s: float = LOCK_TIMEOUT_S,
    root=None,
) -> Path:
    """The cached adapter folder for ``model`` (peft format), trained first when missing or partial,
    with the reference recipe of the course checkout at ``root`` (found as every command finds it)."""
    target = adapter_dir(model, seed=seed, cache_dir=cache_dir)
    if read_manifest(target):
        return target
    builder = course_builder(root)
    return build_once(
        target,
        lambda out: builder.train(model, out, device=device, seed=seed, log=log),
        manifest=MANIFEST,
        what="adapter",
        lock_timeout_s=lock_timeout_s,
        log=log,
    )


def course_builder(root=None):
    """Lab 03's reference recipe (``BUILDER``), loaded from the course checkout: CacheError when
    there is none here (a learner's kernel, which sees the cache but not ``solutions/``)."""
    from rocmlab.root import find_root

    try:
        path = find_root(root) / BUILDER
    except RocmlabError as exc:
        raise CacheError(f"lab 03's QC adapter is not in the cache, and building it needs the course: {exc}") from None
    if not path.is_file():
        raise CacheError(
            f"lab 03's QC adapter is not in the cache, and its recipe {path} cannot be read here: "
            "build it where the course checkout is (python -m rocmlab.lab.qc_adapter)"
        )
    spec = importlib.util.spec_from_file_location("rocmlab_course_adapter", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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

    parser = argparse.ArgumentParser(prog="python -m rocmlab.lab.qc_adapter", description=main.__doc__)
    parser.add_argument("--root", help="the course checkout (default: found from here, or $ROCMLAB_ROOT)")
    path = ensure_qc_adapter(device="cpu", log=print, root=parser.parse_args(argv).root)
    print(f"lab 03's QC adapter: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
