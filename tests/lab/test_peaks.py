"""Peaks of the device a learner has (rocmlab.lab.peaks, rocmlab.lab.datasheets): derived from its
own CUs, clock and per-CU rate, cross-checked against the printed datasheet rows they must reproduce."""

from __future__ import annotations

import types

import pytest

from rocmlab.lab import datasheets, peaks

# (row, data type, the figure the vendor prints, dense) — each derived peak must land within 1 %.
# MI300X/MI325X: 1307.4 FP16/BF16, 2614.9 FP8, 163.4 FP32 vector (AMD's product pages, the MI300
# microarchitecture page); MI355X/MI350X: 2.5 / 2.3 PFLOPS FP16 dense (AMD's product pages);
# MI250X 383.0, MI210 181.0, RX 7900 XTX 122.8 FP16 (AMD's product pages); RX 9070 36.1 FP32 vector.
PRINTED = [
    ("MI300X", "fp16", 1307.4),
    ("MI300X", "bf16", 1307.4),
    ("MI300X", "fp8", 2614.9),
    ("MI300X", "fp32", 163.4),
    ("MI325X", "fp16", 1307.4),
    ("MI355X", "fp16", 2500),
    ("MI350X", "fp16", 2300),
    ("MI250X", "fp16", 383.0 / 2),  # per GCD: the board prints both
    ("MI210", "fp16", 181.0),
    ("RX 7900 XTX", "fp16", 122.8),
    ("RX 9070", "fp32", 36.1),
]


@pytest.mark.parametrize("key, dtype, printed", PRINTED)
def test_derived_peaks_reproduce_the_printed_datasheet_figures(key, dtype, printed):
    figure = datasheets.peak(datasheets.by_key(key), dtype)
    assert figure.basis == "derived" and figure.dense and figure.unit == "TFLOPS"
    assert figure.value == pytest.approx(printed, rel=0.01), figure
    assert "CUs x" in figure.source and "https://" in figure.source


def test_every_amd_row_derives_its_printed_fp16_figure_within_one_percent():
    for gpu in datasheets.TABLE:
        if not gpu.arch.startswith("gfx"):
            continue
        derived = datasheets.peak(gpu, "fp16")
        assert derived is not None and derived.basis == "derived", gpu.key
        assert derived.value * gpu.devices == pytest.approx(gpu.fp16_dense_tflops, rel=0.01), gpu.key


def test_rows_without_a_printed_fp16_figure_say_it_is_derived():
    for key in ("RX 9070", "Strix Halo"):
        row = datasheets.by_key(key)
        assert row.fp16_basis and row.fp16_basis.startswith("derived")
        assert f"— (derived: {row.fp16_tflops:g} TFLOPS dense)" in datasheets.markdown_table()
    halo = datasheets.by_key("Strix Halo")
    assert (halo.arch, halo.cus, halo.clock_mhz, halo.bandwidth_gbs) == ("gfx1151", 40, 2900, 256)
    assert datasheets.peak(halo).value == pytest.approx(40 * 2.9e9 * 512 / 1e12)


def test_a_cpx_slice_of_an_mi300x_is_one_eighth_of_the_board():
    board = datasheets.by_key("MI300X")
    for memory in ("NPS1", "NPS4"):
        part = datasheets.partition_of(board, 38, memory)
        assert part.partition == f"CPX/{memory}"
        assert part.per_device()["fp16_dense_tflops"] == pytest.approx(1307.4 / 8, rel=1e-3)
        assert part.per_device()["bandwidth_gbs"] == pytest.approx(5300 / 8)
        assert part.fp8_dense_tflops == pytest.approx(2614.9 / 8, rel=1e-3)
        assert part.memory_gb == 24, "a fair share: 2 partitions per 48 GiB NPS4 pool, 8 per 192 GiB in NPS1"
        assert part.fp16_basis.startswith("38 CUs x 2100 MHz")


def test_an_nps4_slice_allocates_from_its_48_gib_pool_shared_with_one_other():
    part = datasheets.as_slice(datasheets.by_key("MI300X"), 38, "NPS4")
    assert part.memory().value == 48 and part.memory_share_gib() == 24
    assert part.bandwidth().value == pytest.approx(5300 / 4 / 2)
    assert "NPS4" in part.bandwidth().source and peaks.PARTITIONING in part.bandwidth().source


@pytest.mark.parametrize("cus, mode", [(304, "SPX"), (152, "DPX"), (76, "QPX"), (38, "CPX")])
def test_the_compute_mode_follows_from_the_cu_count(cus, mode):
    assert peaks.mode_of_cus(cus, 304) == mode


def test_nps4_without_cpx_and_odd_cu_counts_are_refused():
    board = datasheets.by_key("MI300X")
    with pytest.raises(ValueError, match="NPS4 comes only with CPX"):
        datasheets.as_slice(board, 152, "NPS4")
    with pytest.raises(ValueError, match="no partition"):
        datasheets.as_slice(board, 40)
    with pytest.raises(ValueError, match="no CU count"):
        datasheets.as_slice(datasheets.by_key("H100 SXM"), 66)


def test_a_whole_board_keeps_its_row_and_its_printed_figures():
    board = datasheets.by_key("MI300X")
    assert datasheets.partition_of(board, 304) is board
    assert datasheets.peak(datasheets.by_key("H100 SXM")) == peaks.Figure(
        989.5, "TFLOPS", True, "datasheet", "https://www.nvidia.com/en-us/data-center/h100/"
    )


def fake_torch(monkeypatch, name, cus, total_memory):
    """torch.cuda as a partition reports itself: the board's product name, its own CUs and memory."""
    import torch

    props = types.SimpleNamespace(multi_processor_count=cus, total_memory=total_memory)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
    return torch.device("cuda", 0)


def test_for_device_gives_a_cpx_partition_its_own_figures(monkeypatch):
    # a CPX/NPS4 partition of an MI300X reports 38 CUs and its 48 GiB pool (KFD: simd_count 152,
    # mem_banks size 51539607552; tests/fixtures/machines/mi300x-cpx-nps4)
    device = fake_torch(monkeypatch, "AMD Instinct MI300X", 38, 48 * 2**30)
    name, row = datasheets.for_device(device)
    assert name == "AMD Instinct MI300X" and row.partition == "CPX/NPS4"
    assert row.per_device()["fp16_dense_tflops"] == pytest.approx(163.4, abs=0.1)


def test_for_device_keeps_the_board_row_for_a_whole_gpu_and_none_for_an_unknown_split(monkeypatch):
    device = fake_torch(monkeypatch, "AMD Instinct MI300X", 304, 192 * 2**30)
    assert datasheets.for_device(device)[1] is datasheets.by_key("MI300X")
    device = fake_torch(monkeypatch, "AMD Instinct MI300X", 40, 192 * 2**30)
    assert datasheets.for_device(device)[1] is None, "no figures rather than the board's"


def test_figures_print_their_basis():
    text = str(datasheets.partition_of(datasheets.by_key("MI300X"), 38).fp16_basis)
    assert "38 CUs" in text
    figure = datasheets.peak(datasheets.by_key("MI355X"))
    assert str(figure).startswith("2516.6 TFLOPS dense (derived: 256 CUs x 2400 MHz")
