"""`rocmlab doctor`: probe a machine, judge it, print what to fix.

Each check returns findings with a status (ok, skip, warn, fail), what was seen, a fix hint in
Chinese and English and a doc link. Probes read through ``rocmlab.probes.Machine`` so that the
tests replay recorded machines (tests/fixtures/machines/).

Exit status of ``rocmlab doctor`` (2 is left to argparse usage errors):
0 nothing worse than ok/skip, 1 the worst finding is a warning, 3 at least one failure.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import probes
from .probes import Machine, base_target, parse_version, target_compatible

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
MATRIX_PATH = Path(__file__).resolve().parents[2] / "env" / "matrix.toml"


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
    gpus: list[dict] = field(default_factory=list)  # {"name", "gfx", "isa", "compute_units", "wavefront_size"}
    gpu_source: str = ""
    torch: dict | None = None

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
    """Releases with their GPU targets: from env/matrix.toml when it has them, else built in."""
    path = MATRIX_PATH if path is None else path
    try:
        import tomllib

        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, ImportError):
        return BUILTIN_RELEASES, "built-in table"
    found = []
    _collect_releases(data, found)
    return (found, str(path)) if found else (BUILTIN_RELEASES, "built-in table")


_TARGET_KEYS = ("gpu_targets", "gfx_targets", "targets", "gfx")


def _collect_releases(node, found: list[dict]) -> None:
    if isinstance(node, dict):
        version = node.get("rocm") or node.get("rocm_version")
        targets = next((node[k] for k in _TARGET_KEYS if isinstance(node.get(k), list)), None)
        if isinstance(version, str) and targets:
            found.append({"rocm": version, "gpu_targets": [base_target(str(t)) for t in targets]})
        for value in node.values():
            _collect_releases(value, found)
    elif isinstance(node, list):
        for value in node:
            _collect_releases(value, found)


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
    result = machine.run(["rocminfo"])
    if result and result.returncode == 0:
        agents = probes.gpu_agents(result.stdout)
        if agents:
            return [
                {
                    "name": a.marketing_name or a.name,
                    "gfx": a.gfx,
                    "isa": a.isa[0].rsplit("--", 1)[-1] if a.isa else a.name,
                    "compute_units": a.compute_units,
                    "wavefront_size": a.wavefront_size,
                }
                for a in agents
            ], "rocminfo"
    result = machine.run(["amd-smi", "static", "--asic"])
    if result and result.returncode == 0:
        gpus = probes.parse_amdsmi_static(result.stdout)
        if gpus:
            return [
                {
                    "name": g.get("market_name", "AMD GPU"),
                    "gfx": base_target(g.get("target_graphics_version", "")),
                    "isa": g.get("target_graphics_version", ""),
                    "compute_units": probes._int(g.get("num_compute_units", "")),
                    "wavefront_size": None,
                }
                for g in gpus
            ], "amd-smi"
    return [], ""


# ---- checks ----------------------------------------------------------------------------------


def check_os(machine, facts, releases):
    release = machine.read_file("/etc/os-release") or ""
    pretty = next(
        (line.split("=", 1)[1].strip().strip('"') for line in release.splitlines() if line.startswith("PRETTY_NAME=")),
        None,
    )
    kernel = (machine.read_file("/proc/sys/kernel/osrelease") or "").strip() or None
    if pretty is None and kernel is None:
        return [
            Finding(
                "os",
                "OS and kernel",
                "warn",
                "not a Linux system (no /etc/os-release)",
                "ROCm 仅支持 Linux（Windows 上用 WSL 或 HIP SDK）；课程的 smoke 配置可在任意 CPU 上运行。",
                "ROCm runs on Linux (WSL or the HIP SDK on Windows); the smoke profile runs on any CPU.",
                DOCS["sysreq"],
            )
        ]
    return [Finding("os", "OS and kernel", "ok", f"{pretty or 'Linux'}, kernel {kernel or '?'}", doc=DOCS["sysreq"])]


def check_driver(machine, facts, releases):
    if facts.amd_driver:
        version = (machine.read_file("/sys/module/amdgpu/version") or "").strip()
        detail = f"amdgpu {version}" if version else "amdgpu loaded (in-kernel driver, no DKMS version)"
        return [Finding("driver", "GPU driver", "ok", detail, doc=DOCS["prereq"])]
    if facts.nvidia_driver:
        first = (machine.read_file("/proc/driver/nvidia/version") or "").splitlines()[:1]
        return [
            Finding(
                "driver", "GPU driver", "ok", f"NVIDIA: {first[0].strip() if first else 'loaded'}", doc=DOCS["cuda"]
            )
        ]
    return [
        Finding(
            "driver",
            "GPU driver",
            "warn",
            "no amdgpu or NVIDIA kernel driver loaded: no GPU for the labs",
            "未加载 amdgpu 驱动。若机器有 AMD GPU：按 ROCm 安装指南安装 amdgpu-dkms 并重启；没有 GPU 时只能运行 smoke 配置。",
            "No amdgpu driver is loaded. With an AMD GPU, install amdgpu-dkms per the ROCm install guide "
            "and reboot; without a GPU only the smoke profile runs.",
            DOCS["install"],
        )
    ]


def check_rocm(machine, facts, releases):
    if facts.vendor != "amd":
        return [
            Finding(
                "rocm",
                "ROCm install",
                "skip",
                f"ROCm {facts.rocm_version} installed, no AMD GPU" if facts.rocm_version else "no AMD GPU",
            )
        ]
    if facts.rocm_version is None:
        return [
            Finding(
                "rocm",
                "ROCm install",
                "warn",
                "no ROCm under /opt/rocm (.info/version or core-*/): rocminfo and amd-smi are missing",
                "PyTorch 的 ROCm wheel 自带运行时，但诊断工具 rocminfo / amd-smi 需要安装 ROCm（amdgpu-install 或发行版软件包）。",
                "The PyTorch ROCm wheel bundles its runtime, but rocminfo / amd-smi come with a ROCm "
                "install (amdgpu-install or your distribution's packages).",
                DOCS["install"],
            )
        ]
    version = parse_version(facts.rocm_version)
    if version and version[:2] < OLDEST_TESTED_ROCM:
        return [
            Finding(
                "rocm",
                "ROCm install",
                "warn",
                f"ROCm {facts.rocm_version} is older than the releases the labs are tested on",
                f"升级到 ROCm {'.'.join(map(str, OLDEST_TESTED_ROCM))} 或更新版本（见兼容性矩阵）；旧版本缺少新 GPU 与新 PyTorch 的支持。",
                f"Upgrade to ROCm {'.'.join(map(str, OLDEST_TESTED_ROCM))} or newer (see the compatibility "
                "matrix); old releases lack newer GPUs and PyTorch versions.",
                DOCS["compat"],
            )
        ]
    return [Finding("rocm", "ROCm install", "ok", f"ROCm {facts.rocm_version}", doc=DOCS["compat"])]


def check_gpus(machine, facts, releases):
    if facts.vendor == "nvidia":
        names = [d["name"] for d in (facts.torch or {}).get("devices", [])]
        return [Finding("gpus", "GPUs", "ok", f"NVIDIA: {', '.join(names) or 'driver loaded'}")]
    if facts.vendor is None:
        return [
            Finding(
                "gpus",
                "GPUs",
                "warn",
                "no GPU found: the labs run in the smoke profile (CPU) only",
                "没有 GPU：课程可用 smoke 配置在 CPU 上完成；真实测量需要 ROCm 或 CUDA GPU。",
                "No GPU: the labs run in the smoke profile on CPU; real measurements need a ROCm or CUDA GPU.",
                DOCS["sysreq"],
            )
        ]
    if not facts.gpus:
        result = machine.run(["rocminfo"])
        said = (result.stderr or result.stdout).strip().splitlines()[-1:] if result else []
        return [
            Finding(
                "gpus",
                "GPUs",
                "fail",
                "amdgpu is loaded but rocminfo / amd-smi list no GPU" + (f" ({said[0]})" if said else ""),
                "检查 /dev/kfd 访问权限（见 access 项）、dmesg 中 amdgpu 的报错，以及容器是否传入了 --device /dev/kfd --device /dev/dri。",
                "Check access to /dev/kfd (see the access finding), amdgpu errors in dmesg, and that a "
                "container got --device /dev/kfd --device /dev/dri.",
                DOCS["docker"],
            )
        ]
    kinds = [f"{g['name']} {g['gfx']} {g['compute_units']} CU wave{g['wavefront_size'] or '?'}" for g in facts.gpus]
    listing = "; ".join(f"{kinds.count(k)} x {k}" for k in dict.fromkeys(kinds))
    findings = [
        Finding("gpus", "GPUs", "ok", f"{len(facts.gpus)} via {facts.gpu_source}: {listing}", doc=DOCS["amdsmi"])
    ]
    release = release_for(facts.rocm_version, releases)
    if release:
        unlisted = sorted({g["gfx"] for g in facts.gpus} - set(release["gpu_targets"]))
        if unlisted:
            findings.append(
                Finding(
                    "gpu-support",
                    "GPU target supported by this ROCm",
                    "warn",
                    f"{', '.join(unlisted)} not among ROCm {release['rocm']}'s targets ({', '.join(release['gpu_targets'])})",
                    "该 GPU 不在此 ROCm 版本的官方支持列表中：换用列出它的 ROCm 版本；HSA_OVERRIDE_GFX_VERSION 只是旧版本的权宜之计。",
                    "This GPU is not on this ROCm release's support list: use a release that lists it; "
                    "HSA_OVERRIDE_GFX_VERSION is a stopgap of older releases.",
                    DOCS["compat"],
                )
            )
    return findings


def check_access(machine, facts, releases):
    if facts.vendor != "amd":
        return [Finding("access", "Device access", "skip", "no AMD GPU")]
    user = machine.user()
    groups = set(user.get("groups", []))
    nodes = ["/dev/kfd"] + [f"/dev/dri/{n}" for n in (machine.list_dir("/dev/dri") or []) if n.startswith("renderD")]
    denied = [n for n in nodes if machine.can_read_write(n) is False]
    missing = [n for n in nodes if machine.can_read_write(n) is None]
    if "/dev/kfd" in missing:
        denied.append("/dev/kfd (absent)")
    lacking = sorted({"render", "video"} - groups)
    if denied:
        return [
            Finding(
                "access",
                "Device access",
                "fail",
                f"user {user.get('name')} cannot read/write {', '.join(denied)}; groups: {', '.join(sorted(groups)) or '-'}",
                f"把用户加入 render 和 video 组：sudo usermod -aG render,video {user.get('name')}，然后重新登录；"
                "容器需 --device /dev/kfd --device /dev/dri --group-add render。",
                f"Add the user to the render and video groups: sudo usermod -aG render,video {user.get('name')}, "
                "then log in again; containers need --device /dev/kfd --device /dev/dri --group-add render.",
                DOCS["prereq"],
            )
        ]
    if lacking and user.get("uid") != 0:
        return [
            Finding(
                "access",
                "Device access",
                "warn",
                f"devices are accessible, but user {user.get('name')} is not in {', '.join(lacking)}",
                f"当前权限可能来自临时 ACL；建议 sudo usermod -aG render,video {user.get('name')} 后重新登录。",
                f"Access may come from a temporary ACL; run sudo usermod -aG render,video {user.get('name')} "
                "and log in again.",
                DOCS["prereq"],
            )
        ]
    return [Finding("access", "Device access", "ok", f"read/write on {', '.join(nodes)}", doc=DOCS["prereq"])]


def backend_of_info(info: dict | None) -> str:
    if not info or not info.get("importable"):
        return "none"
    return "rocm" if info.get("hip") else ("cuda" if info.get("cuda") else "cpu")


def check_torch(machine, facts, releases):
    info = facts.torch
    backend = backend_of_info(info)
    if backend == "none":
        error = (info or {}).get("error", "not installed")
        return [
            Finding(
                "torch",
                "PyTorch build",
                "fail",
                f"torch cannot be imported: {error}",
                "安装与 GPU 匹配的 PyTorch：ROCm 用 https://download.pytorch.org/whl/rocmX.Y 索引，CPU 用 .../whl/cpu。",
                "Install the PyTorch build for your GPU: ROCm from https://download.pytorch.org/whl/rocmX.Y, "
                "CPU from .../whl/cpu.",
                DOCS["torch_local"],
            )
        ]
    version = f"torch {info['version']} ({backend}" + (
        f" {info['hip']})" if backend == "rocm" else f" {info['cuda']})" if backend == "cuda" else ")"
    )
    wanted = {"amd": "rocm", "nvidia": "cuda"}.get(facts.vendor)
    if wanted and backend != wanted:
        return [
            Finding(
                "torch",
                "PyTorch build",
                "fail",
                f"{version} on a machine with an {facts.vendor.upper()} GPU",
                f"当前 PyTorch 不是 {wanted.upper()} 版本，GPU 不可用。卸载后从对应索引重装，例如 "
                "pip install torch --index-url https://download.pytorch.org/whl/rocm6.4（版本见兼容性矩阵）。",
                f"This PyTorch is not a {wanted.upper()} build, so the GPU is unused. Reinstall from the "
                "matching index, e.g. pip install torch --index-url https://download.pytorch.org/whl/rocm6.4 "
                "(versions: compatibility matrix).",
                DOCS["pytorch"] if wanted == "rocm" else DOCS["torch_local"],
            )
        ]
    if wanted and not info.get("available"):
        return [
            Finding(
                "torch",
                "PyTorch build",
                "fail",
                f"{version}: torch.cuda.is_available() is False",
                "PyTorch 看不到 GPU：检查设备访问权限、*_VISIBLE_DEVICES 变量，以及 wheel 是否包含该 GPU 的架构。",
                "PyTorch sees no GPU: check device access, the *_VISIBLE_DEVICES variables, and whether "
                "the wheel has kernels for this GPU's architecture.",
                DOCS["pytorch"],
            )
        ]
    count = len(info.get("devices", []))
    return [
        Finding(
            "torch",
            "PyTorch build",
            "ok",
            f"{version}, {count} GPU(s) visible" if wanted else version,
            doc=DOCS["pytorch"] if backend == "rocm" else DOCS["torch_local"],
        )
    ]


def check_torch_arch(machine, facts, releases):
    info = facts.torch or {}
    backend = backend_of_info(info)
    if backend == "rocm" and facts.gpus:
        arch_list = info.get("arch_list") or []
        targets = {g["isa"] or g["gfx"] for g in facts.gpus}
        unsupported = sorted(t for t in targets if not any(target_compatible(t, b) for b in arch_list))
        if unsupported:
            override = machine.env().get("HSA_OVERRIDE_GFX_VERSION")
            return [
                Finding(
                    "torch-arch",
                    "Wheel has kernels for the GPU",
                    "fail",
                    f"device {', '.join(unsupported)} not in torch.cuda.get_arch_list() = {arch_list}"
                    + (f" (HSA_OVERRIDE_GFX_VERSION={override} is set)" if override else ""),
                    "该 PyTorch wheel 未为此 GPU 架构编译内核（运行时报 'invalid device function'）。安装包含此架构的 "
                    "wheel（对应 ROCm 版本的官方 wheel 或多架构索引的 device 附加项）。",
                    "This PyTorch wheel has no kernels for the GPU's architecture (kernels fail with "
                    "'invalid device function'). Install a wheel built for it (the ROCm release's wheel, "
                    "or the multi-arch index's device extra).",
                    DOCS["pytorch"],
                )
            ]
        return [
            Finding(
                "torch-arch",
                "Wheel has kernels for the GPU",
                "ok",
                f"{', '.join(sorted(targets))} in {arch_list}",
                doc=DOCS["pytorch"],
            )
        ]
    if backend == "cuda" and info.get("devices"):
        arch_list = info.get("arch_list") or []
        lacking = []
        for device in info["devices"]:
            major, minor = device["capability"]
            sm = f"sm_{major}{minor}"
            ptx = [probes.parse_version(a[8:]) for a in arch_list if a.startswith("compute_")]
            if sm not in arch_list and not any(p and p <= (major * 10 + minor,) for p in ptx):
                lacking.append(sm)
        if lacking:
            return [
                Finding(
                    "torch-arch",
                    "Wheel has kernels for the GPU",
                    "fail",
                    f"{', '.join(lacking)} not in {arch_list}",
                    "该 CUDA wheel 不支持此 GPU 的计算能力；安装更新的 PyTorch / CUDA 版本。",
                    "This CUDA wheel does not cover the GPU's compute capability; install a newer "
                    "PyTorch / CUDA build.",
                    DOCS["torch_local"],
                )
            ]
        return [Finding("torch-arch", "Wheel has kernels for the GPU", "ok", f"built for {arch_list}")]
    return [Finding("torch-arch", "Wheel has kernels for the GPU", "skip", "no GPU build with a GPU to check")]


def visible_devices(count: int, env: dict) -> tuple[list[int], list[str]]:
    """Physical GPU indices a HIP process sees, and problems found in the variables.

    ``ROCR_VISIBLE_DEVICES`` selects from the physical GPUs; ``HIP_VISIBLE_DEVICES`` (or, when it
    is unset, ``CUDA_VISIBLE_DEVICES``) then indexes into that selection.
    """
    problems = []
    visible = list(range(count))
    for name in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        if name == "HIP_VISIBLE_DEVICES" and name not in env and "CUDA_VISIBLE_DEVICES" in env:
            name = "CUDA_VISIBLE_DEVICES"
        if name not in env:
            continue
        chosen = []
        for item in (p.strip() for p in env[name].split(",") if p.strip()):
            if item.startswith("GPU-"):
                problems.append(f"{name} uses a UUID ({item}); kept as given")
                continue
            if not item.isdigit() or int(item) >= len(visible):
                problems.append(f"{name}={env[name]!r}: {item!r} is not one of 0..{len(visible) - 1}")
                break
            chosen.append(visible[int(item)])
        visible = chosen
    return visible, problems


def check_visible(machine, facts, releases):
    env = machine.env()
    names = [
        n
        for n in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "HSA_OVERRIDE_GFX_VERSION")
        if n in env
    ]
    findings = []
    if facts.vendor == "amd" and facts.gpus:
        visible, problems = visible_devices(len(facts.gpus), env)
        if problems or not visible:
            findings.append(
                Finding(
                    "visible-devices",
                    "Visible-device variables",
                    "warn",
                    "; ".join(problems + ([] if visible else ["no GPU left visible"])),
                    "检查 ROCR_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES：HIP 的编号是在 ROCR 选出的设备中重新编号的；不需要时 unset。",
                    "Check ROCR_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES: HIP's indices count within "
                    "the devices ROCR selected; unset them when not needed.",
                    DOCS["isolation"],
                )
            )
        else:
            shown = ", ".join(f"{n}={env[n]}" for n in names if "VISIBLE" in n) or "no variables set"
            findings.append(
                Finding(
                    "visible-devices",
                    "Visible-device variables",
                    "ok",
                    f"physical GPUs {visible} visible ({shown})",
                    doc=DOCS["isolation"],
                )
            )
    elif any("VISIBLE" in n for n in names):
        findings.append(
            Finding(
                "visible-devices",
                "Visible-device variables",
                "ok",
                ", ".join(f"{n}={env[n]}" for n in names if "VISIBLE" in n),
            )
        )
    override = env.get("HSA_OVERRIDE_GFX_VERSION")
    if override is not None:
        findings.append(_override_finding(override, facts))
    return findings or [Finding("visible-devices", "Visible-device variables", "skip", "none set")]


def _override_finding(value: str, facts: Facts) -> Finding:
    title = "HSA_OVERRIDE_GFX_VERSION"
    if not re.fullmatch(r"\d+\.\d+\.\d+", value.strip()):
        return Finding(
            "hsa-override",
            title,
            "fail",
            f"HSA_OVERRIDE_GFX_VERSION={value!r} is not MAJOR.MINOR.STEPPING",
            "格式应为 11.0.0 这样的三段版本号；多数情况下应直接 unset。",
            "The value must look like 11.0.0; in most cases unset it.",
            DOCS["isolation"],
        )
    cdna = any(g["gfx"].startswith("gfx9") for g in facts.gpus)
    newer = (parse_version(facts.rocm_version) or (0,)) >= (7, 14)
    why = (
        "set on a CDNA/GCN GPU, where it is never needed"
        if cdna
        else "reported to be rejected by the TheRock runtime of ROCm 7.14+"
        if newer
        else "makes the runtime treat the GPU as another target: a stopgap for unsupported consumer GPUs"
    )
    return Finding(
        "hsa-override",
        title,
        "warn",
        f"HSA_OVERRIDE_GFX_VERSION={value}: {why}",
        "仅在旧版 ROCm 上、且 GPU 不在支持列表时临时使用；优先换用支持该 GPU 的 ROCm 与 wheel，然后 unset。",
        "Use it only as a stopgap on older ROCm for a GPU missing from the support list; prefer a "
        "ROCm release and wheel that support the GPU, then unset it.",
        DOCS["compat"],
    )


def check_iommu(machine, facts, releases):
    if facts.vendor != "amd" or len(facts.gpus) < 2:
        return [Finding("iommu", "IOMMU for multi-GPU", "skip", "fewer than two AMD GPUs")]
    cmdline = (machine.read_file("/proc/cmdline") or "").split()
    if "iommu=pt" in cmdline:
        return [
            Finding("iommu", "IOMMU for multi-GPU", "ok", "iommu=pt on the kernel command line", doc=DOCS["tuning"])
        ]
    return [
        Finding(
            "iommu",
            "IOMMU for multi-GPU",
            "warn",
            "iommu=pt missing from /proc/cmdline",
            "多 GPU 的 RCCL 通信可能挂起或变慢：在 GRUB_CMDLINE_LINUX 中加入 iommu=pt，update-grub 后重启。",
            "Multi-GPU RCCL traffic can hang or slow down: add iommu=pt to GRUB_CMDLINE_LINUX, run "
            "update-grub and reboot.",
            DOCS["tuning"],
        )
    ]


def check_numa(machine, facts, releases):
    value = (machine.read_file("/proc/sys/kernel/numa_balancing") or "").strip()
    if facts.vendor != "amd" or not value:
        return [
            Finding("numa", "NUMA auto-balancing", "skip", "no AMD GPU" if facts.vendor != "amd" else "not reported")
        ]
    if value != "0":
        return [
            Finding(
                "numa",
                "NUMA auto-balancing",
                "warn",
                f"kernel.numa_balancing = {value}",
                "NUMA 自动均衡会干扰 GPU 工作负载：sudo sysctl kernel.numa_balancing=0（写入 /etc/sysctl.d 持久化）。",
                "NUMA auto-balancing interferes with GPU workloads: sudo sysctl kernel.numa_balancing=0 "
                "(persist it in /etc/sysctl.d).",
                DOCS["tuning"],
            )
        ]
    return [Finding("numa", "NUMA auto-balancing", "ok", "disabled", doc=DOCS["tuning"])]


_BRIDGES = ("docker", "lo", "virbr", "veth", "br-")
_NCCL_RULES = [
    (
        "NCCL_P2P_DISABLE",
        lambda v: v.strip() == "1",
        "forces GPU-to-GPU traffic through host memory (slow, hides topology)",
        "仅在排查 P2P 问题时临时设置；解决后 unset。",
        "Set it only while debugging P2P; unset it afterwards.",
        "nccl_env",
    ),
    (
        "NCCL_SOCKET_IFNAME",
        lambda v: v.lstrip("=^").startswith(_BRIDGES),
        "points at a loopback or container bridge: ranks on other hosts cannot connect",
        "设为真实网卡名（如 eth0、ens*），不要用 docker0 / lo。",
        "Name the real NIC (e.g. eth0, ens*), not docker0 / lo.",
        "nccl_env",
    ),
    (
        "NCCL_DEBUG",
        lambda v: v.strip().upper() == "TRACE",
        "TRACE logs every call and slows collectives",
        "日常用 NCCL_DEBUG=WARN，排查时用 INFO。",
        "Use NCCL_DEBUG=WARN day to day and INFO to debug.",
        "nccl_env",
    ),
    (
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        lambda v: v.strip() == "0",
        "a failed or stuck collective hangs the job instead of raising",
        "unset 它（默认会在超时时中止进程组）。",
        "Unset it (the default aborts the process group on timeout).",
        "torch_nccl_env",
    ),
    (
        "TORCH_NCCL_BLOCKING_WAIT",
        lambda v: v.strip() == "1",
        "a debugging mode that blocks the CPU on every collective",
        "仅在排查时使用。",
        "Use it only while debugging.",
        "torch_nccl_env",
    ),
    (
        "NCCL_ASYNC_ERROR_HANDLING",
        lambda v: True,
        "the old name; PyTorch reads TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "改用 TORCH_NCCL_ASYNC_ERROR_HANDLING。",
        "Use TORCH_NCCL_ASYNC_ERROR_HANDLING instead.",
        "torch_nccl_env",
    ),
]


def check_nccl(machine, facts, releases):
    env = machine.env()
    findings = []
    for name, bad, why, fix_zh, fix_en, doc in _NCCL_RULES:
        if name in env and bad(env[name]):
            findings.append(
                Finding("nccl-env", f"{name}", "warn", f"{name}={env[name]}: {why}", fix_zh, fix_en, DOCS[doc])
            )
    if findings:
        return findings
    set_names = sorted(n for n in env if n.startswith(("NCCL_", "TORCH_NCCL_", "RCCL_")))
    return [
        Finding(
            "nccl-env",
            "NCCL / RCCL variables",
            "ok" if set_names else "skip",
            ", ".join(f"{n}={env[n]}" for n in set_names) or "none set",
            doc=DOCS["nccl_env"],
        )
    ]


def hub_cache_dir(env: dict) -> str:
    if env.get("HF_HUB_CACHE"):
        return env["HF_HUB_CACHE"]
    if env.get("HF_HOME"):
        return env["HF_HOME"].rstrip("/") + "/hub"
    cache = env.get("XDG_CACHE_HOME") or env.get("HOME", "/root").rstrip("/") + "/.cache"
    return cache + "/huggingface/hub"


def check_disk(machine, facts, releases, warn_gb=20.0, fail_gb=2.0):
    path = hub_cache_dir(machine.env())
    free = machine.disk_free_bytes(path)
    if free is None:
        return [Finding("disk", "Free disk for the model cache", "skip", f"cannot stat {path}")]
    gb = free / 1e9
    status = "fail" if gb < fail_gb else "warn" if gb < warn_gb else "ok"
    if status == "ok":
        return [Finding("disk", "Free disk for the model cache", "ok", f"{gb:.1f} GB free at {path}")]
    return [
        Finding(
            "disk",
            "Free disk for the model cache",
            status,
            f"only {gb:.1f} GB free at {path}",
            "模型缓存需要空间（0.5B 模型约 1 GB，7B 约 15 GB）：清理空间，或把 HF_HOME 指向更大的磁盘。",
            "Models need room (about 1 GB for 0.5B, 15 GB for 7B): free space or point HF_HOME at a bigger disk.",
            DOCS["hf_env"],
        )
    ]


def check_hub(machine, facts, releases):
    env = machine.env()
    parts = [
        f"{n}={env[n]}"
        for n in ("HF_ENDPOINT", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "MODELSCOPE_CACHE", "HF_HOME")
        if env.get(n)
    ]
    if parts:
        return [Finding("hub", "Model hub / mirror", "ok", ", ".join(parts), doc=DOCS["hf_env"])]
    return [
        Finding(
            "hub",
            "Model hub / mirror",
            "ok",
            "default huggingface.co (in mainland China set HF_ENDPOINT to a mirror, or pre-fetch models)",
            doc=DOCS["hf_env"],
        )
    ]


CHECKS = [
    check_os,
    check_driver,
    check_rocm,
    check_gpus,
    check_access,
    check_torch,
    check_torch_arch,
    check_visible,
    check_iommu,
    check_numa,
    check_nccl,
    check_disk,
    check_hub,
]


# ---- report ----------------------------------------------------------------------------------


def diagnose(machine: Machine | None = None, *, matrix: Path | None = None) -> dict:
    """Run every check on ``machine`` (this computer by default); the JSON-ready report."""
    machine = machine or probes.LiveMachine()
    releases, source = load_releases(matrix)
    facts = gather(machine)
    findings: list[Finding] = []
    for check in CHECKS:
        try:
            findings.extend(check(machine, facts, releases))
        except Exception as exc:  # noqa: BLE001 (one broken probe must not hide the others)
            findings.append(
                Finding(
                    check.__name__.removeprefix("check_"),
                    check.__name__,
                    "warn",
                    f"the check itself failed: {type(exc).__name__}: {exc}",
                )
            )
    worst = max((f.status for f in findings), key=SEVERITY.__getitem__, default="ok")
    torch_info = facts.torch or {}
    return {
        "schema": 1,
        "machine": getattr(machine, "name", "this machine"),
        "worst": worst,
        "exit_code": EXIT_CODES[worst],
        "summary": {s: sum(f.status == s for f in findings) for s in STATUSES},
        "facts": {
            "vendor": facts.vendor,
            "rocm_version": facts.rocm_version,
            "gpus": facts.gpus,
            "torch": {
                "version": torch_info.get("version"),
                "backend": backend_of_info(facts.torch),
                "hip": torch_info.get("hip"),
                "cuda": torch_info.get("cuda"),
                "arch_list": torch_info.get("arch_list", []),
            },
            "release_table": source,
        },
        "findings": [asdict(f) for f in findings],
    }


_MARK = {"ok": "OK  ", "skip": "--  ", "warn": "WARN", "fail": "FAIL"}


def render_table(report: dict, lang: str = "both") -> str:
    rows = [(f["status"], f["check"], f["detail"]) for f in report["findings"]]
    width = max(len(r[1]) for r in rows) if rows else 5
    lines = [f"rocmlab doctor: {report['machine']}", ""]
    for status, check, detail in rows:
        lines.append(f"{_MARK[status]}  {check:<{width}}  {detail}")
    fixes = [f for f in report["findings"] if f["status"] in ("warn", "fail") and (f["fix_en"] or f["fix_zh"])]
    if fixes:
        lines += ["", "How to fix / 修复建议:"]
        for f in fixes:
            lines.append(f"- [{f['status']}] {f['check']}")
            if lang in ("zh", "both") and f["fix_zh"]:
                lines.append(f"    {f['fix_zh']}")
            if lang in ("en", "both") and f["fix_en"]:
                lines.append(f"    {f['fix_en']}")
            if f["doc"]:
                lines.append(f"    {f['doc']}")
    summary = ", ".join(f"{n} {s}" for s, n in report["summary"].items() if n)
    lines += ["", f"worst: {report['worst']} ({summary}); exit status {report['exit_code']}"]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (
        "exit status: 0 all ok (or skipped), 1 worst finding is a warning, 3 at least one failure; 2 is a usage error"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--machine",
        metavar="DIR",
        help="replay a recorded machine (a folder with machine.json) instead of probing this one",
    )
    parser.add_argument("--lang", choices=("zh", "en", "both"), default="both", help="language of fix hints")
    parser.add_argument("--matrix", metavar="TOML", help=f"release matrix (default {MATRIX_PATH})")


def run(args: argparse.Namespace) -> int:
    """Exit status: 0 ok, 1 warnings, 3 failures (2 is argparse's usage error)."""
    try:
        machine = probes.RecordedMachine(args.machine) if args.machine else probes.LiveMachine()
    except ValueError as exc:
        print(f"rocmlab doctor: {exc}", file=sys.stderr)
        return 2
    matrix = Path(args.matrix) if args.matrix else None
    if matrix is None and getattr(args, "root", None):
        matrix = Path(args.root) / "env" / "matrix.toml"
    report = diagnose(machine, matrix=matrix)
    text = json.dumps(report, ensure_ascii=False, indent=2) if args.json else render_table(report, args.lang)
    try:
        print(text)
    except BrokenPipeError:  # `rocmlab doctor | head`
        sys.stderr.close()
    return report["exit_code"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rocmlab doctor", description="Check a machine for the rocmlab labs.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
