import json
import shutil
import sys
from pathlib import Path

import pytest
from freshness_helpers import RECORDED_MATRIX

from rocmlab.cli import main
from rocmlab.freshness import environments, releases
from rocmlab.freshness.environments import EnvBuildError, EnvError

ROOT = Path(__file__).resolve().parents[2]
REAL_CHECK_VERSIONS = environments._check_versions


@pytest.fixture()
def course(tmp_path):
    """A minimal repository: the matrix (frozen at the day of the recordings) and pyproject, no environments."""
    (tmp_path / "env").mkdir()
    shutil.copy(RECORDED_MATRIX, tmp_path / "env" / "matrix.toml")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def entry(name: str):
    """An entry of the frozen copy of the matrix: tests that name today's versions read it."""
    return releases.read_matrix(RECORDED_MATRIX).get(name)


def fake_build(monkeypatch, torch_first_try_fails=False):
    """Replace the subprocesses of create(): venv creation makes bin/python, pip calls are recorded."""
    calls = []

    def fake_run(cmd, logfile, timeout_s, check=True):
        calls.append(cmd)
        if cmd[1:3] == ["-m", "venv"]:
            python = Path(cmd[3]) / "bin" / "python"
            python.parent.mkdir(parents=True)
            python.write_text("#!/bin/sh\n")
            return 0
        is_torch_only = cmd[-1].startswith("torch==")
        return 1 if (torch_first_try_fails and is_torch_only and len(calls) == 2) else 0

    def fake_versions(e, folder, timeout_s):
        return {p: e.pin(p) for p in environments.CHECKED_PACKAGES if e.pin(p)}

    monkeypatch.setattr(environments, "_run", fake_run)
    monkeypatch.setattr(environments, "_check_versions", fake_versions)
    return calls


def test_create_installs_torch_first_then_the_pins_and_rocmlab(course, monkeypatch):
    calls = fake_build(monkeypatch)
    folder = environments.create("cpu-previous", root=course, log=lambda *_: None)
    assert folder == course / ".envs" / "cpu-previous"
    venv, torch, rest = calls
    assert venv[1:3] == ["-m", "venv"]
    assert torch[-1] == "torch==2.13.0+cpu" and "--extra-index-url" not in torch
    assert rest[-2:] == ["-e", f"{course}[labs]"] and "-c" in rest and "-r" in rest
    assert (folder / "pins.txt").read_text().splitlines() == list(entry("cpu-previous").pins)
    stamp = json.loads((folder / environments.STAMP).read_text())
    assert stamp["versions"]["transformers"] == "4.57.6"
    assert environments.python_for("cpu-previous", root=course) == folder / "bin" / "python"


def test_torch_falls_back_to_the_entry_index(course, monkeypatch):
    calls = fake_build(monkeypatch, torch_first_try_fails=True)
    environments.create("cpu-current", root=course, log=lambda *_: None)
    retry = calls[2]
    assert retry[-3:] == ["torch==2.14.1", "--extra-index-url", "https://download.pytorch.org/whl/cpu"]


def test_unchanged_pins_reuse_the_environment(course, monkeypatch):
    fake_build(monkeypatch)
    environments.create("cpu-current", root=course, log=lambda *_: None)
    calls = fake_build(monkeypatch)
    messages = []
    environments.create("cpu-current", root=course, log=messages.append)
    assert calls == [] and "reused" in messages[0]
    environments.create("cpu-current", root=course, force=True, log=lambda *_: None)
    assert len(calls) == 3


def test_changed_pins_make_the_environment_stale(course, monkeypatch):
    fake_build(monkeypatch)
    environments.create("cpu-current", root=course, log=lambda *_: None)
    matrix = course / "env" / "matrix.toml"
    matrix.write_text(matrix.read_text().replace('"peft==0.21.2"', '"peft==0.21.1"'))
    with pytest.raises(EnvError, match="out of date"):
        environments.python_for("cpu-current", root=course)
    states = {s.name: s.state for s in environments.list_environments(course)}
    assert states["cpu-current"] == "stale" and states["cpu-previous"] == "missing"
    assert states["rocm-7.14"] == "container"


def test_labs_dependencies_count_but_dev_extras_do_not(course, monkeypatch):
    fake_build(monkeypatch)
    environments.create("cpu-current", root=course, log=lambda *_: None)
    pyproject = course / "pyproject.toml"
    text = pyproject.read_text()
    pyproject.write_text(text.replace("dev = [", 'dev = ["some-linter>=1", '))
    assert environments.python_for("cpu-current", root=course)
    pyproject.write_text(text.replace("labs = [", 'labs = ["some-lab-package>=1", '))
    with pytest.raises(EnvError, match="out of date"):
        environments.python_for("cpu-current", root=course)


