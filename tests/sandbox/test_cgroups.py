"""The kernels' cgroups (``rocmlab.sandbox.cgroups.KERNELS``) on this machine's real hierarchy:
what a grader killed before its clean-up left is removed by the next grader, and nothing of a
grader still running is touched. Needs root and a cgroup hierarchy with memory and pids."""

import os
import subprocess

import pytest

from rocmlab.processes import is_root
from rocmlab.sandbox.cgroups import KERNELS, join, procs_files
from rocmlab.sandbox.limits import Limits, kernel_cgroup_limits, kernel_cgroups_missing

pytestmark = pytest.mark.skipif(
    not is_root() or not KERNELS.version(), reason="kernel cgroups need root and a memory and pids hierarchy"
)


def test_the_cgroups_of_a_grader_that_ended_are_removed_with_what_runs_in_them_and_no_other():
    ended = subprocess.Popen(["true"])
    ended.wait()
    limits = kernel_cgroup_limits(Limits())
    left, ours = f"{ended.pid}-test-run0", f"{os.getpid()}-test-run0"
    KERNELS.create(left, limits)
    KERNELS.create(ours, limits)
    procs = procs_files(KERNELS.folders(left))
    leftover = subprocess.Popen(["sleep", "300"], preexec_fn=lambda: join(procs))  # a killed grader's kernel
    try:
        assert leftover.pid in KERNELS.members(left)
        assert kernel_cgroups_missing(limits, f"{os.getpid()}-test-probe") == ""
        assert left not in KERNELS.names() and ours in KERNELS.names()
        assert f"{os.getpid()}-test-probe" not in KERNELS.names()
        assert leftover.wait(timeout=30) == -9
    finally:
        leftover.kill()
        leftover.wait()
        KERNELS.kill(left)
        KERNELS.kill(ours)
    assert not {left, ours} & set(KERNELS.names())


def test_the_limits_are_the_sandboxs_memory_with_its_space_and_its_processes():
    limits = kernel_cgroup_limits(Limits(memory_mb=4096, disk_mb=2048, max_processes=256))
    assert (limits.memory_bytes, limits.tasks) == (6144 * 2**20, 256)
    assert kernel_cgroup_limits(Limits(memory_mb=0)).memory_bytes == 0  # no address-space limit: none here either
