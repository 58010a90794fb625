import argparse
import json
import shutil
import sys
from pathlib import Path

import pytest

from rocmlab import environments, releases
from rocmlab.environments import EnvError

ROOT = Path(__file__).resolve().parent.parent
REAL_CHECK_VERSIONS = environments._check_versions


@pytest.fixture()
def course(tmp_path):
    """A minimal repository: the real matrix and pyproject, no environments yet."""
    (tmp_path / "env").mkdir()
    shutil.copy(ROOT / "env" / "matrix.toml", tmp_path / "env" / "matrix.toml")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def entry(name: str):
    return releases.read_matrix(ROOT / "env" / "matrix.toml").get(name)


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
    assert retry[-3:] == ["torch==2.13.0+cpu", "--extra-index-url", "https://download.pytorch.org/whl/cpu"]


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
    with pytest.raises(EnvError, match="transformers is 4.57.5 after install, pinned 4.57.6"):
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
    with pytest.raises(EnvError, match="ROCm entry"):
        environments.create("rocm-7.14", root=course)


def test_unknown_name_is_a_matrix_error(course):
    with pytest.raises(releases.MatrixError, match="no entry named 'cpu-ancient'"):
        environments.python_for("cpu-ancient", root=course)


def test_run_kills_a_command_past_its_timeout(tmp_path):
    with pytest.raises(EnvError, match="timed out"):
        environments._run([sys.executable, "-c", "import time; time.sleep(30)"], tmp_path / "log", 0.5)
    with pytest.raises(EnvError, match="exit 3"):
        environments._run([sys.executable, "-c", "print('boom'); raise SystemExit(3)"], tmp_path / "log", 30)
    assert "boom" in (tmp_path / "log").read_text()


# ---------------------------------------------------------------- ROCm recipes and Dockerfiles


def test_committed_dockerfiles_match_the_matrix():
    assert environments.write_dockerfiles(ROOT, check=True) == []
    names = {p.name for p in (ROOT / "env" / "docker").glob("*.Dockerfile")}
    assert names == {f"{e.name}.Dockerfile" for e in releases.read_matrix(ROOT / "env" / "matrix.toml").of_kind("rocm")}


def test_dockerfile_per_install_method():
    multiarch = environments.render_dockerfile(entry("rocm-7.14"))
    assert "FROM python:3.12-slim-bookworm" in multiarch and "ARG GFX=gfx90a" in multiarch
    assert '"torch[device-${GFX}]==2.12.0+rocm7.14.0"' in multiarch
    wheel = environments.render_dockerfile(entry("rocm-6.4"))
    assert '--index-url https://download.pytorch.org/whl/rocm6.4 "torch==2.8.0+rocm6.4"' in wheel
    image = environments.render_dockerfile(entry("rocm-7.2"))
    assert image.splitlines()[6].startswith("FROM rocm/pytorch:rocm7.2.4_")
    for text, name in ((multiarch, "rocm-7.14"), (wheel, "rocm-6.4"), (image, "rocm-7.2")):
        assert f"ENV ROCMLAB_ENV={name}" in text and "--device /dev/kfd --device /dev/dri" in text


def test_drifted_dockerfile_is_reported_and_rewritten(course):
    assert len(environments.write_dockerfiles(course)) == 5
    path = course / "env" / "docker" / "rocm-7.1.Dockerfile"
    path.write_text(path.read_text().replace("2.10.0", "2.9.0"))
    assert environments.write_dockerfiles(course, check=True) == [path]
    assert environments.write_dockerfiles(course) == [path]
    assert environments.write_dockerfiles(course, check=True) == []


def test_install_recipe_has_the_exact_commands():
    recipe = environments.install_recipe(entry("rocm-7.14"))
    assert (
        '.envs/rocm-7.14/bin/pip install "torch[device-gfx90a]==2.12.0+rocm7.14.0" '
        "--index-url https://repo.amd.com/rocm/whl-multi-arch/"
    ) in recipe
    assert "docker build -f env/docker/rocm-7.14.Dockerfile" in recipe
    assert "docker pull rocm/pytorch:rocm7.2.4_" in environments.install_recipe(entry("rocm-7.2"))


def test_cli_create_for_rocm_prints_the_recipe(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    parser = argparse.ArgumentParser()
    environments.add_arguments(parser)
    assert environments.run(parser.parse_args(["create", "rocm-10.0"])) == 0
    assert "torch[device-gfx942]==2.11.0+rocm10.0.0" in capsys.readouterr().out
    assert environments.run(parser.parse_args(["create", "nope"])) == 1
    assert "no entry named 'nope'" in capsys.readouterr().err
