"""What ``rocmlab doctor`` knows before it judges: findings, the facts the probes learned, and
the ROCm releases with their GPU targets (from the release matrix, else a built-in table)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .. import probes
from ..errors import InputError
from ..probes import Machine, base_target, parse_version

STATUSES = ("ok", "skip", "warn", "fail")
SEVERITY = {"ok": 0, "skip": 0, "warn": 1, "fail": 2}
EXIT_CODES = {"ok": 0, "skip": 0, "warn": 1, "fail": 3}

DOCS = {
    "prereq": "https://rocm.docs.amd.com/projects/install-on-linux/en/latest/install/prerequisites.html",
    "sysreq": "https://rocm.docs.amd.com/projects/install-on-linux/en/latest/reference/system-requirements.html",
    "compat": "https://rocm.docs.amd.com/en/latest/compatibility/compatibility-matrix.html",
    "install": "https://rocm.docs.amd.com/projects/install-on-linux/en/latest/",
    "pytorch": "https://rocm.docs.amd.com/projects/install-on-linux/en/latest/install/3rd-party/pytorch-install.html",
    "torch_local": "https://pytorch.org/get-started/locally/",
    "isolation": "https://rocm.docs.amd.com/en/latest/conceptual/gpu-isolation.html",
    "tuning": "https://rocm.docs.amd.com/en/latest/how-to/system-optimization/mi300x.html",
    "docker": "https://rocm.docs.amd.com/projects/install-on-linux/en/latest/how-to/docker.html",
    "amdsmi": "https://rocm.docs.amd.com/projects/amdsmi/en/latest/",
    "nccl_env": "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html",
    "torch_nccl_env": "https://pytorch.org/docs/stable/torch_nccl_environment_variables.html",
    "hf_env": "https://huggingface.co/docs/huggingface_hub/package_reference/environment_variables",
    "cuda": "https://docs.nvidia.com/cuda/cuda-installation-guide-linux/",
}

# Used until env/matrix.toml exists (or when it cannot be read): ROCm releases and the Linux GPU
# targets AMD's compatibility matrix lists for them, abridged to the parts labs meet.
_CDNA = ["gfx908", "gfx90a", "gfx942"]
BUILTIN_RELEASES = [
    {"rocm": "6.0", "gpu_targets": _CDNA + ["gfx1030", "gfx1100"]},
    {"rocm": "6.2", "gpu_targets": _CDNA + ["gfx1030", "gfx1100"]},
    {"rocm": "6.4", "gpu_targets": _CDNA + ["gfx1030", "gfx1100", "gfx1101"]},
    {"rocm": "7.0", "gpu_targets": _CDNA + ["gfx950", "gfx1030", "gfx1100", "gfx1101", "gfx1200", "gfx1201"]},
    {"rocm": "7.2", "gpu_targets": _CDNA + ["gfx950", "gfx1030", "gfx1100", "gfx1101", "gfx1200", "gfx1201"]},
    {
        "rocm": "7.14",
        "gpu_targets": _CDNA + ["gfx950", "gfx1030", "gfx1100", "gfx1101", "gfx1151", "gfx1200", "gfx1201"],
    },
]
OLDEST_TESTED_ROCM = (6, 0)


@dataclass
class Finding:
    check: str
    title: str
    status: str
    detail: str
    fix_zh: str = ""
    fix_en: str = ""
    doc: str = ""

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"finding {self.check!r}: status {self.status!r} not in {STATUSES}")


@dataclass
class Facts:
    """What the probes learned, shared by the checks."""

    amd_driver: bool = False
    nvidia_driver: bool = False
    rocm_version: str | None = None
    gpus: list[dict] = field(
        default_factory=list
    )  # ``_gpu``'s: name, gfx, isa, features, compute_units, wavefront_size
    gpu_source: str = ""
    torch: dict | None = None

    @property
    def torch_backend(self) -> str:
        """The torch build the probes found: "none" (not importable), "rocm", "cuda" or "cpu"."""
        info = self.torch or {}
        if not info.get("importable"):
            return "none"
        return "rocm" if info.get("hip") else "cuda" if info.get("cuda") else "cpu"

    @property
    def vendor(self) -> str | None:
        """Whose GPU the labs will use: the one torch sees, else the one the drivers show."""
        torch_info = self.torch or {}
        if torch_info.get("devices"):
            return "amd" if torch_info.get("hip") else "nvidia" if torch_info.get("cuda") else None
        if self.gpus or self.amd_driver:
            return "amd"
        return "nvidia" if self.nvidia_driver else None


# ---- release table ---------------------------------------------------------------------------


def load_releases(path: Path | None = None) -> tuple[list[dict], str]:
    """Releases with their GPU targets, and where they came from: the release matrix at ``path``
    (read by ``rocmlab.freshness.releases``; an unreadable one is an InputError naming it), else built in."""
    if path is None:
        return BUILTIN_RELEASES, "built-in table"
    from ..freshness.releases import load_matrix

    try:
        entries = load_matrix(path)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 (a matrix the reader chokes on is still the user's file)
        raise InputError(f"{path}: cannot be read as the release matrix: {exc}") from None
    found = [
        {"rocm": entry.rocm, "gpu_targets": [base_target(g) for g in entry.gfx]}
        for entry in entries
        if entry.kind == "rocm" and entry.rocm and entry.gfx
    ]
    return (found, str(path)) if found else (BUILTIN_RELEASES, "built-in table")


def release_for(version: str | None, releases: list[dict]) -> dict | None:
    """The newest listed release not newer than ``version`` (major.minor match preferred)."""
    have = parse_version(version)
    if have is None:
        return None
    best = None
    for release in releases:
        listed = parse_version(release["rocm"])
        if listed and listed[:2] <= have[:2] and (best is None or listed > parse_version(best["rocm"])):
            best = release
    return best


# ---- probing ---------------------------------------------------------------------------------


def gather(machine: Machine) -> Facts:
    facts = Facts()
    facts.amd_driver = (
        machine.read_file("/sys/module/amdgpu/version") is not None
        or machine.list_dir("/sys/module/amdgpu") is not None
    )
    facts.nvidia_driver = machine.read_file("/proc/driver/nvidia/version") is not None
    facts.gpus, facts.gpu_source = _amd_gpus(machine)
    facts.torch = machine.torch_info()
    rocm = probes.rocm_versions(machine, facts.torch)
    facts.rocm_version = rocm.system or rocm.runtime  # the installed ROCm, else the one a TheRock/ROCm wheel brings
    return facts


def _amd_gpus(machine: Machine) -> tuple[list[dict], str]:
    """The AMD GPUs and where they were read: the KFD topology (one entry per device, a compute
    partition included) named by amd-smi, else by libdrm's amdgpu.ids; else amd-smi alone."""
    asics = _amdsmi_asics(machine)
    names = {a["device_id"]: a["market_name"] for a in asics if a["device_id"] is not None and a["market_name"]}
    kfd = probes.kfd_gpus(machine)
    env = machine.env()
    if kfd:
        ids = probes.parse_amdgpu_ids(machine.read_file(probes.AMDGPU_IDS) or "")
        gpus, sources = [], ["the KFD topology"]
        for g in kfd:
            name = names.get(g.device_id)
            if name and "amd-smi" not in sources:
                sources.append("amd-smi")
            if not name and ids:
                name = probes.marketing_name(ids, g.device_id, probes.pci_revision(machine, g.render_minor))
                if name and "libdrm's amdgpu.ids" not in sources:
                    sources.append("libdrm's amdgpu.ids")
            gpus.append(_gpu(name, g.gfx, probes.agent_features(g.gfx, g.capability, env), g.cus, g.wavefront or None))
        return gpus, " and ".join(sources)
    gpus = [
        _gpu(
            a["market_name"],
            base_target(a["target_graphics_version"]),
            probes.agent_features(base_target(a["target_graphics_version"]), None, env),
            a["num_compute_units"],
            None,
        )
        for a in asics
        if a["target_graphics_version"]
    ]
    return gpus, "amd-smi" if gpus else ""


def _gpu(name: str | None, gfx: str, features: dict, cus: int | None, wavefront: int | None) -> dict:
    """One GPU as the report lists it: ``isa`` names the features the machine decides, ``features``
    all the target has ("unknown" where nothing the doctor reads decides it: xnack, per process)."""
    return {
        "name": name or "AMD GPU",
        "gfx": gfx,
        "isa": probes.isa_name(gfx, features),
        "features": features,
        "compute_units": cus,
        "wavefront_size": wavefront,
    }


def _amdsmi_asics(machine: Machine) -> list[dict]:
    """``amd-smi static --asic --json`` parsed; [] where amd-smi is missing, fails or prints no JSON."""
    result = machine.run(probes.AMDSMI_ASIC)
    if result is None or result.returncode != 0:
        return []
    try:
        return probes.parse_amdsmi_asic(result.stdout)
    except InputError:
        return []
