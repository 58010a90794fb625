"""Load the course model (tiny-qwen-zh, built offline on first use) or a real checkpoint."""

from __future__ import annotations

from rocmlab.assets.resolve import ModelUnavailableError, resolve_model  # noqa: F401  (re-export)
from rocmlab.assets.tiny_model import MODEL_NAME


def _torch_dtype(dtype, device):
    import torch

    if dtype is None:
        return torch.float32 if device.type == "cpu" else "auto"
    if isinstance(dtype, str) and dtype != "auto":
        value = getattr(torch, dtype, None)
        if not isinstance(value, torch.dtype):
            raise ValueError(f"dtype {dtype!r} is not a torch dtype (e.g. 'float32', 'bfloat16')")
        return value
    return dtype


def model_path(name: str = MODEL_NAME):
    """The local checkpoint directory for ``name`` (building tiny-qwen-zh if needed)."""
    if name == MODEL_NAME:
        from rocmlab.assets.tiny_model import ensure_tiny_model

        return ensure_tiny_model()
    return resolve_model(name)


def load_model(name: str = MODEL_NAME, *, device=None, dtype=None):
    """``(model, tokenizer)``: a causal LM in eval mode on ``device`` and its fast tokenizer.

    ``tiny-qwen-zh`` is built offline and cached on first use; any other name is a local
    path or hub id found by ``resolve_model``. ``device=None`` picks the first GPU, else CPU;
    ``dtype=None`` means float32 on CPU and the checkpoint's own dtype on a GPU.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rocmlab.lab.env import pick_device

    path = model_path(name)
    device = pick_device("auto" if device is None else str(device))
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=_torch_dtype(dtype, device))
    model.to(device).eval()
    return model, tokenizer
