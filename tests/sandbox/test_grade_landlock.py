"""The Landlock backend: the sandbox of a grading pod that runs without root, without
CAP_SYS_ADMIN and under the runtime's default seccomp profile (no user namespaces, so neither
bubblewrap nor the namespace fallback). A real kernel attacks what is around it."""

import json
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from rocmlab.errors import InputError
from rocmlab.sandbox import landlock
from rocmlab.sandbox import limits as sandbox
from rocmlab.sandbox.limits import Limits, Sandbox

pytestmark = pytest.mark.skipif(landlock.abi() < 6, reason="needs Landlock ABI 6 (Linux 6.12)")

ATTACKS = """
import os, signal, socket
def attempt(what, action):
    try:
        action()
        print(what, "DONE")
    except OSError as exc:
        print(what, "refused", type(exc).__name__)

attempt("read-secret", lambda: open(SECRET).read())
attempt("list-course", lambda: os.listdir(COURSE))
attempt("write-out", lambda: open(OUT + "/forged.txt", "w").write("x"))
attempt("write-tmp", lambda: open("/tmp/planted-by-a-learner", "w").write("x"))
attempt("signal-worker", lambda: os.kill(os.getppid(), signal.SIGTERM))
attempt("read-worker-mem", lambda: open(f"/proc/{os.getppid()}/mem", "rb").read(1))
attempt("tcp-connect", lambda: socket.create_connection(("127.0.0.1", 9), timeout=2))
attempt("write-work", lambda: open("mine.txt", "w").write("x"))
import numpy
print("numpy", numpy.arange(3).sum())
"""


@pytest.fixture
def course():
    top = Path(tempfile.mkdtemp(prefix="rocmlab-landlock-"))
    top.chmod(0o755)
    (top / "solutions").mkdir()
    (top / "solutions" / "checks.py").write_text("ANSWER = 42\n")
    (top / "out").mkdir()
    yield top
    shutil.rmtree(top, ignore_errors=True)


@pytest.mark.slow
def test_a_landlock_kernel_reaches_only_its_work_folder(course, monkeypatch):
    monkeypatch.setattr(sandbox, "is_root", lambda: False)  # a pod's uid: no grader users
    box = Sandbox(Limits(memory_mb=0), hide=[course], slots=1, backend="landlock")
    run = box.new_run(0, 30)
    try:
        assert box.isolation["backend"] == "landlock" and box.isolation["network"]
        assert not box.isolation[
            "loopback_tcp"
        ]  # what the tcp-connect attack below proves: labs needing it are refused
        assert box.isolation["landlock_abi"] == landlock.abi() and not box.isolation["unprivileged_user"]
        policy = json.loads((run.private / "policy.json").read_text())
        assert str(run.work) in policy["landlock"]["write"] and str(course) not in policy["landlock"]["read"]
        setup = f"SECRET = {str(course / 'solutions' / 'checks.py')!r}\nCOURSE = {str(course)!r}\nOUT = {str(course / 'out')!r}\n"
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(setup + ATTACKS)])
        source = run.private / "in.ipynb"
        nbformat.write(nb, str(source))
        executed, outcome = run.execute(source, run.private / "out.ipynb", {}, 30, 120)
        assert outcome.status == "passed", outcome.reason
        outputs = executed.cells[0].outputs
        assert {o.output_type for o in outputs} == {"stream"}, outputs  # no error
        printed = dict(line.split(" ", 1) for o in outputs for line in o.text.splitlines())
        # without Landlock (as root here) the first four succeed, the memory read fails with EIO
        # at offset 0 and the connection is refused by the closed port: each denial is Landlock's
        attacks = (
            "read-secret",
            "list-course",
            "write-out",
            "write-tmp",
            "signal-worker",
            "read-worker-mem",
            "tcp-connect",
        )
        for attack in attacks:
            assert printed[attack] == "refused PermissionError", (attack, printed)
        assert printed["write-work"] == "DONE" and printed["numpy"] == "3"
        assert not (course / "out" / "forged.txt").exists() and not Path("/tmp/planted-by-a-learner").exists()
        assert (run.work / "mine.txt").read_text() == "x"
    finally:
        run.cleanup()
        box.close()


def test_a_system_folder_holding_a_hidden_path_is_not_granted(course, monkeypatch):
    monkeypatch.setattr(sandbox, "is_root", lambda: False)
    monkeypatch.setattr(sandbox, "SYSTEM_READ", ("/usr", str(course)))
    matrix = course / "matrix.toml"
    matrix.write_text("")
    box = Sandbox(slots=1, backend="landlock", hide=[course], expose=[matrix])
    try:
        view = box._landlock_view(box.base / "work", box.base / "ipc")
        assert str(course) not in view["read"] and "/usr" in view["read"]
        assert view["write"] == [str(box.base / "work"), str(box.base / "ipc")]
        assert str(matrix) in view["read"] and not box.problems
    finally:
        box.close()


