"""Course data as the harness computes it for a lab's checks, from the run's parameters and the
course's own files: never read from the learner's namespace, where any later cell may rebind it.

A check that needs what a notebook builds from the course (lab 02's ``PROMPTS``: the eval split's
QC descriptions, tokenized by the run's ``MODEL``; its ``EOS`` and ``PAD``) asks here. The values
are the notebook's for an honest learner: the same files, the same tokenizer (``tokenizer.json``
read by the ``tokenizers`` library that transformers' fast tokenizers wrap), so every rule stays
the same for them.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path


@cache
def _model_folder(model: str) -> Path:
    """Where the kernel loaded ``model`` from; never built or downloaded here (the harness's time
    budget has no room for it: a missing model is the grader's error, raised as such)."""
    from .assets.resolve import resolve_model
    from .assets.tiny_model import MODEL_NAME, model_dir

    if model == MODEL_NAME:
        folder = model_dir()
        if not (folder / "tokenizer.json").is_file():
            raise FileNotFoundError(f"{model}: not built in {folder} (rocmlab assets build-model)")
        return folder
    return Path(resolve_model(model, download=False))


@cache
def _tokenizer(model: str):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(_model_folder(model) / "tokenizer.json"))


def _special_token(model: str, key: str) -> str | None:
    config = json.loads((_model_folder(model) / "tokenizer_config.json").read_text(encoding="utf-8"))
    token = config.get(key)
    return token.get("content") if isinstance(token, dict) else token


def token_ids(model: str, text: str) -> list[int]:
    """``tok(text)["input_ids"]`` of the notebook's tokenizer for ``model``."""
    return list(_tokenizer(model).encode(text).ids)


def eos_id(model: str) -> int:
    """``tok.eos_token_id``."""
    token = _special_token(model, "eos_token")
    found = _tokenizer(model).token_to_id(token) if token else None
    if found is None:
        raise LookupError(f"{model}: its tokenizer names no eos token")
    return found


def pad_id(model: str) -> int:
    """``tok.pad_token_id`` after ``lab.load_model``, which pads with eos where none is set."""
    token = _special_token(model, "pad_token")
    found = _tokenizer(model).token_to_id(token) if token else None
    return eos_id(model) if found is None else found


@cache
def qc_prompts(model: str) -> tuple[tuple[int, ...], ...]:
    """Lab 02's ``PROMPTS``: each eval QC report's description and a newline, tokenized."""
    from .assets.loaders import load_qc_reports

    return tuple(tuple(token_ids(model, r["description"] + "\n")) for r in load_qc_reports("eval"))
