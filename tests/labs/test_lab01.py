"""Lab 01 (ROCm setup): metadata, data files, and the solution functions run outside the notebook."""

import filecmp
from pathlib import Path

import pytest
from in_process import InProcess
from labsource import LabSource, definitions

from rocmlab import doctor, probes
from rocmlab.lab import datasheets

SOURCE = LabSource("01-rocm-setup")
LAB = SOURCE.folder
MACHINES = Path(__file__).parents[1] / "fixtures" / "machines"
SOLUTION_CELLS = (
    "01-backend-sol-1",
    "01-rocminfo-sol-1",
    "01-arch-sol-1",
    "01-wheel-sol-1",
    "01-visible-sol-1",
    "01-arith-sol-1",
    "01-harness-sol-1",
    "01-watt-sol-1",
    "01-stretch-triage-sol-1",
)


@pytest.fixture(scope="module")
def sol():
    """The definitions of the solution cells (functions, classes, UPPER_CASE constants) in one
    namespace; their demo statements need the notebook's globals and are left out."""
    namespace = SOURCE.run(*(definitions(SOURCE.graded[g]) for g in SOLUTION_CELLS))
    assert {"backend_of", "parse_rocminfo", "triage"} <= set(namespace)
    return namespace


def test_lab_toml_is_valid():
    lab = SOURCE.lab
    assert lab.id == "01-rocm-setup" and {"smoke", "gpu"} <= set(lab.profiles)


def test_lab_machine_data_matches_the_doctor_fixtures():
    for folder in (LAB / "data" / "machines").iterdir():
        _, mismatch, errors = filecmp.cmpfiles(
            folder, MACHINES / folder.name, [p.name for p in folder.iterdir()], shallow=False
        )
        assert not mismatch and not errors, (folder.name, mismatch, errors)


# Each file's GPU agents as its text states them (the agent's own `Name`, `Marketing Name`,
# `Compute Unit`, `Wavefront Size`): rocmlab holds no rocminfo parser to compare with (issue 47).
ROCMINFO_GPUS = {
    "apu-780m": [("AMD Radeon 780M", "gfx1103", 12, 32)],
    "mi250x-2cards": [("AMD Instinct MI250X", "gfx90a", 110, 64)] * 4,
    "mi300x-8gpu": [("AMD Instinct MI300X", "gfx942", 304, 64)] * 8,
    "rx7900xtx": [("Radeon RX 7900 XTX", "gfx1100", 96, 32)],
}


def test_every_rocminfo_file_has_its_gpus_stated():
    assert sorted(p.stem for p in (LAB / "data" / "rocminfo").glob("*.txt")) == sorted(ROCMINFO_GPUS)


@pytest.mark.parametrize("name", sorted(ROCMINFO_GPUS))
def test_parse_rocminfo_solution_reads_each_files_gpu_agents(sol, name):
    text = (LAB / "data" / "rocminfo" / f"{name}.txt").read_text()
    keys = ("name", "gfx", "compute_units", "wavefront_size")
    want = [dict(zip(keys, gpu)) for gpu in ROCMINFO_GPUS[name]]
    assert sol["parse_rocminfo"](text) == want
    for gpu in want:
        assert sol["arch_family"](gpu["gfx"])[1] == gpu["wavefront_size"]


def test_backend_of_uses_version_not_capability(sol):
    from types import SimpleNamespace as NS

    rocm = NS(version=NS(hip="7.2.1", cuda=None), cuda=NS(get_device_capability=lambda i=0: (9, 0)))
    cuda = NS(version=NS(hip=None, cuda="12.8"), cuda=NS(get_device_capability=lambda i=0: (9, 0)))
    assert [sol["backend_of"](t) for t in (rocm, cuda, NS(version=NS()))] == ["rocm", "cuda", "cpu"]


@pytest.mark.parametrize(
    "device, built, runs",
    [
        ("gfx90a:sramecc+:xnack-", "gfx90a:xnack+", False),
        ("gfx1100", "gfx110", False),
        ("gfx942:sramecc+:xnack-", "gfx942", True),
        ("gfx90a", "gfx90a:xnack-", True),
        ("amdgcn-amd-amdhsa--gfx942:sramecc+", "gfx942", False),  # the contract's base is before the first colon
    ],
)
def test_wheel_supports_follows_the_contract(sol, device, built, runs):
    assert sol["wheel_supports"](device, [built]) is runs


