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
- the hub refuses to start when one of those ports could be bound by anyone, naming the fix; so
  is the proxy's public port on a workshop server (a learner would serve the login page while the
  proxy restarts);
- a learner's own server listens on a port any account may bind (it runs as the learner): before
  the hub routes to it, the spawner reads who listens there from the kernel's socket tables
  (``listening_uids``), and refuses a port another account took first.
"""

from __future__ import annotations

import ipaddress
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


# proc(5), /proc/net/tcp: "sl local_address rem_address st ... uid timeout inode", addresses as hex
# (IPv4 one little-endian word; IPv6 four), st 0A = TCP_LISTEN (include/net/tcp_states.h)
SOCKET_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
TCP_LISTEN = "0A"
WILDCARDS = {ipaddress.ip_address("0.0.0.0"), ipaddress.ip_address("::")}


def _address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))  # each word in host order
    address = ipaddress.ip_address(words)
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped or address


def listening_uids(ip: str, port: int, tables=SOCKET_TABLES) -> set[int]:
    """The uids of the sockets listening on ``ip``:``port``, or on every address at that port (what a
    connection to ``ip``:``port`` may reach), read from the kernel's socket tables."""
    try:
        wanted = ipaddress.ip_address(ip)
    except ValueError:  # a name (localhost)
        wanted = ipaddress.ip_address(socket.gethostbyname(ip))
    uids: set[int] = set()
    for table in tables:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 8 or fields[3] != TCP_LISTEN:
                continue
            address, _, hex_port = fields[1].partition(":")
            if int(hex_port, 16) == port and _address(address) in WILDCARDS | {wanted}:
                uids.add(int(fields[7]))
    return uids


def others_listening(ip: str, port: int, uid: int) -> set[int]:
    """The uids other than ``uid`` listening where ``ip``:``port`` leads (a squatter)."""
    return listening_uids(ip, port) - {uid}
