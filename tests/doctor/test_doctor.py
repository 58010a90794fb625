"""`rocmlab doctor` judged on recorded machines (tests/fixtures/machines/<name>/machine.json)."""

import json
import tomllib
from pathlib import Path

import pytest
import tomli_w

from rocmlab import doctor, probes
from rocmlab.cli import main
from rocmlab.course.course import Course
from rocmlab.doctor import checks_gpu
from rocmlab.errors import InputError

MACHINES = Path(__file__).parents[1] / "fixtures" / "machines"
REPO_MATRIX = Path(__file__).resolve().parents[2] / "env" / "matrix.toml"
NO_MATRIX = None  # the built-in release table


def report_for(name, matrix=NO_MATRIX):
    return doctor.diagnose(probes.RecordedMachine(MACHINES / name), matrix=matrix)


def statuses(report):
    out = {}
    for f in report["findings"]:
        out.setdefault(f["check"], f["status"])
    return out


@pytest.mark.parametrize(
    "name, worst, expected",
    [
        (
            "mi300x-node",
            "ok",
            {
                "driver": "ok",
                "gpus": "ok",
                "access": "ok",
                "torch": "ok",
                "torch-arch": "ok",
                "iommu": "ok",
                "numa": "ok",
                "nccl-env": "ok",
            },
        ),
        (
            "mi250x-rocm57",
            "warn",
            {"rocm": "warn", "iommu": "warn", "numa": "warn", "torch-arch": "ok", "visible-devices": "ok"},
        ),
        ("rx7900xtx-desktop", "ok", {"driver": "ok", "torch-arch": "ok", "iommu": "skip"}),
        ("no-render-group", "fail", {"access": "fail", "torch": "fail", "gpus": "ok"}),
        (
            "wheel-lacks-arch",
            "fail",
            {"torch-arch": "fail", "hsa-override": "warn", "disk": "warn", "gpu-support": "warn"},
        ),
        ("cuda-h100", "warn", {"driver": "ok", "torch": "ok", "torch-arch": "ok", "rocm": "skip", "nccl-env": "warn"}),
        ("cpu-only", "warn", {"gpus": "warn", "torch": "ok", "access": "skip", "torch-arch": "skip"}),
    ],
)
def test_recorded_machines(name, worst, expected):
    report = report_for(name)
    assert report["worst"] == worst
    assert report["exit_code"] == doctor.EXIT_CODES[worst]
    got = statuses(report)
    for check, status in expected.items():
        assert got.get(check) == status, (check, got.get(check), report["findings"])


def test_every_warning_and_failure_has_bilingual_fix_and_link():
    for folder in sorted(p.parent for p in MACHINES.glob("*/machine.json")):
        for f in report_for(folder.name)["findings"]:
            if f["status"] in ("warn", "fail"):
                assert f["fix_zh"] and f["fix_en"] and f["doc"].startswith("https://"), (folder.name, f)


def test_facts_of_the_mi250x_node_count_gcds():
    facts = report_for("mi250x-rocm57")["facts"]
    assert facts["vendor"] == "amd" and facts["rocm_version"].startswith("5.7.1")
    assert [g["gfx"] for g in facts["gpus"]] == ["gfx90a"] * 4  # one KFD node per GCD
    assert {(g["compute_units"], g["wavefront_size"]) for g in facts["gpus"]} == {(110, 64)}
    assert {g["name"] for g in facts["gpus"]} == {"AMD GPU"}  # ROCm 5.7 recorded no amd-smi to name it


def test_gpus_come_from_the_kfd_topology_named_by_amd_smi():
    report = report_for("mi300x-node")
    gpus = report["facts"]["gpus"]
    assert len(gpus) == 8 and {(g["name"], g["gfx"], g["compute_units"], g["wavefront_size"]) for g in gpus} == {
        ("AMD Instinct MI300X", "gfx942", 304, 64)
    }
    found = next(f for f in report["findings"] if f["check"] == "gpus")
    assert (
        found["detail"] == "8 via the KFD topology and amd-smi: 8 x AMD Instinct MI300X gfx942:sramecc+ 304 CU wave64"
    )