def test_pin_that_did_not_hold_is_an_error(course, monkeypatch):
    fake_build(monkeypatch)
    monkeypatch.setattr(environments, "_check_versions", REAL_CHECK_VERSIONS)

    def wrong_versions(cmd, capture_output, text, timeout, check):
        return type(
            "R",
            (),
            {"returncode": 0, "stdout": json.dumps({"torch": "2.13.0+cpu", "transformers": "4.57.5"}), "stderr": ""},
        )()

    monkeypatch.setattr(environments.subprocess, "run", wrong_versions)
    with pytest.raises(EnvBuildError, match="transformers is 4.57.5 after install, pinned 4.57.6"):
        environments.create("cpu-previous", root=course, log=lambda *_: None)
    assert not (course / ".envs" / "cpu-previous" / environments.STAMP).exists()


def test_missing_environment_says_how_to_create_it(course):
    with pytest.raises(EnvError, match="rocmlab env create cpu-current"):
        environments.python_for("cpu-current", root=course)


def test_rocm_entry_points_at_its_container(course, monkeypatch):
    with pytest.raises(EnvError, match=r"env/docker/rocm-7.14.Dockerfile"):
        environments.python_for("rocm-7.14", root=course)
    monkeypatch.setenv(environments.CONTAINER_VARIABLE, "rocm-7.14")
    assert environments.python_for("rocm-7.14", root=course) == Path(sys.executable)
    with pytest.raises(EnvError, match="runs on a GPU"):
        environments.create("rocm-7.14", root=course)


def test_unknown_name_is_a_matrix_error(course):
    with pytest.raises(releases.MatrixError, match="no entry named 'cpu-ancient'"):
        environments.python_for("cpu-ancient", root=course)


def test_run_kills_a_command_past_its_timeout(tmp_path):
    with pytest.raises(EnvBuildError, match="timed out"):
        environments._run([sys.executable, "-c", "import time; time.sleep(30)"], tmp_path / "log", 0.5)
    with pytest.raises(EnvBuildError, match="exit 3"):
        environments._run([sys.executable, "-c", "print('boom'); raise SystemExit(3)"], tmp_path / "log", 30)
    assert "boom" in (tmp_path / "log").read_text()


# ---------------------------------------------------------------- pins and canaries


@pytest.mark.parametrize(
    "pinned,installed,holds",
    [
        ("2.14.1", "2.14.1+cpu", True),  # a pin without a local label accepts the CPU build
        ("2.14.1", "2.14.1", True),
        ("2.13.0+cpu", "2.13.0+cpu", True),
        ("2.13.0+cpu", "2.13.0", False),  # a pin with a label wants exactly that build
        ("2.14.1", "2.14.0+cpu", False),
        ("5.24.0", None, False),
    ],
)
def test_pin_holds(pinned, installed, holds):
    assert environments.pin_holds(pinned, installed) is holds


def test_canary_installs_pre_releases_from_its_index_then_keeps_torch(course, monkeypatch):
    calls = fake_build(monkeypatch)
    monkeypatch.setattr(environments, "_installed", lambda folder, package, timeout_s: "2.17.0.dev20261130+cpu")
    folder = environments.create("canary-pytorch-nightly", root=course, log=lambda *_: None)
    venv, torch, *rest = calls
    assert "--pre" in torch and torch[-1] == "torch"
    assert torch[torch.index("--index-url") + 1] == "https://download.pytorch.org/whl/nightly/cpu"
    assert all("--pre" not in c for c in rest)  # transformers & co. from their stable releases
    assert (folder / "torch-constraint.txt").read_text() == "torch==2.17.0.dev20261130+cpu\n"
    assert all("-c" in c for c in rest) and rest[-1][-2:] == ["-e", f"{course}[labs]"]
    calls = fake_build(monkeypatch)
    environments.create("canary-transformers-pre", root=course, log=lambda *_: None)
    torch, pre = calls[1], calls[2]
    assert torch[-1] == "torch==2.14.1" and "--pre" not in torch and "--index-url" not in torch
    assert "--pre" in pre and pre[-4:] == ["transformers", "peft", "accelerate", "tokenizers"]


# ---------------------------------------------------------------- ROCm recipes and Dockerfiles


def test_committed_dockerfiles_match_the_matrix():
    assert environments.write_dockerfiles(ROOT, check=True) == []
    names = {p.name for p in (ROOT / "env" / "docker").glob("*.Dockerfile")}
    m = releases.read_matrix(ROOT / "env" / "matrix.toml")
    expected = {e.name for e in m.entries} | {c.name for c in m.canaries if c.on_gpu}
    assert names == {f"{name}.Dockerfile" for name in expected}


