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

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    hub = " ".join(project["project"]["optional-dependencies"]["hub"])
    assert "jupyterlab-language-pack-zh-cn" in hub and "nbgitpuller" in hub


# ------------------------------------------------------------------ the Helm chart's zh profile


def test_helm_zh_profile_gives_chinese_notebooks_and_menus(monkeypatch, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    import test_hub_helm as helm

    env = helm.profile("cpu-smoke-zh")["kubespawner_override"]["environment"]
    assert env["ROCMLAB_HUB_LANG"] == "zh" and env["ROCMLAB_UI_LANG"] == "zh" and env["ROCMLAB_PROFILE"] == "smoke"
    assert env["LANG"] == "zh_CN.UTF-8"
    assert "locale-gen" in (helm.ROOT / "env" / "jupyterhub" / "helm" / "Dockerfile").read_text()
    # the roles hook keeps the profile's language instead of custom.rocmlab.lang
    hook = helm.roles_hook(monkeypatch)
    _, default = helm.spawn(hook, groups=[])
    assert default["ROCMLAB_HUB_LANG"] == helm.CUSTOM["lang"]
    zh = helm.types.SimpleNamespace(name="ROCMLAB_HUB_LANG", value="zh")
    real_namespace = helm.types.SimpleNamespace

    def with_zh(**fields):  # the profile's environment is on the container before the hook runs
        if "env" in fields:
            fields["env"] = [*fields["env"], zh]
        return real_namespace(**fields)

    monkeypatch.setattr(helm.types, "SimpleNamespace", with_zh)
    _, env_zh = helm.spawn(hook, groups=[])
    monkeypatch.setattr(helm.types, "SimpleNamespace", real_namespace)
    assert env_zh["ROCMLAB_HUB_LANG"] == "zh"
    # postStart with the profile's variables: zh notebooks and the JupyterLab setting in the home
    script = helm.POST_START.replace(helm.CUSTOM["courseDir"], str(helm.ROOT))
    home = tmp_path / "home"
    home.mkdir()
    variables = {
        "HOME": str(home),
        "ROCMLAB_ROOT": str(helm.ROOT),
        "ROCMLAB_HUB_ROLE": "learner",
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        **{key: str(value) for key, value in env.items() if key != "LANG"},
    }
    subprocess.run(["sh", "-c", script], env=variables, check=True, timeout=120)
    assert json.loads((home / SETTINGS / SETTINGS_FILE).read_text()) == {"locale": "zh_CN"}
    first = sorted(p.name for p in (helm.ROOT / "labs" / "zh").iterdir() if p.is_dir())[0]
    assert (home / first / f"{first}.ipynb").read_bytes() == (
        helm.ROOT / "labs" / "zh" / first / f"{first}.ipynb"
    ).read_bytes()