def test_the_model_caches_the_grader_names_are_readable_unless_hidden(course, monkeypatch):
    monkeypatch.setattr(sandbox, "is_root", lambda: False)
    monkeypatch.setenv("HF_HOME", "/opt/rocmlab/hf")
    monkeypatch.setenv("HF_HUB_CACHE", str(course / "hub"))
    box = Sandbox(slots=1, backend="landlock", hide=[course])
    try:
        view = box._landlock_view(box.base / "work", box.base / "ipc")
        assert "/opt/rocmlab/hf" in view["read"] and str(course / "hub") not in view["read"]
    finally:
        box.close()


def test_an_exposed_folder_around_a_hidden_one_is_named_a_problem(course, monkeypatch):
    monkeypatch.setattr(sandbox, "is_root", lambda: False)
    secret = course / "solutions"
    box = Sandbox(slots=1, backend="landlock", hide=[secret], expose=[course])
    try:
        box._landlock_view(box.base / "work", box.base / "ipc")
        assert any(str(secret) in p and "stays readable" in p for p in box.problems), box.problems
    finally:
        box.close()


def test_choose_backend_falls_back_to_landlock_before_none(monkeypatch):
    monkeypatch.setattr(sandbox, "bubblewrap_works", lambda: False)
    monkeypatch.setattr(sandbox, "namespaces_work", lambda: False)
    assert sandbox.choose_backend(None) == "landlock"
    monkeypatch.setattr(landlock, "abi", lambda: 5)  # a kernel could still signal a classmate's kernel
    assert sandbox.choose_backend(None) == "none"
    monkeypatch.setattr(landlock, "abi", lambda: 0)
    assert sandbox.choose_backend(None) == "none"
    assert sandbox.choose_backend(False) == "none"


def test_rocmlab_sandbox_names_a_working_backend_or_is_refused(monkeypatch):
    monkeypatch.setattr(sandbox, "bubblewrap_works", lambda: True)
    monkeypatch.setattr(sandbox, "namespaces_work", lambda: False)
    monkeypatch.setenv("ROCMLAB_SANDBOX", "bubblewrap")
    assert sandbox.choose_backend(None) == "bubblewrap"
    assert sandbox.choose_backend(False) == "none"
    monkeypatch.setenv("ROCMLAB_SANDBOX", "namespaces")
    with pytest.raises(InputError, match="ROCMLAB_SANDBOX='namespaces'.*does not work"):
        sandbox.choose_backend(None)
    monkeypatch.setenv("ROCMLAB_SANDBOX", "none")
    with pytest.raises(InputError, match="expected one of bubblewrap, namespaces, landlock"):
        sandbox.choose_backend(None)


def test_the_import_path_entry_of_an_exposed_package_is_listed_and_nothing_else(course, monkeypatch):
    """An editable install puts a checkout's src/ on sys.path, and Python lists it to import
    rocmlab: unlisted, a process the kernel starts (lab 01's `python -m rocmlab.doctor`) found
    no rocmlab. Listing gives names only; a folder that holds a hidden path is never listed."""
    monkeypatch.setattr(sandbox, "is_root", lambda: False)
    src, package = course / "src", course / "src" / "pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (src / "pkg.egg-info").mkdir()  # hidden (split around the package), its names listable
    (course / "matrix.toml").write_text("")
    monkeypatch.setattr(sys, "path", [*sys.path, str(src), str(course)])
    box = Sandbox(slots=1, backend="landlock", hide=[course], expose=[package, course / "matrix.toml"])
    try:
        view = box._landlock_view(box.base / "work", box.base / "ipc")
        assert str(src) in view["listed"] and str(course) not in view["listed"]
        assert str(src) not in view["read"]
    finally:
        box.close()


def test_the_kernel_may_write_the_usual_device_files(course, monkeypatch):
    """/dev is readable only: lab 10's reference wrote to /dev/null (a subprocess's DEVNULL) and
    got PermissionError under Landlock. The device files a bubblewrap kernel's /dev holds are writable."""
    monkeypatch.setattr(sandbox, "is_root", lambda: False)
    box = Sandbox(slots=1, backend="landlock", hide=[course])
    try:
        view = box._landlock_view(box.base / "work", box.base / "ipc")
        assert {"/dev/null", "/dev/zero", "/dev/urandom"} <= set(view["devices"])
    finally:
        box.close()


@pytest.mark.slow
def test_a_landlock_runs_fresh_kernel_sees_none_of_the_learners_patches_or_processes(course, monkeypatch):
    """Issue 47 on the backend without root: the learner's kernel keeps the grader's uid, so its
    run is ended by its tag and the worker's descendants (a subreaper) before the fresh kernel starts."""
    from test_kernel_world import FRESH_VERDICTS, fresh_attack

    monkeypatch.setattr(sandbox, "is_root", lambda: False)  # a pod's uid: no grader users
    box = Sandbox(Limits(memory_mb=0), hide=[course], slots=1, backend="landlock")
    try:
        record = fresh_attack(box)
    finally:
        box.close()
    assert [(c["name"], c["passed"], c["detail"], c["error"]) for c in record["checks"]] == FRESH_VERDICTS, record
