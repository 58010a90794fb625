"""The device check (docs/device-check.md): the kit of `make device-kit`, the labs' run on the
course model under a cap, the honest summary, and ci/device_check.sh.

The fast tests build a kit with pip replaced by fakes that write wheel files (the assembly, the
size limit, the image and interactive-only packages left out), read real lab sources and real
records, and run the script where it stops before Python. The slow test downloads the real kit
(without the course assets) from PyPI and runs the script's dry run on it: `rocmlab doctor` and
lab 01 in the smoke profile: 38 s on the 2-core dev container when it was quiet, 76 s with seven other
engineers' tests beside it, after a download of 25 to 72 s (pip's cache warm or cold, the same load),
measured 2026-12-06; about 25 s of CPU for both.
"""

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from packaging.utils import parse_wheel_filename

from rocmlab.course.catalog import COURSE_MODEL, GPU, SMOKE, discover
from rocmlab.errors import CommandFailed, ExitCode, InputError
from rocmlab.execution import device_check, device_kit
from rocmlab.execution.fingerprint import Fingerprint
from rocmlab.execution.results import Record, write_record

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "ci" / "device_check.sh"
LABS = {lab.id: lab for lab in discover(ROOT)}
# A fingerprint as `python -m rocmlab.execution.fingerprint` prints it on the lent machine (the keys of
# fingerprint.Fingerprint; torch 2.11.0+cu130 on one H100, as the device's image was last described).
CUDA_FINGERPRINT = {
    "python": "3.12.3",
    "os": "Ubuntu 24.04",
    "packages": {"torch": "2.11.0+cu130"},
    "hip": None,
    "cuda": "13.0",
    "gpus": [{"name": "NVIDIA H100 80GB HBM3", "arch": "sm_90", "memory_gb": 79.2}],
    "rocm": None,
}
ROCM_FINGERPRINT = {
    **CUDA_FINGERPRINT,
    "packages": {"torch": "2.14.0+rocm10.1.0"},
    "hip": "10.1.0",
    "cuda": None,
    "gpus": [{"name": "AMD Instinct MI300X", "arch": "gfx942", "memory_gb": 192.0}],
}


# ---------------------------------------------------------------- the kit


def test_kit_requirements_are_rocmlabs_own_less_grading_and_the_image():
    from importlib import metadata

    names = {re.split(r"[<>=!~;\[ ]", r)[0].lower() for r in device_kit.kit_requirements(metadata.requires("rocmlab"))}
    assert {"papermill", "nbformat", "nbclient", "ipykernel", "jupytext", "jsonschema", "jieba"} <= names
    assert "nbgrader" not in names  # build and grading only
    assert not names & {"torch", "transformers", "peft", "accelerate", "numpy", "matplotlib", "tokenizers"}
    assert not names & {"jupyterhub", "jupyterlab", "pytest", "ruff", "nbconvert"}  # other extras


def test_kit_requirements_keep_base_dependencies_and_the_labs_extra_only():
    lines = [
        "papermill<3,>=2.6",
        'jieba>=0.42; extra == "labs"',
        'numpy>=1.26; extra == "labs"',
        'ruff; extra == "dev"',
    ]
    assert device_kit.kit_requirements(lines) == ["papermill<3,>=2.6", "jieba>=0.42"]


def test_the_size_check_names_the_biggest_items_when_the_kit_is_too_big():
    items = [device_kit.Item("wheels/jieba.whl", 19 * 2**20), device_kit.Item("cache/models/m", 16 * 2**20)]
    assert (
        device_kit.check_size(items, 64 * 2**20, 10 * 2**20)
        == "kit 35.0 MiB + working tree 10.0 MiB = 45.0 MiB of 64.0 MiB"
    )
    with pytest.raises(
        CommandFailed,
        match=r"too big: kit 35.0 MiB \+ working tree 30.0 MiB.*wheels/jieba.whl \(19.0 MiB\), cache/models/m",
    ):
        device_kit.check_size(items, 64 * 2**20, 30 * 2**20)


