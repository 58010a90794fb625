"""The machine fingerprint: what a lab ran on, as typed facts, and how it is read from this machine.

``Fingerprint`` is the one definition. Each field is a fact that declares its label and whether
it is machine-specific (it differs between two machines that run one matrix entry with the same
pins: the kernel, the CPU, the GPUs); committed views (``rocmlab report --stamp``) leave those out.
``schemas/fingerprint.schema.json`` is its JSON form, shared by the run record's and the ledger
line's schemas; a test keeps the two in step. Adding a fact: a field here with its reader in
``fingerprint()``, a property in the schema, one test.

``python -m rocmlab.execution.fingerprint`` prints the fingerprint of the interpreter it runs in
(``rocmlab run --env`` asks an environment's interpreter so).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, TypedDict

from ..schemas import validate

FINGERPRINT_PACKAGES = (
    "torch",
    "transformers",
    "peft",
    "accelerate",
    "tokenizers",
    "nbgrader",
    "papermill",
    "jupytext",
    "numpy",
)
IMAGE_VARIABLES = {"image": "ROCMLAB_IMAGE", "image_digest": "ROCMLAB_IMAGE_DIGEST"}  # set by CI's container runs


class Gpu(TypedDict, total=False):
    name: str
    arch: str
    memory_gb: float


def _text(value) -> str:
    return "" if value is None else str(value)


def _gpus_text(gpus: list[Gpu]) -> str:
    return ", ".join(f"{g.get('name')} ({g.get('arch')})" for g in gpus)


def _packages_text(packages: dict[str, str | None]) -> str:
    return ", ".join(f"{name} {version}" for name, version in sorted(packages.items()) if version)


def fact(label: str, machine_specific: bool, *, listed: bool = True, text: Callable[[Any], str] = _text, **kw):
    """A fingerprint field: ``label`` names it in a view; ``listed`` False keeps it out of the
    one-line-per-fact lists (the whole freeze, and its hash: views compare packages one by one)."""
    meta = {"label": label, "machine_specific": machine_specific, "listed": listed, "text": text}
    if "default_factory" not in kw:
        kw["default"] = None
    return field(metadata=meta, **kw)


@dataclass(frozen=True)
class Fingerprint:
    """What one lab run ran on. Every fact is optional: records older than a fact lack it."""

    python: str | None = fact("Python", False)
    os: str | None = fact("OS", True)
    kernel: str | None = fact("kernel", True)
    machine: str | None = fact("architecture", False)
    cpu_model: str | None = fact("CPU", True)
    packages: dict[str, str | None] = fact("packages", False, text=_packages_text, default_factory=dict)
    freeze: list[str] | None = fact("freeze", False, listed=False)
    freeze_sha256: str | None = fact("freeze hash", False, listed=False)
    hip: str | None = fact("HIP", False)
    cuda: str | None = fact("CUDA", False)
    gpus: list[Gpu] = fact("GPUs", True, text=_gpus_text, default_factory=list)
    rocm: str | None = fact("ROCm", False)
    rocm_source: str | None = fact("ROCm read from", False)
    rocm_system: str | None = fact("system ROCm", True)
    image: str | None = fact("image", False)
    image_digest: str | None = fact("image digest", False)

    @classmethod
    def from_data(cls, data: dict, where: str = "fingerprint") -> Fingerprint:
        """The fingerprint of its JSON form; ValueError naming ``where`` and the field when it is not one."""
        validate(data, "fingerprint", where, ValueError)
        return cls(**data)

    def to_data(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def gpu_archs(self) -> list[str]:
        return [g.get("arch", "") for g in self.gpus]

    def facts(self, committed: bool = False, without: set[str] = frozenset()) -> dict[str, str]:
        """label → text of each listed fact that is known, but those named in ``without``;
        ``committed`` leaves the machine-specific ones out."""
        shown = {}
        for f in FACTS:
            value = getattr(self, f.name)
            if value in (None, "", [], {}) or f.name in without or (committed and f.metadata["machine_specific"]):
                continue
            shown[f.metadata["label"]] = f.metadata["text"](value)
        return shown


FACTS = tuple(f for f in dataclasses.fields(Fingerprint) if f.metadata["listed"])


# ---------------------------------------------------------------- reading this machine


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


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """The first processor's ``model name`` line of /proc/cpuinfo (``model name\t: <name>``, printed
    by Linux's arch/x86/kernel/cpu/proc.c), or None where there is no such line or file."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "model name" and value.strip():
            return " ".join(value.split())
    return None


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


def freeze() -> list[str]:
    """Every installed distribution as ``name==version`` (names normalised), sorted: what pip freeze shows."""
    found = set()
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.add(f"{re.sub(r'[-_.]+', '-', name).lower()}=={dist.version}")
    return sorted(found)


def freeze_hash(lines: list[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _rocm(torch_version: str | None, hip: str | None) -> dict:
    from ..probes import LiveMachine, rocm_versions

    found = rocm_versions(LiveMachine(), {"version": torch_version, "hip": hip})
    version, source = found.best
    return {"rocm": version, "rocm_source": source, "rocm_system": found.system}


def fingerprint() -> Fingerprint:
    """What the labs run on here: interpreter, OS, CPU, library versions, ROCm, GPU devices, the
    whole freeze, and the container image when CI says which (``$ROCMLAB_IMAGE``, ``$ROCMLAB_IMAGE_DIGEST``)."""
    packages = {name: _package_version(name) for name in FINGERPRINT_PACKAGES}
    installed = freeze()
    devices = _torch_devices()
    return Fingerprint(
        python=platform.python_version(),
        os=_os_name(),
        kernel=platform.release(),
        machine=platform.machine(),
        cpu_model=cpu_model(),
        packages=packages,
        freeze=installed,
        freeze_sha256=freeze_hash(installed),
        **devices,
        **_rocm(packages["torch"], devices["hip"]),
        **{key: os.environ.get(variable) or None for key, variable in IMAGE_VARIABLES.items()},
    )


def main() -> int:
    """``python -m rocmlab.execution.fingerprint``: this interpreter's fingerprint as one JSON line."""
    print(json.dumps(fingerprint().to_data(), ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
