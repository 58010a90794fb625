"""resolve_model: local paths, the HF cache, offline and unreachable mirrors; the assets CLI."""

import json

import pytest

from rocmlab.assets.resolve import ModelUnavailableError, resolve_model
from rocmlab.cli import main

REPO = "rocmlab-test/definitely-not-cached"


@pytest.fixture
def empty_hf_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hf"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    return cache


def test_local_checkpoint_directory_is_returned(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(str(tmp_path)) == tmp_path.resolve()


def test_offline_error_lists_what_was_tried_and_the_fetch_command(empty_hf_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnavailableError) as info:
        resolve_model(REPO)
    message = str(info.value)
    assert f"local path {REPO}: no such directory" in message
    assert f"Hugging Face cache {empty_hf_cache}: not cached" in message
    assert "skipped: HF_HUB_OFFLINE is set" in message
    assert f"rocmlab assets fetch {REPO} --mirror" in message
    assert [source for source, _ in info.value.attempts][:2] == [
        f"local path {REPO}",
        f"Hugging Face cache {empty_hf_cache}",
    ]


def test_unreachable_mirror_is_reported(empty_hf_cache, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(ModelUnavailableError) as info:
        resolve_model(REPO)
    hub = dict(info.value.attempts)["hub http://127.0.0.1:9"]
    assert hub.startswith("failed:")
    assert "ModelScope" in dict(info.value.attempts)


def test_found_in_hf_cache(empty_hf_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    repo_dir = empty_hf_cache / "models--rocmlab-test--cached"
    snapshot = repo_dir / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text("a" * 40)
    assert resolve_model("rocmlab-test/cached") == snapshot


def test_a_non_repo_name_is_not_looked_up(tmp_path):
    with pytest.raises(ModelUnavailableError, match="not a valid repo id"):
        resolve_model(str(tmp_path / "missing" / "dir"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelUnavailableError, match="no config.json"):
        resolve_model(str(tmp_path / "empty"))


def test_cli_fetch_offline_fails_with_the_message(empty_hf_cache, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["assets", "fetch", REPO]) == 1
    assert "HF_HUB_OFFLINE" in capsys.readouterr().err


def test_cli_info_json(tmp_path, capsys):
    assert main(["assets", "info", "--json", "--cache-dir", str(tmp_path)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["tiny_model"]["status"] == "not built"
    assert info["data"]["qc_reports_train"] >= 600 and info["data"]["qc_kb"] >= 40


def test_cli_rejects_bad_steps(capsys):
    assert main(["assets", "build-model", "--steps", "0"]) == 2
    assert "--steps: expected a positive number, got 0" in capsys.readouterr().err