def test_tree_bytes_count_what_travels_tracked_and_untracked_not_ignored(tmp_path):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True, timeout=30)

    git("init", "-q")
    (tmp_path / ".gitignore").write_text("/kit/\n")
    (tmp_path / "tracked.txt").write_bytes(b"x" * 1000)
    git("add", ".gitignore", "tracked.txt")
    (tmp_path / "new.txt").write_bytes(b"y" * 300)
    (tmp_path / "kit").mkdir()
    (tmp_path / "kit" / "big.whl").write_bytes(b"z" * 5000)
    assert device_kit.tree_bytes(tmp_path) == 1000 + 300 + len("/kit/\n")


def test_a_wheel_built_here_must_be_pure_python(tmp_path):
    (tmp_path / "jieba-0.42.1-cp312-cp312-linux_x86_64.whl").write_bytes(b"")
    with pytest.raises(CommandFailed, match="not pure Python"):
        device_kit.check_pure(tmp_path, frozenset({"jieba"}))


def test_the_scripts_platform_tags_are_the_kits():
    line = re.search(r"platforms=\(([^)]*)\)", SCRIPT.read_text()).group(1)
    assert tuple(line.split()) == device_kit.PLATFORMS


def fake_cache(cache: Path) -> None:
    """A course model and an adapter in the layout and with the manifests rocmlab checks."""
    from rocmlab.assets import tiny_model
    from rocmlab.lab import qc_adapter

    model = tiny_model.model_dir(cache)
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"w" * 4096)
    (model.parent / f"{model.name}.lock").write_text("")
    files = {"model.safetensors": {"sha256": hashlib.sha256(b"w" * 4096).hexdigest(), "bytes": 4096}}
    (model / tiny_model.MANIFEST).write_text(json.dumps({"files": files}))
    adapter = qc_adapter.adapter_dir(COURSE_MODEL)
    adapter.mkdir(parents=True)
    (adapter / "adapter_model.safetensors").write_bytes(b"a" * 512)
    (adapter / qc_adapter.MANIFEST).write_text(json.dumps({"files": {"adapter_model.safetensors": 512}}))


@pytest.fixture
def fake_pip(monkeypatch):
    """pip download and pip wheel write wheel files; the requirements they were asked for are kept."""
    asked = []

    def download(requirements, dest, python=sys.executable):
        asked.extend(requirements)
        for name in (
            "papermill-2.7.0-py3-none-any.whl",
            "jinja2-3.1.6-py3-none-any.whl",
            "debugpy-1.8.22-py2.py3-none-any.whl",
            "pyzmq-27.3.0-cp312-abi3-manylinux_2_28_x86_64.whl",
        ):
            (dest / name).write_bytes(b"p" * 2000)

    def wheel(targets, dest, python=sys.executable):
        name = "jieba-0.42.1-py3-none-any.whl" if targets[0] == "--no-binary" else "rocmlab-0.1.0-py3-none-any.whl"
        (dest / name).write_bytes(b"r" * 1000)

    monkeypatch.setattr(device_kit, "pip_download", download)
    monkeypatch.setattr(device_kit, "pip_wheel", wheel)
    return asked


def test_the_kit_holds_wheels_pins_and_assets_and_leaves_out_the_image(tmp_path, monkeypatch, fake_pip):
    monkeypatch.setenv("ROCMLAB_CACHE", str(tmp_path / "cache"))
    fake_cache(tmp_path / "cache")
    manifest = device_kit.build_kit(tmp_path / "kit", ROOT)
    kit = tmp_path / "kit"
    assert sorted(p.name for p in (kit / "wheels").iterdir()) == [
        "jieba-0.42.1-py3-none-any.whl",
        "papermill-2.7.0-py3-none-any.whl",
        "pyzmq-27.3.0-cp312-abi3-manylinux_2_28_x86_64.whl",
        "rocmlab-0.1.0-py3-none-any.whl",
    ]
    assert (kit / "requirements.txt").read_text() == "jieba==0.42.1\npapermill==2.7.0\npyzmq==27.3.0\n"
    assert manifest["left_to_image"] == ["jinja2"] and manifest["left_out"] == ["debugpy"]
    assert not any(r.startswith("jieba") for r in fake_pip)  # built from its source, not downloaded
    models = list((kit / "cache" / "models").iterdir())
    assert len(models) == 1 and models[0].is_dir() and (models[0] / "model.safetensors").is_file()
    assert (next((kit / "cache" / "adapters").iterdir()) / "adapter_model.safetensors").is_file()
    assert manifest == json.loads((kit / "manifest.json").read_text())
    on_disk = sum(f.stat().st_size for f in [*(kit / "wheels").iterdir(), *(kit / "cache").rglob("*")] if f.is_file())
    assert manifest["kit_bytes"] == sum(i["bytes"] for i in manifest["items"]) == on_disk
    assert not list((kit / "cache").rglob("*.lock"))
    assert not list(tmp_path.glob(".kit-*.building"))


