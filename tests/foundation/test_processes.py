"""rocmlab.processes: ending what escaped its parent, a whole process group, what carries a marker."""

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import psutil
import pytest

from rocmlab import processes


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_for_file(path, timeout_s=30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.05)
    raise AssertionError(f"{path} was never written")


def python(code: str, **options) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], **options)


def test_a_tracked_tree_ends_the_grandchild_that_escaped_into_its_own_session(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    child = python(
        f"""
        import subprocess, sys
        grandchild = subprocess.Popen(["sleep", "300"], start_new_session=True)
        open({str(pid_file)!r}, "w").write(str(grandchild.pid))
        sys.stdin.read()  # until the test lets go
        """,
        stdin=subprocess.PIPE,
    )
    tree = processes.Tree(child.pid)
    grandchild = int(wait_for_file(pid_file))
    tree.track()
    child.stdin.close()  # the child exits; its grandchild lives on, re-parented away from it
    child.wait(timeout=30)
    assert not gone(grandchild) and grandchild not in {p.pid for p in processes.descendants(child.pid)}
    tree.end(grace_s=2)
    assert gone(grandchild)
    assert tree.alive() == []


def test_end_kills_what_ignores_sigterm_after_the_grace_period():
    polite = subprocess.Popen(["sleep", "300"])
    stubborn = python(
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint(1, flush=True)\ntime.sleep(300)",
        stdout=subprocess.PIPE,
    )
    stubborn.stdout.readline()  # its handler is set
    watched = [psutil.Process(polite.pid), psutil.Process(stubborn.pid)]
    processes.end(watched, grace_s=1)
    # psutil reaped them (they are this process's children) and kept how each one ended
    assert [proc.wait(timeout=10) for proc in watched] == [-signal.SIGTERM, -signal.SIGKILL]


def test_stop_ends_the_whole_process_group_of_a_session_leader(tmp_path):
    pid_file = tmp_path / "member.pid"
    leader = python(
        f"""
        import signal, subprocess, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the leader ignores the polite request
        member = subprocess.Popen(["sleep", "300"])  # same process group
        open({str(pid_file)!r}, "w").write(str(member.pid))
        time.sleep(300)
        """,
        start_new_session=True,
    )
    member = int(wait_for_file(pid_file))
    assert os.getpgid(member) == leader.pid
    assert processes.stop(leader, grace_s=1) == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while not gone(member) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(member)


def test_the_marker_sweep_finds_a_daemon_by_its_environment(tmp_path):
    marker = uuid.uuid4().hex
    pid_file = tmp_path / "daemon.pid"
    starter = python(
        f"""
        import os, subprocess
        daemon = subprocess.Popen(["sleep", "300"], start_new_session=True)  # forgotten by its starter
        open({str(pid_file)!r}, "w").write(str(daemon.pid))
        """,
        env={**os.environ, "ROCMLAB_TEST_MARKER": marker},
    )
    starter.wait(timeout=30)
    daemon = int(wait_for_file(pid_file))
    assert [p.pid for p in processes.marked("ROCMLAB_TEST_MARKER", marker)] == [daemon]
    assert processes.marked("ROCMLAB_TEST_MARKER", "another run") == []
    processes.end_marked("ROCMLAB_TEST_MARKER", marker, grace_s=1)
    assert gone(daemon)


def _nobody_uid():
    import pwd

    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        return None


@pytest.mark.skipif(os.geteuid() != 0 or _nobody_uid() is None, reason="needs root and a `nobody` account")
def test_kill_user_sweeps_every_process_of_a_user():
    uid = _nobody_uid()
    if any(p.info["uids"] and p.info["uids"].real == uid for p in psutil.process_iter(["uids"])):
        pytest.skip("`nobody` already runs processes here; the sweep would end them")
    started = [subprocess.Popen(["sleep", "300"], user=uid, start_new_session=True) for _ in range(3)]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(psutil.Process(p.pid).uids().real != uid for p in started):
        time.sleep(0.05)  # until each child has switched to the user
    processes.kill_user(uid)
    assert all(gone(proc.pid) for proc in started)
