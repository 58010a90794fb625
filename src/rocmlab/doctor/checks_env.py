"""The doctor's checks of the settings around the GPUs: visible-device variables, IOMMU, NUMA,
NCCL/RCCL variables, disk for the model cache, the model hub."""

from __future__ import annotations

import re

from ..probes import parse_version
from .facts import DOCS, Facts, Finding

VISIBLE_VARIABLES = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


def check_visible(machine, facts, releases):
    """The visible-device variables set, and what they leave: the GPUs the ROCm runtime itself
    gave torch in the probed process (``collect_torch_info``), against the topology's. The doctor
    does not re-derive the runtimes' rules (ROCr's and HIP's parsers decide, lab 01 teaches them)."""
    env = machine.env()
    set_ = [f"{n}={env[n]}" for n in VISIBLE_VARIABLES if n in env]
    findings = []
    if facts.vendor == "amd" and facts.gpus and set_:
        findings.append(_visible_finding(facts, ", ".join(set_)))
    elif set_:
        findings.append(Finding("visible-devices", "Visible-device variables", "ok", ", ".join(set_)))
    elif facts.vendor == "amd" and facts.gpus:
        findings.append(
            Finding(
                "visible-devices",
                "Visible-device variables",
                "ok",
                f"none set: all {len(facts.gpus)} GPU(s) visible",
                doc=DOCS["isolation"],
            )
        )
    override = env.get("HSA_OVERRIDE_GFX_VERSION")
    if override is not None:
        findings.append(_override_finding(override, facts))
    return findings or [Finding("visible-devices", "Visible-device variables", "skip", "none set")]


def _visible_finding(facts: Facts, shown: str) -> Finding:
    info = facts.torch or {}
    if facts.torch_backend != "rocm":
        return Finding(
            "visible-devices",
            "Visible-device variables",
            "ok",
            f"{shown}; no ROCm torch here to say which GPUs they leave",
            doc=DOCS["isolation"],
        )
    seen = len(info.get("devices") or [])
    if seen:
        return Finding(
            "visible-devices",
            "Visible-device variables",
            "ok",
            f"torch sees {seen} of the {len(facts.gpus)} GPU(s) of the topology ({shown})",
            doc=DOCS["isolation"],
        )
    return Finding(
        "visible-devices",
        "Visible-device variables",
        "warn",
        f"torch sees none of the {len(facts.gpus)} GPU(s) of the topology with {shown}",
        "检查 ROCR_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES：HIP 的编号是在 ROCR 选出的设备中重新编号的；不需要时 unset。",
        "Check ROCR_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES: HIP's indices count within the devices ROCR "
        "selected; unset them when not needed.",
        DOCS["isolation"],
    )


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