def test_the_topology_lists_the_gpu_a_user_outside_the_render_group_cannot_open():
    """sysfs is readable by everyone: the GPU is listed (and named) although /dev/kfd is not open to this user."""
    report = report_for("no-render-group")
    assert [(g["name"], g["gfx"], g["compute_units"]) for g in report["facts"]["gpus"]] == [
        ("AMD Instinct MI210", "gfx90a", 104)
    ]
    assert statuses(report)["access"] == "fail"


def test_without_the_topology_amd_smi_alone_lists_the_gpus(tmp_path):
    data = json.loads((MACHINES / "rx7900xtx-desktop" / "machine.json").read_text())
    data["dirs"].pop("/sys/class/kfd/kfd/topology/nodes")  # no KFD (a container without /sys/class/kfd)
    (tmp_path / "amd-smi-asic.json").write_text((MACHINES / "rx7900xtx-desktop" / "amd-smi-asic.json").read_text())
    (tmp_path / "machine.json").write_text(json.dumps(data))
    facts = doctor.diagnose(probes.RecordedMachine(tmp_path), matrix=NO_MATRIX)["facts"]
    assert facts["gpus"] == [
        {
            "name": "Radeon RX 7900 XTX",
            "gfx": "gfx1100",
            "isa": "gfx1100",
            "features": {},
            "compute_units": 96,
            "wavefront_size": None,
        }
    ]
    del data["commands"]["amd-smi static --asic --json"]
    (tmp_path / "machine.json").write_text(json.dumps(data))
    got = statuses(doctor.diagnose(probes.RecordedMachine(tmp_path), matrix=NO_MATRIX))
    assert got["gpus"] == "fail"  # amdgpu loaded, nothing lists a GPU: the fix names /dev/kfd and the container flags


def test_parse_amdsmi_asic_and_version():
    gpus = probes.parse_amdsmi_asic((MACHINES / "mi300x-node" / "amd-smi-asic.json").read_text())
    assert len(gpus) == 8 and gpus[7]["gpu"] == 7
    assert gpus[0] == {
        "gpu": 0,
        "market_name": "AMD Instinct MI300X",
        "device_id": 0x74A1,
        "num_compute_units": 304,
        "target_graphics_version": "gfx942",
    }
    unread = '[{"gpu": 0, "asic": {"market_name": "N/A", "device_id": "N/A", "num_compute_units": "N/A"}}]'
    assert probes.parse_amdsmi_asic(unread) == [
        {"gpu": 0, "market_name": None, "device_id": None, "num_compute_units": None, "target_graphics_version": None}
    ]
    with pytest.raises(InputError, match="amd-smi static --asic --json"):
        probes.parse_amdsmi_asic("GPU: 0\n    ASIC:\n")
    version = probes.parse_amdsmi_version(
        "AMDSMI Tool: 26.2.2+7f | AMDSMI Library version: 26.2.2 | ROCm version: 7.2.4"
    )
    assert version == {"tool": "26.2.2+7f", "library": "26.2.2", "rocm": "7.2.4"}


GFX90A_TOPOLOGY = {"gfx": "gfx90a", "features": {"sramecc": "+", "xnack": "unknown"}}
GFX1100_TOPOLOGY = {"gfx": "gfx1100", "features": {}}


@pytest.mark.parametrize(
    "gpu, arch_list, verdict",
    [
        (GFX90A_TOPOLOGY, ["gfx90a"], ("yes", [])),
        (GFX90A_TOPOLOGY, ["gfx90a:sramecc+"], ("yes", [])),
        (GFX90A_TOPOLOGY, ["gfx90a:sramecc-"], ("no", [])),  # sramecc is the GPU's: the topology decides it
        (GFX90A_TOPOLOGY, ["gfx90a:xnack+"], ("per process", ["xnack+"])),  # xnack is the process's
        (GFX90A_TOPOLOGY, ["gfx90a:xnack+", "gfx90a:xnack-"], ("per process", ["xnack+", "xnack-"])),
        (GFX90A_TOPOLOGY, ["gfx90a:xnack+", "gfx90a"], ("yes", [])),
        (GFX90A_TOPOLOGY, ["gfx942", "gfx90"], ("no", [])),
        (GFX1100_TOPOLOGY, ["gfx110", "gfx1101"], ("no", [])),
        (GFX1100_TOPOLOGY, ["gfx1100:xnack-"], ("no", [])),  # a target without xnack: no such code object
        (GFX1100_TOPOLOGY, [], ("no", [])),
    ],
)
def test_what_loads_on_a_gpu_of_the_topology(gpu, arch_list, verdict):
    """ROCr's rule (isa.cpp ``Isa::IsCompatible``) on the doctor's GPU: a feature the topology
    leaves unknown makes code that names it depend on the process, not fail."""
    assert checks_gpu.loads_on(gpu, arch_list) == verdict


