"""Vendor datasheet figures of the GPUs the labs compare against, in one cited table.

A row is found by the product name the runtime reports (``torch.cuda.get_device_name``,
rocminfo's ``Marketing Name``), compared exactly after normalising case, spacing and a leading
vendor word. A virtual function under SR-IOV (a cloud VM) reports the product name with " VF"
appended (libdrm's ``data/amdgpu.ids``: 74B5 MI300X VF, 74B9 MI325X VF, 75B0 MI350X VF, 75B3
MI355X VF); it is the same GPU and has the same row. Substring matching is wrong here:
"NVIDIA H100 PCIe", "NVIDIA H100 NVL" and "NVIDIA A100-SXM4-40GB" are other products with
other figures, and an unknown name must give no figures rather than someone else's.

Figures are as the vendor prints them. ``fp16_tflops`` is the FP16/BF16 matrix figure; when the
datasheet prints only the "with sparsity" figure (2:4 structured sparsity, twice the dense one),
``fp16_sparse`` is True and ``fp16_dense_tflops`` halves it. ``fp8_tflops`` / ``fp8_sparse`` /
``fp8_dense_tflops`` are the same for FP8 (OCP e4m3 on gfx950 and NVIDIA, FNUZ on gfx942), None
where no source was checked. ``fp8_basis`` says how a figure was obtained where it was not read off a vendor
page: the gfx950 rows are derived (see ``_GFX950_FP8``). Board figures describe the whole
board: an MI250X board holds two GCDs that PyTorch numbers as two devices, so ``per_device()``
divides bandwidth, compute and power by ``devices``. ``llc_mib`` is the last-level cache of one
device (Infinity Cache / L3 where the GPU has one, else L2), from AMD's ROCm GPU specification
table; it is None where no source was checked.

``memory_gb`` is the capacity as vendors print it, "192 GB". Memory capacity is counted in binary units: AMD's
own ROCm GPU specification table gives the same figures as "VRAM (GiB)", and an MI300X reports
205,822,885,888 bytes to rocm-smi (191.7 GiB, some of 192 GiB reserved; 192 × 10⁹ would be less). A board
holds ``memory_gb`` × 2³⁰ bytes, ``memory_bytes``; labs that count capacity in bytes use it.

A partition of a board (an MI300X in CPX mode: eight devices of 38 CUs, each reporting the board's
product name) is not the board: ``for_device`` reads the device's CU count and memory and gives it
``partition_of`` the row, whose figures are derived from the partition's own CUs, the board's clock
and the architecture's per-CU rate (``rocmlab.lab.peaks``), so that a slice's efficiency is of the
slice. ``peak`` gives any row's dense figure with its basis (derived or datasheet) and source.

``INTERCONNECTS`` holds the scale-up fabric between the GPUs of one node (xGMI, NVLink), all
figures per GPU and per direction, so that a collective's busbw can be set against them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from . import peaks

ROCM_GPU_SPECS = "https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html"
_AMD = "https://www.amd.com/en/products"
# gfx950 FP8 dense peaks: 256 CUs x 8192 FP8 FLOPs per clock per CU (twice CDNA 3's 4096) x the peak engine
# clock (2.4 GHz MI355X, 2.2 GHz MI350X) = 5033.2 and 4613.7 TFLOPS; the same arithmetic gives the MI300X's
# printed 2614.9 (304 x 4096 x 2.1 GHz). No primary source could be opened to check them: AMD's product
# pages and the CDNA 4 white paper below are where they are printed, but neither page was readable from
# here. The per-CU rate and the clocks are from press reports of AMD's talks (ISSCC 2026, Hot Chips 2025),
# and they agree with AMD's headline MXFP4/MXFP6 peaks of 20.1 and 18.45 PFLOPS (4 x the FP8 figures).
_CDNA4_WHITEPAPER = "https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/white-papers/amd-cdna-4-architecture-whitepaper.pdf"
# Press reports, not AMD's own pages: ISSCC 2026 (8192 FP8 FLOPs per clock per CU, up from 4096), Hot Chips
# 2025 (2.4 / 2.2 GHz peak clocks), ISC 2025 (MXFP4/MXFP6 peaks 20.1 / 18.45 PFLOPS).
_ISSCC_2026_REPORT = "https://www.world-today-news.com/?p=7253162"
_HOT_CHIPS_2025_REPORT = (
    "https://wccftech.com/amd-instinct-mi350-gpuai-hardware-powerhouse-3nm-3d-chiplet-cdna-4-185-billion-"
    "transistors-1400w-tbp-over-4000b-llm-support//amp/"
)
_ISC_2025_REPORT = (
    "https://www.tomshardware.com/pc-components/gpus/amds-instinct-mi355x-accelerator-will-consume-1-400-watts"
)
_DERIVED_FP16 = (
    "derived: CUs x dense FP16 FLOPs/clock/CU x peak clock (rocmlab.lab.peaks.RATES); no vendor page prints it"
)
_GFX950_FP8 = "derived: CUs x 8192 FP8 FLOPs/clock/CU x peak clock; no AMD page could be read to confirm it"


@dataclass(frozen=True)
class GPU:
    key: str  # short label used in tables and plots
    names: tuple[str, ...]  # product names as the runtime reports them
    arch: str  # gfx target or sm_XY
    memory_gb: float  # board memory as printed ("192 GB"); binary units: memory_bytes = memory_gb x 2^30
    bandwidth_gbs: float  # peak memory bandwidth of the board, GB/s
    fp16_tflops: float  # FP16/BF16 matrix figure as printed
    fp16_sparse: bool  # the printed figure assumes 2:4 structured sparsity
    board_w: float  # board power, W
    llc_mib: float | None  # last-level cache of one device, MiB
    devices: int  # devices PyTorch sees per board
    sources: tuple[str, ...]
    fp8_tflops: float | None = None  # FP8 matrix figure as printed; None where no source was checked
    fp8_sparse: bool = False  # the printed FP8 figure assumes 2:4 structured sparsity
    fp8_basis: str | None = None  # how fp8_tflops was obtained, where it was not read off a vendor page
    cus: int | None = None  # compute units of the board (all its devices), as the vendor prints them
    clock_mhz: float | None = None  # peak engine clock the vendor's peaks are computed at
    fp16_basis: str | None = None  # how fp16_tflops was obtained, where no vendor page prints it
    fp32_tflops: float | None = None  # FP32 vector figure as printed; None where no source was checked
    partition: str = ""  # "CPX/NPS4" for one partition of the board (``partition_of``); "" for a whole board

    @property
    def memory_bytes(self) -> int:
        """The board's memory in bytes: the printed GB are binary (2^30 bytes), as for all memory capacity."""
        return int(self.memory_gb * 2**30)

    @property
    def fp16_dense_tflops(self) -> float:
        return self.fp16_tflops / 2 if self.fp16_sparse else self.fp16_tflops

    @property
    def fp8_dense_tflops(self) -> float | None:
        if self.fp8_tflops is None:
            return None
        return self.fp8_tflops / 2 if self.fp8_sparse else self.fp8_tflops

    def per_device(self) -> dict:
        """Figures of one device as PyTorch numbers it: bandwidth_gbs, fp16_dense_tflops, board_w,
        memory_gb (board figures divided by ``devices``) and llc_mib."""
        share = self.devices
        return {
            "bandwidth_gbs": self.bandwidth_gbs / share,
            "fp16_dense_tflops": self.fp16_dense_tflops / share,
            "board_w": self.board_w / share,
            "memory_gb": self.memory_gb / share,
            "llc_mib": self.llc_mib,
        }


