"""Lab 04 (collectives and RCCL debugging): its solution cells against its graded tests.

Fast tests run the pure-Python exercises (init plan, busbw, debugging kit) straight from the lab
source, and check that each test cell rejects the empty student version. Slow tests launch the ring
all-reduce under torchrun with 2 to 4 ranks, and the hang scripts.
"""

from __future__ import annotations

import json
import sys

import pytest
import torch
from labsource import LabSource, as_code, student

SOURCE = LabSource("04-collectives-rccl")
LAB = SOURCE.folder


@pytest.fixture(scope="module")
def cells():
    return SOURCE.graded


def write_module(tmp_path, cells, grade_id, *, empty=False):
    source = cells[grade_id]
    name = source.splitlines()[0].split()[1]
    (tmp_path / name).write_text(as_code(student(source) if empty else source))
    return tmp_path / name


def run_cells(*sources, namespace=None):
    namespace = {"torch": torch, "math": __import__("math"), "json": json} if namespace is None else namespace
    return SOURCE.run(*sources, namespace=namespace)


def import_from(tmp_path, module_name, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(module_name, None)
    return __import__(module_name)


def test_every_profile_parameter_is_in_the_parameters_cell():
    for name, profile in SOURCE.lab.profiles.items():
        missing = set(profile.params) - SOURCE.parameter_names
        assert not missing, f"profile {name}: {missing} not assigned in the parameters cell"


def test_grade_ids_are_unique_and_paired(cells):
    tests = [g for g in cells if "-sol-" not in g]
    assert len(tests) >= 6 and all(g.startswith("04-") for g in cells)


@pytest.mark.parametrize("grade_id", ["04-init-1"])
def test_init_plan_solution_passes_and_student_fails(tmp_path, cells, monkeypatch, grade_id):
    write_module(tmp_path, cells, "04-init-sol-1")
    module = import_from(tmp_path, "dist_common", monkeypatch)
    run_cells(cells[grade_id], namespace={"init_plan": module.init_plan, "torch": torch})
    write_module(tmp_path, cells, "04-init-sol-1", empty=True)
    module = import_from(tmp_path, "dist_common", monkeypatch)
    with pytest.raises(NotImplementedError):
        run_cells(cells[grade_id], namespace={"init_plan": module.init_plan, "torch": torch})


def test_busbw_solution_passes_and_student_fails(cells):
    run_cells(cells["04-busbw-sol-1"], cells["04-busbw-1"])
    with pytest.raises(NotImplementedError):
        run_cells(student(cells["04-busbw-sol-1"]), cells["04-busbw-1"])


def test_busbw_matches_nccl_tests_factors(cells):
    bandwidth = run_cells(cells["04-busbw-sol-1"])["bandwidth"]
    for n in (2, 3, 8):
        assert bandwidth("all_reduce", 1e9, 1.0, n) == pytest.approx((1.0, 2 * (n - 1) / n))
        for op in ("reduce_scatter", "all_gather", "all_to_all"):
            assert bandwidth(op, 1e9, 1.0, n)[1] == pytest.approx((n - 1) / n)
        for op in ("broadcast", "reduce"):
            assert bandwidth(op, 1e9, 1.0, n)[1] == pytest.approx(1.0)


def test_debug_kit_solution_passes_and_student_fails(cells):
    run_cells(cells["04-debug-sol-1"], cells["04-debug-1"])
    with pytest.raises(NotImplementedError):
        run_cells(student(cells["04-debug-sol-1"]), cells["04-debug-1"])


def test_debug_kit_rejects_a_wrong_flight_recorder_name(cells):
    """A kit that always uses the old buffer name must fail the graded test."""
    wrong = cells["04-debug-sol-1"].replace('"TORCH_FR_BUFFER_SIZE" if new_names else ', "")
    assert wrong != cells["04-debug-sol-1"]
    with pytest.raises(AssertionError):
        run_cells(wrong, cells["04-debug-1"])


# ---------------------------------------------------------------- torchrun (slow)


def ring_run(tmp_path, cells, nproc, sizes, *, break_it=False):
    from rocmlab.lab import run_torchrun

    write_module(tmp_path, cells, "04-init-sol-1")
    ring = write_module(tmp_path, cells, "04-ring-sol-1")
    if break_it:  # all-gather forgotten: each rank keeps only its own reduced chunk
        ring.write_text(
            ring.read_text().replace(
                "    for step in range(n - 1):\n        exchange((rank + 1 - step)",
                "    for step in range(0):\n        exchange((rank + 1 - step)",
            )
        )
    (tmp_path / "run_ring.py").write_text(as_code(SOURCE.cell_starting("%%writefile run_ring.py")))
    runs = tmp_path / "runs"
    runs.mkdir()
    result = run_torchrun("run_ring.py", nproc=nproc, args=[runs, 0, *sizes], cwd=tmp_path, timeout_s=180, show=False)
    return result, [json.loads((runs / f"ring_ws{nproc}_rank{r}.json").read_text()) for r in range(nproc)]


@pytest.mark.slow
def test_ring_all_reduce_with_four_ranks(tmp_path, cells, monkeypatch):
    result, ranks = ring_run(tmp_path, cells, 4, [1, 6, 4099])
    assert result.ok, result.summary()
    dist_common = import_from(tmp_path, "dist_common", monkeypatch)
    for size in (1, 6, 4099):
        expected = sum(dist_common.rank_input(r, size, 0) for r in range(4))
        sent = 0
        for data in ranks:
            case = next(c for c in data["results"] if c["size"] == size)
            assert torch.allclose(torch.tensor(case["ring"]).reshape(-1), expected, rtol=1e-5, atol=1e-5)
            assert case["steps"] == 6
            sent += case["sent_elements"]
        assert sent == 2 * 3 * size


@pytest.mark.slow
def test_ring_test_cell_catches_a_missing_all_gather(tmp_path, cells, monkeypatch):
    result, ranks = ring_run(tmp_path, cells, 2, [7, 1000], break_it=True)
    assert result.ok, result.summary()
    case = next(c for c in ranks[0]["results"] if c["size"] == 7)
    assert not torch.allclose(torch.tensor(case["ring"]), torch.tensor(case["reference"]))
