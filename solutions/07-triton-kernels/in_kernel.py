"""Lab 07's kernel-side helpers: what a hidden check runs in a kernel (``learner.run`` and
``reference.run``).

In the learner's kernel they build inputs on the notebook's ``device`` (buffers with a sentinel
tail, strided views) and call the learner's kernels (``vector_add``, ``softmax``, ``rmsnorm``,
``swiglu``, ``triton_kernels_in``), returning what those answered. In the reference kernel they
read the solution's stock model on the same inputs. ``checks.py`` judges every value.
"""

import contextlib

import IPython
import torch


def _front(v, slack, fill):
    """``v`` on the device as the first ``v.numel()`` elements of a longer buffer filled with ``fill``."""
    buf = torch.full((v.numel() + slack,), fill, dtype=v.dtype, device=device)
    buf[: v.numel()] = v.to(device)
    return buf[: v.numel()]


def vector_add_into(x, y, slack, fill, block):
    """``(buffer, returned)``: ``vector_add`` writing into the front of a buffer ``slack`` longer
    than ``x``, filled with ``fill``, and what it returned."""
    xv, yv = _front(x, slack, 0), _front(y, slack, 0)
    buf = torch.full((x.numel() + slack,), fill, dtype=x.dtype, device=device)
    returned = vector_add(xv, yv, out=buf[: x.numel()], block=block)
    return buf, returned


def softmax_of_view(wide, view, lo, hi, rows):
    """``softmax`` of a strided view of ``wide`` on the device: ``view`` names which."""
    w = wide.to(device)
    views = {
        "columns": lambda: w[:, lo:hi],
        "transposed": lambda: w.t(),
        "every other row": lambda: w[::2],
        "transposed and cut": lambda: w.t()[lo:hi, 1 : rows - 1],
    }
    return softmax(views[view]())


# ---------------------------------------------------------------- the model swap


def _rms_modules():
    return [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]


def rmsnorm_module(h, i):
    """``(weight, eps, output)`` of the model's ``i``-th RMSNorm module (cyclically) on ``h``."""
    modules = _rms_modules()
    module = modules[i % len(modules)]
    with torch.no_grad():
        out = module(h.to(device)).float().cpu()
    return module.weight.detach().cpu(), float(module.variance_epsilon), out


def _marked(kernel, scales):
    """``kernel`` with the k-th call's output scaled by ``scales[k % len(scales)]``."""
    calls = [0]

    def marked(*args):
        calls[0] += 1
        return kernel(*args) * scales[(calls[0] - 1) % len(scales)]

    return marked


def _scaling_hook(scales):
    """A forward hook that scales the k-th call's output as ``_marked`` does."""
    calls = [0]

    def hook(module, args, output):
        calls[0] += 1
        return output * scales[(calls[0] - 1) % len(scales)]

    return hook


def stock_model(prompts, norm_scales, mlp_scales):
    """The reference kernel's side: ``(kinds, stock logits, marked logits, input ids, mask)`` of the
    solution's stock model on ``prompts``; marked: each RMSNorm / MLP module's output scaled per
    call, in call order, by hooks."""
    kinds = {
        "rmsnorm": sum(type(m).__name__.endswith("RMSNorm") for m in model.modules()),
        "mlp": sum(type(m).__name__.endswith("MLP") for m in model.modules()),
    }
    batch = tokenizer(prompts, return_tensors="pt", padding=True, truncation=True, max_length=MAX_TOKENS)

    def logits():
        with torch.no_grad():
            return model(**batch.to(device)).logits.float().cpu()

    stock = logits()
    norm_hook, mlp_hook = _scaling_hook(norm_scales), _scaling_hook(mlp_scales)  # one count per kind
    hooks = [
        m.register_forward_hook(norm_hook if type(m).__name__.endswith("RMSNorm") else mlp_hook)
        for m in model.modules()
        if type(m).__name__.endswith(("RMSNorm", "MLP"))
    ]
    try:
        marked = logits()
    finally:
        for hook in hooks:
            hook.remove()
    return kinds, stock, marked, batch["input_ids"].cpu(), batch["attention_mask"].cpu()


def swap_run(ids, mask, norm_scales, mlp_scales):
    """The learner's side: ``(counts, stock, swapped, marked inside, marked after)`` logits of the
    notebook's model. "Marked": the notebook's ``rmsnorm`` / ``swiglu`` rebound, before entering
    the block, to themselves scaled per call; outside the block a restored model never calls them."""

    def logits():
        with torch.no_grad():
            return model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float()

    stock = logits()
    with triton_kernels_in(model) as counts:
        counts = dict(counts)
        swapped = logits()
    with _marked_kernels(norm_scales, mlp_scales):
        with triton_kernels_in(model):
            in_marked = logits()
    return counts, stock, swapped, in_marked, marked_logits(ids, mask, norm_scales, mlp_scales)


def _names():
    return IPython.get_ipython().user_ns  # where the notebook's functions look their names up


@contextlib.contextmanager
def _marked_kernels(norm_scales, mlp_scales):
    """The notebook's ``rmsnorm`` / ``swiglu`` rebound to themselves scaled per call, put back after."""
    names = _names()
    real = (names["rmsnorm"], names["swiglu"])
    names["rmsnorm"], names["swiglu"] = _marked(real[0], norm_scales), _marked(real[1], mlp_scales)
    try:
        yield
    finally:
        names["rmsnorm"], names["swiglu"] = real


def marked_logits(ids, mask, norm_scales, mlp_scales):
    """The notebook's model's logits with its ``rmsnorm`` / ``swiglu`` marked: a model restored
    after the block never calls them, so these are its stock logits."""
    with _marked_kernels(norm_scales, mlp_scales), torch.no_grad():
        return model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float()


def raise_in_block(token):
    """``KeyError(token)`` raised inside ``triton_kernels_in(model)``: the check sees whether it
    reached the caller (its answer is that exception, ``token`` and all), not a flag computed here."""
    with triton_kernels_in(model):
        raise KeyError(token)