def test_a_kit_too_big_leaves_the_old_kit_in_place(tmp_path, monkeypatch, fake_pip):
    monkeypatch.setenv("ROCMLAB_CACHE", str(tmp_path / "cache"))
    fake_cache(tmp_path / "cache")
    (tmp_path / "kit").mkdir()
    (tmp_path / "kit" / "manifest.json").write_text("{}")
    with pytest.raises(CommandFailed, match=r"too big.*of 1.0 MiB; the biggest items: cache/models/tiny-qwen-zh"):
        device_kit.build_kit(tmp_path / "kit", ROOT, limit_bytes=2**20)
    assert [p.name for p in (tmp_path / "kit").iterdir()] == ["manifest.json"]
    assert not list(tmp_path.glob(".kit-*.building"))


def test_the_kit_needs_the_course_model_in_the_cache(tmp_path, monkeypatch, fake_pip):
    monkeypatch.setenv("ROCMLAB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(CommandFailed, match="course model is not in the cache.*make model"):
        device_kit.build_kit(tmp_path / "kit", ROOT)
    assert not (tmp_path / "kit").exists()


# ---------------------------------------------------------------- the labs on the device


def test_on_device_puts_the_course_model_in_place_of_the_hub_checkpoint_and_caps_the_time():
    lab = LABS["06-multi-agent"]
    assert lab.profiles[GPU].params["MODEL"] != COURSE_MODEL
    changed = device_check.on_device(lab, GPU, 200).profiles[GPU]
    assert changed.params == {**lab.profiles[GPU].params, "MODEL": COURSE_MODEL}
    assert (changed.timeout_s, changed.cell_timeout_s) == (200, 200)
    assert changed.requires.course_model and changed.requires.qc_adapter  # as lab 06's smoke profile needs
    assert changed.requires.gpus == lab.profiles[GPU].requires.gpus
    assert device_check.on_device(lab, GPU, 200).profiles[SMOKE] == lab.profiles[SMOKE]
    assert lab.profiles[GPU].params["MODEL"] != COURSE_MODEL  # the lab itself is untouched


def test_every_gpu_profile_runs_offline_on_the_course_model_within_the_cap():
    for lab in LABS.values():
        if GPU not in lab.profiles:
            continue
        profile = device_check.on_device(lab, GPU, 240).profiles[GPU]
        assert profile.params.get("MODEL", COURSE_MODEL) == COURSE_MODEL, lab.id
        assert profile.timeout_s <= 240 and profile.cell_timeout_s <= 240, lab.id
        assert set(profile.params) == set(lab.profiles[GPU].params), lab.id


def test_a_short_profile_keeps_its_own_limits():
    lab = LABS["01-rocm-setup"]
    assert device_check.on_device(lab, SMOKE, 10_000) == lab


def test_each_rocm_only_step_names_the_vendor_branch_of_its_lab():
    for lab_id, steps in device_check.ROCM_ONLY.items():
        source = LABS[lab_id].source.read_text(encoding="utf-8")
        for step in steps:
            assert step.anchor in source, f"{lab_id}: {step.step}: the lab no longer has {step.anchor!r}"


@pytest.mark.parametrize(
    ("fingerprint", "vendor"),
    [(CUDA_FINGERPRINT, "CUDA"), (ROCM_FINGERPRINT, "ROCm"), ({"hip": None, "cuda": "13.0", "gpus": []}, "CPU")],
)
def test_the_vendor_is_read_from_the_fingerprint(fingerprint, vendor):
    assert device_check.vendor(Fingerprint(**fingerprint)) == vendor


def record(lab_id: str, status: str, fingerprint: dict, **fields) -> Record:
    return Record(
        lab_id,
        "1.0.0",
        GPU,
        "cuda-h100",
        status,
        "2026-12-06T06:00:00+00:00",
        duration_s=42.4,
        fingerprint=fingerprint,
        notebook=f"{lab_id}.ipynb",
        **fields,
    )


def test_the_summary_of_a_cuda_run_is_never_a_rocm_verdict():
    records = {
        "07-triton-kernels": record("07-triton-kernels", "passed", CUDA_FINGERPRINT),
        "08-low-precision": record("08-low-precision", "passed", CUDA_FINGERPRINT),
        "09-profiling": record("09-profiling", "timeout", CUDA_FINGERPRINT, reason="ran past its 240 s limit"),
        "10-fsdp2": None,
    }
    ranks = device_check.world_sizes([LABS[lab_id] for lab_id in records], GPU)
    assert ranks == {"10-fsdp2": 2}
    text = device_check.summary(records, entry="cuda-h100", profile=GPU, doctor_status=3, jobs=4, ranks=ranks)
    assert "CUDA: NVIDIA H100 80GB HBM3 (sm_90); torch 2.11.0+cu130 (CUDA 13.0)" in text
    assert "never a ROCm verdict" in text and "exit status 3" in text
    assert "with MODEL = tiny-qwen-zh (4 M parameters) in place of a hub checkpoint" in text
    assert (
        "| 08-low-precision | passed | 42 | not applicable on CUDA: FP8 GEMM in e4m3fnuz (gfx942) (e4m3fn (OCP) on sm_89 and newer) |  |"
        in text
    )
    assert "| 09-profiling | timeout | 42 | not applicable on CUDA: rocprofv3 and rocprof-compute" in text
    assert text.rstrip().endswith(
        "| 10-fsdp2 | not run (the check's time ran out) |  | none |  |"
    )  # no record, no rank note
    assert "ran past its 240 s limit" in text and "ran:" not in text
    assert "Result: 2 passed, 1 not run, 1 timeout." in text
    rows = [line for line in text.splitlines() if line.startswith("| 0") or line.startswith("| 1")]
    assert len(rows) == 4 and all(row.count(" | ") == 4 for row in rows)


def test_the_summary_says_which_labs_ran_their_ranks_on_the_cpu_for_want_of_gpus():
    labs = [LABS["04-collectives-rccl"], LABS["05-distributed-training"], LABS["10-fsdp2"], LABS["01-rocm-setup"]]
    ranks = device_check.world_sizes(labs, GPU)
    assert ranks == {"04-collectives-rccl": 2, "05-distributed-training": 2, "10-fsdp2": 2}
    records = {lab.id: record(lab.id, "passed", CUDA_FINGERPRINT) for lab in labs}
    text = device_check.summary(records, entry="cuda-h100", profile=GPU, doctor_status=0, jobs=4, ranks=ranks)
    assert text.rstrip().endswith(
        "04-collectives-rccl, 05-distributed-training, 10-fsdp2: more ranks than GPUs (1), so their ranks ran with "
        "gloo on the CPU (nccl needs a GPU per rank): their multi-GPU path did not run."
    )
    two_gpus = {**CUDA_FINGERPRINT, "gpus": CUDA_FINGERPRINT["gpus"] * 2}
    records = {lab.id: record(lab.id, "passed", two_gpus) for lab in labs}
    text = device_check.summary(records, entry="cuda-h100", profile=GPU, doctor_status=0, jobs=4, ranks=ranks)
    assert "more ranks than GPUs" not in text


def test_the_summary_of_a_rocm_run_says_the_rocm_only_steps_ran():
    records = {"08-low-precision": record("08-low-precision", "passed", ROCM_FINGERPRINT)}
    text = device_check.summary(records, entry="rocm-10.1", profile=GPU, doctor_status=0, jobs=1)
    assert "| 08-low-precision | passed | 42 | ran: FP8 GEMM in e4m3fnuz (gfx942) |  |" in text
    assert "never a ROCm verdict" not in text


def test_the_bundle_holds_every_record_and_the_notebooks_of_the_labs_that_did_not_pass(tmp_path):
    env_dir = tmp_path / "cuda-h100"
    records = {
        "01-rocm-setup": record("01-rocm-setup", "passed", CUDA_FINGERPRINT),
        "07-triton-kernels": record("07-triton-kernels", "failed", CUDA_FINGERPRINT, reason="cell 12"),
        "10-fsdp2": None,
    }
    for lab_id, r in records.items():
        if r:
            write_record(r, env_dir / f"{lab_id}.json")
            (env_dir / f"{lab_id}.ipynb").write_text("{}")
    names = device_check.bundle(env_dir, records, tmp_path / "out" / "records.tar.gz")
    assert names == ["01-rocm-setup.json", "07-triton-kernels.json", "07-triton-kernels.ipynb"]
    with tarfile.open(tmp_path / "out" / "records.tar.gz") as tar:
        assert tar.getnames() == [f"cuda-h100/{n}" for n in names]


def test_a_gpu_run_is_recorded_under_a_cuda_entry_of_the_matrix():
    device_check.check_entry("cuda-h100", GPU, ROOT)
    device_check.check_entry(device_check.DRY_RUN_ENTRY, SMOKE, ROOT)
    for entry, profile in (("rocm-10.1", GPU), ("cpu-current", GPU), (device_check.DRY_RUN_ENTRY, GPU)):
        with pytest.raises(InputError, match=r"--entry: expected a \[\[cuda\]\] entry .*cuda-h100"):
            device_check.check_entry(entry, profile, ROOT)


def test_the_summary_command_writes_the_table_and_the_bundle(tmp_path, capsys):
    env_dir = tmp_path / "results" / "cuda-h100"
    write_record(record("01-rocm-setup", "passed", CUDA_FINGERPRINT), env_dir / "01-rocm-setup.json")
    args = [
        "summary",
        "01",
        "07",
        "--root",
        str(ROOT),
        "--entry",
        "cuda-h100",
        "--results",
        str(tmp_path / "results"),
        "--doctor-status",
        "1",
        "--summary",
        str(tmp_path / "summary.md"),
        "--bundle",
        str(tmp_path / "r.tar.gz"),
    ]
    assert device_check.main(args) == ExitCode.FAILED  # lab 07 left no record
    text = (tmp_path / "summary.md").read_text()
    assert "| 01-rocm-setup | passed |" in text and "| 07-triton-kernels | not run" in text
    assert capsys.readouterr().out.strip() == text.strip()
    assert device_check.main(["summary", "01", *args[3:]]) == ExitCode.OK  # lab 01 alone


def test_the_commands_refuse_bad_input(tmp_path, capsys):
    base = ["--root", str(ROOT), "--results", str(tmp_path)]
    assert device_check.main(["run", *base, "--entry", "rocm-10.1"]) == ExitCode.BAD_INPUT
    assert device_check.main(["run", *base, "--entry", "cuda-h100", "--jobs", "0"]) == ExitCode.BAD_INPUT
    assert device_check.main(["run", *base, "--entry", "cuda-h100", "99"]) == ExitCode.BAD_INPUT
    err = capsys.readouterr().err
    assert (
        "expected a [[cuda]] entry" in err and "--jobs: expected a positive number" in err and "unknown lab '99'" in err
    )


# ---------------------------------------------------------------- the script


def script(*args, env=None, timeout=60):
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )


