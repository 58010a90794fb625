"""The peak of the device a learner actually has: a whole GPU, or one partition (slice) of it.

A datasheet prints a board's peak. A learner on a shared MI300X in CPX mode has one of eight
partitions of 38 CUs each that still reports the board's product name, so dividing a measurement by
the board's figure reads about 8x too low. Here a device's compute peak is derived from its own CU
count, its peak engine clock and the dense FLOPs one CU does per clock for a data type
(``RATES``), and its share of memory bandwidth and capacity from the partition modes.

Every figure is a ``Figure``: its value, unit, whether it is dense or counts 2:4 structured
sparsity, whether it was read off a datasheet or derived here, and its source (a URL, or the
arithmetic with the URLs of its inputs). ``tests/lab/test_peaks.py`` checks that the derived peaks
reproduce the datasheet rows they must (within 1 %).

Partition modes (AMD Instinct MI300X partitioning overview and amd-smi's partition guide, below):
compute SPX (one device of all 8 XCDs), DPX (2 devices), QPX (4), CPX (8, one XCD each); memory
NPS1 (one pool interleaved over all 8 HBM stacks) or NPS4 (four pools of 2 stacks each, a quarter
of the capacity and bandwidth; NPS4 only with CPX, so two CPX partitions share one NPS4 pool).
"""

from __future__ import annotations

from dataclasses import dataclass

MI300_ARCH = "https://rocm.docs.amd.com/en/latest/conceptual/gpu-arch/mi300.html"
PARTITIONING = "https://instinct.docs.amd.com/projects/amdgpu-docs/en/latest/gpu-partitioning/mi300x/overview.html"
AMDSMI_PARTITION = "https://rocm.docs.amd.com/projects/amdsmi/en/latest/conceptual/partition.html"
CDNA4_WHITEPAPER = (
    "https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/white-papers/"
    "amd-cdna-4-architecture-whitepaper.pdf"
)
CDNA2_WHITEPAPER = (
    "https://www.amd.com/content/dam/amd/en/documents/instinct-business-docs/white-papers/amd-cdna2-white-paper.pdf"
)
RDNA3_ISA = "https://www.amd.com/content/dam/amd/en/documents/radeon-tech-docs/instruction-set-architectures/rdna3-shader-instruction-set-architecture-feb-2023_0.pdf"
RDNA4_ISA = "https://www.amd.com/content/dam/amd/en/documents/radeon-tech-docs/instruction-set-architectures/rdna4-instruction-set-architecture.pdf"

CDNA4_BASIS = f"{CDNA4_WHITEPAPER}; reproduces the MI355X's printed 2.5 PFLOPS FP16 (256 CUs, 2400 MHz)"
CDNA2_BASIS = f"{CDNA2_WHITEPAPER}; reproduces the MI250X's printed 383 TFLOPS FP16 (220 CUs, 1700 MHz)"
RDNA3_BASIS = f"{RDNA3_ISA}; reproduces the RX 7900 XTX's printed 122.8 TFLOPS FP16 (96 CUs, 2500 MHz)"
RDNA4_UNVERIFIED = (
    f"{RDNA4_ISA}; FP16/BF16/FP8 per-CU rates inferred from AMD's printed INT8 AI TOPS, no AMD figure checks them"
)
DTYPES = ("fp16", "bf16", "fp8", "fp32")  # fp16/bf16/fp8: matrix cores; fp32: the vector ALUs


@dataclass(frozen=True)
class Rate:
    """Dense FLOPs one CU does per clock, per data type, for one GPU architecture."""

    arch: str
    per_cu_clock: dict  # dtype -> dense FLOPs per clock per CU
    source: str  # where the per-CU rate is printed, or how it was obtained


RATES: dict[str, Rate] = {
    # CDNA 3: AMD's MI300 microarchitecture page prints FLOPs/clock/CU per data type (matrix FP16/BF16
    # 2048, FP8 4096; vector FP32 256), the same figures its MI300X datasheet peaks are made of.
    "gfx942": Rate("gfx942", {"fp16": 2048, "bf16": 2048, "fp8": 4096, "fp32": 256}, MI300_ARCH),
    # CDNA 4 doubles CDNA 3's matrix rate per CU for FP16/BF16 and FP8 (CDNA 4 white paper).
    "gfx950": Rate("gfx950", {"fp16": 4096, "bf16": 4096, "fp8": 8192, "fp32": 256}, CDNA4_BASIS),
    # CDNA 2: 1024 FP16/BF16 matrix FLOPs/clock/CU (220 CUs x 1.7 GHz = the MI250X's 383 TFLOPS).
    "gfx90a": Rate("gfx90a", {"fp16": 1024, "bf16": 1024, "fp32": 256}, CDNA2_BASIS),
    # RDNA 3 / 3.5: WMMA, 512 dense FP16/BF16 FLOPs/clock/CU; FP32 vector 256 (64 lanes x FMA x dual issue).
    "gfx1100": Rate("gfx1100", {"fp16": 512, "bf16": 512, "fp32": 256}, RDNA3_BASIS),
    "gfx1151": Rate("gfx1151", {"fp16": 512, "bf16": 512, "fp32": 256}, RDNA3_BASIS),
    # RDNA 4: FP32 vector 256 (reproduces AMD's printed 36.1 TFLOPS of the RX 9070). AMD prints no FP16
    # matrix figure: 1024 is half the 2048 dense INT8 ops/clock/CU behind AMD's printed AI TOPS (RX 9070 XT:
    # 779 INT8 TOPS with sparsity at 64 CUs and 2970 MHz), on the assumption that WMMA runs FP16 at half
    # the INT8 rate as on RDNA 3; FP8 at the INT8 rate. Unverified against an AMD figure.
    "gfx1201": Rate("gfx1201", {"fp16": 1024, "bf16": 1024, "fp8": 2048, "fp32": 256}, RDNA4_UNVERIFIED),
}