TABLE: tuple[GPU, ...] = (
    GPU("MI355X", ("AMD Instinct MI355X", "AMD Instinct MI355X VF"), "gfx950", 288, 8000, 2500, False, 1400, 256, 1,
        (f"{_AMD}/accelerators/instinct/mi350/mi355x.html", ROCM_GPU_SPECS, _CDNA4_WHITEPAPER, _ISSCC_2026_REPORT,
         _HOT_CHIPS_2025_REPORT, _ISC_2025_REPORT), fp8_tflops=5033.2, fp8_basis=_GFX950_FP8, cus=256, clock_mhz=2400),
    GPU("MI350X", ("AMD Instinct MI350X", "AMD Instinct MI350X VF"), "gfx950", 288, 8000, 2300, False, 1000, 256, 1,
        (f"{_AMD}/accelerators/instinct/mi350/mi350x.html", ROCM_GPU_SPECS, _CDNA4_WHITEPAPER, _ISSCC_2026_REPORT,
         _HOT_CHIPS_2025_REPORT, _ISC_2025_REPORT), fp8_tflops=4613.7, fp8_basis=_GFX950_FP8, cus=256, clock_mhz=2200),
    GPU("MI325X", ("AMD Instinct MI325X", "AMD Instinct MI325X VF"), "gfx942", 256, 6000, 1307.4, False, 1000, 256, 1,
        (f"{_AMD}/accelerators/instinct/mi300/mi325x.html", ROCM_GPU_SPECS), fp8_tflops=2614.9, cus=304,
        clock_mhz=2100, fp32_tflops=163.4),
    GPU("MI300X", ("AMD Instinct MI300X", "AMD Instinct MI300X VF"), "gfx942", 192, 5300, 1307.4, False, 750, 256, 1,
        (f"{_AMD}/accelerators/instinct/mi300/mi300x.html", ROCM_GPU_SPECS, peaks.MI300_ARCH), fp8_tflops=2614.9,
        cus=304, clock_mhz=2100, fp32_tflops=163.4),
    GPU("MI250X", ("AMD Instinct MI250X",), "gfx90a", 128, 3276.8, 383.0, False, 560, 8, 2,
        (f"{_AMD}/accelerators/instinct/mi200/mi250x.html", ROCM_GPU_SPECS), cus=220, clock_mhz=1700),
    GPU("MI210", ("AMD Instinct MI210",), "gfx90a", 64, 1638.4, 181.0, False, 300, 8, 1,
        (f"{_AMD}/accelerators/instinct/mi200/mi210.html", ROCM_GPU_SPECS), cus=104, clock_mhz=1700),
    GPU("RX 7900 XTX", ("Radeon RX 7900 XTX",), "gfx1100", 24, 960, 122.8, False, 355, 96, 1,
        (f"{_AMD}/graphics/desktops/radeon/7000-series/amd-radeon-rx-7900xtx.html", ROCM_GPU_SPECS), cus=96,
        clock_mhz=2500),
    # RX 9070: AMD prints 56 CUs, a 2520 MHz boost clock, 36.1 TFLOPS FP32 vector, 16 GB GDDR6 at 640 GB/s,
    # 64 MB Infinity Cache, 220 W; the FP16 matrix figure below is derived (56 x 2520 MHz x 1024).
    GPU("RX 9070", ("Radeon RX 9070",), "gfx1201", 16, 640, 144.5, False, 220, 64, 1,
        (f"{_AMD}/graphics/desktops/radeon/9000-series/amd-radeon-rx-9070.html", ROCM_GPU_SPECS, peaks.RDNA4_ISA),
        cus=56, clock_mhz=2520, fp16_basis=_DERIVED_FP16, fp32_tflops=36.1),
    # Strix Halo (Ryzen AI Max+ 395, Radeon 8060S, gfx1151): AMD prints 40 graphics CUs at 2900 MHz and
    # LPDDR5X-8000 on a 256-bit bus (256 GB/s), up to 128 GB shared with the CPU, 32 MB MALL, 55 W default TDP.
    # No FP16 figure is printed; it is derived (40 x 2900 MHz x 512). memory_gb is what the GPU may use at most.
    GPU("Strix Halo", ("Radeon 8060S Graphics",), "gfx1151", 128, 256, 59.4, False, 55,
        32, 1, (f"{_AMD}/processors/laptop/ryzen/ai-300-series/amd-ryzen-ai-max-plus-395.html", ROCM_GPU_SPECS,
                peaks.RDNA3_ISA), cus=40, clock_mhz=2900, fp16_basis=_DERIVED_FP16),
    GPU("H200 SXM", ("NVIDIA H200",), "sm_90", 141, 4800, 1979, True, 700, None, 1,
        ("https://www.nvidia.com/en-us/data-center/h200/",), fp8_tflops=3958, fp8_sparse=True),
    GPU("H100 SXM", ("NVIDIA H100 80GB HBM3",), "sm_90", 80, 3350, 1979, True, 700, None, 1,
        ("https://www.nvidia.com/en-us/data-center/h100/",), fp8_tflops=3958, fp8_sparse=True),
    GPU("A100 SXM 80GB", ("NVIDIA A100-SXM4-80GB",), "sm_80", 80, 2039, 312, False, 400, None, 1,
        ("https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
         "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",)),
)  # fmt: skip

