"""Lab 08's kernel-side helpers: what its checks run in a kernel (``learner.run`` in the
learner's, ``reference.run`` in the reference kernel), over that kernel's names. A name read here
without binding is the notebook's: the learner's ``quantize_fp8``, or in the reference kernel the
solution's ``model`` and ``tok``. Each returns the answers as plain data; the checks judge them."""

import torch


def quantize_bytes(w, dtype, options):
    """``quantize_fp8(w, dtype, **options)``: its q as raw bytes, q's dtype and the scale."""
    q, scale = quantize_fp8(w, dtype, **options)
    return q.view(torch.uint8), q.dtype, scale


def _converted(function, raw, shape, dtype, scale):
    q = torch.tensor(raw, dtype=torch.uint8).reshape(shape).view(dtype)
    out, new_scale = function(q, scale)
    return out.view(torch.uint8), out.dtype, new_scale, q.view(torch.uint8), scale


def fnuz_of_ocp_bytes(raw, shape, scale):
    """``ocp_to_fnuz`` of the e4m3fn bytes ``raw``: (q bytes, q dtype, scale, the input's bytes and
    scale after the call)."""
    return _converted(ocp_to_fnuz, raw, shape, torch.float8_e4m3fn, scale)


def ocp_of_fnuz_bytes(raw, shape, scale):
    """``fnuz_to_ocp`` of the e4m3fnuz bytes ``raw``, as ``fnuz_of_ocp_bytes`` returns it."""
    return _converted(fnuz_to_ocp, raw, shape, torch.float8_e4m3fnuz, scale)


def w8a8_output(w, x, dtype):
    """``fp8_linear`` of x against w quantized per channel by the learner's own ``quantize_fp8``."""
    q_weight, weight_scale = quantize_fp8(w, dtype, granularity="channel")
    return fp8_linear(x, q_weight, weight_scale)


def token_nll(texts, max_tokens):
    """(summed next-token NLL, tokens predicted) of ``model`` over each text's first ``max_tokens``
    tokens, texts of fewer than 2 skipped: perplexity's reference, run in the reference kernel."""
    nll, n = 0.0, 0
    with torch.no_grad():
        for text in texts:
            ids = tok(text, add_special_tokens=False)["input_ids"][:max_tokens]
            if len(ids) < 2:
                continue
            batch = torch.tensor([ids], device=next(model.parameters()).device)
            nll += float(model(input_ids=batch, labels=batch).loss) * (len(ids) - 1)
            n += len(ids) - 1
    return nll, n


def model_size():
    """The loaded ``model``'s config and parameter count: weight_bytes' case of a real model."""
    return model.config.to_dict(), sum(p.numel() for p in model.parameters())
