"""Per-learner ceilings on a workshop server run by systemd (rocmlab.hub.scopes): each learner's
server in a transient scope with MemoryMax, CPUQuota and TasksMax. The D-Bus call is checked
here everywhere; the real ceilings (a memory hog and a fork bomb in one learner's scope) only
where systemd runs the machine and the test runs as root."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from rocmlab.hub import scopes
from rocmlab.hub import spawner as rocmlab_spawner
from rocmlab.hub.scopes import ScopeLimits, busctl_argv, scope_name


def test_the_call_asks_systemd_for_a_scope_holding_the_server_with_each_limit():
    argv = busctl_argv("ann", 4242, ScopeLimits(memory_bytes=8 * 2**30, cpu_percent=200, tasks=1024))
    assert argv[:9] == [
        "busctl",
        "call",
        "--quiet",
        "org.freedesktop.systemd1",
        "/org/freedesktop/systemd1",
        "org.freedesktop.systemd1.Manager",
        "StartTransientUnit",
        "ssa(sv)a(sa(sv))",
        "rocmlab-server-ann-4242.scope",
    ]
    assert argv[9:11] == ["fail", "6"] and argv[-1] == "0"
    properties = " ".join(argv[11:-1])
    assert "PIDs au 1 4242" in properties and f"Slice s {scopes.SLICE}" in properties
    assert f"MemoryMax t {8 * 2**30}" in properties
    assert "CPUQuotaPerSecUSec t 2000000" in properties  # CPUQuota=200%: two cores' worth per second
    assert "TasksMax t 1024" in properties


def test_a_limit_set_to_zero_is_left_out():
    argv = busctl_argv("ann", 7, ScopeLimits(tasks=64))
    assert argv[10] == "4" and "MemoryMax" not in argv and "CPUQuotaPerSecUSec" not in argv


def test_an_odd_user_name_makes_a_valid_unit_name():
    assert scope_name("a-b c/d", 9) == r"rocmlab-server-a\x2db\x20c\x2fd-9.scope"


def spawner_for(name: str, *groups: str, **traits):
    traits = {"scope_memory_max": "1G", "scope_cpu_percent": 100, "scope_tasks_max": 64, **traits}
    spawner = rocmlab_spawner.CourseSpawner(
        user=SimpleNamespace(name=name, groups=[SimpleNamespace(name=g) for g in groups]), **traits
    )
    spawner.pid = 4242
    return spawner


@pytest.mark.skipif(os.geteuid() != 0, reason="the hub confines servers as root")
def test_a_learners_server_is_confined_and_an_instructors_is_not(monkeypatch):
    calls = []
    monkeypatch.setattr(rocmlab_spawner, "systemd_runs_here", lambda: True)
    monkeypatch.setattr(rocmlab_spawner, "confine", lambda *args: calls.append(args) or "unit")
    asyncio.run(spawner_for("nobody").confine_learner())
    assert calls == [("nobody", 4242, ScopeLimits(2**30, 100, 64))]
    asyncio.run(spawner_for("nobody", "instructors").confine_learner())
    assert len(calls) == 1
    monkeypatch.setattr(rocmlab_spawner, "systemd_runs_here", lambda: False)
    asyncio.run(spawner_for("nobody").confine_learner())
    assert len(calls) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="the hub confines servers as root")
def test_a_scope_systemd_refuses_stops_the_server(monkeypatch):
    stopped = []

    def refuse(*_args):
        raise OSError("systemd would not make the scope")

    async def stop(now=False):
        stopped.append(now)

    monkeypatch.setattr(rocmlab_spawner, "systemd_runs_here", lambda: True)
    monkeypatch.setattr(rocmlab_spawner, "confine", refuse)
    spawner = spawner_for("nobody")
    monkeypatch.setattr(spawner, "stop", stop)
    with pytest.raises(OSError):
        asyncio.run(spawner.confine_learner())
    assert stopped == [True]


HOG = "x = bytearray(512 * 2**20); print('survived')"
BOMB = (
    "import os\nborn = 0\nfor _ in range(64):\n    try:\n        if os.fork() == 0:\n"
    "            import time; time.sleep(5); os._exit(0)\n        born += 1\n"
    "    except OSError:\n        break\nprint('born', born)"
)


def confined_run(code: str, limits: ScopeLimits) -> subprocess.CompletedProcess:
    """``code`` in a Python that waits on its stdin until it is in its scope."""
    proc = subprocess.Popen(
        [sys.executable, "-c", f"import sys; sys.stdin.readline()\n{code}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        unit = scopes.confine("rocmlab-test", proc.pid, limits)
        assert unit in open(f"/proc/{proc.pid}/cgroup").read()
        out, _ = proc.communicate("go\n", timeout=60)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
@pytest.mark.skipif(
    os.geteuid() != 0 or not scopes.systemd_runs_here(), reason="needs systemd as the init system, and root"
)
def test_a_memory_hog_and_a_fork_bomb_hit_their_own_scopes_ceiling():
    started = time.monotonic()
    hog = confined_run(HOG, ScopeLimits(memory_bytes=128 * 2**20))
    assert hog.returncode == -9 and "survived" not in hog.stdout  # OOM-killed inside its scope
    bomb = confined_run(BOMB, ScopeLimits(tasks=16))
    assert bomb.returncode == 0 and 0 < int(bomb.stdout.split()[1]) < 16, bomb.stdout
    assert time.monotonic() - started < 60
