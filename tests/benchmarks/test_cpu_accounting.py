"""benchmarks/cpu_accounting.py counts the CPU of a process nobody waits for: a grandchild left to
init, as a kernel forked from a zygote is reaped inside its own PID namespace (issue 49: live_load
counted waited-for children only, and missed every graded kernel)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from cpu_accounting import CpuGroup, ProcessSampler, Seen, waited_children_cpu_s

# the grandchild burns CPU after its parent has exited, then writes the CPU seconds it used
ORPHAN = """
import os, sys
if os.fork():
    os._exit(0)
total = 0
while os.times().user + os.times().system < 0.3:
    total += 1
times = os.times()
with open(sys.argv[1], "w") as out:
    out.write(str(times.user + times.system))
"""


def test_a_grandchild_nobody_waits_for_is_counted_in_the_group_and_missed_by_rusage(tmp_path):
    group = CpuGroup("test")
    try:
        if group.folder is None:
            pytest.skip(group.how)
        waited_before = waited_children_cpu_s()
        used = tmp_path / "used"
        subprocess.run([sys.executable, "-c", ORPHAN, str(used)], preexec_fn=group.join, check=True, timeout=60)
        deadline = time.monotonic() + 60
        while not (used.is_file() and used.read_text()) or (group.folder / "cgroup.procs").read_text().strip():
            assert time.monotonic() < deadline, "the grandchild did not finish"
            time.sleep(0.05)
        burnt = float(used.read_text())
        assert group.cpu_s() >= burnt  # its whole CPU, though only its parent was waited for
        assert waited_children_cpu_s() - waited_before < burnt  # what live_load counted before
    finally:
        group.close()
    assert not group.folder.exists()


def test_without_a_cgroup_it_says_what_it_misses(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    group = CpuGroup("test")
    assert group.folder is None and "forked kernels are missed" in group.how
    before = group.cpu_s()
    subprocess.run([sys.executable, "-c", "pass"], preexec_fn=group.join, check=True, timeout=60)
    assert group.cpu_s() > before  # the waited-for child's CPU
    group.close()


# the process tree of a live worker as root under bubblewrap, as /proc shows it (ps -o pid,ppid,args
# of a run of benchmarks/live_load.py): bwrap's own arguments name the zygote's command
BIN = "/repo/.venv/bin/python"
ZYGOTE_ARGS = f"{BIN} -P -m rocmlab.sandbox.forkserver /tmp/rocmlab-sandbox-x/slot0/zygote.sock numpy"
TREE = [  # pid, ppid, cmdline, cpu_s
    (10, 1, f"{BIN} {BIN[:-6]}rocmlab --root /repo live worker --queue /q/queue.sqlite --lease 20", 3.0),
    (11, 10, f"{BIN} -m rocmlab.sandbox.entry worker /tmp/rocmlab-sandbox-x/slot0/policy.json", 2.0),
    (12, 10, f"/usr/bin/bwrap --unshare-net --die-with-parent --chdir / {ZYGOTE_ARGS}", 0.0),
    (13, 12, ZYGOTE_ARGS, 1.5),
    (14, 13, ZYGOTE_ARGS, 0.01),  # the fork that waits for the kernel
    (15, 14, ZYGOTE_ARGS, 4.0),  # the kernel, PID 1 of its own namespaces
    (16, 99, ZYGOTE_ARGS, 0.5),  # a child of the kernel's whose parent (99) ended before it was sampled
    (20, 1, f"{BIN} {BIN[:-6]}rocmlab --root /repo grade 01-rocm-setup --submissions /s --jobs 2", 5.0),
]


def sampled_tree() -> ProcessSampler:
    sampler = ProcessSampler(CpuGroup.__new__(CpuGroup))
    for n, (pid, ppid, cmdline, cpu_s) in enumerate(TREE):
        sampler.seen[(pid, n)] = Seen(pid, ppid, cmdline, cpu_s, 1.0 + n, 9.0, [(1.0 + n, 0.0), (9.0, cpu_s)])
    return sampler


def test_each_process_of_a_worker_is_told_apart_though_bwrap_and_forks_repeat_the_zygote_command():
    sampler = sampled_tree()
    kinds = {seen.pid: sampler.kind(seen) for seen in sampler.seen.values()}
    assert kinds == {
        10: "grading process",
        11: "sandbox worker",
        12: "bwrap",
        13: "zygote",
        14: "fork waiter",
        15: "kernel",
        16: "kernel",
        20: "grading process",
    }


def test_cpu_by_kind_is_split_by_the_tree_each_process_started_in_and_by_time():
    sampler = sampled_tree()
    assert sampler.by_kind(tops={10}) == {
        "grading process": 3.0,
        "sandbox worker": 2.0,
        "bwrap": 0.0,
        "zygote": 1.5,
        "fork waiter": 0.01,
        "kernel": 4.0,
    }
    assert sampler.by_kind(tops={20}) == {"grading process": 5.0}
    assert sampler.by_kind()["kernel"] == 4.5  # with the orphan no tree claims
    assert sampler.by_kind(tops={10}, until=5.0)["kernel"] == 0.0  # the kernel had used nothing by then
    assert sampler.count("kernel") == 2 and sampler.count("zygote") == 1


def test_a_group_inside_another_counts_in_both_and_closes_with_it(tmp_path):
    outer = CpuGroup("test-outer")
    try:
        if outer.folder is None:
            pytest.skip(outer.how)
        inner = CpuGroup("worker-0", outer)
        subprocess.run([sys.executable, "-c", "sum(range(3_000_000))"], preexec_fn=inner.join, check=True, timeout=60)
        assert inner.cpu_s() > 0
        assert outer.cpu_s() >= inner.cpu_s()
    finally:
        outer.close()
    assert not outer.folder.exists() and inner.cpu_s() > 0
