"""The doctor's checks of the learner's case: which device they have (a whole GPU or a partition,
and its peak), how ready TheRock says ROCm is for its gfx target, and the traps known for it.

Sources:
- partitions: AMD's MI300X partitioning overview (``PARTITIONING``) and amd-smi's partition guide;
- readiness: TheRock's SUPPORTED_GPUS.md (``THEROCK_SUPPORT``), the "Build Passing / Sanity Tested /
  Release Ready" columns of its Linux tables, as of commit 89553ce3 (2026-08-22);
- vLLM: its ROCm install guide says the ROCm wheels need Python 3.12 (``VLLM_ROCM``); PyPI's
  ``vllm`` is the CUDA build, which pip picks on any other Python;
- AITER: vLLM uses it on Instinct CDNA 3/4 (gfx942, gfx950); aiter's own arch table did not know
  gfx1151 (ROCm/aiter#1552), and Radeon targets are outside what its kernels are tuned for.
"""

from __future__ import annotations

from .. import probes
from ..lab import datasheets, peaks
from .facts import Finding

THEROCK_SUPPORT = "https://github.com/ROCm/TheRock/blob/main/SUPPORTED_GPUS.md"
VLLM_ROCM = "https://docs.vllm.ai/en/latest/getting_started/installation/gpu.html"
AITER_GFX1151 = "https://github.com/ROCm/aiter/issues/1552"
AITER_TARGETS = ("gfx942", "gfx950")

# TheRock, ROCm on Linux: the furthest column each target has reached.
READINESS = {
    "gfx950": "build passing",
    "gfx942": "release ready",
    "gfx90a": "build passing",
    "gfx908": "build passing",
    "gfx906": "build passing",
    "gfx900": "build passing",
    "gfx1201": "release ready",
    "gfx1200": "release ready",
    "gfx1153": "build passing",
    "gfx1152": "release ready",
    "gfx1151": "release ready",
    "gfx1150": "release ready",
    "gfx1103": "release ready",
    "gfx1102": "release ready",
    "gfx1101": "release ready",
    "gfx1100": "release ready",
    "gfx1030": "release ready",
}


def _first_gpu(machine):
    gpus = probes.kfd_gpus(machine)
    return gpus, gpus[0] if gpus else None


def _product(machine, facts) -> str:
    devices = (facts.torch or {}).get("devices") or []
    if devices:
        return devices[0]["name"]
    return facts.gpus[0]["name"] if facts.gpus else ""


def check_partition(machine, facts, releases):
    gpus, first = _first_gpu(machine)
    if first is None:
        return [Finding("partition", "Device and partition", "skip", "no GPU in the KFD topology")]
    physical = len({g.unique_id for g in gpus}) if all(g.unique_id for g in gpus) else len(gpus)
    modes = probes.partition_modes(machine)
    name = _product(machine, facts)
    row = datasheets.lookup(name) if name else None
    detail = f"{name or first.gfx}: {len(gpus)} device(s) on {physical} GPU(s), {first.cus} CUs each"
    if modes:
        compute, memory = modes
        detail += f", {compute}/{memory}"
        if compute in peaks.COMPUTE_PARTITIONS and memory in peaks.MEMORY_PARTITIONS and row and row.cus:
            try:
                part = datasheets.as_slice(row, first.cus, memory)
                detail += (
                    f"; one device allocates from a {part.memory().value:g} GiB pool shared by "
                    f"{max(1, part.partitions // part.pools)} device(s)"
                )
            except ValueError as exc:
                return [
                    Finding("partition", "Device and partition", "warn", f"{detail}: {exc}", doc=peaks.PARTITIONING)
                ]
    else:
        detail += ", not partitioned"
    figure = peaks.derived_peak(first.gfx, first.cus, first.clock_mhz, "fp16")
    if figure:
        detail += f"; peak of one device {figure.value:.1f} TFLOPS dense FP16 ({figure.basis})"
    return [Finding("partition", "Device and partition", "ok", detail, doc=peaks.PARTITIONING)]


def check_readiness(machine, facts, releases):
    targets = sorted({g.gfx for g in probes.kfd_gpus(machine)} or {g["gfx"] for g in facts.gpus if g.get("gfx")})
    if not targets:
        return [Finding("readiness", "TheRock readiness", "skip", "no AMD GPU")]
    findings = []
    for gfx in targets:
        tier = READINESS.get(gfx, "not listed")
        status = "ok" if tier == "release ready" else "warn"
        findings.append(
            Finding(
                "readiness",
                "TheRock readiness",
                status,
                f"{gfx}: {tier} on Linux (TheRock SUPPORTED_GPUS.md)",
                ""
                if status == "ok"
                else f"TheRock 对 {gfx} 尚未完成测试：pip 能装上，但运行时可能失败；以 ROCm 正式版兼容性矩阵为准。",
                ""
                if status == "ok"
                else f"TheRock has not sanity-tested {gfx}: packages install, but device enumeration or "
                "kernels may fail at run time; the released ROCm's compatibility matrix is authoritative.",
                THEROCK_SUPPORT,
            )
        )
    return findings


def check_traps(machine, facts, releases):
    targets = {g.gfx for g in probes.kfd_gpus(machine)} or {g["gfx"] for g in facts.gpus if g.get("gfx")}
    if not targets:
        return [Finding("traps", "Known traps", "skip", "no AMD GPU")]
    return [_vllm_trap(machine), _aiter_trap(machine, targets)]


def _vllm_trap(machine) -> Finding:
    python = machine.python_version() or ""
    vllm = machine.package_version("vllm")
    if not python:
        return Finding("traps", "vLLM wheel", "skip", "the Python version is unknown", doc=VLLM_ROCM)
    if python.startswith("3.12."):
        return Finding("traps", "vLLM wheel", "ok", f"Python {python}: vLLM's ROCm wheels (cp312) fit", doc=VLLM_ROCM)
    installed = f"; vllm {vllm} installed here is then the CUDA build" if vllm else ""
    return Finding(
        "traps",
        "vLLM wheel",
        "warn",
        f"Python {python}: vLLM's ROCm wheels are cp312 only, so pip installs PyPI's CUDA wheel{installed}",
        "vLLM 的 ROCm wheel 只有 Python 3.12 版本；其他 Python 上 pip 会静默装上 CUDA 版。请用 Python 3.12 的环境安装。",
        "vLLM's ROCm wheels exist for Python 3.12 only; on another Python pip silently installs the CUDA "
        "wheel. Install vLLM in a Python 3.12 environment.",
        VLLM_ROCM,
    )


def _aiter_trap(machine, targets) -> Finding:
    lacking = sorted(t for t in targets if t not in AITER_TARGETS)
    if not lacking:
        return Finding(
            "traps", "AITER", "ok", f"{', '.join(sorted(targets))}: AITER's kernels target it", doc=VLLM_ROCM
        )
    installed = machine.package_version("aiter")
    users = installed or machine.package_version("vllm")  # nothing here would reach for it otherwise
    return Finding(
        "traps",
        "AITER",
        "warn" if users else "ok",
        f"AITER is unavailable on {', '.join(lacking)} (its kernels target {', '.join(AITER_TARGETS)})"
        + (f"; aiter {installed} is installed but will not serve this GPU" if installed else ""),
        "AITER 只支持 Instinct（gfx942、gfx950）；在 Radeon 与 gfx1151 上请关闭 VLLM_ROCM_USE_AITER，走默认内核。",
        "AITER serves Instinct gfx942/gfx950 only; on Radeon and gfx1151 keep VLLM_ROCM_USE_AITER off and "
        "use the default kernels.",
        AITER_GFX1151,
    )