COMPUTE_PARTITIONS = {"SPX": 1, "DPX": 2, "TPX": 3, "QPX": 4, "CPX": 8}  # devices per MI300X-class GPU
MEMORY_PARTITIONS = {"NPS1": 1, "NPS2": 2, "NPS4": 4, "NPS8": 8}  # memory pools per GPU


@dataclass(frozen=True)
class Figure:
    """A peak with its basis: dense or sparse, read off a datasheet or derived, and where from."""

    value: float
    unit: str  # "TFLOPS" | "GB/s" | "GiB"
    dense: bool
    basis: str  # "datasheet" | "derived"
    source: str

    def __str__(self) -> str:
        kind = "" if self.unit != "TFLOPS" else (" dense" if self.dense else " with sparsity")
        return f"{self.value:.1f} {self.unit}{kind} ({self.basis}: {self.source})"


def derived_peak(arch: str, cus: int, clock_mhz: float, dtype: str = "fp16") -> Figure | None:
    """CUs x peak engine clock x the architecture's dense FLOPs per clock per CU; None where the
    rate of ``dtype`` on ``arch`` is not in ``RATES``."""
    rate = RATES.get(arch)
    per_cu = rate.per_cu_clock.get(dtype) if rate else None
    if per_cu is None or cus <= 0 or clock_mhz <= 0:
        return None
    value = cus * clock_mhz * 1e6 * per_cu / 1e12
    return Figure(
        value,
        "TFLOPS",
        True,
        "derived",
        f"{cus} CUs x {clock_mhz:g} MHz x {per_cu} {dtype} FLOPs/clock/CU ({rate.source})",
    )


@dataclass(frozen=True)
class Slice:
    """One device the runtime sees: a whole GPU (SPX) or one partition of it.

    ``cus`` and ``clock_mhz`` are the device's own (KFD topology: simd_count / simd_per_cu and
    max_engine_clk_fcompute); the board's figures come from its datasheet row.
    """

    arch: str
    cus: int
    clock_mhz: float
    board_cus: int
    board_bandwidth_gbs: float
    board_memory_gib: float
    compute_mode: str = "SPX"
    memory_mode: str = "NPS1"
    source: str = ""  # the datasheet row's first source

    @property
    def partitions(self) -> int:
        return COMPUTE_PARTITIONS[self.compute_mode]

    @property
    def pools(self) -> int:
        return MEMORY_PARTITIONS[self.memory_mode]

    @property
    def compute_share(self) -> float:
        return self.cus / self.board_cus

    def peak(self, dtype: str = "fp16") -> Figure | None:
        return derived_peak(self.arch, self.cus, self.clock_mhz, dtype)

    def bandwidth(self) -> Figure:
        """The slice's fair share of the board's memory bandwidth when every slice streams:
        NPS1 interleaves every slice over all stacks (board / partitions); NPS4 gives each pool a
        quarter of the stacks, shared by the partitions on it (board / 4 / (partitions / 4))."""
        per_pool = self.board_bandwidth_gbs / self.pools
        sharing = max(1, self.partitions // self.pools)
        how = (
            f"{self.board_bandwidth_gbs:g} GB/s / {self.pools} {self.memory_mode} pool(s) / "
            f"{sharing} {self.compute_mode} partition(s) per pool ({self.source}; {PARTITIONING})"
        )
        return Figure(per_pool / sharing, "GB/s", True, "derived", how)

    def memory(self) -> Figure:
        """The memory this slice can allocate: its pool (the whole board in NPS1, a quarter in NPS4),
        shared with the other partitions on that pool."""
        pool = self.board_memory_gib / self.pools
        sharing = max(1, self.partitions // self.pools)
        how = (
            f"{self.board_memory_gib:g} GiB / {self.pools} {self.memory_mode} pool(s), shared by "
            f"{sharing} partition(s) ({PARTITIONING})"
        )
        return Figure(pool, "GiB", True, "derived", how)

    def memory_share_gib(self) -> float:
        """What one slice can count on when every slice on its pool uses memory: pool / sharers."""
        return self.memory().value / max(1, self.partitions // self.pools)


def mode_of_cus(cus: int, board_cus: int) -> str:
    """The compute mode whose partitions have ``cus`` CUs on a board of ``board_cus`` ("SPX" when
    the device has the whole board); ValueError when no mode splits the board so."""
    for mode, parts in COMPUTE_PARTITIONS.items():
        if board_cus % parts == 0 and board_cus // parts == cus:
            return mode
    raise ValueError(f"{cus} CUs is no partition of a {board_cus}-CU GPU ({', '.join(COMPUTE_PARTITIONS)})")
