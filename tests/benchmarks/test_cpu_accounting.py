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

from cpu_accounting import CpuGroup, waited_children_cpu_s

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
