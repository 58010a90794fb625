"""Find a real model's files: a local path, the Hugging Face cache, then a hub or mirror.

Network sources are tried only when online (``HF_HUB_OFFLINE`` unset). When nothing works
the error lists every source tried and the command that pre-fetches the model.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import CommandFailed

DEFAULT_HUB = "https://huggingface.co"
ETAG_TIMEOUT_S = 10
# Only the files a causal LM needs; skips other frameworks' weights and repo extras.
MODEL_FILE_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.py", "*.tiktoken"]


class ModelUnavailableError(CommandFailed, RuntimeError):
    """No source had the model; ``attempts`` lists (source, outcome) pairs."""

    def __init__(self, name: str, attempts: list[tuple[str, str]]):
        self.name, self.attempts = name, attempts
        tried = "\n".join(f"  - {source}: {outcome}" for source, outcome in attempts)
        super().__init__(
            f"cannot find model {name!r}. Tried:\n{tried}\n"
            f"Pre-fetch it once while online (instructors: on the shared cache), e.g. through a mirror:\n"
            f"  rocmlab assets fetch {name} --mirror https://hf-mirror.com\n"
            f"(plain `rocmlab assets fetch {name}` uses HF_ENDPOINT or {DEFAULT_HUB}), or pass a local "
            f'checkpoint directory, or use the offline course model "tiny-qwen-zh".'
        )


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _is_checkpoint(path: Path) -> bool:
    return path.is_dir() and (path / "config.json").is_file()


def _from_local_path(name: str):
    path = Path(name).expanduser()
    if _is_checkpoint(path):
        return path.resolve(), "found"
    if path.exists():
        return None, "exists but is not a checkpoint directory (no config.json)"
    return None, "no such directory"


def _valid_repo_id(name: str) -> bool:
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(name)
        return True
    except Exception:  # noqa: BLE001 (hub clients raise many error types)
        return False


def _from_hf_cache(name: str, cache_dir=None):
    from huggingface_hub import snapshot_download

    try:
        path = Path(
            snapshot_download(name, cache_dir=cache_dir, local_files_only=True, allow_patterns=MODEL_FILE_PATTERNS)
        )
    except Exception as exc:  # noqa: BLE001 (hub clients raise many error types)
        return None, f"not cached ({type(exc).__name__})"
    if _is_checkpoint(path):
        return path, "found"
    return None, f"cached snapshot {path} has no config.json"


def _from_hub(name: str, endpoint: str, cache_dir=None):
    from huggingface_hub import snapshot_download

    try:
        path = Path(
            snapshot_download(
                name,
                cache_dir=cache_dir,
                endpoint=endpoint,
                etag_timeout=ETAG_TIMEOUT_S,
                allow_patterns=MODEL_FILE_PATTERNS,
            )
        )
    except Exception as exc:  # noqa: BLE001 (hub clients raise many error types)
        return None, f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    return (path, "downloaded") if _is_checkpoint(path) else (None, "download has no config.json")


def _modelscope_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("modelscope") is not None


def _from_modelscope(name: str, cache_dir=None):
    try:
        from modelscope import snapshot_download as ms_snapshot_download

        path = Path(ms_snapshot_download(name, cache_dir=cache_dir))
    except Exception as exc:  # noqa: BLE001 (hub clients raise many error types)
        return None, f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    return (path, "downloaded") if _is_checkpoint(path) else (None, "download has no config.json")


def resolve_model(name: str, *, mirror: str | None = None, cache_dir=None, download: bool = True) -> Path:
    """The local directory holding checkpoint ``name``; downloads it only when online.

    Order: ``name`` as a local directory; the Hugging Face cache; then, unless
    ``HF_HUB_OFFLINE`` is set or ``download`` is False, the hub at ``mirror`` or
    ``HF_ENDPOINT`` (default huggingface.co), then ModelScope if the package is installed.
    """
    from huggingface_hub import constants

    name = str(name)
    attempts = []
    path, outcome = _from_local_path(name)
    attempts.append((f"local path {Path(name).expanduser()}", outcome))
    if path:
        return path
    if not _valid_repo_id(name):
        attempts.append(("Hugging Face cache and hub", "skipped: not a valid repo id (owner/name)"))
        raise ModelUnavailableError(name, attempts)
    path, outcome = _from_hf_cache(name, cache_dir)
    attempts.append((f"Hugging Face cache {cache_dir or constants.HF_HUB_CACHE}", outcome))
    if path:
        return path
    endpoint = mirror or os.environ.get("HF_ENDPOINT") or DEFAULT_HUB
    if hub_offline() or not download:
        reason = "HF_HUB_OFFLINE is set" if hub_offline() else "download=False"
        attempts.append((f"hub {endpoint}", f"skipped: {reason}"))
        if _modelscope_available():
            attempts.append(("ModelScope", f"skipped: {reason}"))
        raise ModelUnavailableError(name, attempts)
    path, outcome = _from_hub(name, endpoint, cache_dir)
    attempts.append((f"hub {endpoint}", outcome))
    if path:
        return path
    if _modelscope_available():
        path, outcome = _from_modelscope(name, cache_dir)
        attempts.append(("ModelScope", outcome))
        if path:
            return path
    else:
        attempts.append(("ModelScope", "skipped: the modelscope package is not installed"))
    raise ModelUnavailableError(name, attempts)


def fetch_model(name: str, *, mirror: str | None = None, cache_dir=None, log=print) -> Path:
    """Make ``name`` available offline: build tiny-qwen-zh, or download a real model."""
    from rocmlab.assets.tiny_model import MODEL_NAME, ensure_tiny_model

    if name == MODEL_NAME:
        return ensure_tiny_model(cache_dir, log=log)
    if hub_offline():
        raise ModelUnavailableError(name, [("fetch", "HF_HUB_OFFLINE is set; unset it to download")])
    path = resolve_model(name, mirror=mirror, cache_dir=cache_dir)
    log(f"{name}: {path}")
    return path
