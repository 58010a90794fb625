"""The tokenizer of tiny-qwen-zh: a byte-level BPE trained on the course corpus, with Qwen2's
normalizer, pre-tokenizer, special tokens and chat template, saved so that both transformers
generations load it."""

from __future__ import annotations

import json
from pathlib import Path

from .corpus import DEFAULT_SYSTEM

VOCAB_SIZE = 4096
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "{{ '<|im_start|>system\\n" + DEFAULT_SYSTEM + "<|im_end|>\\n' }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
QWEN_PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def train_tokenizer(docs: list[str]):
    """A byte-level BPE tokenizer (``tokenizers``) trained on ``docs``."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    # The same normalizer and pre-tokenizer as transformers' Qwen2Tokenizer, so the checkpoint
    # tokenizes identically whichever class loads it.
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(docs, trainer=trainer)
    return tokenizer


def wrap_tokenizer(tokenizer, max_length: int):
    """``tokenizer`` as a transformers fast tokenizer with the chat template, for ``save_pretrained``."""
    from transformers import PreTrainedTokenizerFast

    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        clean_up_tokenization_spaces=False,
        model_max_length=max_length,
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def make_tokenizer_config_portable(path: Path) -> None:
    """Name a tokenizer class and special-token field every transformers generation reads.

    transformers 5 writes ``TokenizersBackend`` and a list under ``extra_special_tokens``;
    transformers 4 (the cpu-previous environment) knows neither and refuses to load, and its
    generic fast tokenizer adds token_type_ids, which Qwen2's generate() rejects.
    """
    config = json.loads(path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config["model_input_names"] = ["input_ids", "attention_mask"]
    extra = config.pop("extra_special_tokens", None)
    if isinstance(extra, list):
        config["additional_special_tokens"] = extra
    path.write_text(json.dumps(config, ensure_ascii=False, indent=2, sort_keys=True) + "\n", encoding="utf-8")
