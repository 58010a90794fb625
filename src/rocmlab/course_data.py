"""Course data as the harness computes it for a lab's checks, from the run's parameters and the
course's own files: never read from the learner's namespace, where any later cell may rebind it.

A check that needs what a notebook builds from the course (lab 02's ``PROMPTS``: the eval split's
QC descriptions, tokenized by the run's ``MODEL``; its ``EOS`` and ``PAD``; lab 05's QC items and
the tokens of their chat prompts and answers) asks here. The values
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


@cache  # read as often as a check asks (lab 02 asks pad_id once per vocabulary token)
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


# ---------------------------------------------------------------- lab 05: the QC fine-tune's pieces

QC_SYSTEM = "你是工业质检助手。把缺陷描述整理成 JSON 格式的质检报告。"
BASE_LIKE_EOS = "<|endoftext|>"  # lab 05's base-like tokenizer: eos set to the end-of-document token


@cache
def chat_tokenizer(model: str, base_like: bool = False):
    """``lab.load_model(model)``'s tokenizer (transformers' fast tokenizer of the model folder, padding
    with eos where none is set); ``base_like``: lab 05's copy of it with eos the end-of-document token.
    Used read-only: callers must not change it."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(_model_folder(model))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if base_like:
        tokenizer.eos_token = BASE_LIKE_EOS
    return tokenizer


@cache
def qc_train_items() -> tuple[dict, ...]:
    """Lab 05's ``qc_items``: the train split of the QC reports."""
    from .assets.loaders import load_qc_reports

    return tuple(load_qc_reports("train"))


def qc_messages(item: dict) -> list[dict]:
    """Lab 05's given ``qc_messages``: the chat prompt for one QC item."""
    return [{"role": "system", "content": QC_SYSTEM}, {"role": "user", "content": item["description"]}]


def end_of_turn(tokenizer) -> str:
    """Lab 05's given ``end_of_turn``: the token its chat template closes an assistant turn with."""
    probe = "QC_ANSWER_PROBE"
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "?"}, {"role": "assistant", "content": probe}], tokenize=False
    )
    after = text.split(probe, 1)[1].split() if probe in text else []
    if not after or len(tokenizer(after[0], add_special_tokens=False)["input_ids"]) != 1:
        raise ValueError(f"the chat template has no single token after an assistant message: {text[-40:]!r}")
    return after[0]


def qc_pieces(model: str, items: list[dict], base_like: bool = False) -> list[tuple[list[int], list[int]]]:
    """Lab 05's (prompt ids, answer ids) of each item: its chat prompt with the generation prompt,
    and its report as JSON closed by the template's end of turn (the given ``qc_answer``)."""
    tokenizer = chat_tokenizer(model, base_like)
    turn_end = end_of_turn(tokenizer)
    pieces = []
    for item in items:
        prompt = tokenizer.apply_chat_template(qc_messages(item), tokenize=False, add_generation_prompt=True)
        answer = json.dumps(item["report"], ensure_ascii=False) + turn_end
        pieces.append(
            (
                list(tokenizer(prompt, add_special_tokens=False)["input_ids"]),
                list(tokenizer(answer, add_special_tokens=False)["input_ids"]),
            )
        )
    return pieces


# ---------------------------------------------------------------- lab 10: the course model's own weights


def _weight_files(model: str) -> list[Path]:
    files = sorted(_model_folder(model).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{model}: no *.safetensors in {_model_folder(model)}")
    return files


@cache
def parameter_shapes(model: str) -> dict[str, tuple[int, ...]]:
    """``{name: shape}`` of every tensor the model folder's safetensors files hold (one file or a
    sharded set): the names ``from_pretrained`` gives those parameters. Read from the headers only."""
    from safetensors import safe_open

    shapes = {}
    for path in _weight_files(model):
        with safe_open(str(path), framework="pt") as f:
            shapes.update({name: tuple(f.get_slice(name).get_shape()) for name in f.keys()})
    return shapes


def parameters(model: str, names: list[str]) -> dict:
    """The tensors ``names`` of the model's files as ``lab.load_model(model, dtype=float32)`` holds
    them: float32, read from the files here."""
    import torch
    from safetensors import safe_open

    found = {}
    for path in _weight_files(model):
        with safe_open(str(path), framework="pt") as f:
            found.update({n: f.get_tensor(n).to(torch.float32) for n in names if n in f.keys()})
    missing = sorted(set(names) - set(found))
    if missing:
        raise KeyError(f"{model}: its files hold no tensor {missing[0]!r}")
    return found


# ---------------------------------------------------------------- lab 02: token ids a check may draw


def vocab_size(model: str) -> int:
    """How many token ids ``model``'s tokenizer has (``len(tok)``); each is a row of its logits."""
    return _tokenizer(model).get_vocab_size()


@cache
def causal_lm(model: str):
    """``lab.load_model(model, device="cpu", dtype=torch.float32)``'s model: the course's weights as
    every rank of lab 05's fine-tune starts from them, in eval mode. Used read-only: callers must
    not train or change it."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(_model_folder(model), dtype=torch.float32).eval()
