"""Kernels forked from a slot's zygote: what each one can see, and that none outlives its run."""

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time

import nbformat
import psutil
import pytest

from rocmlab.sandbox.cgroups import KERNELS
from rocmlab.sandbox.forkserver import ForkedKernel, fork_kernel
from rocmlab.sandbox.limits import Sandbox, bubblewrap_works, fork_server_applies, is_root, namespaces_work
from rocmlab.sandbox.paths import PRIVATE_TEMP


@pytest.fixture(params=["bubblewrap", "namespaces"])
def backend(request):
    """Each backend whose kernels are forked from a zygote, where it works here (both need root)."""
    if not is_root():
        pytest.skip("forked kernels need root")
    works = bubblewrap_works if request.param == "bubblewrap" else namespaces_work
    if not works():
        pytest.skip(f"{request.param} does not work here (make system-deps installs bubblewrap)")
    return request.param


PROBE = """
import json, os, socket, numpy
print(json.dumps({
    "pid": os.getpid(),
    "uid": os.getuid(),
    "pids": sorted(p for p in os.listdir("/proc") if p.isdigit()),
    "interfaces": [name for _, name in socket.if_nameindex()],
    "sandbox": os.listdir(BASE),
    "socket_seen": os.path.exists(SOCKET),
    "random": numpy.random.rand(),
}))
"""


def test_a_forked_kernel_handle_tells_when_its_process_ended_and_what_signal_ended_it():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    ours, parents = socket.socketpair()
    try:
        kernel = ForkedKernel(child.pid, os.pidfd_open(child.pid), ours)
        assert kernel.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            kernel.wait(timeout=0.05)
        kernel.kill()
        assert struct.unpack("i", parents.recv(4)) == (signal.SIGKILL,)  # asked of the kernel's parent
        child.kill()
        child.wait()  # this test is its parent: reaped here, so that the pidfd says it ended
        assert kernel.wait(timeout=5) == -signal.SIGKILL and kernel.poll() == -signal.SIGKILL
        assert ours.fileno() == -1 and parents.recv(4) == b""  # ended: the control socket is closed
        kernel.kill()  # an ended kernel: nothing to signal
    finally:
        child.kill()
        child.wait()
        parents.close()


def test_forks_apply_only_to_a_class_graded_as_root_under_bubblewrap_or_the_namespace_fallback():
    assert not fork_server_applies("landlock", True) and not fork_server_applies("none", True)
    assert not fork_server_applies("bubblewrap", False) and not fork_server_applies("namespaces", False)
    assert fork_server_applies("bubblewrap", True) == fork_server_applies("namespaces", True) == is_root()


def test_without_a_zygote_listening_the_worker_gets_a_clear_error(tmp_path):
    with pytest.raises(RuntimeError, match="fork server at .* did not start in 0.1 s"):
        fork_kernel(str(tmp_path / "zygote.sock"), os.getpid(), {}, timeout_s=0.1)  # alive: still loading
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="fork server at .* has ended"):
        fork_kernel(str(tmp_path / "zygote.sock"), ended.pid, {}, timeout_s=30)
    assert time.monotonic() - started < 5  # no wait for a zygote that is gone


def _run(sandbox, probe: str, timeout_s: int = 60):
    source = sandbox.base / "probe.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(probe)]
    nbformat.write(nb, source)
    run = sandbox.new_run(0, timeout_s)
    executed, outcome = run.execute(source, run.private / "out.ipynb", {}, timeout_s, timeout_s)
    return run, executed, outcome