def test_a_wheel_built_for_one_xnack_mode_is_a_warning_naming_hsa_xnack(tmp_path):
    data = json.loads((MACHINES / "no-render-group" / "machine.json").read_text())
    data["torch"]["arch_list"] = ["gfx90a:xnack+"]
    got = report_for_data(tmp_path, data, "no-render-group")
    found = next(f for f in got["findings"] if f["check"] == "torch-arch")
    assert found["status"] == "warn" and "xnack+" in found["detail"] and "HSA_XNACK" in found["detail"]


def report_for_data(tmp_path, data, like):
    for extra in (MACHINES / like).iterdir():
        if extra.name != "machine.json":
            (tmp_path / extra.name).write_text(extra.read_text())
    (tmp_path / "machine.json").write_text(json.dumps(data))
    return doctor.diagnose(probes.RecordedMachine(tmp_path), matrix=NO_MATRIX)


def test_visible_devices_are_what_the_runtime_gave_torch_not_a_rederived_rule(tmp_path):
    """The doctor reports the variables and the GPUs torch got under them; it has no copy of the
    runtimes' parsing rules (lab 01's exercise)."""
    assert not hasattr(doctor, "visible_devices")
    report = report_for("mi250x-rocm57")  # ROCR_VISIBLE_DEVICES=0,1 and HIP_VISIBLE_DEVICES=1: one GCD
    found = next(f for f in report["findings"] if f["check"] == "visible-devices")
    assert found["status"] == "ok" and found["detail"].startswith("torch sees 1 of the 4 GPU(s)")
    data = json.loads((MACHINES / "mi250x-rocm57" / "machine.json").read_text())
    data["torch"]["devices"], data["torch"]["available"] = [], False
    found = next(
        f for f in report_for_data(tmp_path, data, "mi250x-rocm57")["findings"] if f["check"] == "visible-devices"
    )
    assert found["status"] == "warn" and "torch sees none of the 4" in found["detail"]


def test_hidden_gpus_and_bad_override_are_reported(tmp_path):
    data = json.loads((MACHINES / "rx7900xtx-desktop" / "machine.json").read_text())
    data["env"].update({"HIP_VISIBLE_DEVICES": "1", "HSA_OVERRIDE_GFX_VERSION": "gfx1100"})
    data["torch"]["devices"], data["torch"]["available"] = [], False  # HIP's device 1 of one GPU: none left
    (tmp_path / "amd-smi-asic.json").write_text((MACHINES / "rx7900xtx-desktop" / "amd-smi-asic.json").read_text())
    (tmp_path / "machine.json").write_text(json.dumps(data))
    got = statuses(doctor.diagnose(probes.RecordedMachine(tmp_path), matrix=NO_MATRIX))
    assert got["visible-devices"] == "warn" and got["hsa-override"] == "fail"


def test_rocm_version_from_core_layout(tmp_path):
    data = json.loads((MACHINES / "rx7900xtx-desktop" / "machine.json").read_text())
    del data["files"]["/opt/rocm/.info/version"]
    data["commands"].pop("amd-smi version")
    data["dirs"]["/opt/rocm"] = ["bin", "core-7.14", "lib"]
    data["files"]["/opt/rocm/core-7.14/.info/version"] = "7.14.0\n"
    (tmp_path / "amd-smi-asic.json").write_text((MACHINES / "rx7900xtx-desktop" / "amd-smi-asic.json").read_text())
    (tmp_path / "machine.json").write_text(json.dumps(data))
    report = doctor.diagnose(probes.RecordedMachine(tmp_path), matrix=NO_MATRIX)
    assert report["facts"]["rocm_version"] == "7.14.0"


