"""Per-learner cgroups written by the hub itself, where systemd does not run the machine.

Each learner's server, and everything it starts, is in ``rocmlab-learners/<user>`` with a memory,
CPU and process ceiling (the same limits systemd's scope gets, rocmlab.hub.scopes): a memory hog,
a tmpfs fill (tmpfs pages are charged to the memory cgroup of whoever writes them) or a CPU storm
stays within that learner's share, and a classmate's processes are in a cgroup of their own.

The server's process joins its cgroup between fork and exec, as root, before it becomes the
learner (``join``: "0" written to ``cgroup.procs`` moves the writer), so nothing it runs is ever
outside. Clean-up kills the whole cgroup at once: ``cgroup.kill`` on cgroup v2 (Linux 5.14), on
v1 the freezer (frozen, killed, thawed), so no process forks its way out between a listing and a
kill. Learners cannot write any of these files (root's, 644).

Both hierarchies are handled: the unified one (cgroup v2, ``/sys/fs/cgroup/cgroup.controllers``)
and the per-controller one of v1 (``/sys/fs/cgroup/{memory,cpu,pids,freezer}``), which is what the
test machines here have. Kernel docs: https://docs.kernel.org/admin-guide/cgroup-v2.html and
https://docs.kernel.org/admin-guide/cgroup-v1/ (memory.rst, freezer-subsystem.rst, pids.rst).
"""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PARENT = "rocmlab-learners"
CPU_PERIOD_US = 100_000
V1_CONTROLLERS = ("memory", "cpu", "pids", "freezer")


@dataclass(frozen=True)
class Limits:
    memory_bytes: int = 0
    cpu_percent: int = 0  # 100 per core
    tasks: int = 0


def version(root: Path = ROOT) -> int:
    """2 (unified, with memory, cpu and pids), 1 (v1 hierarchies of those), or 0 (neither usable)."""
    controllers = root / "cgroup.controllers"
    if controllers.is_file() and {"memory", "cpu", "pids"} <= set(controllers.read_text().split()):
        return 2
    if all((root / name / "cgroup.procs").is_file() for name in V1_CONTROLLERS):
        return 1
    return 0


def safe_name(user: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", user)


def folders(user: str, root: Path = ROOT) -> list[Path]:
    """The learner's cgroup folders: one (v2) or one per controller (v1)."""
    if version(root) == 2:
        return [root / PARENT / safe_name(user)]
    return [root / name / PARENT / safe_name(user) for name in V1_CONTROLLERS]


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def create(user: str, limits: Limits, root: Path = ROOT) -> list[Path]:
    """The learner's cgroup with its limits (made, or reset, before their server starts)."""
    kind = version(root)
    if kind == 0:
        raise OSError(f"no cgroup hierarchy with memory, cpu and pids under {root}")
    made = folders(user, root)
    if kind == 2:
        parent = root / PARENT
        _enable(root, ("memory", "cpu", "pids"))
        parent.mkdir(mode=0o755, exist_ok=True)
        _enable(parent, ("memory", "cpu", "pids"))
    for folder in made:
        folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    quota = limits.cpu_percent * CPU_PERIOD_US // 100
    if kind == 2:
        (folder,) = made
        _write(folder / "memory.max", str(limits.memory_bytes or "max"))
        if (folder / "memory.swap.max").exists():
            _write(folder / "memory.swap.max", "0")
        _write(folder / "cpu.max", f"{quota or 'max'} {CPU_PERIOD_US}")
        _write(folder / "pids.max", str(limits.tasks or "max"))
    else:
        memory, cpu, pids, _ = made
        _write(memory / "memory.limit_in_bytes", str(limits.memory_bytes or -1))
        _write(cpu / "cpu.cfs_period_us", str(CPU_PERIOD_US))
        _write(cpu / "cpu.cfs_quota_us", str(quota or -1))
        _write(pids / "pids.max", str(limits.tasks or "max"))
    return made


def _enable(folder: Path, controllers) -> None:
    wanted = [c for c in controllers if c not in (folder / "cgroup.subtree_control").read_text().split()]
    if wanted:
        _write(folder / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))


def procs_files(made: list[Path]) -> list[str]:
    """The ``cgroup.procs`` files a server's child writes "0" into (looked up before the fork)."""
    return [str(folder / "cgroup.procs") for folder in made]


def join(procs: list[str]) -> None:
    """In the child, as root, before exec: move this process into the learner's cgroup."""
    for path in procs:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)


def cpu_stat(user: str, root: Path = ROOT) -> dict[str, int]:
    """The learner's cgroup's ``cpu.stat``: ``nr_periods`` counts only while a quota is in force
    (CFS bandwidth control), ``nr_throttled`` the periods it held the cgroup back."""
    folder = folders(user, root)[0 if version(root) == 2 else 1]
    lines = (folder / "cpu.stat").read_text().splitlines()
    return {name: int(value) for name, value in (line.split() for line in lines if line.strip())}


def members(user: str, root: Path = ROOT) -> set[int]:
    pids = set()
    for folder in folders(user, root):
        procs = folder / "cgroup.procs"
        if procs.is_file():
            pids.update(int(line) for line in procs.read_text().split())
    return pids


def kill(user: str, root: Path = ROOT, timeout_s: float = 10) -> None:
    """End every process in the learner's cgroup at once, then remove it."""
    kind = version(root)
    made = [folder for folder in folders(user, root) if folder.is_dir()]
    if not made:
        return
    if kind == 2 and (made[0] / "cgroup.kill").exists():
        _write(made[0] / "cgroup.kill", "1")
    elif kind == 2:  # before Linux 5.14: killed one by one, until none is left
        for pid in members(user, root):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    elif kind == 1:
        freezer = made[-1] if made[-1].parent.parent.name == "freezer" else None
        if freezer is not None:
            _write(freezer / "freezer.state", "FROZEN")
        for pid in members(user, root):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if freezer is not None:
            _write(freezer / "freezer.state", "THAWED")  # the killed ones now die
    deadline = time.monotonic() + timeout_s
    while members(user, root) and time.monotonic() < deadline:
        time.sleep(0.05)
    for folder in made:
        try:
            folder.rmdir()
        except OSError:
            pass
