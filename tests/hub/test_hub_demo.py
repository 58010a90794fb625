"""The demo hub run as root never runs a learner as root, and keeps its state from them (root only)."""

from __future__ import annotations

import os
import pwd
import subprocess

import pytest
from test_hub import demo_spawner, hub_config

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="what the demo does as root")


def nobody():
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("needs a `nobody` account")


def test_as_root_the_servers_run_as_the_sudo_user_or_nobody(monkeypatch, tmp_path):
    monkeypatch.delenv("SUDO_USER", raising=False)
    assert hub_config(monkeypatch, tmp_path, ROCMLAB_HUB_MODE="demo").DemoCourseSpawner.run_as == "nobody"
    monkeypatch.setenv("SUDO_USER", "nobody")
    assert hub_config(monkeypatch, tmp_path, ROCMLAB_HUB_MODE="demo").DemoCourseSpawner.run_as == "nobody"
    with pytest.raises(ValueError, match="must not run as root"):
        hub_config(monkeypatch, tmp_path, ROCMLAB_HUB_MODE="demo", ROCMLAB_HUB_DEMO_USER="root")
    with pytest.raises(ValueError, match="is not a Unix user"):
        hub_config(monkeypatch, tmp_path, ROCMLAB_HUB_MODE="demo", ROCMLAB_HUB_DEMO_USER="no-such-user-xyz")


def test_the_state_folder_is_roots_alone(monkeypatch, tmp_path):
    tmp_path.chmod(0o755)
    hub_config(monkeypatch, tmp_path, ROCMLAB_HUB_MODE="demo")
    state = (tmp_path / "data" / "hub").stat()
    assert state.st_uid == 0 and state.st_mode & 0o077 == 0  # database and cookie secret live here


def test_a_demo_server_switches_to_its_account_and_home(tmp_path):
    entry = nobody()
    tmp_path.chmod(0o755)
    spawner = demo_spawner(tmp_path, "ann", run_as="nobody")
    spawner.deliver_course()
    home = tmp_path / "ann"
    assert home.stat().st_uid == entry.pw_uid and (home / "01-rocm-setup").stat().st_uid == entry.pw_uid
    out = subprocess.run(
        ["/bin/sh", "-c", "id -u; pwd"],
        preexec_fn=spawner.make_preexec_fn("ann"),
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == ""  # into the server's own log, opened as its account
    log = home / ".rocmlab-server.log"
    assert log.read_text().split() == [str(entry.pw_uid), str(home)]
    assert log.stat().st_uid == entry.pw_uid
