"""The doctor's checks of the GPU stack: OS, driver, ROCm, GPUs, device access, the torch build.

Each check takes ``(machine, facts, releases)`` and returns findings with a status, what was seen,
a fix in Chinese and English and a doc link.
"""

from __future__ import annotations

from .. import probes
from ..probes import UNKNOWN, base_target, parse_version, target_features
from .facts import DOCS, OLDEST_TESTED_ROCM, Finding, release_for


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
        return [
            Finding(
                "gpus",
                "GPUs",
                "fail",
                f"amdgpu is loaded but neither the KFD topology ({probes.KFD_TOPOLOGY}) nor amd-smi lists a GPU",
                "检查 /dev/kfd 访问权限（见 access 项）、dmesg 中 amdgpu 的报错，以及容器是否传入了 --device /dev/kfd --device /dev/dri。",
                "Check access to /dev/kfd (see the access finding), amdgpu errors in dmesg, and that a "
                "container got --device /dev/kfd --device /dev/dri.",
                DOCS["docker"],
            )
        ]
    kinds = [f"{g['name']} {g['isa']} {g['compute_units']} CU wave{g['wavefront_size'] or '?'}" for g in facts.gpus]
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


def check_torch(machine, facts, releases):
    info = facts.torch
    backend = facts.torch_backend
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


def loads_on(gpu: dict, arch_list: list[str]) -> tuple[str, list[str]]:
    """Whether code of a wheel built for ``arch_list`` loads on ``gpu`` (the doctor's GPU, its
    ``features`` from the topology): ("yes", []), ("no", []), or ("per process", the features the
    runtime's choice turns on) where only entries naming a feature the topology leaves unknown
    (xnack: HSA_XNACK) match. The runtime's rule (ROCr's ``Isa::IsCompatible``, isa.cpp): same
    target, and a feature the code object names equals the agent's."""
    undecided = set()
    for entry in arch_list:
        if base_target(entry) != gpu["gfx"]:
            continue
        named = target_features(entry)
        if any(gpu["features"].get(f) not in (v, UNKNOWN) for f, v in named.items()):
            continue
        open_ = {f"{f}{v}" for f, v in named.items() if gpu["features"].get(f) == UNKNOWN}
        if not open_:
            return "yes", []
        undecided |= open_
    return ("per process", sorted(undecided)) if undecided else ("no", [])


def check_torch_arch(machine, facts, releases):
    info = facts.torch or {}
    backend = facts.torch_backend
    if backend == "rocm" and facts.gpus:
        arch_list = info.get("arch_list") or []
        verdicts = {g["isa"]: loads_on(g, arch_list) for g in facts.gpus}
        unsupported = sorted(isa for isa, (verdict, _) in verdicts.items() if verdict == "no")
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
        undecided = sorted({f for verdict, features in verdicts.values() for f in features})
        if undecided:
            return [
                Finding(
                    "torch-arch",
                    "Wheel has kernels for the GPU",
                    "warn",
                    f"the wheel's kernels for {', '.join(sorted(verdicts))} need {', '.join(undecided)}, which "
                    f"the process chooses (HSA_XNACK), not the GPU: {arch_list}",
                    "该 wheel 的内核只适用于特定 xnack 模式：按需设置 HSA_XNACK=1 或 0（驱动可能拒绝），或安装不限定该特性的 wheel。",
                    "This wheel's kernels need one xnack mode: set HSA_XNACK=1 or 0 to match (the driver may "
                    "refuse), or install a wheel built without the feature.",
                    DOCS["pytorch"],
                )
            ]
        return [
            Finding(
                "torch-arch",
                "Wheel has kernels for the GPU",
                "ok",
                f"{', '.join(sorted(verdicts))} in {arch_list}",
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
