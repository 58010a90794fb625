"""The result record of one lab run (JSON, written atomically) and the environment fingerprint."""

from __future__ import annotations

import json
import os
import platform
import tempfile
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

SCHEMA = 1
STATUSES = ("passed", "failed", "timeout", "crashed", "skipped", "flaky")
FINGERPRINT_PACKAGES = ("torch", "transformers", "peft", "nbgrader", "papermill", "jupytext", "numpy")


@dataclass
class Record:
    lab: str
    lab_version: str
    profile: str
    env: str
    status: str
    started_at: str
    duration_s: float = 0.0
    reason: str = ""
    failing_cell: dict | None = None
    warnings: list = field(default_factory=list)
    fingerprint: dict = field(default_factory=dict)
    notebook: str = ""
    student: bool = False
    repeats: list = field(default_factory=list)  # with `run --repeat N`: each run's status, reason, failing cell
    schema: int = SCHEMA

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {self.status!r}")

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def write_json_atomic(path: Path, data) -> None:
    """Write JSON so that a reader sees the old file or the whole new one, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, ensure_ascii=False, indent=2, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_record(record: Record, path: Path) -> None:
    write_json_atomic(path, asdict(record))


def read_record(path: Path) -> Record:
    """Load a record; a malformed file raises ValueError naming the file and the field."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable JSON result record ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")  # noqa: TRY004 (a malformed file is a value error)
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: field schema: expected {SCHEMA}, got {data.get('schema')!r}")
    known = Record.__dataclass_fields__
    missing = [name for name in ("lab", "lab_version", "profile", "env", "status", "started_at") if name not in data]
    if missing:
        raise ValueError(f"{path}: missing field {missing[0]}")
    try:
        return Record(**{k: v for k, v in data.items() if k in known})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _os_name() -> str:
    try:
        release = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
        return release.get("PRETTY_NAME", "").strip('"') or platform.platform()
    except OSError:
        return platform.platform()


def _rocm_version() -> str | None:
    info = Path("/opt/rocm/.info/version")
    if info.is_file():
        return info.read_text().strip() or None
    cores = sorted(Path("/opt").glob("rocm/core-*"))
    return cores[-1].name.removeprefix("core-") if cores else None


def _torch_devices() -> dict:
    try:
        import torch
    except ImportError:
        return {"hip": None, "cuda": None, "gpus": []}
    gpus = []
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            arch = (getattr(props, "gcnArchName", "") or "").split(":", 1)[0]
            if not arch:
                major, minor = torch.cuda.get_device_capability(index)
                arch = f"sm_{major}{minor}"
            gpus.append({"name": props.name, "arch": arch, "memory_gb": round(props.total_memory / 2**30, 1)})
    return {"hip": getattr(torch.version, "hip", None), "cuda": getattr(torch.version, "cuda", None), "gpus": gpus}


def fingerprint() -> dict:
    """What the labs ran on: interpreter, OS, library versions, GPU stack and devices."""
    info = {
        "python": platform.python_version(),
        "os": _os_name(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "rocm": _rocm_version(),
        "packages": {name: _package_version(name) for name in FINGERPRINT_PACKAGES},
    }
    info.update(_torch_devices())
    return info


if __name__ == "__main__":
    # `python -m rocmlab.results` prints the fingerprint of the interpreter it runs in.
    print(json.dumps(fingerprint(), ensure_ascii=False))