def one_entry_matrix(tmp_path, gfx, series=None) -> Path:
    """The repository's matrix cut down to one ROCm entry (the newest, or the one named
    ``rocm-<series>``), with these GPU targets."""
    data = tomllib.loads(REPO_MATRIX.read_text(encoding="utf-8"))
    chosen = next(e for e in data["rocm"] if series is None or e["name"] == f"rocm-{series}")
    entry = dict(chosen, gfx=gfx, runner_gfx=gfx[0])
    path = tmp_path / "matrix.toml"
    path.write_text(tomli_w.dumps({**data, "rocm": [entry]}), encoding="utf-8")
    return path


def test_release_table_comes_from_the_release_matrix(tmp_path):
    matrix = one_entry_matrix(tmp_path, ["gfx942"])
    releases, source = doctor.load_releases(matrix)
    rocm = tomllib.loads(matrix.read_text())["rocm"][0]["rocm"]
    assert releases == [{"rocm": rocm, "gpu_targets": ["gfx942"]}] and source == str(matrix)
    assert doctor.load_releases(None) == (doctor.BUILTIN_RELEASES, "built-in table")
    older = one_entry_matrix(tmp_path, ["gfx942"], series="6.4")
    got = statuses(report_for("rx7900xtx-desktop", matrix=older))
    assert got["gpu-support"] == "warn"  # the desktop's gfx1100 is not in this one-entry matrix


def test_a_matrix_named_on_the_command_line_must_be_readable(tmp_path, capsys):
    matrix = tmp_path / "matrix.toml"
    matrix.write_text("not = [valid toml")
    with pytest.raises(InputError, match="matrix.toml"):
        doctor.load_releases(matrix)
    machine = str(MACHINES / "mi250x-rocm57")
    assert main(["doctor", "--machine", machine, "--matrix", str(matrix)]) == 2
    assert "matrix.toml" in capsys.readouterr().err
    assert main(["doctor", "--machine", machine, "--matrix", str(tmp_path / "missing.toml")]) == 2
    assert "missing.toml" in capsys.readouterr().err


def test_the_course_matrix_is_the_course_s_own(tmp_path):
    assert doctor.course_matrix(Course(REPO_MATRIX.parents[1])) == REPO_MATRIX
    assert doctor.course_matrix(Course(tmp_path)) is None  # a course without one: the built-in table
    assert doctor.course_matrix(None) is None  # outside a course: the built-in table


def test_release_for_picks_newest_not_newer():
    releases = [
        {"rocm": "6.2", "gpu_targets": []},
        {"rocm": "6.4", "gpu_targets": []},
        {"rocm": "7.0", "gpu_targets": []},
    ]
    assert doctor.release_for("6.4.4-129", releases)["rocm"] == "6.4"
    assert doctor.release_for("6.3.1", releases)["rocm"] == "6.2"
    assert doctor.release_for("5.7.1", releases) is None


def test_a_broken_check_becomes_a_warning(monkeypatch):
    def broken(machine, facts, releases):
        raise KeyError("boom")

    monkeypatch.setattr(doctor, "CHECKS", [doctor.check_os, broken])
    report = report_for("mi300x-node")
    assert report["worst"] == "warn" and "KeyError" in report["findings"][-1]["detail"]


def test_finding_rejects_unknown_status():
    with pytest.raises(ValueError, match="status"):
        doctor.Finding("x", "X", "bad", "detail")


def test_cli_json_and_exit_status(capsys, tmp_path):
    matrix = one_entry_matrix(tmp_path, ["gfx942"])
    code = main(["doctor", "--json", "--machine", str(MACHINES / "no-render-group"), "--matrix", str(matrix)])
    report = json.loads(capsys.readouterr().out)
    assert code == 3 == report["exit_code"] and report["worst"] == "fail"


def test_cli_table_shows_fixes_in_chosen_language(capsys):
    code = doctor.main(machine=str(MACHINES / "mi250x-rocm57"), lang="zh")
    out = capsys.readouterr().out
    assert code == 1
    assert "WARN  iommu" in out and "iommu=pt" in out and "GRUB_CMDLINE_LINUX 中加入" in out
    assert "add iommu=pt to GRUB_CMDLINE_LINUX" not in out


def test_cli_bad_machine_folder(tmp_path, capsys):
    assert main(["doctor", "--machine", str(tmp_path)]) == 2
    assert "machine.json" in capsys.readouterr().err


