"""Lab 01 (ROCm setup): metadata, data files, and the solution functions run outside the notebook."""

import filecmp
from pathlib import Path

import pytest
from labsource import LabSource, definitions

from rocmlab import doctor, probes

SOURCE = LabSource("01-rocm-setup")
LAB = SOURCE.folder
MACHINES = Path(__file__).parent / "fixtures" / "machines"
SOLUTION_CELLS = (
    "01-backend-sol-1",
    "01-rocminfo-sol-1",
    "01-arch-sol-1",
    "01-wheel-sol-1",
    "01-visible-sol-1",
    "01-arith-sol-1",
    "01-harness-sol-1",
    "01-watt-sol-1",
    "01-doctor-sol-1",
)


@pytest.fixture(scope="module")
def sol():
    """The definitions of the solution cells (functions, classes, UPPER_CASE constants) in one
    namespace; their demo statements need the notebook's globals and are left out."""
    namespace = SOURCE.run(*(definitions(SOURCE.graded[g]) for g in SOLUTION_CELLS))
    assert {"backend_of", "parse_rocminfo", "triage"} <= set(namespace)
    return namespace


def test_lab_toml_is_valid():
    assert SOURCE.lab.id == "01-rocm-setup" and {"smoke", "gpu"} <= set(SOURCE.lab.profiles)


def test_lab_machine_data_matches_the_doctor_fixtures():
    for folder in (LAB / "data" / "machines").iterdir():
        _, mismatch, errors = filecmp.cmpfiles(
            folder, MACHINES / folder.name, [p.name for p in folder.iterdir()], shallow=False
        )
        assert not mismatch and not errors, (folder.name, mismatch, errors)


@pytest.mark.parametrize("path", sorted((LAB / "data" / "rocminfo").glob("*.txt")), ids=lambda p: p.stem)
def test_parse_rocminfo_solution_agrees_with_probes(sol, path):
    text = path.read_text()
    want = [
        {"name": a.marketing_name, "gfx": a.name, "compute_units": a.compute_units, "wavefront_size": a.wavefront_size}
        for a in probes.gpu_agents(text)
    ]
    assert want and sol["parse_rocminfo"](text) == want
    for gpu in want:
        assert sol["arch_family"](gpu["gfx"])[1] == gpu["wavefront_size"]


def test_backend_of_uses_version_not_capability(sol):
    from types import SimpleNamespace as NS

    rocm = NS(version=NS(hip="7.2.1", cuda=None), cuda=NS(get_device_capability=lambda i=0: (9, 0)))
    cuda = NS(version=NS(hip=None, cuda="12.8"), cuda=NS(get_device_capability=lambda i=0: (9, 0)))
    assert [sol["backend_of"](t) for t in (rocm, cuda, NS(version=NS()))] == ["rocm", "cuda", "cpu"]


@pytest.mark.parametrize(
    "device, built",
    [
        ("gfx90a:sramecc+:xnack-", "gfx90a:xnack+"),
        ("gfx1100", "gfx110"),
        ("gfx942:sramecc+:xnack-", "gfx942"),
        ("gfx90a", "gfx90a:xnack-"),
    ],
)
def test_wheel_supports_matches_doctor_rule(sol, device, built):
    assert sol["wheel_supports"](device, [built]) is probes.target_compatible(device, built)


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"ROCR_VISIBLE_DEVICES": "2,3", "HIP_VISIBLE_DEVICES": "1"},
        {"HIP_VISIBLE_DEVICES": "5,0"},
        {"HIP_VISIBLE_DEVICES": "1,8,2"},
    ],
)
def test_visible_gpus_matches_doctor(sol, env):
    assert sol["visible_gpus"](8, env) == doctor.visible_devices(8, env)[0]


def test_harness_excludes_warmup_and_syncs(sol):
    events = []
    now = [0.0]

    def fn():
        events.append("fn")
        now[0] += 1.0

    def clock():
        events.append("clock")
        return now[0]

    seconds = sol["time_per_call"](fn, warmup=2, repeats=2, clock=clock, sync=lambda: events.append("sync"))
    assert seconds == 1.0
    assert events[:2] == ["fn", "fn"]
    assert [events[i - 1] for i, e in enumerate(events) if e == "clock"] == ["sync"] * 4


def test_efficiency_table_and_triage(sol):
    ratios = sol["tflops_per_watt"]([{"gpu": "H100", "fp16_tflops": 1979.0, "sparse": True, "board_w": 700}])
    assert ratios["H100"] == pytest.approx(989.5 / 700)
    report = doctor.diagnose(probes.RecordedMachine(MACHINES / "no-render-group"))
    triaged = sol["triage"](report)
    assert [t["status"] for t in triaged] == sorted((t["status"] for t in triaged), key=lambda s: s != "fail")
    assert {"access", "torch"} <= {t["check"] for t in triaged if t["status"] == "fail"}
