"""The kernels' cgroups (``rocmlab.sandbox.cgroups.KERNELS``) on this machine's real hierarchy:
what a grader killed before its clean-up left is removed by the next grader, and nothing of a
grader still running is touched. Needs root and a cgroup hierarchy with memory and pids."""

import os
import subprocess
import sys
import uuid

import pytest

from rocmlab.execution.worker import LearnerRunLeft, end_learner_run
from rocmlab.processes import is_root, marked
from rocmlab.sandbox.cgroups import KERNELS, ROOT, Limits, join, kill_all, members, procs_files
from rocmlab.sandbox.limits import Limits as SandboxLimits
from rocmlab.sandbox.limits import kernel_cgroup_limits, kernel_cgroups_missing

pytestmark = pytest.mark.skipif(
    not is_root() or not KERNELS.version(), reason="kernel cgroups need root and a memory and pids hierarchy"
)


def test_the_cgroups_of_a_grader_that_ended_are_removed_with_what_runs_in_them_and_no_other():
    ended = subprocess.Popen(["true"])
    ended.wait()
    limits = kernel_cgroup_limits(SandboxLimits())
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
    limits = kernel_cgroup_limits(SandboxLimits(memory_mb=4096, disk_mb=2048, max_processes=256))
    assert (limits.memory_bytes, limits.tasks) == (6144 * 2**20, 256)
    assert (
        kernel_cgroup_limits(SandboxLimits(memory_mb=0)).memory_bytes == 0
    )  # no address-space limit: none here either


# A learner's process that never keeps one pid: it forks, and the parent leaves at once, so a pid
# listed from cgroup.procs is gone by the time a kill reaches it while its child runs on.
FORK_RUNNER = """
import os, time
while True:
    try:
        if os.fork():
            os._exit(0)
    except OSError:  # the cgroup's task limit: try again
        time.sleep(0.001)
"""
MARK = "ROCMLAB_TEST_FORK_RUNNER"


def _start_fork_runner(procs: list[str]) -> str:
    """A fork runner in the cgroup of ``procs``, once it is running there; its mark in the environment."""
    mark = uuid.uuid4().hex
    starter = subprocess.Popen(
        [sys.executable, "-c", FORK_RUNNER], env={**os.environ, MARK: mark}, preexec_fn=lambda: join(procs)
    )
    starter.wait(timeout=30)  # its first fork left it at once
    assert members(procs), "the fork runner is not in the cgroup"
    return mark


def test_a_process_that_keeps_forking_is_gone_after_the_v1_freezer_kill():
    """On cgroup v1 (this machine's KERNELS) the freezer holds it still for the kill."""
    if KERNELS.version() != 1:
        pytest.skip("needs the v1 hierarchies (memory, pids, freezer)")
    name = f"{os.getpid()}-test-forks"
    procs = procs_files(KERNELS.create(name, Limits(tasks=64)))
    try:
        mark = _start_fork_runner(procs)
        KERNELS.kill(name)
        assert not marked(MARK, mark)
        assert name not in KERNELS.names()
    finally:
        kill_all(procs)
        KERNELS.kill(name)


def test_a_process_that_keeps_forking_is_gone_after_cgroup_kill_on_v2():
    """On cgroup v2 (here the hybrid set-up's unified hierarchy) ``cgroup.kill`` ends it at once."""
    unified = next((r for r in (ROOT, ROOT / "unified") if (r / "cgroup.controllers").is_file()), None)
    if unified is None:
        pytest.skip("no cgroup v2 hierarchy")
    folder = unified / f"rocmlab-test-{os.getpid()}-forks"
    folder.mkdir()
    procs = [str(folder / "cgroup.procs")]
    try:
        if not (folder / "cgroup.kill").is_file():
            pytest.skip("this kernel has no cgroup.kill (Linux 5.14)")
        mark = _start_fork_runner(procs)
        assert kill_all(procs) == set()
        assert not marked(MARK, mark)
    finally:
        kill_all(procs)
        folder.rmdir()


def test_the_fresh_kernels_sweep_ends_a_process_that_keeps_forking_in_the_learners_cgroup():
    """``end_learner_run`` (before a fresh kernel starts) kills the kernel's cgroup the same way,
    and refuses to go on where it was given cgroups and no way to kill them."""
    name = f"{os.getpid()}-test-sweep"
    procs = procs_files(KERNELS.create(name, Limits(tasks=64)))
    try:
        mark = _start_fork_runner(procs)
        with pytest.raises(LearnerRunLeft, match="no way to kill them"):
            end_learner_run(None, "", set(), {"cgroup": procs})
        end_learner_run(None, "", set(), {"cgroup": procs}, kill_all)
        assert not marked(MARK, mark)
        assert not members(procs)
    finally:
        KERNELS.kill(name)


def test_the_members_of_a_removed_cgroup_are_none(tmp_path):
    assert members([str(tmp_path / "gone" / "cgroup.procs")]) == set()
    listed = tmp_path / "cgroup.procs"
    listed.write_text("0\n0\n")  # processes of another PID namespace
    assert members([str(listed)]) == set()
