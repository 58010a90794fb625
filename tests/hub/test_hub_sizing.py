"""docs/hub.md's seats per node, recomputed from the labs' lab.toml needs (rocmlab.hub.sizing)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rocmlab.course.catalog import discover
from rocmlab.hub import sizing

REPO = Path(__file__).parents[2]
DOC = REPO / "docs" / "hub.md"


def test_the_docs_table_is_the_one_computed_from_the_labs():
    text = DOC.read_text(encoding="utf-8")
    table = text.split(sizing.START, 1)[1].split(sizing.END, 1)[0].strip()
    assert table == sizing.markdown(sizing.size(REPO)).strip(), "run python -m rocmlab.hub.sizing docs/hub.md"


def test_an_mi300x_node_seats_8_whole_and_64_in_cpx():
    rows = {(r.gpu, r.mode): r for r in sizing.size(REPO)}
    assert rows["MI300X", "SPX/NPS1"].one_rank_seats == 8
    cpx = rows["MI300X", "CPX/NPS4"]
    assert (cpx.slices, cpx.cus, cpx.share_gib, cpx.one_rank_seats, cpx.two_rank_seats) == (64, 38, 24, 64, 32)
    assert cpx.one_rank_labs == cpx.labs == len(discover(REPO))


def test_two_slices_of_a_cpx_node_come_from_one_gpu():
    slices = sizing.node_slices("MI300X", "CPX/NPS4")
    assert sizing.seats_for(slices, 2) == 32
    assert {s.pool_gib for s in slices} == {48} and {s.pool_sharers for s in slices} == {2}


def test_a_lab_needing_more_than_a_slice_has_lowers_the_seats(monkeypatch):
    labs = discover(REPO)
    gpu = labs[0].profiles["gpu"]
    more = replace(gpu, requires=replace(gpu.requires, gpu_mem_gb=40))  # more than a CPX slice's 24 GiB share
    hungry = replace(labs[0], profiles={**labs[0].profiles, "gpu": more})
    monkeypatch.setattr(sizing, "discover", lambda root: [hungry, *labs[1:]])
    rows = {(r.gpu, r.mode): r for r in sizing.size(REPO)}
    assert rows["MI300X", "CPX/NPS4"].one_rank_labs == len(labs) - 1
    assert rows["MI300X", "QPX/NPS1"].one_rank_labs == len(labs)