UUIDS = [f"GPU-{0xA0 + i:016X}" for i in range(4)]


@pytest.mark.parametrize(
    "env, want",
    [
        ({}, [0, 1, 2, 3]),
        ({"ROCR_VISIBLE_DEVICES": "2,3", "HIP_VISIBLE_DEVICES": "1"}, [3]),
        ({"HIP_VISIBLE_DEVICES": "3,0"}, [3, 0]),
        ({"HIP_VISIBLE_DEVICES": "1,8,2"}, [1]),
        ({"HIP_VISIBLE_DEVICES": "", "CUDA_VISIBLE_DEVICES": "2"}, [2]),
        ({"ROCR_VISIBLE_DEVICES": ""}, []),
        ({"ROCR_VISIBLE_DEVICES": f"{UUIDS[2].lower()}, 0"}, [2, 0]),
        ({"ROCR_VISIBLE_DEVICES": "1,1,2"}, [1]),
        ({"HIP_VISIBLE_DEVICES": "1,1,2"}, [1, 2]),
    ],
)
def test_visible_gpus_follows_the_rocr_and_hip_parsers(sol, env, want):
    """Expected values follow ROCr's amd_filter_device.cpp (RvdFilter) and HIP clr's rocdevice.cpp."""
    assert sol["visible_gpus"](UUIDS, env) == want


def test_harness_marks_once_per_group_and_excludes_warmup(sol):
    events = []
    now = [0.0]

    def fn():
        events.append("fn")
        now[0] += 1.0

    def start():
        events.append("start")
        return now[0]

    def stop(mark):
        events.append("stop")
        return now[0] - mark

    seconds = sol["time_per_call"](fn, calls=3, repeats=2, warmup=2, start=start, stop=stop)
    assert seconds == 1.0
    assert events == ["fn", "fn"] + (["start"] + ["fn"] * 3 + ["stop"]) * 2
    with pytest.raises(ValueError):
        sol["time_per_call"](fn, calls=0, repeats=1, warmup=0, start=start, stop=stop)


# -- 01-harness-1's checks take time_per_call's answer only (issue 47) ------------------------


def _harness_results(names, seed=47):
    from rocmlab.harness import Learner, hidden_files, load_checks, run_checks
    from rocmlab.lab.answers import evaluate

    path = LAB / "checks.py"
    checks = [
        c
        for c in load_checks(path.read_text(encoding="utf-8"), str(path), hidden_files(path))
        if c.grade_id == "01-harness-1"
    ]
    assert len(checks) == 6
    return {r.name: r for r in run_checks(checks, Learner(InProcess(names)), seed)}


def _forges_the_counters(fn, *, calls, repeats, warmup, start, stop):
    """Does no timing and sets the counters a check used to read back from the kernel."""
    device = getattr(fn, "__self__", None)
    if device is not None:
        device.calls, device.marks, device.stops = warmup + calls * repeats, repeats, repeats
    return 1.0


def _marks_every_call(fn, *, calls, repeats, warmup, start, stop):
    """Right values on any clock, but a mark around every call inside a group."""
    if calls < 1 or repeats < 1:
        raise ValueError("calls and repeats must be >= 1")
    for _ in range(warmup):
        fn()
    groups = []
    for _ in range(repeats):
        total = 0.0
        for _ in range(calls):
            mark = start()
            fn()
            total += stop(mark)
        groups.append(total / calls)
    groups.sort()
    middle = len(groups) // 2
    return groups[middle] if len(groups) % 2 else (groups[middle - 1] + groups[middle]) / 2


@pytest.mark.parametrize("seed", [47, 1547827278, 3, 11])
def test_harness_checks_give_the_solution_full_marks(sol, seed):
    results = _harness_results({"time_per_call": sol["time_per_call"]}, seed)
    assert all(r.passed for r in results.values()), {n: r.detail for n, r in results.items() if not r.passed}


