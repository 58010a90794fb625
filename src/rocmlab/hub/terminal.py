"""The shell of every JupyterLab terminal the hub opens.

jupyter_server's default terminal is ``$SHELL -l`` (``sh -l`` without ``$SHELL``), and a login
shell reads ``/etc/profile``, which sets PATH anew (Debian's: ``/usr/local/bin:/usr/bin:/bin...``):
the course's tools (``rocmlab``, ``nbgrader``, next to the server's Python) are then not found.
The hub's server config (env/jupyterhub/jupyter_server_config.py) runs this command instead: the
account's shell reading what a login shell reads, and then ``templates/terminal_rc.sh``, which puts
the tools first on PATH. bash takes it as its ``--rcfile`` (the rc reads the login profiles itself);
a POSIX sh (dash) as ``$ENV``, which it reads after the profiles, and which its interactive
children (a ``sh -l`` the learner types) read again.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

NO_SHELL = ("", "nologin", "false")
RC_FILE = Path(__file__).resolve().parent.parent / "templates" / "terminal_rc.sh"


def tools_folder() -> str:
    """Where ``rocmlab`` and ``nbgrader`` are: next to the Python running the server."""
    return str(Path(sys.executable).parent)


def shell_command(environ=None) -> list[str]:
    """The terminal's command (jupyter_server's ``terminado_settings["shell_command"]``)."""
    env = os.environ if environ is None else environ
    shell = env.get("SHELL") or ""
    if Path(shell).name in NO_SHELL or not os.access(shell, os.X_OK):  # an account without a login shell
        shell = shutil.which("sh") or "/bin/sh"
    launch = ["/usr/bin/env", f"ROCMLAB_TOOLS_BIN={tools_folder()}"]
    if Path(shell).name == "bash":
        return [*launch, shell, "--rcfile", str(RC_FILE), "-i"]
    return [*launch, f"ENV={RC_FILE}", shell, "-l"]
