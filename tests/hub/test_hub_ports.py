"""Port squatting on a workshop server (issue 48): a learner binds the port of a classmate's (or an
instructor's) server before it does, or the proxy's public port while the proxy restarts, and gets
their pages and cookies. The public port is one only root binds (the config refuses another); a
server's port is checked before the hub routes to it (rocmlab.hub.loopback, CourseSpawner).

The squatter is a real Unix account (``nobody``) running a listener; the kernel's socket tables are
this machine's own (proc(5), /proc/net/tcp and /proc/net/tcp6).
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import socket
import subprocess
from types import SimpleNamespace

import pytest

from rocmlab.hub import loopback
from rocmlab.hub import spawner as rocmlab_spawner
from rocmlab.hub.launch import free_port

LISTEN = """
import socket, sys, time
family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
with socket.socket(family) as sock:
    sock.bind((sys.argv[1], int(sys.argv[2])))
    sock.listen()
    print("listening", flush=True)
    time.sleep(60)
"""


def listener_of(account: str, ip: str, port: int) -> subprocess.Popen:
    """``account`` listening on ``ip``:``port`` until killed."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    if os.geteuid() != 0 or python is None:
        pytest.skip("listening as another account needs root and a system python3")
    entry = pwd.getpwnam(account)
    proc = subprocess.Popen(
        [python, "-c", LISTEN, ip, str(port)],
        user=entry.pw_uid,
        group=entry.pw_gid,
        extra_groups=[],
        cwd="/",
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "listening"
    return proc


def test_the_socket_tables_name_who_listens_where():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert loopback.listening_uids("127.0.0.1", port) == {os.geteuid()}
        assert loopback.listening_uids("127.0.0.2", port) == set()  # another address: not reached
        assert loopback.listening_uids("localhost", port) == {os.geteuid()}
    with socket.socket(socket.AF_INET6) as sock:  # every address, IPv4 too
        sock.bind(("::", 0))
        sock.listen()
        assert loopback.listening_uids("127.0.0.1", sock.getsockname()[1]) == {os.geteuid()}


def squatted_spawner(name: str, stopped: list, polled: list | None = None):
    spawner = rocmlab_spawner.CourseSpawner(user=SimpleNamespace(name=name, groups=[]), http_timeout=5)

    async def stop(now=False):
        stopped.append(now)

    async def poll():  # the server runs; asked only while its port does not listen yet
        (polled if polled is not None else []).append(1)
        return None

    spawner.stop, spawner.poll = stop, poll
    return spawner


@pytest.mark.machine_wide
def test_a_port_another_account_took_first_is_never_routed_to():
    """``nobody`` (the learner) listens on the port the hub gave ``daemon``'s server: its start
    fails naming the squatter, and the server is stopped, before any route goes there. On the
    every-address listener too. The account's own listener is routed to."""
    squatter = pwd.getpwnam("nobody")
    for ip in ("127.0.0.1", "::"):
        port = free_port()
        proc = listener_of("nobody", ip, port)
        try:
            stopped = []
            spawner = squatted_spawner("daemon", stopped)
            with pytest.raises(RuntimeError, match=f"uid {squatter.pw_uid} listens there"):
                asyncio.run(spawner.refuse_a_squatted_port(("127.0.0.1", port)))
            assert stopped == [True]
        finally:
            proc.kill()
            proc.wait()
    port = free_port()
    own = listener_of("daemon", "127.0.0.1", port)
    try:
        stopped, polled = [], []
        asyncio.run(squatted_spawner("daemon", stopped, polled).refuse_a_squatted_port(("127.0.0.1", port)))
        assert stopped == [] and polled == []  # answered by the table at once, not by its time limit
    finally:
        own.kill()
        own.wait()


@pytest.mark.machine_wide
def test_a_learner_cannot_bind_the_proxys_public_port():
    """The workshop server's public port (443 by default) is below the unprivileged bound."""
    assert loopback.open_ports({"ROCMLAB_HUB_PORT": 443}) == []
    if os.geteuid() != 0:
        pytest.skip("binding as another account needs root")
    python = shutil.which("python3", path="/usr/bin:/bin")
    entry = pwd.getpwnam("nobody")
    done = subprocess.run(
        [python, "-c", "import socket; socket.socket().bind(('0.0.0.0', 443))"],
        user=entry.pw_uid,
        group=entry.pw_gid,
        extra_groups=[],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode != 0 and "Permission denied" in done.stderr, done.stderr


@pytest.mark.machine_wide
def test_a_servers_start_checks_its_port_before_the_hub_routes(monkeypatch):
    """CourseSpawner.start: the server came up (JupyterHub's LocalProcessSpawner, stood in for) on a
    port ``nobody`` listens on: the start fails, so JupyterHub adds no route."""
    from jupyterhub.spawner import LocalProcessSpawner

    port = free_port()
    proc = listener_of("nobody", "127.0.0.1", port)
    try:
        stopped = []
        spawner = squatted_spawner("daemon", stopped)

        async def came_up(self):
            return ("127.0.0.1", port)

        async def nothing(*_):
            return []

        monkeypatch.setattr(LocalProcessSpawner, "start", came_up)
        spawner.prepare_in_pool = spawner.confine_learner = nothing
        with pytest.raises(RuntimeError, match="listens there"):
            asyncio.run(spawner.start())
        assert stopped == [True]
    finally:
        proc.kill()
        proc.wait()


def test_the_public_port_picked_is_one_browsers_load_pages_from(monkeypatch):
    """`rocmlab hub --port 0` on a server picked 995 (pop3s), and chromium refused the login page
    with ERR_UNSAFE_PORT: the Fetch standard's bad ports (launch.BROWSER_BLOCKED_PORTS, from
    web-platform-tests' fetch/api/request/request-bad-port.any.js) are never picked, nor taken."""
    from rocmlab.hub.launch import BROWSER_BLOCKED_PORTS, HubError, public_port

    bad_first = lambda ports: ports.sort(key=lambda port: port not in {995, 993, 990, 989, 636, 601})  # noqa: E731
    monkeypatch.setattr(loopback.random, "shuffle", bad_first)
    picked = public_port(False, None, used=[881])
    assert picked not in BROWSER_BLOCKED_PORTS and 600 <= picked < 1000 and picked != 881
    assert {995, 993, 587, 6000, 10080} <= BROWSER_BLOCKED_PORTS and 443 not in BROWSER_BLOCKED_PORTS
    assert public_port(False, 443) == 443
    with pytest.raises(HubError, match=r"port 995: browsers refuse to load pages from it.*choose another"):
        public_port(False, 995)
    assert public_port(True, None) not in BROWSER_BLOCKED_PORTS