@pytest.mark.slow
def test_each_forked_kernel_is_alone_in_its_namespaces_as_its_runs_user(backend):
    sandbox = Sandbox(backend=backend, slots=1, prestart=True, preimport=["numpy"])
    try:
        assert sandbox.isolation["forked_kernels"]
        zygote_socket = str(sandbox.fork_servers[0].socket_path)
        seen = []
        for _ in range(2):
            run, executed, outcome = _run(sandbox, f"SOCKET = {zygote_socket!r}\nBASE = {str(sandbox.base)!r}\n{PROBE}")
            assert outcome.status == "passed", outcome.reason
            spec = json.loads((run.private / "jupyter" / "kernels" / "rocmlab-sandbox" / "kernel.json").read_text())
            assert spec["metadata"]["kernel_provisioner"]["provisioner_name"] == "rocmlab-fork"
            probe = json.loads(executed.cells[0].outputs[0]["text"])
            assert probe["pid"] == 1 and probe["pids"] == ["1"]  # its own PID namespace: no zygote, no worker
            assert probe["uid"] == run.uid != 0
            assert probe["interfaces"] == ["lo"] and not probe["socket_seen"]
            assert probe["sandbox"] == [run.folder.name]  # other runs and the slot's folder are covered
            seen.append(probe)
            run.cleanup()
        assert seen[0]["uid"] != seen[1]["uid"]
        assert seen[0]["random"] != seen[1]["random"]  # each fork draws its own random state
    finally:
        sandbox.close()
    assert sandbox.fork_servers[0].proc.poll() is not None


MATPLOTLIB_PROBE = """\
import sys
loaded_ahead = "matplotlib.font_manager" in sys.modules
import matplotlib.pyplot as plt
plt.plot([1, 2, 3])
plt.show()
import matplotlib, os
print(loaded_ahead, plt.get_backend(), os.path.exists(matplotlib.get_configdir()))
"""


@pytest.mark.slow
def test_a_forked_kernel_has_matplotlibs_font_list_and_still_draws_inline(backend):
    """Loaded in the zygote, with ipykernel's inline backend; not the grading user's matplotlib settings."""
    sandbox = Sandbox(backend=backend, slots=1, prestart=True, preimport=["matplotlib"])
    try:
        run, executed, outcome = _run(sandbox, MATPLOTLIB_PROBE)
        assert outcome.status == "passed", outcome.reason
        outputs = executed.cells[0].outputs
        assert any("image/png" in out.get("data", {}) for out in outputs)  # the figure, as without preloading
        assert [out["text"] for out in outputs if out.get("name") == "stdout"] == [
            "True module://matplotlib_inline.backend_inline False\n"
        ]  # the zygote's matplotlib folder, where it wrote the font list, is covered like the rest of its slot
        run.cleanup()
    finally:
        sandbox.close()


