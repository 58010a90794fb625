"""Before learner code runs: the model cache (the course model, lab 03's adapter) must be readable
by the kernel's user, and it is built world-readable."""

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from rocmlab.assets import tiny_model
from rocmlab.assets.cache import make_world_readable
from rocmlab.course.catalog import Requires
from rocmlab.errors import CommandFailed
from rocmlab.grading.preflight import check_adapter_cache, check_model_cache, course_view, unreadable
from rocmlab.lab import qc_adapter

SMOKE = {"MODEL": tiny_model.MODEL_NAME}
WITH_ADAPTER = Requires(course_model=True, qc_adapter=True)


@pytest.fixture
def cache(monkeypatch):
    """A model cache holding a valid (tiny, fake) checkpoint, built by root with umask 077, in a
    folder others can enter (pytest's own tmp folders are private)."""
    top = Path(tempfile.mkdtemp(prefix="rocmlab-cache-test-"))
    top.chmod(0o755)
    monkeypatch.setenv("ROCMLAB_CACHE", str(top / "cache"))
    target = tiny_model.model_dir()
    target.mkdir(parents=True)
    weights = target / "model.safetensors"
    weights.write_bytes(b"w" * 64)
    manifest = {"files": {"model.safetensors": {"bytes": 64, "sha256": tiny_model.sha256_file(weights)}}}
    (target / tiny_model.MANIFEST).write_text(json.dumps(manifest))
    for path in (weights, target / tiny_model.MANIFEST):
        path.chmod(0o600)
    target.chmod(0o700)
    yield target
    shutil.rmtree(top)


def test_a_private_cache_stops_grading_with_the_fix(cache):
    assert "mode 0700" in unreadable(cache, other_user=True)
    with pytest.raises(CommandFailed, match="cannot be read by the sandbox.s grader users.*chmod -R a\\+rX"):
        check_model_cache(SMOKE, other_user=True)
    check_model_cache(SMOKE, other_user=False)  # the owner itself can read it
    check_model_cache({"MODEL": "Qwen/Qwen2.5-0.5B-Instruct"}, other_user=True)  # no offline model needed


def test_the_builder_leaves_the_cache_world_readable(cache):
    make_world_readable(cache)
    assert unreadable(cache, other_user=True) == ""
    assert oct(os.stat(cache / "model.safetensors").st_mode & 0o777) == "0o644"
    check_model_cache(SMOKE, other_user=True)


def test_a_missing_model_says_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setenv("ROCMLAB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(CommandFailed, match="rocmlab assets build-model"):
        check_model_cache(SMOKE, other_user=False)


def test_the_sandbox_view_hides_the_course_and_home_but_not_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ROCMLAB_CACHE", str(tmp_path / "cache"))
    hide, expose = course_view(tmp_path / "course", tmp_path / "out")
    assert tmp_path / "course" in hide and tmp_path / "out" in hide and Path.home() in hide
    assert (tmp_path / "cache").resolve() in expose and tmp_path / "course" / "env" / "matrix.toml" in expose


def test_a_closed_folder_above_the_cache_is_the_sandboxs_business(cache):
    make_world_readable(cache)
    above = cache.parents[2]  # the folder holding the cache root
    above.chmod(0o700)
    try:
        assert "cannot be entered" in unreadable(cache, other_user=True)
        check_model_cache(SMOKE, other_user=True)  # the sandbox puts the cache back below /root-like folders
    finally:
        above.chmod(0o755)


def test_a_lab_that_loads_the_adapter_is_not_graded_without_it_or_unable_to_read_it(cache):
    make_world_readable(cache)
    check_adapter_cache(Requires(course_model=True), other_user=True)  # the lab does not load it
    with pytest.raises(CommandFailed, match="python -m rocmlab.lab.qc_adapter"):
        check_adapter_cache(WITH_ADAPTER, other_user=True)
    adapter = qc_adapter.adapter_dir(tiny_model.MODEL_NAME)
    adapter.mkdir(parents=True)
    (adapter / "adapter_model.safetensors").write_bytes(b"a" * 8)
    (adapter / qc_adapter.MANIFEST).write_text(json.dumps({"files": {"adapter_model.safetensors": 8}}))
    (adapter / "adapter_model.safetensors").chmod(0o600)  # as safetensors writes it
    with pytest.raises(CommandFailed, match="cannot be read by the sandbox.s grader users.*chmod -R a\\+rX"):
        check_adapter_cache(WITH_ADAPTER, other_user=True)
    check_adapter_cache(WITH_ADAPTER, other_user=False)
    make_world_readable(adapter)
    check_adapter_cache(WITH_ADAPTER, other_user=True)