def test_the_script_needs_out_and_knows_its_one_option(tmp_path):
    assert script("--fast", env={"OUT": str(tmp_path)}).returncode == 2
    unset = script("--dry-run", env={"OUT": ""})
    assert unset.returncode == 2 and "set OUT" in unset.stderr


def test_without_a_kit_the_script_says_so_in_the_summary(tmp_path):
    result = script("--dry-run", env={"OUT": str(tmp_path / "out"), "DEVICE_KIT": str(tmp_path / "no-kit")})
    assert result.returncode == 1
    assert "no device kit at" in result.stdout and "make device-kit" in result.stdout
    assert "did not install" in (tmp_path / "out" / "summary.md").read_text()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["device_check.log", "summary.md"]


def test_on_the_device_a_kit_without_the_course_model_is_refused_before_pip(tmp_path):
    kit = tmp_path / "kit"
    (kit / "wheels").mkdir(parents=True)
    (kit / "manifest.json").write_text("{}")
    (kit / "wheels" / "rocmlab-0.1.0-py3-none-any.whl").write_bytes(b"")
    result = script(env={"OUT": str(tmp_path / "out"), "DEVICE_KIT": str(kit), "PYTHON": "/nonexistent/python"})
    assert result.returncode == 1
    assert f"the kit at {kit} has no course model (built with --no-assets?)" in result.stdout


