"""Per-learner cgroup limits on a workshop server run by systemd: each learner's server, and
everything it starts (kernels, terminals), in a transient scope of its own with a memory, CPU and
task ceiling, the way The Littlest JupyterHub's systemdspawner does it (``MemoryMax``,
``CPUQuota``, ``TasksMax``). A fork bomb or a memory hog then hits its own scope's ceiling: the
kernel OOM-kills inside that scope only, and new tasks fail there, while classmates' servers go on.

The hub (root) asks systemd over D-Bus (``busctl``, part of systemd) to start a transient scope
holding the server's process, right after it started and before the learner can run anything in
it; the scope goes when its last process exits. Without systemd (``/run/systemd/system`` is what
``sd_booted()`` looks for) only the per-process and per-account limits of the spawner apply.
systemd.resource-control(5): https://www.freedesktop.org/software/systemd/man/latest/systemd.resource-control.html
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

SLICE = "rocmlab-learners.slice"
SIGNATURE = "ssa(sv)a(sa(sv))"


def systemd_runs_here() -> bool:
    return os.path.isdir("/run/systemd/system") and shutil.which("busctl") is not None


@dataclass(frozen=True)
class ScopeLimits:
    memory_bytes: int = 0  # MemoryMax of the whole server (0: none)
    cpu_percent: int = 0  # CPUQuota, 100 per core (0: none)
    tasks: int = 0  # TasksMax: processes and threads (0: none)
    devices: tuple[str, ...] = ()  # the only device files the scope may open besides /dev/null & co. (hub.devices)

    def properties(self) -> list[tuple[str, ...]]:
        """(name, D-Bus type, value) of each limit set; systemd's CPUQuota= is
        CPUQuotaPerSecUSec on the bus, microseconds of CPU per second."""
        chosen = [
            ("MemoryMax", "t", self.memory_bytes),
            ("CPUQuotaPerSecUSec", "t", self.cpu_percent * 10_000),
            ("TasksMax", "t", self.tasks),
        ]
        limits = [(name, kind, str(value)) for name, kind, value in chosen if value > 0]
        return limits + device_properties(self.devices)


def device_properties(paths: tuple[str, ...]) -> list[tuple[str, ...]]:
    """DevicePolicy=closed (keeps /dev/null, /dev/zero, /dev/urandom, /dev/tty and the like) and a
    DeviceAllow= entry per path, read-write, in busctl's argument form; none for no paths."""
    if not paths:
        return []
    allow = [str(len(paths))]
    for path in paths:
        allow += [path, "rw"]
    return [("DevicePolicy", "s", "closed"), ("DeviceAllow", "a(ss)", *allow)]


def scope_name(user: str, pid: int) -> str:
    """A unit name systemd accepts for ``user``'s server ``pid`` (a name's odd bytes escaped)."""
    safe = re.sub(r"[^A-Za-z0-9_.]", lambda m: "\\x%02x" % ord(m.group()), user)  # noqa: UP031
    return f"rocmlab-server-{safe}-{pid}.scope"


def busctl_argv(user: str, pid: int, limits: ScopeLimits) -> list[str]:
    """``busctl call`` of systemd's StartTransientUnit for a scope holding ``pid``, in ``SLICE``."""
    properties: list[tuple[str, ...]] = [
        ("PIDs", "au", "1", str(pid)),
        ("Slice", "s", SLICE),
        ("Delegate", "b", "false"),
    ]
    properties += limits.properties()
    argv = ["busctl", "call", "--quiet", "org.freedesktop.systemd1", "/org/freedesktop/systemd1"]
    argv += ["org.freedesktop.systemd1.Manager", "StartTransientUnit", SIGNATURE]
    argv += [scope_name(user, pid), "fail", str(len(properties))]
    for entry in properties:
        argv += list(entry)
    return [*argv, "0"]  # no auxiliary units


def confine(user: str, pid: int, limits: ScopeLimits, timeout_s: float = 20) -> str:
    """Put ``pid`` (and what it will start) in its own limited scope; the scope's name. Raises
    OSError when systemd refuses."""
    proc = subprocess.run(busctl_argv(user, pid, limits), capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise OSError(f"systemd would not make the scope of {user}'s server: {proc.stderr.strip()}")
    return scope_name(user, pid)
