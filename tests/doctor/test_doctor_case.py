"""The doctor names the learner's case on each recorded machine of issue 51: the device and its
partition, TheRock's readiness for its gfx target, and the known traps (tests/fixtures/machines)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmlab import doctor, probes
from rocmlab.doctor.checks_case import AITER_GFX1151, THEROCK_SUPPORT, VLLM_ROCM

MACHINES = Path(__file__).parents[1] / "fixtures" / "machines"


def case(machine: str) -> dict[str, list[dict]]:
    report = doctor.diagnose(probes.RecordedMachine(MACHINES / machine))
    found: dict[str, list[dict]] = {}
    for finding in report["findings"]:
        found.setdefault(finding["check"], []).append(finding)
    return found


@pytest.mark.parametrize(
    "machine, partition, tier",
    [
        (
            "mi300x-cpx-nps4",
            "64 device(s) on 8 GPU(s), 38 CUs each, CPX/NPS4; one device allocates from a 48 GiB pool shared by 2",
            "gfx942: release ready",
        ),
        ("mi300x-spx-nps1", "8 device(s) on 8 GPU(s), 304 CUs each, SPX/NPS1", "gfx942: release ready"),
        ("mi355x-node", "8 device(s) on 8 GPU(s), 256 CUs each, SPX/NPS1", "gfx950: build passing"),
        ("rx9070-desktop", "1 device(s) on 1 GPU(s), 56 CUs each, not partitioned", "gfx1201: release ready"),
        ("strix-halo-apu", "1 device(s) on 1 GPU(s), 40 CUs each, not partitioned", "gfx1151: release ready"),
    ],
)
def test_each_recorded_device_gets_its_partition_and_readiness_named(machine, partition, tier):
    found = case(machine)
    assert partition in found["partition"][0]["detail"]
    assert found["readiness"][0]["detail"].startswith(tier)
    assert found["readiness"][0]["doc"] == THEROCK_SUPPORT
    assert {f["title"] for f in found["traps"]} == {"vLLM wheel", "AITER"}


def test_the_peak_named_is_the_partitions_own():
    assert "peak of one device 163.4 TFLOPS dense FP16 (derived)" in case("mi300x-cpx-nps4")["partition"][0]["detail"]
    assert "peak of one device 1307.4 TFLOPS" in case("mi300x-spx-nps1")["partition"][0]["detail"]


def test_a_build_passing_target_is_a_warning_with_a_fix():
    readiness = case("mi355x-node")["readiness"][0]
    assert readiness["status"] == "warn" and "sanity-tested" in readiness["fix_en"]


def test_vllm_on_a_python_other_than_312_is_named_with_the_cuda_wheel_it_gets():
    vllm = next(f for f in case("rx9070-desktop")["traps"] if f["title"] == "vLLM wheel")
    assert vllm["status"] == "warn" and vllm["doc"] == VLLM_ROCM
    assert "Python 3.13.3" in vllm["detail"] and "cp312 only" in vllm["detail"] and "CUDA" in vllm["detail"]
    assert "vllm 0.11.0 installed here is then the CUDA build" in vllm["detail"]
    ok = next(f for f in case("mi300x-cpx-nps4")["traps"] if f["title"] == "vLLM wheel")
    assert ok["status"] == "ok"


@pytest.mark.parametrize("machine, gfx", [("rx9070-desktop", "gfx1201"), ("strix-halo-apu", "gfx1151")])
def test_aiter_is_named_unavailable_on_radeon_and_gfx1151(machine, gfx):
    aiter = next(f for f in case(machine)["traps"] if f["title"] == "AITER")
    assert aiter["status"] == "warn" and f"unavailable on {gfx}" in aiter["detail"] and aiter["doc"] == AITER_GFX1151


def test_aiter_is_fine_on_instinct():
    for machine in ("mi300x-cpx-nps4", "mi355x-node"):
        aiter = next(f for f in case(machine)["traps"] if f["title"] == "AITER")
        assert aiter["status"] == "ok"


def test_a_machine_without_a_gpu_skips_the_case():
    found = case("cpu-only")
    assert {found[c][0]["status"] for c in ("partition", "readiness", "traps")} == {"skip"}


def test_the_kfd_topology_is_read_per_partition():
    gpus = probes.kfd_gpus(probes.RecordedMachine(MACHINES / "mi300x-cpx-nps4"))
    assert len(gpus) == 64 and len({g.unique_id for g in gpus}) == 8
    assert {(g.gfx, g.cus, g.clock_mhz, g.memory_bytes) for g in gpus} == {("gfx942", 38, 2100, 48 * 2**30)}
    assert [g.render_minor for g in gpus] == list(range(128, 192))


@pytest.mark.parametrize(
    "version, gfx", [(90402, "gfx942"), (90010, "gfx90a"), (90500, "gfx950"), (110501, "gfx1151"), (120001, "gfx1201")]
)
def test_gfx_target_versions_become_llvm_targets(version, gfx):
    assert probes.gfx_of_version(version) == gfx


def test_amd_smi_partitions_parse_and_bad_json_names_the_command():
    parsed = probes.parse_amdsmi_partitions(
        '[{"gpu": 0, "partition": {"compute_partition": "CPX", "memory_partition": "NPS4", "partition_id": 0}}]'
    )
    assert parsed == [{"gpu": 0, "compute": "CPX", "memory": "NPS4", "partition_id": 0}]
    with pytest.raises(Exception, match="amd-smi static --partition --json"):
        probes.parse_amdsmi_partitions("GPU: 0")