_VENDOR = re.compile(r"^(amd|nvidia)\s+")


def normalise_name(name: str) -> str:
    """Case-folded, single-spaced, without a leading vendor word: "AMD Radeon RX 7900 XTX" and
    "Radeon RX 7900 XTX" name the same product."""
    return _VENDOR.sub("", " ".join(str(name).split()).casefold())


def lookup(name: str) -> GPU | None:
    """The row whose product name equals ``name`` (after normalise_name), else None."""
    wanted = normalise_name(name)
    return next((gpu for gpu in TABLE if wanted in {normalise_name(n) for n in gpu.names}), None)


def by_key(key: str) -> GPU:
    """The row with this table key ("MI300X", "H100 SXM", ...); KeyError names the known keys."""
    for gpu in TABLE:
        if gpu.key == key:
            return gpu
    raise KeyError(f"no datasheet row {key!r}; known: {', '.join(g.key for g in TABLE)}")


def as_slice(gpu: GPU, cus: int, memory_mode: str = "NPS1") -> peaks.Slice:
    """The device of ``cus`` CUs on a board of this row: the whole board, or the partition of its
    compute mode (``peaks.mode_of_cus``); ValueError when the row lacks CUs or no mode fits."""
    if not gpu.cus or not gpu.clock_mhz:
        raise ValueError(f"datasheet row {gpu.key} has no CU count and clock to derive a partition from")
    board_cus = gpu.cus // gpu.devices
    mode = peaks.mode_of_cus(cus, board_cus)
    if memory_mode == "NPS4" and mode != "CPX":
        raise ValueError(f"{gpu.key}: NPS4 comes only with CPX, not {mode} ({peaks.PARTITIONING})")
    return peaks.Slice(
        gpu.arch,
        cus,
        gpu.clock_mhz,
        board_cus,
        gpu.bandwidth_gbs / gpu.devices,
        gpu.memory_gb / gpu.devices,
        mode,
        memory_mode,
        gpu.sources[0],
    )


