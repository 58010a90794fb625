"""Seats per node for the instructor: how many learners one node of each GPU kind seats in each
partition mode, computed from the labs' ``requires`` in lab.toml with the hub's own slice
assignment and admission (rocmlab.hub.devices). docs/hub.md holds the table between markers;
``python -m rocmlab.hub.sizing docs/hub.md`` writes it, and a test keeps the two the same.

A node is 8 GPUs (an 8-GPU OAM platform). A slice's memory is its fair share: its pool (the whole
GPU in NPS1, a quarter in NPS4) divided among the partitions on it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from ..course.catalog import GPU, MULTI_GPU, discover
from ..lab import datasheets, peaks
from ..markdown_table import splice
from .devices import Assignments, Slice, admit

GPUS_PER_NODE = 8
START, END = "<!-- sizing:start -->", "<!-- sizing:end -->"
# The modes each GPU kind is sized for: MI300X's from AMD's partitioning overview (NPS4 only with
# CPX); MI355X in its whole-GPU and CPX/NPS1 modes.
MODES = {
    "MI300X": ("SPX/NPS1", "DPX/NPS1", "QPX/NPS1", "CPX/NPS1", "CPX/NPS4"),
    "MI355X": ("SPX/NPS1", "CPX/NPS1"),
}


@dataclass(frozen=True)
class Seats:
    gpu: str
    mode: str
    slices: int
    cus: int
    share_gib: float
    one_rank_labs: int  # labs whose gpu profile fits one slice
    one_rank_seats: int
    two_rank_labs: int  # labs whose multi-gpu profile fits two slices
    two_rank_seats: int
    labs: int


def node_slices(gpu_key: str, mode: str) -> list[Slice]:
    """The slices of one node of ``gpu_key`` GPUs in ``mode`` ("CPX/NPS4")."""
    row = datasheets.by_key(gpu_key)
    compute, memory = mode.split("/")
    parts, pools = peaks.COMPUTE_PARTITIONS[compute], peaks.MEMORY_PARTITIONS[memory]
    slices = []
    for gpu in range(GPUS_PER_NODE):
        for part in range(parts):
            index = gpu * parts + part
            slices.append(
                Slice(index, f"/dev/dri/renderD{128 + index}", gpu, row.arch, row.cus // parts,
                      row.memory_gb / pools, max(1, parts // pools), mode if parts > 1 or pools > 1 else "")
            )  # fmt: skip
    return slices


def seats_for(slices: list[Slice], count: int) -> int:
    """How many learners the hub's assignment seats with ``count`` slices each."""
    book = Assignments(slices)
    seated = 0
    while True:
        try:
            book.assign(f"learner{seated}", count)
        except RuntimeError:
            return seated
        seated += 1


def size(root: Path) -> list[Seats]:
    labs = discover(root)
    rows = []
    for gpu_key, modes in MODES.items():
        for mode in modes:
            slices = node_slices(gpu_key, mode)
            one = Assignments(slices).assign("sample", 1)
            two = Assignments(slices).assign("sample", 2)
            fit_one, _ = admit([lab for lab in labs if GPU in lab.profiles], GPU, one)
            multi = [lab for lab in labs if MULTI_GPU in lab.profiles]
            fit_two, _ = admit(multi, MULTI_GPU, two)
            rows.append(
                Seats(gpu_key, mode, len(slices), slices[0].cus, slices[0].share_gib,
                      len(fit_one), seats_for(slices, 1) if fit_one else 0,
                      len(fit_two), seats_for(slices, 2) if fit_two else 0, len(labs))
            )  # fmt: skip
    return rows


def markdown(rows: list[Seats]) -> str:
    lines = [
        "| GPU (8 per node) | mode | slices per node | one slice | labs fitting one slice (gpu profile) "
        "| seats, one slice each | two-rank labs fitting two slices (of one GPU where partitioned) | seats, two slices each |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r.gpu} | {r.mode} | {r.slices} | {r.cus} CUs, {r.share_gib:g} GiB | {r.one_rank_labs} of "
            f"{r.labs} | {r.one_rank_seats} | {r.two_rank_labs} | {r.two_rank_seats} |"
        )
    return "\n".join(lines) + "\n"


def write(doc: Path, root: Path) -> bool:
    """Splice the table into ``doc``; True when it changed."""
    text = doc.read_text(encoding="utf-8")
    new = splice(text, START, END, markdown(size(root)))
    if new != text:
        doc.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":
    write(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else Path("."))
