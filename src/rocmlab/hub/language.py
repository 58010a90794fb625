"""JupyterLab in the learner's language: for zh, the zh-CN language pack and the locale.

JupyterLab shows its menus in the language of its ``@jupyterlab/translation-extension:plugin``
setting ``locale`` when the language pack of that locale is installed (``jupyterlab-language-pack-zh-cn``,
in rocmlab's ``hub`` extra). Its default, ``"default"``, means the server's own locale, which is
English wherever ``zh_CN.UTF-8`` is not generated; so the user's setting is written, once, into the
home: a learner who switches back to English in Settings › Language keeps that choice. The locale
variables go into the server's environment (``LANG`` only where the system has that locale, so
that programs do not warn about a missing one).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

LOCALES = {"zh": "zh_CN"}  # notebook language -> JupyterLab locale; en is JupyterLab's own
PACKS = {"zh": "jupyterlab-language-pack-zh-cn"}
SETTINGS = Path(".jupyter") / "lab" / "user-settings" / "@jupyterlab" / "translation-extension"
SETTINGS_FILE = "plugin.jupyterlab-settings"


def system_locales() -> set[str]:
    try:
        out = subprocess.run(["locale", "-a"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return set()
    return {line.strip().lower().replace("utf-8", "utf8") for line in out.splitlines()}


def ui_environment(lang: str) -> dict[str, str]:
    """Locale variables for a server whose learners read ``lang``."""
    locale = LOCALES.get(lang)
    if not locale:
        return {}
    env = {"LANGUAGE": f"{locale}:{lang}", "ROCMLAB_UI_LANG": lang}
    if f"{locale}.utf8".lower() in system_locales():
        env["LANG"] = f"{locale}.UTF-8"
    return env


def set_lab_language(home: Path, lang: str, owner: tuple[int, int] | None = None) -> Path | None:
    """Write JupyterLab's language setting into ``home`` unless the user already has one; its path."""
    locale = LOCALES.get(lang)
    if not locale:
        return None
    path = home / SETTINGS / SETTINGS_FILE
    if path.exists():
        return None
    made = [p for p in reversed(path.parents) if not p.exists() and home in p.parents]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"locale": locale}, indent=2) + "\n", encoding="utf-8")
    if owner:
        for item in [*made, path]:
            os.chown(item, *owner, follow_symlinks=False)
    return path


def missing_pack(lang: str) -> str:
    """The language pack ``lang`` needs that this interpreter lacks ('' when none is missing)."""
    from importlib.metadata import PackageNotFoundError, version

    pack = PACKS.get(lang)
    if not pack:
        return ""
    try:
        version(pack)
    except PackageNotFoundError:
        return pack
    return ""


if __name__ == "__main__":  # the Helm chart's postStart hook: python -m rocmlab.hub.language HOME LANG
    set_lab_language(Path(sys.argv[1]), sys.argv[2])
