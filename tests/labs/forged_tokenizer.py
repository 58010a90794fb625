"""A tokenizer a learner's later cell rebinds, and the sample builder that agrees with it (issue 47):
used by lab 03's forgery tests (``tokenizer`` and ``build_sft_sample``) and lab 08's (``tok``)."""


class TwoTokens:
    """Every text is the same two tokens, the second its end."""

    pad_token_id = 0

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [1, 2]}

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
        return ""

    def convert_tokens_to_ids(self, token):
        return 2


def two_token_sample(tokenizer, messages, pad_to=None):
    """The ``build_sft_sample`` that agrees with ``TwoTokens``, whatever the messages."""
    if pad_to is not None and pad_to < 2:
        raise ValueError(pad_to)
    pad = (pad_to or 2) - 2
    return {"input_ids": [1, 2] + [0] * pad, "labels": [-100, 2] + [-100] * pad, "attention_mask": [1, 1] + [0] * pad}
