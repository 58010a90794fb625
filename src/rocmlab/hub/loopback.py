"""Where the workshop server's root-side services listen, so that no learner can take one over.

Learners' servers share the machine's network. A service on a loopback port of 1024 or more can
be bound by any account while it is down (a restart, a crash): the hub then routes to the
learner's listener, which serves same-origin pages to an instructor (issue 48). So, in server mode:

- the proxy's API listens on a Unix socket in the hub's state folder (root's, mode 700):
  no learner can bind it or reach it (JupyterHub 6's ``http+unix://`` api_url, passed to
  configurable-http-proxy 5 as ``--api-socket``);
- the hub itself and the live service listen on loopback ports below the kernel's
  ``net.ipv4.ip_unprivileged_port_start``, which only root may bind (``ip(7)``: "binding to a port
  number below 1024 requires CAP_NET_BIND_SERVICE" unless that sysctl lowers the bound);
- the hub refuses to start when one of those ports could be bound by anyone, naming the fix.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path
from urllib.parse import quote

UNPRIVILEGED_START = Path("/proc/sys/net/ipv4/ip_unprivileged_port_start")
DEFAULT_PORTS = {"ROCMLAB_HUB_INTERNAL_PORT": 881, "ROCMLAB_LIVE_PORT": 1011}  # server mode, started by hand
PICK_RANGE = (600, 1000)  # where `rocmlab hub` looks for free privileged ports


def unprivileged_port_start(path: Path = UNPRIVILEGED_START) -> int:
    """The lowest port any account may bind (Linux's default 1024; 1024 where the file is missing)."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return 1024


def open_ports(ports: dict[str, int], start: int | None = None) -> list[str]:
    """What is wrong with each port in ``ports`` (variable -> port) that any account may bind."""
    start = unprivileged_port_start() if start is None else start
    return [
        f"{name}={port}: any account may bind 127.0.0.1:{port} while the service is down "
        f"(net.ipv4.ip_unprivileged_port_start={start}); choose a port below {min(start, 1024)}"
        + (" and `sysctl net.ipv4.ip_unprivileged_port_start=1024`" if start < 1024 else "")
        for name, port in ports.items()
        if port >= start
    ]


def free_privileged_port(used=()) -> int:
    """A free loopback port below the unprivileged bound (binding it needs root)."""
    low, high = PICK_RANGE[0], min(PICK_RANGE[1], unprivileged_port_start())
    candidates = [port for port in range(low, high) if port not in used]
    random.shuffle(candidates)
    if os.geteuid() != 0:  # nothing below the bound can be tried; the hub that binds it runs as root
        return candidates[0]
    for port in candidates:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError(f"no free loopback port in {low}..{high - 1} (binding them needs root)")


def unix_socket_url(path: Path) -> str:
    """JupyterHub's URL of a Unix socket (``http+unix://`` and the path, %-encoded)."""
    return "http+unix://" + quote(str(path), safe="")
