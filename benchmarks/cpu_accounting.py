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
import threading
import time
from dataclasses import dataclass, field
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

    def __init__(self, name: str, parent: CpuGroup | None = None):
        if parent is None:
            found = _cgroup_folder(f"rocmlab-bench-{os.getpid()}-{name}")
        else:  # a group inside ``parent``: its usage is part of the parent's (both cgroup versions)
            found = (parent.folder / name, parent._usage_file) if parent.folder is not None else None
        self.folder, self._usage_file = found if found else (None, "")
        self.children: list[CpuGroup] = []
        if parent is not None:
            parent.children.append(self)
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

    def pids(self) -> list[int]:
        """The processes in this group and in the groups inside it."""
        if self.folder is None or self._final_s is not None:
            return []
        try:
            own = [int(p) for p in (self.folder / "cgroup.procs").read_text().split()]
        except OSError:
            own = []
        return own + [pid for child in self.children for pid in child.pids()]

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
        for child in self.children:
            child.close(timeout_s)
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


# --------------------------------------------------------------- by process kind

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
ZYGOTE = "rocmlab.sandbox.forkserver"


def _is_bwrap(seen: Seen | None) -> bool:
    return seen is not None and Path(seen.cmdline.split(" ", 1)[0]).name == "bwrap"


def _runs_forkserver(seen: Seen | None) -> bool:
    """The zygote or a process forked from it (bwrap's arguments name the zygote's command too)."""
    return seen is not None and ZYGOTE in seen.cmdline and not _is_bwrap(seen)


@dataclass
class Seen:
    """One process as last sampled: its own CPU (not its children's), parent, first and last sight."""

    pid: int
    ppid: int
    cmdline: str
    cpu_s: float
    first_at: float
    last_at: float
    cpu_at: list = field(default_factory=list)  # (time, cpu_s) at each sample


def read_process(pid: int) -> tuple[int, int, float, str] | None:
    """(ppid, start time in ticks, own user+system CPU seconds, command line) from /proc; None if gone.

    Fields of /proc/PID/stat (https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html): after
    the parenthesised command, 4 ppid, 14 utime, 15 stime, 22 starttime (1-based)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # fields from the 3rd on
    ppid, utime, stime, start = int(fields[1]), int(fields[11]), int(fields[12]), int(fields[19])
    return ppid, start, (utime + stime) / CLOCK_TICKS, cmdline.strip()


class ProcessSampler:
    """Samples every process of a ``CpuGroup`` every ``interval_s`` in a thread, to split the
    group's CPU by process kind and by the process tree each started in (``tops``: the pids the
    benchmark started). A process that ended between two samples loses what it used since the
    last; the group's own total is exact, and ``unsampled`` is the difference."""

    def __init__(self, group: CpuGroup, interval_s: float = 0.2):
        self.group, self.interval_s = group, interval_s
        self.seen: dict[tuple[int, int], Seen] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ProcessSampler:
        if self.group.folder is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> None:
        pids = self.group.pids()
        now = time.monotonic()
        for pid in pids:
            found = read_process(pid)
            if found is None:
                continue
            ppid, start, cpu_s, cmdline = found
            seen = self.seen.get((pid, start))
            if seen is None:
                seen = self.seen[(pid, start)] = Seen(pid, ppid, cmdline, cpu_s, now, now)
            seen.cpu_s, seen.last_at = cpu_s, now
            seen.cpu_at.append((now, cpu_s))

    def kind(self, seen: Seen) -> str:
        """What the process is, from its command line and its parent's (a forked kernel keeps its zygote's)."""
        if _is_bwrap(seen):
            return "bwrap"
        if _runs_forkserver(seen):
            parent = self._parent(seen)
            if parent is None:  # its parent ended unseen: a kernel's own child (zygotes live as long as bwrap)
                return "kernel"
            if not _runs_forkserver(parent):
                return "zygote"
            return "kernel" if _runs_forkserver(self._parent(parent)) else "fork waiter"
        for marker, kind in (
            (" live worker ", "grading process"),
            (" grade ", "grading process"),
            (" rocmlab.sandbox.entry worker ", "sandbox worker"),
            ("ipykernel", "kernel"),
        ):
            if marker in f" {seen.cmdline} ":
                return kind
        return "other"

    def _parent(self, seen: Seen) -> Seen | None:
        candidates = [s for s in self.seen.values() if s.pid == seen.ppid and s.first_at <= seen.first_at]
        return max(candidates, key=lambda s: s.first_at) if candidates else None

    def top(self, seen: Seen, tops: set[int]) -> int | None:
        """The pid of the started process ``seen`` descends from (None: reparented before first seen)."""
        while seen is not None and seen.pid not in tops:
            seen = self._parent(seen)
        return seen.pid if seen is not None else None

    def by_kind(self, tops: set[int] | None = None, until: float | None = None) -> dict[str, float]:
        """CPU seconds per kind, of the trees of ``tops`` (None: all), used up to ``until`` (None: all)."""
        totals: dict[str, float] = {}
        for seen in self.seen.values():
            if tops is not None and self.top(seen, tops) is None:
                continue
            cpu_s = seen.cpu_s if until is None else max((c for t, c in seen.cpu_at if t <= until), default=0.0)
            kind = self.kind(seen)
            totals[kind] = totals.get(kind, 0.0) + cpu_s
        return totals

    def biggest(self, kind: str, n: int = 3) -> list[tuple[str, float]]:
        """The ``n`` commands of ``kind`` that used the most CPU seconds, all their processes together."""
        totals: dict[str, float] = {}
        for seen in self.seen.values():
            if self.kind(seen) == kind:
                command = " ".join(
                    Path(word).name if word.startswith("/") else word for word in seen.cmdline.split()[:4]
                )
                totals[command] = totals.get(command, 0.0) + seen.cpu_s
        return sorted(totals.items(), key=lambda kv: -kv[1])[:n]

    def count(self, kind: str) -> int:
        return sum(1 for seen in self.seen.values() if self.kind(seen) == kind)
