"""Device choice, seeding and the one-line environment description every lab prints."""

from __future__ import annotations

import os
import random


def pick_device(preference: str = "auto"):
    """Return a ``torch.device``: ``auto`` takes the first GPU (ROCm or CUDA) if any, else CPU."""
    import torch

    preference = (preference or "auto").lower()
    if preference == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    device = torch.device(preference)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"DEVICE={preference!r} asks for a GPU but torch sees none "
            f"(torch {torch.__version__}); run `rocmlab doctor` or use DEVICE='auto'."
        )
    return device


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices) so a lab's numbers repeat run to run."""
    os.environ["PYTHONHASHSEED"] = str(seed)
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass
    try:
        import torch

        torch.manual_seed(seed)
        if torch.cuda.is_available():
            torch.cuda.manual_seed_all(seed)
    except ImportError:
        pass


def synchronize(device=None) -> None:
    """Wait for queued GPU work; a no-op on CPU. Timers call this before reading the clock."""
    import torch

    if device is None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gpu_arch(index: int = 0) -> str | None:
    """The gfx target (ROCm, feature suffixes dropped) or ``sm_XY`` (CUDA) of a visible GPU."""
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(index)
    arch = getattr(props, "gcnArchName", "") or ""
    if torch.version.hip and arch:
        return arch.split(":", 1)[0]
    major, minor = torch.cuda.get_device_capability(index)
    return f"sm_{major}{minor}"


def describe_environment(profile: str | None = None, device=None) -> str:
    """One line: torch, the HIP or CUDA build, the GPU and its arch, and the lab profile."""
    import platform

    import torch

    hip = getattr(torch.version, "hip", None)
    cuda = getattr(torch.version, "cuda", None)
    stack = f"ROCm/HIP {hip}" if hip else (f"CUDA {cuda}" if cuda else "CPU build")
    if torch.cuda.is_available():
        index = 0 if device is None else (torch.device(device).index or 0)
        name = torch.cuda.get_device_name(index)
        gpu = f"{name} ({gpu_arch(index)}), {torch.cuda.device_count()} visible"
    else:
        gpu = f"no GPU, {os.cpu_count()} CPU cores"
    parts = [f"python {platform.python_version()}", f"torch {torch.__version__}", stack, gpu]
    if profile:
        parts.append(f"profile {profile}")
    return " | ".join(parts)
