"""``rocmlab submit`` is found in every terminal the hub opens (rocmlab.hub.terminal): the shell is
started the way jupyter_server's terminal starts it (on a pty, terminado's ``shell_command``), as a
login shell whose /etc/profile sets PATH anew (Debian's does), with the server's PATH, which holds the
course's tools first. The browser test (test_live_e2e.py) types plain ``rocmlab submit`` in JupyterLab."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from rocmlab.hub.terminal import RC_FILE, shell_command

ptyprocess = pytest.importorskip("ptyprocess")

TOOLS = str(Path(sys.executable).parent)


def typed_in_a_terminal(command: list[str], home: Path, line: str, timeout_s: float = 30) -> str:
    """What the terminal shows after ``line`` is typed (the shell exits after it)."""
    # PATH as the spawner sets it: the tools first
    env = {"HOME": str(home), "PATH": f"{TOOLS}:/usr/bin:/bin", "TERM": "xterm", "LANG": "C.UTF-8"}
    terminal = ptyprocess.PtyProcessUnicode.spawn(command, cwd=str(home), env=env, dimensions=(40, 200))
    shown = ""
    try:
        terminal.write(line + "; exit\n")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                shown += terminal.read(4096)
            except EOFError:
                break
    finally:
        terminal.terminate(force=True)
    return shown


@pytest.mark.parametrize("shell", ["bash", "sh"])
def test_a_login_terminal_finds_rocmlab_first_on_path(tmp_path, shell):
    if shutil.which(shell) is None:
        pytest.skip(f"no {shell} here")
    if "PATH=" not in Path("/etc/profile").read_text(errors="replace"):
        pytest.skip("/etc/profile here does not reset PATH: nothing to overcome")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".profile").write_text('PATH="/usr/bin:/bin"\nexport PATH\n')  # a profile that resets it as well
    command = shell_command({"SHELL": shutil.which(shell)})
    shown = typed_in_a_terminal(command, home, 'echo "found:$(command -v rocmlab)"')
    assert f"found:{TOOLS}/rocmlab" in shown, shown


def test_without_the_rc_a_login_shell_loses_the_tools(tmp_path):
    """The trap itself, so that the test above cannot pass by accident: the plain login shell."""
    home = tmp_path / "home"
    home.mkdir()
    shown = typed_in_a_terminal([shutil.which("sh"), "-l"], home, 'echo "found:$(command -v rocmlab)"')
    assert f"found:{TOOLS}/rocmlab" not in shown, shown


def test_the_rc_file_ships_with_the_package():
    assert RC_FILE.is_file()
    assert os.access(RC_FILE, os.R_OK)


def test_an_account_without_a_login_shell_gets_sh():
    for shell in ("/usr/sbin/nologin", "/bin/false", "", "/no/such/shell"):
        command = shell_command({"SHELL": shell})
        assert command[-2:] == [shutil.which("sh") or "/bin/sh", "-l"], command