# ---------------------------------------------------------------- the real kit and the dry run (slow)


def pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def real_kit(tmp_path_factory):
    """The kit's wheels as `make device-kit` downloads them (the course assets left out: lab 01 needs none)."""
    if not pypi_reachable():
        pytest.skip("PyPI is not reachable: the kit's wheels cannot be downloaded")
    kit = tmp_path_factory.mktemp("device") / "kit"
    proc = subprocess.run(
        [sys.executable, "-m", "rocmlab.execution.device_kit", "--out", str(kit), "--no-assets"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return kit


def installs_on_the_device(wheel: Path) -> bool:
    """CPython 3.12 on manylinux x86_64 can install it (pure Python, or a cp312 / abi3 build for x86_64)."""
    _, _, _, tags = parse_wheel_filename(wheel.name)
    return any(
        (t.platform == "any" or ("manylinux" in t.platform and t.platform.endswith("x86_64")))
        and (
            t.interpreter.startswith("py3")
            or t.interpreter == "cp312"
            or (t.abi == "abi3" and t.interpreter <= "cp312")
        )
        for t in tags
    )


@pytest.mark.slow
def test_the_real_kit_holds_what_the_device_image_lacks(real_kit):
    manifest = json.loads((real_kit / "manifest.json").read_text())
    wheels = {device_kit.wheel_name(w)[0]: w for w in (real_kit / "wheels").glob("*.whl")}
    assert {"papermill", "nbformat", "nbclient", "ipykernel", "jupyter-client", "jupytext", "jieba", "rocmlab"} <= set(
        wheels
    )
    assert not set(wheels) & (device_kit.IMAGE_PACKAGES | device_kit.INTERACTIVE_ONLY | {"nbgrader"})
    assert all(installs_on_the_device(w) for w in wheels.values()), [
        w.name for w in wheels.values() if not installs_on_the_device(w)
    ]
    assert manifest["kit_bytes"] + manifest["tree_bytes"] <= device_kit.TRAVEL_LIMIT_BYTES
    pinned = (real_kit / "requirements.txt").read_text().split()
    assert sorted(pinned) == sorted(f"{n}=={device_kit.wheel_name(w)[1]}" for n, w in wheels.items() if n != "rocmlab")


@pytest.mark.slow
def test_the_dry_run_runs_every_step_on_this_cpu(real_kit, tmp_path):
    out = tmp_path / "out"
    env = {"OUT": str(out), "DEVICE_KIT": str(real_kit), "PYTHON": sys.executable, "DEVICE_CHECK_LABS": "01"}
    result = script("--dry-run", env=env, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert re.search(r"Would install .*papermill-[0-9.]+ .*rocmlab-[0-9.]+", result.stdout)
    assert f"course assets: {real_kit}/cache\n" in result.stdout
    assert "rocmlab doctor: this machine" in (out / "doctor.txt").read_text()
    names = sorted(p.name for p in out.iterdir())
    assert names == ["device_check.log", "doctor.txt", "records.tar.gz", "summary.md"]  # the device returns at most 8
    summary = (out / "summary.md").read_text()
    assert "| 01-rocm-setup | passed |" in summary and "A rehearsal on a CPU" in summary
    assert "Parameters:" not in summary  # the smoke profile runs the course model already
    with tarfile.open(out / "records.tar.gz") as tar:
        assert tar.getnames() == ["device-dry-run/01-rocm-setup.json"]
        saved = json.loads(tar.extractfile("device-dry-run/01-rocm-setup.json").read())
    assert saved["profile"] == SMOKE and saved["env"] == "device-dry-run" and saved["status"] == "passed"