def test_live_machine_report_is_well_formed():
    report = doctor.diagnose(probes.LiveMachine())
    assert report["findings"] and all(f["status"] in doctor.STATUSES for f in report["findings"])
    assert report["exit_code"] == doctor.EXIT_CODES[report["worst"]]
    json.dumps(report)


def test_vendor_follows_the_gpu_torch_uses():
    cuda_torch = {"importable": True, "hip": None, "cuda": "12.8", "devices": [{"name": "NVIDIA RTX 4090"}]}
    mixed = doctor.Facts(amd_driver=True, nvidia_driver=True, torch=cuda_torch)  # AMD iGPU + NVIDIA card
    assert mixed.vendor == "nvidia"
    assert doctor.Facts(amd_driver=True, torch={"importable": True, "hip": None, "cuda": None}).vendor == "amd"
    assert doctor.Facts(nvidia_driver=True).vendor == "nvidia" and doctor.Facts().vendor is None


def test_python_dash_m_runs_the_command(tmp_path):
    """Lab 01 runs `python -m rocmlab.doctor --json` in the learner's kernel."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "rocmlab.doctor", "--json", "--machine", str(MACHINES / "mi250x-rocm57")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 1 and json.loads(done.stdout)["worst"] == "warn", done.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "rocmlab.doctor", "--machine", str(tmp_path)], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "machine.json" in bad.stderr


# ---- the agent's ISA features (probes.agent_features) and names from libdrm's amdgpu.ids -------------


@pytest.mark.parametrize(
    "name, isa, features",
    [
        ("mi300x-node", "gfx942:sramecc+", {"sramecc": "+", "xnack": "unknown"}),  # capability 0xac77a280: bit 26 set
        ("mi250x-rocm57", "gfx90a:sramecc+", {"sramecc": "+", "xnack": "unknown"}),  # 0x2c77a280
        ("mi355x-node", "gfx950:sramecc+", {"sramecc": "+", "xnack": "unknown"}),
        ("rx7900xtx-desktop", "gfx1100", {}),  # ROCr's registry: gfx1100 has neither feature
        ("strix-halo-apu", "gfx1151", {}),
    ],
)
def test_the_isa_names_the_features_the_topology_decides(name, isa, features):
    gpus = report_for(name)["facts"]["gpus"]
    assert {(g["isa"], json.dumps(g["features"], sort_keys=True)) for g in gpus} == {
        (isa, json.dumps(features, sort_keys=True))
    }


def test_sramecc_follows_the_capability_bit_and_hsa_enable_sramecc():
    assert probes.agent_features("gfx90a", 0x2C77A280 & ~probes.HSA_CAP_SRAM_EDCSUPPORTED, {}) == {
        "sramecc": "-",
        "xnack": "unknown",
    }
    assert probes.agent_features("gfx942", 0xAC77A280, {"HSA_ENABLE_SRAMECC": "0"})["sramecc"] == "-"
    assert probes.agent_features("gfx942", 0, {"HSA_ENABLE_SRAMECC": "1"})["sramecc"] == "+"
    assert probes.agent_features("gfx942", None, {})["sramecc"] == "unknown"  # no capability line: not guessed
    assert probes.agent_features("gfx1036", 0xFFFFFFFF, {"HSA_ENABLE_SRAMECC": "1"}) == {}
    assert probes.agent_features("gfx9999", 0, {}) == {"sramecc": "unknown", "xnack": "unknown"}  # not in the table
    assert probes.isa_name("gfx90a", {"xnack": "unknown", "sramecc": "-"}) == "gfx90a:sramecc-"


LIBDRM_IDS = Path(__file__).parents[1] / "fixtures" / "libdrm" / "amdgpu.ids"


def with_amdgpu_ids(tmp_path, like, revisions=None):
    """The recorded machine ``like`` with libdrm's table installed (an excerpt of mesa/drm's
    data/amdgpu.ids, tests/fixtures/machines/README.md) and, when given, render minor → PCI revision."""
    data = json.loads((MACHINES / like / "machine.json").read_text())
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "amdgpu.ids").write_text(LIBDRM_IDS.read_text())
    data["files"][probes.AMDGPU_IDS] = "@amdgpu.ids"
    for minor, revision in (revisions or {}).items():
        data["files"][f"/sys/class/drm/renderD{minor}/device/revision"] = f"{revision:#04x}\n"
    return report_for_data(tmp_path, data, like)


@pytest.mark.parametrize(
    "like, name",
    [
        ("mi300x-spx-nps1", "AMD Instinct MI300X"),
        ("mi300x-cpx-nps4", "AMD Instinct MI300X"),
        ("mi355x-node", "AMD Instinct MI355X"),
        ("mi250x-rocm57", "AMD Instinct MI250X / MI250"),
    ],
)
def test_a_device_id_with_one_name_in_amdgpu_ids_names_the_gpu_without_amd_smi(tmp_path, like, name):
    report = with_amdgpu_ids(tmp_path, like)
    assert {g["name"] for g in report["facts"]["gpus"]} == {name}
    found = next(f for f in report["findings"] if f["check"] == "gpus")
    assert "via the KFD topology and libdrm's amdgpu.ids" in found["detail"]


def test_a_device_id_named_by_revision_needs_the_revision(tmp_path):
    """0x7550 is an RX 9070 XT, GRE or RX 9070 by its PCI revision (C0, C2, C3): not guessed without it."""
    assert {g["name"] for g in with_amdgpu_ids(tmp_path / "a", "rx9070-desktop")["facts"]["gpus"]} == {"AMD GPU"}
    minor = probes.kfd_gpus(probes.RecordedMachine(MACHINES / "rx9070-desktop"))[0].render_minor
    named = with_amdgpu_ids(tmp_path / "b", "rx9070-desktop", {minor: 0xC3})["facts"]["gpus"]
    assert {g["name"] for g in named} == {"AMD Radeon RX 9070"}
    unlisted = with_amdgpu_ids(tmp_path / "c", "rx9070-desktop", {minor: 0xC1})["facts"]["gpus"]
    assert {g["name"] for g in unlisted} == {"AMD GPU"}  # libdrm names only a listed pair
    assert {g["name"] for g in with_amdgpu_ids(tmp_path / "d", "strix-halo-apu")["facts"]["gpus"]} == {"AMD GPU"}


def test_amd_smi_s_name_comes_first_and_amdgpu_ids_parses_as_libdrm_reads_it():
    ids = probes.parse_amdgpu_ids(LIBDRM_IDS.read_text())
    assert ids[0x744C] == {
        0xC8: "AMD Radeon RX 7900 XTX",
        0xCC: "AMD Radeon RX 7900 XT",
        0xCE: "AMD Radeon RX 7900 GRE",
        0xCF: "AMD Radeon RX 7900M",
    }
    assert probes.parse_amdgpu_ids("1.0.0\n# c\nzz,\t00,\tX\n7550,\tC0\n7550,\tC0,\tA\n7550,\tC0,\tB\n") == {
        0x7550: {0xC0: "A"}
    }
    assert probes.marketing_name(ids, 0x744C, None) is None
    assert probes.marketing_name(ids, 0x744C, 0xCE) == "AMD Radeon RX 7900 GRE"
    assert probes.marketing_name(ids, 0x1234, None) is None


@pytest.mark.parametrize("name", sorted(p.parent.name for p in MACHINES.glob("*/machine.json")))
def test_the_topology_s_features_agree_with_the_isa_the_runtime_gave_torch(name):
    """Where a recorded machine holds both, what the doctor decides from the topology matches the
    ``gcnArchName`` ROCr gave torch (the same target, the same set of features, and each feature
    the doctor decided with the runtime's value); xnack, reported unknown, is the runtime's to say."""
    report = report_for(name)
    torch_info = probes.RecordedMachine(MACHINES / name).torch_info() or {}
    runtime = {d["arch"] for d in torch_info.get("devices", []) if d.get("arch")}
    if not runtime or not report["facts"]["gpus"]:
        pytest.skip("records no ROCm torch device or no AMD GPU")
    for arch in runtime:
        gpu = next(g for g in report["facts"]["gpus"] if g["gfx"] == probes.base_target(arch))
        told = probes.target_features(arch)
        assert set(gpu["features"]) == set(told), (gpu, arch)
        assert all(told[f] == v for f, v in gpu["features"].items() if v != probes.UNKNOWN), (gpu, arch)
