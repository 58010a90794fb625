"""Lab 02's kernel-side helpers: what a hidden check runs in a kernel (``learner.run``, or
``reference.run`` in the reference kernel, which ran the solution).

The learner's functions (``generate_with_kv_cache``, ``stream_completion``,
``environment_fingerprint``) and the notebook's ``ref_model`` and ``device`` are the notebook's own
names. A fact of the loaded model or of the machine (greedy tokens, the real cache, the parameter
count, the torch build) is asked of the reference kernel only: the learner's kernel may have
rebound ``ref_model`` or patched torch.
"""

import torch

from rocmlab import lab
from rocmlab.lab.sse import ScriptedSSEServer


def greedy(prompts, n, eos, pad):
    """``model.generate``'s greedy tokens of each prompt (model defaults such as
    repetition_penalty switched off)."""
    out = []
    for prompt in prompts:
        ids = torch.tensor([prompt], device=ref_model.device)
        with torch.no_grad():
            tokens = ref_model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=n,
                min_new_tokens=0,
                do_sample=False,
                repetition_penalty=1.0,
                num_beams=1,
                eos_token_id=eos,
                pad_token_id=pad,
            )
        out.append(tokens[0, len(prompt) :].tolist())
    return out


def kv_loop(prompt, n, eos):
    """``generate_with_kv_cache`` on ``prompt``: its record (tokens, prompt_len, prefill_s,
    decode_s) and its record's keys."""
    got = generate_with_kv_cache(ref_model, prompt, n, eos_token_id=eos)
    if not isinstance(got, dict):
        return got, None
    return {k: got[k] for k in ("tokens", "prompt_len", "prefill_s", "decode_s") if k in got}, sorted(got)


class _ScriptedModel:
    """``ref_model`` with each pass's logits written by the check: pass k answers ``right[k]`` at
    its last position when it is the pass the rule asks for (the whole prompt first, then one token
    on the cache the previous pass returned), ``wrong[k]`` otherwise and at every other position.
    A pass after the last token raises. The real model still runs, so the cache is real."""

    def __init__(self, model, prompt_len, right, wrong):
        self._model, self._prompt_len, self._right, self._wrong = model, prompt_len, right, wrong
        self._passes, self._cache = 0, None

    def __getattr__(self, name):
        return getattr(self._model, name)

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        k = self._passes
        if k >= len(self._right):
            raise RuntimeError(f"forward pass {k + 1} for {len(self._right)} new tokens: the last token needs none")
        self._passes += 1
        ids = kwargs.get("input_ids", args[0] if args else None)
        given = kwargs.get("past_key_values", kwargs.get("cache"))
        shape = tuple(ids.shape) if isinstance(ids, torch.Tensor) else None
        planned = shape == (1, self._prompt_len) if k == 0 else (shape == (1, 1) and given is self._cache)
        out = self._model(*args, **kwargs)
        self._cache = getattr(out, "cache", None) or out.past_key_values
        logits = torch.zeros(out.logits.shape, dtype=torch.float32, device=out.logits.device)
        logits[..., self._wrong[k]] = 1.0
        logits[..., -1, :] = 0.0
        logits[..., -1, (self._right if planned else self._wrong)[k]] = 1.0
        out.logits = logits
        return out


def kv_loop_scripted(prompt, eos, right, wrong):
    """``generate_with_kv_cache`` on ``prompt`` for ``len(right)`` tokens, given ``ref_model``
    whose passes answer as ``_ScriptedModel`` says: the learner's record, tokens and decode_s."""
    scripted = _ScriptedModel(ref_model, len(prompt), right, wrong)
    got = generate_with_kv_cache(scripted, prompt, len(right), eos_token_id=eos)
    return {k: got[k] for k in ("tokens", "decode_s") if k in got} if isinstance(got, dict) else got


def real_cache(prompt):
    """``(config, bytes, element size)``: the KV cache a forward pass over ``prompt`` holds."""
    ids = torch.tensor([prompt], device=ref_model.device)
    with torch.no_grad():
        out = ref_model(input_ids=ids, use_cache=True)
    cache = getattr(out, "cache", None) or out.past_key_values
    if hasattr(cache, "layers"):
        pairs = [(layer.keys, layer.values) for layer in cache.layers]
    elif hasattr(cache, "key_cache"):
        pairs = list(zip(cache.key_cache, cache.value_cache, strict=True))
    else:
        pairs = [tuple(kv[:2]) for kv in cache]
    real = sum(t.numel() * t.element_size() for kv in pairs for t in kv)
    return ref_model.config.to_dict(), real, next(ref_model.parameters()).element_size()


def model_size():
    """``(config, parameter count)`` of the loaded model."""
    return ref_model.config.to_dict(), sum(p.numel() for p in ref_model.parameters())


def stream(pieces, counts, *, ttft, itl, usage, max_tokens, chat, prompt, prompt_len, path=""):
    """``stream_completion`` against a scripted SSE server (at ``path`` under its base URL): the
    class from its own module, not the ``lab`` package's attribute, which a cell may rebind."""
    server = ScriptedSSEServer(pieces, tokens_per_piece=counts, ttft_s=ttft, itl_s=itl, usage=usage)
    server.start()
    try:
        return stream_completion(
            server.base_url + path, prompt, max_tokens=max_tokens, chat=chat, prompt_len=prompt_len, timeout_s=20.0
        )
    finally:
        server.stop()


def fingerprint():
    """``environment_fingerprint(device)``, its str values plain (``torch.__version__`` is a str
    subclass, which travels as an opaque object)."""
    got = environment_fingerprint(device)
    return {k: str(v) if isinstance(v, str) else v for k, v in got.items()} if isinstance(got, dict) else got


def kernel_facts(profile):
    """What this kernel's torch build and device are, and the course's line for them."""
    return {
        "torch": str(torch.__version__),
        "hip": getattr(torch.version, "hip", None),
        "cuda": getattr(torch.version, "cuda", None),
        "device": str(device),
        "type": device.type,
        "line": lab.describe_environment(profile, device),
    }
