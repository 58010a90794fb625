"""The JupyterLab notification of a hint (rocmlab.live.notify.HintNotice, named by
env/jupyterhub/jupyter_server_config.py as ``LabApp.check_for_updates_class``): JupyterLab's
announcements plugin asks ``lab/api/update`` on each load and shows the answer
(jupyterlab/handlers/announcements.py, ``CheckForUpdateHandler``). The HINT files are written by
live_hints' own ``hint_markdown``. The learner's JupyterLab showing it in chromium:
tests/live/test_live_e2e.py."""

from __future__ import annotations

import asyncio
import os
import runpy
from pathlib import Path

import pytest

from rocmlab.live.hints import Hint, hint_file_name, hint_markdown
from rocmlab.live.notify import MESSAGE_CHARS, HintNotice, hint_notice

LAB, OTHER = "01-rocm-setup", "07-triton-kernels"
PREFIX = "/user/ana/"


def hint(n: int, grade_id: str, en: str, zh: str = "") -> Hint:
    return Hint(n, LAB, grade_id, {"en": en, "zh": zh}, "teacher", 1_800_000_000.0 + n)


def write_hints(folder: Path, lab: str, hints, mtime: float) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / hint_file_name(lab)
    path.write_text(hint_markdown(lab, hints), encoding="utf-8")
    os.utime(path, (mtime, mtime))
    return path


def test_no_hint_no_notification(tmp_path):
    (tmp_path / "rocmlab" / LAB).mkdir(parents=True)
    assert hint_notice(tmp_path, PREFIX, "en") is None


def test_the_newest_hint_is_the_message_and_the_link_opens_its_file(tmp_path):
    first = hint(1, "01-arch-1", "Split at the first ':'", "在第一个 ':' 处截断")
    write_hints(tmp_path / "rocmlab" / LAB, LAB, [first], mtime=1000)
    message, (label, url) = hint_notice(tmp_path, PREFIX, "en")
    assert message == f"Hint from your instructor for {LAB} (01-arch-1): 在第一个 ':' 处截断 Split at the first ':'"
    assert (label, url) == ("Open the hint", f"/user/ana/lab/tree/rocmlab/{LAB}/HINT-{LAB}.md")
    second = hint(2, "01-backend-1", "version.hip is a str")
    write_hints(tmp_path / "rocmlab" / LAB, LAB, [first, second], mtime=2000)
    again, _ = hint_notice(tmp_path, PREFIX, "zh")
    assert again.startswith(f"老师发来 {LAB} 的提示（01-backend-1）") and "version.hip is a str" in again
    assert again != message  # a new message: JupyterLab shows it even if the first was dismissed


def test_the_lab_worked_on_last_wins_and_a_long_hint_is_cut(tmp_path):
    write_hints(tmp_path / "rocmlab" / LAB, LAB, [hint(1, "01-arch-1", "old")], mtime=1000)
    long_text = "use tl.program_id(0) " * 30
    write_hints(tmp_path / OTHER, OTHER, [hint(2, "07-add-1", long_text)], mtime=3000)  # the practice copy
    message, (_, url) = hint_notice(tmp_path, PREFIX, "en")
    assert OTHER in message and len(message) == MESSAGE_CHARS and message.endswith("…")
    assert url == f"/user/ana/lab/tree/{OTHER}/HINT-{OTHER}.md"


def test_a_link_posing_as_a_hint_file_is_ignored(tmp_path):
    secret = write_hints(tmp_path / "elsewhere", LAB, [hint(1, "01-arch-1", "not from the instructor")], mtime=1000)
    (tmp_path / "rocmlab" / LAB).mkdir(parents=True)
    (tmp_path / "rocmlab" / LAB / hint_file_name(LAB)).symlink_to(secret)
    assert hint_notice(tmp_path, PREFIX, "en") is None


def test_the_servers_config_names_the_notice_and_jupyterlab_accepts_it(tmp_path, monkeypatch):
    pytest.importorskip("jupyterlab")
    from jupyterlab.labapp import LabApp
    from traitlets.config import Config

    config = Config()
    monkeypatch.setattr("rocmlab.hub.terminal.shell_command", lambda: ["/bin/sh"])
    runpy.run_path(
        str(Path(__file__).parents[2] / "env" / "jupyterhub" / "jupyter_server_config.py"),
        init_globals={"get_config": lambda: config},
    )
    app = LabApp(config=config)
    assert app.check_for_updates_class is HintNotice
    from jupyterlab_server.settings_utils import _get_overrides

    overrides, error = _get_overrides(app.app_settings_dir)  # what JupyterLab's settings API applies
    assert not error and overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
    write_hints(tmp_path / LAB, LAB, [hint(1, "01-arch-1", "ceil")], mtime=1000)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", PREFIX)
    monkeypatch.delenv("ROCMLAB_UI_LANG", raising=False)
    message, link = asyncio.run(app.check_for_updates_class("4")())
    assert "ceil" in message and link[1] == f"/user/ana/lab/tree/{LAB}/HINT-{LAB}.md"