def test_dockerfile_per_install_method():
    multiarch = environments.render_dockerfile(entry("rocm-10.1"))
    assert "FROM python:3.12-slim-bookworm" in multiarch and "ARG GFX=gfx942" in multiarch
    assert '"torch[device-${GFX}]==2.14.0+rocm10.1.0"' in multiarch
    assert "--build-arg GFX=gfx942" in multiarch
    wheel = environments.render_dockerfile(entry("rocm-6.4"))
    assert '--index-url https://download.pytorch.org/whl/rocm6.4 "torch==2.8.0+rocm6.4"' in wheel
    image = environments.render_dockerfile(entry("rocm-7.2"))
    assert "\nFROM rocm/pytorch:rocm7.2.4_" in image
    cpu = environments.render_dockerfile(releases.read_matrix(RECORDED_MATRIX).get("cpu-current"))
    assert '--extra-index-url https://download.pytorch.org/whl/cpu "torch==2.14.1" "transformers==5.25.0"' in cpu
    canary = environments.render_dockerfile(entry("canary-therock-nightly"))
    assert '--pre --index-url https://nightly.repo.amd.com/rocm/whl-next/ "torch[device-${GFX}]"' in canary
    for text, name in ((multiarch, "rocm-10.1"), (wheel, "rocm-6.4"), (image, "rocm-7.2"), (cpu, "cpu-current")):
        assert f"ENV ROCMLAB_ENV={name}" in text and "redis-server" in text and "HOME=/tmp/home" in text
        assert "ROCMLAB_CACHE=/rocmlab-cache HF_HOME=/rocmlab-cache/huggingface" in text
        assert ("--device /dev/kfd --device /dev/dri" in text) is (name != "cpu-current")


def test_image_digest_pins_the_base_image():
    digest = "sha256:" + "a" * 64
    e = entry("rocm-7.2")
    pinned = environments.containers.render_dockerfile(
        type(e)(**{**e.__dict__, "install": type(e.install)(**{**e.install.__dict__, "digest": digest})})
    )
    assert f"FROM rocm/pytorch:rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.10.0@{digest}" in pinned


def test_dockerignore_keeps_the_build_context_to_the_package():
    lines = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert lines[0] == "*" and {"!pyproject.toml", "!README.md", "!src/"} <= set(lines)
    for dockerfile in (ROOT / "env" / "docker").glob("*.Dockerfile"):
        copied = {
            p for line in dockerfile.read_text().splitlines() if line.startswith("COPY ") for p in line.split()[1:-1]
        }
        assert copied == {"pyproject.toml", "README.md", "src"}, dockerfile


def test_drifted_or_orphaned_dockerfile_is_reported_and_rewritten(course):
    written = environments.write_dockerfiles(course)
    assert len(written) == 9
    path = course / "env" / "docker" / "rocm-7.1.Dockerfile"
    path.write_text(path.read_text().replace("2.10.0", "2.9.0"))
    orphan = course / "env" / "docker" / "rocm-5.7.Dockerfile"
    orphan.write_text("FROM x\n")
    assert environments.write_dockerfiles(course, check=True) == [path, orphan]
    assert environments.write_dockerfiles(course) == [path, orphan] and not orphan.exists()
    assert environments.write_dockerfiles(course, check=True) == []


def test_install_recipe_has_the_exact_commands():
    recipe = environments.install_recipe(entry("rocm-7.14"))
    assert (
        '.envs/rocm-7.14/bin/pip install "torch[device-gfx942]==2.12.0+rocm7.14.1" '
        "--index-url https://repo.amd.com/rocm/whl-multi-arch/"
    ) in recipe
    assert "docker build -f env/docker/rocm-7.14.Dockerfile --build-arg GFX=gfx942" in recipe
    assert "docker pull rocm/pytorch:rocm7.2.4_" in environments.install_recipe(entry("rocm-7.2"))


def test_cli_create_for_rocm_prints_the_recipe(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["env", "create", "rocm-10.0"]) == 0
    assert "torch[device-gfx942]==2.13.0+rocm10.0.0" in capsys.readouterr().out
    assert main(["env", "create", "nope"]) == 2
    assert "rocmlab env: error: " in (err := capsys.readouterr().err) and "no entry named 'nope'" in err


def test_cli_a_failed_install_is_exit_1_and_names_the_log(course, capsys, monkeypatch):
    monkeypatch.setattr(environments, "find_python", lambda version: Path(sys.executable))
    monkeypatch.setattr(environments.subprocess, "Popen", lambda cmd, **kw: FailingProcess())
    assert main(["--root", str(course), "env", "create", "cpu-current"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rocmlab env: error: failed (exit 7): ") and "(log: " in err


class FailingProcess:
    pid = 0

    def wait(self, timeout=None):
        return 7


def test_run_env_looks_for_the_environment_under_root_not_the_working_directory(course, monkeypatch):
    from rocmlab.execution import run

    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("ROCMLAB_ROOT", raising=False)
    with pytest.raises(EnvError, match=f"does not exist at {course / '.envs' / 'cpu-current'}"):
        run.env_target("cpu-current", course)