def test_harness_counters_forged_in_the_kernel_earn_nothing():
    results = _harness_results({"time_per_call": _forges_the_counters})
    assert not any(r.points for r in results.values()), [n for n, r in results.items() if r.points]


def test_harness_a_mark_inside_a_group_breaks_only_its_rule(sol):
    results = _harness_results({"time_per_call": _marks_every_call})
    assert not results["harness_one_mark"].passed and "RuntimeError" in results["harness_one_mark"].detail
    assert results["harness_value_error"].passed


def test_harness_an_extra_call_after_the_timing_breaks_the_warmup_rule(sol):
    def one_call_too_many(fn, **kwargs):
        seconds = sol["time_per_call"](fn, **kwargs)
        fn()
        return seconds

    assert not _harness_results({"time_per_call": one_call_too_many})["harness_warmup"].passed


def test_efficiency_table_and_triage(sol):
    h100 = datasheets.by_key("H100 SXM")
    ratios = sol["tflops_per_watt"]([{"gpu": "H100", "fp16_tflops": h100.fp16_tflops, "sparse": True, "board_w": 700}])
    assert ratios["H100"] == pytest.approx(h100.fp16_dense_tflops / 700) == pytest.approx(989.5 / 700)
    report = doctor.diagnose(probes.RecordedMachine(MACHINES / "no-render-group"))
    triaged = sol["triage"](report)
    assert [t["status"] for t in triaged] == sorted((t["status"] for t in triaged), key=lambda s: s != "fail")
    assert {"access", "torch"} <= {t["check"] for t in triaged if t["status"] == "fail"}


# -- the shared datasheet table (rocmlab.lab.datasheets, used by labs 01 and 02) ----------------


@pytest.mark.parametrize(
    "name, key",
    [
        ("AMD Instinct MI300X", "MI300X"),
        ("amd instinct  mi300x", "MI300X"),
        ("AMD Instinct MI355X", "MI355X"),
        ("AMD Instinct MI350X", "MI350X"),
        ("AMD Instinct MI300X VF", "MI300X"),  # SR-IOV virtual functions (cloud VMs)
        ("AMD Instinct Mi325X VF", "MI325X"),
        ("AMD Instinct MI355X VF", "MI355X"),
        ("Radeon RX 7900 XTX", "RX 7900 XTX"),
        ("AMD Radeon RX 7900 XTX", "RX 7900 XTX"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"),
    ],
)
def test_datasheet_lookup_matches_exact_product_names(name, key):
    assert datasheets.lookup(name).key == key


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA H100 PCIe",
        "NVIDIA H100 NVL",
        "NVIDIA H200 NVL",
        "NVIDIA A100-SXM4-40GB",
        "NVIDIA A100-PCIE-40GB",
        "NVIDIA A100 80GB PCIe",
        "AMD Instinct MI300A",
        "MI300X",
        "",
    ],
)
def test_other_products_get_no_figures(name):
    assert datasheets.lookup(name) is None


def test_datasheet_rows_are_consistent_and_cited():
    keys = [gpu.key for gpu in datasheets.TABLE]
    assert len(keys) == len(set(keys))
    names = [datasheets.normalise_name(n) for gpu in datasheets.TABLE for n in gpu.names]
    assert len(names) == len(set(names)), "a product name in two rows"
    for gpu in datasheets.TABLE:
        assert gpu.sources and all(url.startswith("https://") for url in gpu.sources), gpu.key
        assert gpu.bandwidth_gbs > 0 and gpu.fp16_tflops > 0 and gpu.board_w > 0 and gpu.devices >= 1, gpu.key
        if gpu.arch.startswith("gfx"):
            assert datasheets.ROCM_GPU_SPECS in gpu.sources and gpu.llc_mib, f"{gpu.key}: AMD rows cite the cache"
    mi300x = datasheets.by_key("MI300X")
    assert (mi300x.bandwidth_gbs, mi300x.fp16_dense_tflops, mi300x.llc_mib) == (5300, 1307.4, 256)
    assert {g.arch for g in datasheets.TABLE if g.key in ("MI350X", "MI355X")} == {"gfx950"}
    assert datasheets.by_key("H100 SXM").fp16_dense_tflops == 989.5, "half of the 1,979 NVIDIA prints with sparsity"
    with pytest.raises(KeyError, match="known"):
        datasheets.by_key("B200")