@pytest.mark.slow
def test_a_forked_kernel_ends_with_the_worker_that_asked_for_it(backend):
    sandbox = Sandbox(backend=backend, slots=1, prestart=True)
    try:
        run, _, outcome = _run(sandbox, "import time\ntime.sleep(120)", timeout_s=3)
        assert outcome.status == "timeout"  # the worker was killed: its kernel's parent sees it go
        deadline = time.monotonic() + 5
        while _processes_of(run.uid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _processes_of(run.uid)
    finally:
        sandbox.close()
    assert not _zygotes_of(sandbox)
    # its run was never cleaned up: closing the sandbox removed the run's cgroup too
    assert not [name for name in KERNELS.names() if name.startswith(f"{os.getpid()}-")]


@pytest.mark.slow
def test_the_zygote_answers_a_bad_request_and_serves_the_next(backend):
    sandbox = Sandbox(backend=backend, slots=1, prestart=True)
    try:
        path = str(sandbox.fork_servers[0].socket_path)
        deadline = time.monotonic() + 60
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(path)
            conn.sendall(b"not json\n")
            assert conn.recv(4096).startswith(b"bad request")
        with pytest.raises(RuntimeError, match="gave no kernel: bad request"):
            fork_kernel(path, sandbox.fork_servers[0].proc.pid, {"policy": 1})
        missing = {"policy": "/nonexistent/policy.json", "connection_file": "", "env": {}, "cwd": "/"}
        with pytest.raises(RuntimeError, match="gave no kernel: cannot start the kernel: FileNotFoundError"):
            fork_kernel(path, sandbox.fork_servers[0].proc.pid, missing)
        _, _, outcome = _run(sandbox, "print('still serving')")
        assert outcome.status == "passed", outcome.reason
    finally:
        sandbox.close()


@pytest.mark.slow
def test_when_a_zygote_ends_its_slot_starts_each_kernel_as_a_process_of_its_own(backend):
    sandbox = Sandbox(backend=backend, slots=1, prestart=True)
    try:
        os.killpg(sandbox.fork_servers[0].proc.pid, signal.SIGKILL)
        sandbox.fork_servers[0].proc.wait()
        run, _, outcome = _run(sandbox, "print('started as a process')")
        assert outcome.status == "passed", outcome.reason
        spec = json.loads((run.private / "jupyter" / "kernels" / "rocmlab-sandbox" / "kernel.json").read_text())
        assert "kernel_provisioner" not in spec["metadata"]
        assert ("kernel-inside" if backend == "bubblewrap" else "kernel") in spec["argv"]
        assert any("fork server ended: exit status -9" in p for p in sandbox.isolation["problems"])
    finally:
        sandbox.close()


LITTER = """
import os
left = []
for folder in FOLDERS:
    try:
        with open(os.path.join(folder, "rocmlab-litter"), "w") as out:
            out.write("from the learner before")
        os.chmod(os.path.join(folder, "rocmlab-litter"), 0o644)
        left.append(folder)
    except OSError:
        pass
print(left)
"""
FIND = "import os\nprint([f for f in FOLDERS if os.path.exists(os.path.join(f, 'rocmlab-litter'))])"


@pytest.mark.slow
@pytest.mark.parametrize("forked", [True, False], ids=["forked", "per-kernel"])
def test_what_a_learner_leaves_in_a_folder_every_user_may_write_never_reaches_the_next(backend, forked):
    folders = [f for f in PRIVATE_TEMP if os.path.isdir(f)]
    assert "/run/lock" in folders or not os.path.isdir("/run/lock")
    sandbox = Sandbox(backend=backend, slots=1, prestart=forked)
    try:
        assert sandbox.isolation["forked_kernels"] == forked
        runs = []
        for probe in (LITTER, FIND):
            run, executed, outcome = _run(sandbox, f"FOLDERS = {folders!r}\n{probe}")
            assert outcome.status == "passed", outcome.reason
            runs.append(executed.cells[0].outputs[0]["text"].strip())
            run.cleanup()
        assert runs == [repr(folders), "[]"]  # written in its own, found in none by the next learner
        assert not [f for f in folders if os.path.exists(os.path.join(f, "rocmlab-litter"))]  # nor on the host
    finally:
        sandbox.close()


OWNER = """
import os, sys, time
from rocmlab.sandbox.limits import Sandbox
sandbox = Sandbox(backend=sys.argv[1], slots=1, prestart=True)
while not os.path.exists(sandbox.fork_servers[0].socket_path):
    time.sleep(0.05)
print(sandbox.base, flush=True)
time.sleep(120)
"""


@pytest.mark.slow
def test_a_zygote_ends_with_the_grader_that_started_it_even_when_that_one_is_killed(backend):
    owner = subprocess.Popen([sys.executable, "-c", OWNER, backend], stdout=subprocess.PIPE, text=True)
    try:
        base = owner.stdout.readline().strip()  # once its zygote serves, as in a class being graded
    finally:
        owner.kill()
        owner.wait()
    assert base.startswith("/"), base
    deadline = time.monotonic() + 10
    while (left := _processes_naming(base)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"outlived the grader that was killed: {left}"


def _processes_naming(path: str) -> list:
    commands = ((p, " ".join(p.info["cmdline"] or [])) for p in psutil.process_iter(["cmdline"]))
    return [p for p, command in commands if path in command]


def _zygotes_of(sandbox) -> list:
    """The fork servers of ``sandbox`` (their sockets lie in its folder); other runs' may be running."""
    return [
        p for p in _processes_naming(str(sandbox.base)) if "rocmlab.sandbox.forkserver" in " ".join(p.info["cmdline"])
    ]


def _processes_of(uid: int) -> list:
    return [p for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == uid]
