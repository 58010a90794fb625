"""CPU seconds of a process and everything it starts, kernels included, for the benchmarks.

``resource.getrusage(RUSAGE_CHILDREN)`` counts only children that were waited for, and theirs: a
graded kernel forked from a slot's zygote is PID 1 of namespaces of its own and is reaped there
(rocmlab.sandbox.forkserver), so its CPU never reaches the grader's parent. As root, a ``CpuGroup``
is a cgroup of the CPU accounting controller: a process started with ``join`` as its
``preexec_fn`` is in it before it runs, and so is everything it forks, wherever it is reparented,
as the sandbox moves kernels only in the memory and pids hierarchies (rocmlab.sandbox.cgroups).
Its usage is ``cpuacct.usage`` (nanoseconds) on cgroup v1 and ``usage_usec`` of ``cpu.stat`` on
v2 (https://docs.kernel.org/admin-guide/cgroup-v1/cpuacct.html,
https://docs.kernel.org/admin-guide/cgroup-v2.html#cpu-interface-files). Elsewhere it falls back
to the waited-for children, and ``how`` says so.
"""

from __future__ import annotations

import os
import resource
import signal
import time
from pathlib import Path

CGROUPS = Path("/sys/fs/cgroup")


def waited_children_cpu_s() -> float:
    """User and system CPU seconds of every child process waited for so far (and of theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _cgroup_folder(name: str) -> tuple[Path, str] | None:
    """Where a CPU-accounting cgroup ``name`` goes, and the file of its usage; None where none can be made."""
    if os.geteuid() != 0:
        return None
    if (CGROUPS / "cpuacct" / "cpuacct.usage").is_file():
        return CGROUPS / "cpuacct" / name, "cpuacct.usage"
    if (CGROUPS / "cgroup.controllers").is_file():
        return CGROUPS / name, "cpu.stat"
    return None


class CpuGroup:
    """CPU seconds used by the processes started with ``preexec_fn=group.join`` and all they start."""

    def __init__(self, name: str):
        found = _cgroup_folder(f"rocmlab-bench-{os.getpid()}-{name}")
        self.folder, self._usage_file = found if found else (None, "")
        if self.folder is not None:
            try:
                self.folder.mkdir()
            except OSError:
                self.folder = None
        self._children_at_start = waited_children_cpu_s()
        self._final_s: float | None = None

    @property
    def how(self) -> str:
        if self.folder is not None:
            return "a CPU-accounting cgroup: every process started, kernels included"
        return "waited-for children only (not root, or no cgroup): forked kernels are missed"

    def join(self) -> None:
        """In the child between fork and exec: into the cgroup (nothing where there is none)."""
        if self.folder is not None:
            (self.folder / "cgroup.procs").write_text(str(os.getpid()))

    def cpu_s(self) -> float:
        if self._final_s is not None:
            return self._final_s
        if self.folder is None:
            return waited_children_cpu_s() - self._children_at_start
        text = (self.folder / self._usage_file).read_text()
        if self._usage_file == "cpuacct.usage":
            return int(text) / 1e9
        fields = dict(line.split() for line in text.splitlines())
        return int(fields["usage_usec"]) / 1e6

    def close(self, timeout_s: float = 30) -> None:
        """Kill what is left in it (a killed worker's orphaned kernels), then remove it; ``cpu_s``
        keeps what it used. Closing again does nothing."""
        if self.folder is None or self._final_s is not None:
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pids = [int(p) for p in (self.folder / "cgroup.procs").read_text().split()]
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)
        self._final_s = self.cpu_s()
        try:
            self.folder.rmdir()
        except OSError as exc:
            print(f"could not remove the cgroup {self.folder}: {exc}")