def test_per_device_figures_split_a_two_gcd_board():
    mi250x = datasheets.by_key("MI250X").per_device()
    assert mi250x == {
        "bandwidth_gbs": 1638.4,
        "fp16_dense_tflops": 191.5,
        "board_w": 280,
        "memory_gb": 64,
        "llc_mib": 8,
    }
    assert datasheets.by_key("MI300X").per_device()["bandwidth_gbs"] == 5300


def test_markdown_table_has_a_row_per_gpu_with_links():
    table = datasheets.markdown_table().splitlines()
    assert len(table) == 2 + len(datasheets.TABLE)
    assert all(row.count("](https://") >= 1 for row in table[2:])
    assert any("1979 TFLOPS with sparsity" in row and "989.5 TFLOPS" in row for row in table)


def test_fp8_peaks_are_dense_or_halved_and_match_the_cu_arithmetic():
    """gfx950 and gfx942 FP8 peaks are CUs x FP8 FLOPs per clock per CU x peak clock (dense)."""
    per_cu = {"gfx942": 4096, "gfx950": 8192}
    for key, cus, ghz in (("MI355X", 256, 2.4), ("MI350X", 256, 2.2), ("MI300X", 304, 2.1)):
        row = datasheets.by_key(key)
        assert row.fp8_dense_tflops == pytest.approx(cus * per_cu[row.arch] * ghz / 1e3, abs=0.1)
    assert datasheets.by_key("H100 SXM").fp8_dense_tflops == 1979
    assert datasheets.by_key("RX 7900 XTX").fp8_dense_tflops is None
    assert any("5033.2 TFLOPS" in row for row in datasheets.markdown_table().splitlines())


def test_memory_is_counted_in_binary_units():
    """Vendors print "192 GB"; ROCm's GPU table says 192 GiB and an MI300X reports 205,822,885,888 bytes."""
    assert datasheets.by_key("MI300X").memory_bytes == 192 * 2**30 > 205_822_885_888
    assert datasheets.by_key("H200 SXM").memory_bytes == 141 * 2**30
    assert all(" GiB |" in row for row in datasheets.markdown_table().splitlines()[2:])


def test_derived_fp8_peaks_say_so():
    for gpu in datasheets.TABLE:
        assert (gpu.fp8_basis is not None) == (gpu.arch == "gfx950"), gpu.key
    rows = [row for row in datasheets.markdown_table().splitlines() if row.startswith("| MI35")]
    assert len(rows) == 2 and all("(derived:" in row for row in rows)


def test_for_device_on_cpu_has_no_row():
    import torch

    assert datasheets.for_device(torch.device("cpu")) == ("CPU", None)


def test_install_lines_come_from_the_release_matrix():
    """The lab prints commands built from env/matrix.toml's install entries; they must stay well formed."""
    from rocmlab.freshness import releases

    entries = releases.load_matrix()
    wheel = next(e for e in entries if e.install and e.install.method == "multiarch")
    image = next(e for e in entries if e.install and e.install.method == "image")
    assert "[device-gfx942]" in wheel.install.requirement_for("gfx942")
    assert image.install.image.startswith("rocm/pytorch:")


def test_every_solution_cell_has_a_contract_in_both_languages_right_above():
    cells = SOURCE.cells
    for i, cell in enumerate(cells):
        if "solution" not in cell.metadata.get("tags", []):
            continue
        zh, en = cells[i - 2], cells[i - 1]
        assert "zh" in zh.metadata.get("tags", []) and "约定" in zh.source, cell.metadata["grade_id"]
        assert "en" in en.metadata.get("tags", []) and "contract" in en.source, cell.metadata["grade_id"]


def test_stretch_exercise_is_last_and_graded_apart():
    ids = list(SOURCE.graded)
    stretch = [i for i, g in enumerate(ids) if g.startswith("01-stretch-")]
    assert stretch and stretch == list(range(len(ids) - len(stretch), len(ids)))