def partition_of(gpu: GPU, cus: int, memory_mode: str = "NPS1") -> GPU:
    """This row as one partition of ``cus`` CUs: a row whose figures (``per_device()`` included)
    are the partition's own, derived from its CUs and the board's partition modes; the board's row
    itself when ``cus`` is the whole device."""
    part = as_slice(gpu, cus, memory_mode)
    if part.compute_mode == "SPX" and memory_mode == "NPS1":
        return gpu
    fp16 = part.peak("fp16")
    fp8 = part.peak("fp8")
    share = part.compute_share / gpu.devices
    return replace(
        gpu,
        key=f"{gpu.key} {part.compute_mode}/{memory_mode} partition",
        memory_gb=part.memory_share_gib(),
        bandwidth_gbs=part.bandwidth().value,
        fp16_tflops=fp16.value,
        fp16_sparse=False,
        board_w=gpu.board_w * share,
        devices=1,
        fp8_tflops=fp8.value if fp8 else None,
        fp8_sparse=False,
        fp8_basis=fp8.source if fp8 else None,
        cus=cus,
        fp16_basis=fp16.source,
        fp32_tflops=None,
        partition=f"{part.compute_mode}/{memory_mode}",
    )


def peak(gpu: GPU, dtype: str = "fp16") -> peaks.Figure | None:
    """The dense peak of one device of this row, with its basis: derived from the row's CUs and
    clock where ``peaks.RATES`` knows the architecture, else the printed figure (halved where it
    counts sparsity); None where neither exists."""
    if gpu.cus and gpu.clock_mhz:
        derived = peaks.derived_peak(gpu.arch, gpu.cus // gpu.devices, gpu.clock_mhz, dtype)
        if derived:
            return derived
    printed = {"fp16": gpu.fp16_dense_tflops, "bf16": gpu.fp16_dense_tflops, "fp8": gpu.fp8_dense_tflops}
    value = printed.get(dtype)
    if value is None:
        return None
    return peaks.Figure(value / gpu.devices, "TFLOPS", True, "datasheet", gpu.sources[0])


def _memory_mode(total_bytes: int, gpu: GPU) -> str:
    """NPS4 when a partition reports at most a quarter of the board's memory (its pool), else NPS1."""
    return "NPS4" if 0 < total_bytes <= gpu.memory_bytes / gpu.devices / 4 else "NPS1"


def for_device(device) -> tuple[str, GPU | None]:
    """(the device's product name, its row or None) for a torch device; ("CPU", None) off a GPU.
    A partition (fewer CUs than the board, e.g. an MI300X in CPX mode) gets the row of that
    partition (``partition_of``), so that efficiencies are of the device the learner has."""
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return "CPU", None
    name = torch.cuda.get_device_name(device)
    row = lookup(name)
    if row is None or not row.cus:
        return name, row
    props = torch.cuda.get_device_properties(device)
    cus = getattr(props, "multi_processor_count", 0)
    if not cus or cus >= row.cus // row.devices:
        return name, row
    try:
        return name, partition_of(row, cus, _memory_mode(getattr(props, "total_memory", 0), row))
    except ValueError:
        return name, None  # a CU count no partition mode gives: no figures rather than wrong ones


HEADERS = (
    "GPU",
    "arch",
    "memory",
    "peak bandwidth",
    "FP16/BF16 as printed",
    "dense",
    "FP8 as printed",
    "board power",
    "last-level cache",
)


def _fp16_cell(gpu: GPU) -> str:
    if gpu.fp16_basis:
        return f"— (derived: {gpu.fp16_tflops:g} TFLOPS dense)"
    return f"{gpu.fp16_tflops:g} TFLOPS{' with sparsity' if gpu.fp16_sparse else ''}"


def _fp8_cell(gpu: GPU) -> str:
    if gpu.fp8_tflops is None:
        return "—"
    sparsity = " with sparsity" if gpu.fp8_sparse else ""
    basis = f" ({gpu.fp8_basis})" if gpu.fp8_basis else ""
    return f"{gpu.fp8_tflops:g} TFLOPS{sparsity}{basis}"


def markdown_table() -> str:
    """The table as Markdown, one row per GPU, with its sources as numbered links."""
    lines = ["| " + " | ".join((*HEADERS, "sources")) + " |", "|" + " --- |" * (len(HEADERS) + 1)]
    for gpu in TABLE:
        per_board = f" per board of {gpu.devices} devices" if gpu.devices > 1 else ""
        cells = (
            gpu.key,
            gpu.arch,
            f"{gpu.memory_gb:g} GiB",
            f"{gpu.bandwidth_gbs:g} GB/s{per_board}",
            _fp16_cell(gpu),
            f"{gpu.fp16_dense_tflops:g} TFLOPS",
            _fp8_cell(gpu),
            f"{gpu.board_w:g} W",
            "—" if gpu.llc_mib is None else f"{gpu.llc_mib:g} MiB",
            " · ".join(f"[{i + 1}]({url})" for i, url in enumerate(gpu.sources)),
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- scale-up interconnects ---------------------------------------------------------------------

_RCCL_XGMI_BLOG = "https://rocm.blogs.amd.com/software-tools-optimization/mi300x-rccl-xgmi/README.html"
_MI300X_WORKLOAD = "https://rocm.docs.amd.com/en/latest/how-to/rocm-for-ai/inference-optimization/workload.html"
_HOPPER = "https://www.nvidia.com/en-us/technologies/hopper-architecture/"


@dataclass(frozen=True)
class Interconnect:
    """The GPU-to-GPU fabric of one node, per GPU and per direction (GB/s = 1e9 bytes/s).

    topology "mesh": every GPU has a direct link of ``link_gbs`` to each of the other
    ``gpus - 1`` GPUs (MI300X: 7 xGMI links). topology "switch": every GPU reaches a switch at
    ``link_gbs`` in all, whatever peer it talks to (H100/H200 through NVSwitch).
    ``usable_link_gbs`` is the same figure after protocol overhead as the vendor states it, or
    None where the vendor publishes none. NVIDIA prints NVLink as a bidirectional total (900 GB/s
    a GPU); this table keeps one direction, as busbw counts it.
    """

    key: str
    gpu: str  # the TABLE key of the GPU it connects
    fabric: str
    topology: str  # "mesh" | "switch"
    gpus: int  # GPUs in one scale-up domain (a node)
    link_gbs: float  # mesh: one link; switch: the GPU's whole connection; one direction
    usable_link_gbs: float | None
    sources: tuple[str, ...]


INTERCONNECTS: tuple[Interconnect, ...] = (
    Interconnect("MI300X xGMI", "MI300X", "Infinity Fabric (xGMI)", "mesh", 8, 64, 48,
                 (_RCCL_XGMI_BLOG, _MI300X_WORKLOAD)),
    Interconnect("H100 SXM NVLink", "H100 SXM", "NVLink 4 + NVSwitch", "switch", 8, 450, None,
                 (_HOPPER, "https://www.nvidia.com/en-us/data-center/h100/")),
    Interconnect("H200 SXM NVLink", "H200 SXM", "NVLink 4 + NVSwitch", "switch", 8, 450, None,
                 (_HOPPER, "https://www.nvidia.com/en-us/data-center/h200/")),
)  # fmt: skip


def interconnect(key: str) -> Interconnect:
    """The fabric row with this key, or the one of the GPU with this TABLE key ("MI300X");
    KeyError names the known keys."""
    for row in INTERCONNECTS:
        if key in (row.key, row.gpu):
            return row
    raise KeyError(f"no interconnect row {key!r}; known: {', '.join(r.key for r in INTERCONNECTS)}")
