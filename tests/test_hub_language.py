"""JupyterLab's language for zh learners (issue 27): the setting written once, the locale variables."""

from __future__ import annotations

import json

from test_hub import demo_spawner

from rocmlab.hub import language
from rocmlab.hub.language import SETTINGS, SETTINGS_FILE, set_lab_language, ui_environment


def test_zh_home_gets_the_zh_cn_setting_once(tmp_path):
    path = set_lab_language(tmp_path, "zh")
    assert path == tmp_path / SETTINGS / SETTINGS_FILE
    assert json.loads(path.read_text()) == {"locale": "zh_CN"}
    path.write_text('{"locale": "en"}')  # the learner switched back to English
    assert set_lab_language(tmp_path, "zh") is None
    assert json.loads(path.read_text()) == {"locale": "en"}
    assert set_lab_language(tmp_path / "en-home", "en") is None
    assert not (tmp_path / "en-home").exists()


def test_lang_is_set_only_where_the_system_has_the_locale(monkeypatch):
    monkeypatch.setattr(language, "system_locales", lambda: {"c.utf8", "zh_cn.utf8"})
    assert ui_environment("zh") == {"LANGUAGE": "zh_CN:zh", "ROCMLAB_UI_LANG": "zh", "LANG": "zh_CN.UTF-8"}
    monkeypatch.setattr(language, "system_locales", lambda: {"c.utf8"})
    assert "LANG" not in ui_environment("zh")
    assert ui_environment("en") == {}


def test_the_spawner_sets_the_language_of_zh_servers(tmp_path):
    spawner = demo_spawner(tmp_path, lang="zh")
    spawner.deliver_course()
    assert (tmp_path / "learner1" / SETTINGS / SETTINGS_FILE).is_file()
    assert spawner.course_env()["LANGUAGE"] == "zh_CN:zh"
    english = demo_spawner(tmp_path, "learner2")
    english.deliver_course()
    assert not (tmp_path / "learner2" / SETTINGS).exists()
    assert "LANGUAGE" not in english.course_env()


def test_the_zh_language_pack_is_in_the_hub_extra():
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    hub = " ".join(project["project"]["optional-dependencies"]["hub"])
    assert "jupyterlab-language-pack-zh-cn" in hub and "nbgitpuller" in hub
