"""Cgroups this machine's root writes itself: one per learner's server on the hub (where systemd
does not run the machine), one per graded kernel.

A ``Hierarchy`` is a parent folder of such cgroups and the controllers they need:

- ``LEARNERS`` (``rocmlab-learners/<user>``): each learner's server, and everything it starts,
  with a memory, CPU and process ceiling (the same limits systemd's scope gets,
  rocmlab.hub.scopes). The server's process joins its cgroup between fork and exec, as root,
  before it becomes the learner (``join``), so nothing it runs is ever outside.
- ``KERNELS`` (``rocmlab-kernels/<grader pid>-<run>``): each graded kernel, with a memory and
  process ceiling (rocmlab.sandbox.limits decides them from the lab's limits). The kernel joins it
  before any learner code runs; a forked kernel, whose zygote cannot see this file system, writes
  into ``cgroup.procs`` files its worker opened and passed it (rocmlab.sandbox.forkserver).

Either way a memory hog or a tmpfs fill (tmpfs pages are charged to the memory cgroup of whoever
writes them) or a fork bomb meets its own cgroup's ceiling: the kernel's OOM killer picks a process
inside it, and a classmate's processes, or the zygote, are in a cgroup of their own.

Clean-up kills the whole cgroup at once (``kill_all``, also the fresh kernel's sweep of a learner's
run, rocmlab.execution.worker's ``end_learner_run``): ``cgroup.kill`` on cgroup v2 (Linux 5.14), on
v1 the freezer (frozen, killed, thawed), so no process forks its way out between a listing and a
kill. Learners cannot write any of these files (root's, 644).

Both hierarchies are handled: the unified one (cgroup v2, ``/sys/fs/cgroup/cgroup.controllers``)
and the per-controller one of v1 (``/sys/fs/cgroup/{memory,cpu,pids,freezer}``), which is what the
test machines here have. Kernel docs: https://docs.kernel.org/admin-guide/cgroup-v2.html and
https://docs.kernel.org/admin-guide/cgroup-v1/ (memory.rst, freezer-subsystem.rst, pids.rst).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
CPU_PERIOD_US = 100_000


@dataclass(frozen=True)
class Limits:
    memory_bytes: int = 0
    cpu_percent: int = 0  # 100 per core
    tasks: int = 0


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _write(path: Path, value: str) -> None:
    path.write_text(value)


@dataclass(frozen=True)
class Hierarchy:
    """Cgroups named under ``parent`` with ``controllers`` (v1 adds the freezer, to kill at once)."""

    parent: str
    controllers: tuple[str, ...]
    root: Path = ROOT

    @property
    def v1_controllers(self) -> tuple[str, ...]:
        return (*self.controllers, "freezer")

    def version(self) -> int:
        """2 (unified, with the controllers), 1 (v1 hierarchies of them), or 0 (neither usable)."""
        controllers = self.root / "cgroup.controllers"
        if controllers.is_file() and set(self.controllers) <= set(controllers.read_text().split()):
            return 2
        if all((self.root / name / "cgroup.procs").is_file() for name in self.v1_controllers):
            return 1
        return 0

    def folders(self, name: str) -> list[Path]:
        """The cgroup's folders: one (v2) or one per controller (v1, in ``v1_controllers``' order)."""
        if self.version() == 2:
            return [self.root / self.parent / safe_name(name)]
        return [self.root / kind / self.parent / safe_name(name) for kind in self.v1_controllers]

    def create(self, name: str, limits: Limits) -> list[Path]:
        """The cgroup with its limits (made, or reset); its folders."""
        kind = self.version()
        if kind == 0:
            raise OSError(f"no cgroup hierarchy with {', '.join(self.controllers)} under {self.root}")
        made = self.folders(name)
        if kind == 2:
            parent = self.root / self.parent
            _enable(self.root, self.controllers)
            parent.mkdir(mode=0o755, exist_ok=True)
            _enable(parent, self.controllers)
        for folder in made:
            folder.mkdir(mode=0o755, parents=True, exist_ok=True)
        by_controller = dict.fromkeys(self.controllers, made[0]) if kind == 2 else dict(zip(self.v1_controllers, made))
        for controller, folder in by_controller.items():
            SETTERS[kind, controller](folder, limits)
        return made

    def members(self, name: str) -> set[int]:
        return members(procs_files(self.folders(name)))

    def cpu_stat(self, name: str) -> dict[str, int]:
        """The cgroup's ``cpu.stat``: ``nr_periods`` counts only while a quota is in force
        (CFS bandwidth control), ``nr_throttled`` the periods it held the cgroup back."""
        folder = self.folders(name)[0 if self.version() == 2 else self.controllers.index("cpu")]
        lines = (folder / "cpu.stat").read_text().splitlines()
        return {key: int(value) for key, value in (line.split() for line in lines if line.strip())}

    def kill(self, name: str, timeout_s: float = 10) -> None:
        """End every process in the cgroup at once (``kill_all``), then remove it."""
        made = [folder for folder in self.folders(name) if folder.is_dir()]
        if not made:
            return
        kill_all(procs_files(made), timeout_s)
        for folder in made:
            try:
                folder.rmdir()
            except OSError:
                pass

    def names(self) -> list[str]:
        """The cgroups under ``parent`` now (in the first controller's hierarchy)."""
        folder = self.root / self.parent if self.version() == 2 else self.root / self.controllers[0] / self.parent
        return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


def _enable(folder: Path, controllers) -> None:
    wanted = [c for c in controllers if c not in (folder / "cgroup.subtree_control").read_text().split()]
    if wanted:
        _write(folder / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))


def kill_all(procs: list[str], timeout_s: float = 10) -> set[int]:
    """End every process of the cgroups whose ``cgroup.procs`` files are ``procs`` (a cgroup's one
    file on v2, or its file in each v1 hierarchy): ``cgroup.kill`` where the kernel has it (v2,
    Linux 5.14; it reaches every member, in any PID namespace), else each member killed while the
    v1 freezer holds the cgroup frozen (a process cannot fork between the listing and its kill;
    the killed die once thawed), else each member killed, listed again and killed until none is
    left. Waits up to ``timeout_s`` for the members to leave; the pids still listed then."""
    folders = [Path(path).parent for path in procs]
    killed = [folder for folder in folders if _write_if_there(folder / "cgroup.kill", "1")]
    frozen = [] if killed else [folder for folder in folders if _freeze(folder)]
    try:
        if not killed:
            _kill_each(members(procs))
    finally:
        for folder in frozen:
            _write_if_there(folder / "freezer.state", "THAWED")
    deadline = time.monotonic() + timeout_s
    while left := members(procs):
        if time.monotonic() >= deadline:
            return left
        _kill_each(left)  # forked before a kill without cgroup.kill or the freezer reached it
        time.sleep(0.05)
    return set()


def members(procs: list[str]) -> set[int]:
    """The processes listed in ``procs`` (``cgroup.procs`` files) that this process can see: one in
    another PID namespace is listed as 0. A cgroup removed has none."""
    pids: set[int] = set()
    for path in procs:
        try:
            pids.update(int(pid) for pid in Path(path).read_text().split())
        except (OSError, ValueError):
            continue
    pids.discard(0)
    return pids


def _freeze(folder: Path, timeout_s: float = 5) -> bool:
    """Freeze a v1 freezer cgroup and wait until every task in it is frozen (``FREEZING`` until then)."""
    state = folder / "freezer.state"
    if not _write_if_there(state, "FROZEN"):
        return False
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if state.read_text().strip() == "FROZEN":
                break
        time.sleep(0.01)
    return True


def _write_if_there(path: Path, value: str) -> bool:
    """Whether ``value`` was written into ``path``: a file this kernel lacks, or one this process
    may not write (another's cgroup, a removed one), is left to the other ways."""
    if not path.is_file():
        return False
    try:
        _write(path, value)
    except OSError:
        return False
    return True


def _kill_each(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _v2_memory(folder: Path, limits: Limits) -> None:
    _write(folder / "memory.max", str(limits.memory_bytes or "max"))
    if (folder / "memory.swap.max").exists():
        _write(folder / "memory.swap.max", "0")


def _v1_memory(folder: Path, limits: Limits) -> None:
    """memory.memsw (memory and swap together: no swap beyond the limit) may never be below
    memory.limit_in_bytes: raised first where a reset raises both, lowered after."""
    value = str(limits.memory_bytes or -1)
    memsw = folder / "memory.memsw.limit_in_bytes"
    if memsw.exists():
        with contextlib.suppress(OSError):
            _write(memsw, value)
    _write(folder / "memory.limit_in_bytes", value)
    if memsw.exists():
        _write(memsw, value)


def _v1_cpu(folder: Path, limits: Limits) -> None:
    quota = limits.cpu_percent * CPU_PERIOD_US // 100
    _write(folder / "cpu.cfs_period_us", str(CPU_PERIOD_US))
    _write(folder / "cpu.cfs_quota_us", str(quota or -1))


def _v2_cpu(folder: Path, limits: Limits) -> None:
    quota = limits.cpu_percent * CPU_PERIOD_US // 100
    _write(folder / "cpu.max", f"{quota or 'max'} {CPU_PERIOD_US}")


def _pids(folder: Path, limits: Limits) -> None:
    _write(folder / "pids.max", str(limits.tasks or "max"))


SETTERS = {
    (2, "memory"): _v2_memory,
    (2, "cpu"): _v2_cpu,
    (2, "pids"): _pids,
    (1, "memory"): _v1_memory,
    (1, "cpu"): _v1_cpu,
    (1, "pids"): _pids,
    (1, "freezer"): lambda _folder, _limits: None,
}

LEARNERS = Hierarchy("rocmlab-learners", ("memory", "cpu", "pids"))
KERNELS = Hierarchy("rocmlab-kernels", ("memory", "pids"))


def procs_files(made: list[Path]) -> list[str]:
    """The ``cgroup.procs`` files a process writes "0" into to join (looked up before a fork)."""
    return [str(folder / "cgroup.procs") for folder in made]


def join(procs: list[str]) -> None:
    """In the child, as root, before exec: move this process into the cgroup."""
    for path in procs:
        fd = os.open(path, os.O_WRONLY)
        try:
            join_through(fd)
        finally:
            os.close(fd)


def join_through(fd: int) -> None:
    """Move this process into the cgroup whose ``cgroup.procs`` ``fd`` is open for writing."""
    os.write(fd, b"0")
