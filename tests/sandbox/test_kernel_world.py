"""The world a sandboxed kernel sees is consistent and its own (issue 47), on every backend here:
its working folder, ``.`` and the folder's absolute path are one file system (a rename from one
spelling to the other works, as safetensors' save does); its environment is an allow-list
(nothing of the grader's shell leaks in); its ranks reach each other over loopback TCP, as
``sandbox.limits.LOOPBACK_TCP`` says; and so is its view of the machine: a readable copy of
the solutions anywhere outside what the kernel needs is not there."""

import json
import os
import shutil
import uuid
from pathlib import Path

import nbformat
import pytest
from fresh_attack import LEARNER, harness
from harness_schema import harness_errors

from rocmlab.grading.preflight import course_view, sandbox_env
from rocmlab.sandbox.cgroups import KERNELS
from rocmlab.sandbox.limits import Sandbox, bubblewrap_works, is_root, namespaces_work

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

PLANTED = "ROCMLAB_INSTRUCTOR_SECRET"
LIMIT_FILES = ("memory.max", "memory.limit_in_bytes", "pids.max")

# (backend, forked): each way a graded kernel starts on this machine
WAYS = [("bubblewrap", True), ("bubblewrap", False), ("namespaces", True), ("namespaces", False)]


@pytest.fixture(params=WAYS, ids=[f"{b}-{'forked' if f else 'per-kernel'}" for b, f in WAYS])
def sandbox(request, monkeypatch):
    backend, forked = request.param
    if backend == "bubblewrap" and not bubblewrap_works():
        pytest.skip("bubblewrap is not installed (make system-deps installs it)")
    if backend == "namespaces" and not namespaces_work():
        pytest.skip("the namespace fallback needs root and unshare")
    if forked and not is_root():
        pytest.skip("forked kernels need root")
    monkeypatch.setenv(PLANTED, "the grader's own")
    monkeypatch.setenv("PWD", os.getcwd())
    monkeypatch.setenv("OLDPWD", "/root")
    hide, expose = course_view(ROOT)  # as rocmlab grade hides the course
    box = Sandbox(backend=backend, slots=1, prestart=forked, hide=hide, expose=expose, env=sandbox_env(ROOT))
    assert box.isolation["forked_kernels"] == forked
    yield box
    box.close()


PROBE = f"""
import json, os, tempfile
found = {{}}
cwd = os.getcwd()
os.makedirs("x", exist_ok=True)
with open(os.path.join(cwd, "x", "tmp"), "w") as out:
    out.write("saved")
os.rename(os.path.join(cwd, "x", "tmp"), "./x/target")  # safetensors: temp from getcwd(), target relative
found["rename"] = open("x/target").read()
folder = tempfile.mkdtemp(dir=".")  # a hidden check's temp folder
with open(os.path.join(folder, "part"), "w") as out:
    out.write("part")
os.rename(os.path.join(os.path.abspath(folder), "part"), os.path.join(cwd, "whole"))
found["mkdtemp"] = open("whole").read()
with tempfile.NamedTemporaryFile("w", delete=False) as out:
    out.write("temp")
os.replace(out.name, "from-tmpdir")
found["tempfile"] = open("from-tmpdir").read()
found["same_fs"] = os.stat(".").st_dev == os.stat(cwd).st_dev == os.stat(os.environ["HOME"]).st_dev
found["env"] = sorted(os.environ)
found["planted"] = {PLANTED!r} in os.environ
import socket  # torchrun's rendezvous and gloo: a listener and a connection on 127.0.0.1
with socket.create_server(("127.0.0.1", 0)) as server:
    with socket.create_connection(server.getsockname(), timeout=5):
        found["loopback_tcp"] = server.accept()[0].getsockname()[0]
print(json.dumps(found))
"""


def _probe(sandbox, probe: str = PROBE, after=None) -> dict:
    """What ``probe`` printed (JSON) in a run's kernel; ``after(run)`` is called once the notebook
    ran, before the run is cleaned up."""
    source = sandbox.base / "probe.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(probe)]), source)
    run = sandbox.new_run(0, 60)
    try:
        executed, outcome = run.execute(source, run.private / "out.ipynb", {}, 60, 120)
        assert outcome.status == "passed", (outcome.reason, executed and executed.cells[0].get("outputs"))
        if after is not None:
            after(run)
        return json.loads(executed.cells[0].outputs[0]["text"])
    finally:
        run.cleanup()


def test_renames_and_temp_files_work_as_on_a_laptop_and_nothing_of_the_grader_leaks_in(sandbox):
    found = _probe(sandbox)
    assert found["rename"] == "saved" and found["mkdtemp"] == "part" and found["tempfile"] == "temp"
    assert found["same_fs"]
    assert not found["planted"]
    assert "PWD" not in found["env"] and "OLDPWD" not in found["env"]
    assert {"HOME", "TMPDIR", "PATH", "OMP_NUM_THREADS"} <= set(found["env"])
    assert sandbox.isolation["loopback_tcp"] and found["loopback_tcp"] == "127.0.0.1"  # labs 04, 05, 10 need it


# Where an instructor's machine may hold a readable copy of the solutions: another folder under
# /opt or /srv, a home, a backup in /tmp, a second checkout of the course.
PLANT_IN = ("/opt", "/srv", "/home", "/tmp")
SEARCH = """
import json, os
found = []
for top in ["/"]:
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if os.path.join(folder, d) not in ("/proc", "/sys", "/dev")]
        if "checks.py" in files:
            try:
                text = open(os.path.join(folder, "checks.py"), errors="replace").read()
            except OSError:
                continue
            if "@check(" in text:
                found.append(folder)
opt = os.listdir("/opt") if os.path.isdir("/opt") else []
print(json.dumps({"found": found, "root": os.listdir("/"), "opt": opt, "course": os.path.exists(COURSE)}))
"""


@pytest.fixture
def planted():
    """A readable copy of lab 01's solutions (checks.py included) in each place of ``PLANT_IN``,
    and a second checkout of the course (solutions/, src/) below /srv."""
    name = f"rocmlab-planted-{uuid.uuid4().hex[:8]}"
    lab = next((ROOT / "solutions").glob("01-*"))
    tops = [Path(top) / name for top in PLANT_IN if os.path.isdir(top)]
    for top in tops:
        shutil.copytree(lab, top / "solutions" / lab.name)
    shutil.copytree(ROOT / "solutions", tops[1] / "checkout" / "solutions")
    for top in tops:
        for folder in [top, *top.rglob("*")]:
            folder.chmod(0o755 if folder.is_dir() else 0o644)
    yield tops
    for top in tops:
        shutil.rmtree(top)


def test_a_readable_copy_of_the_solutions_anywhere_else_is_not_in_the_kernels_view(sandbox, planted):
    found = _probe(sandbox, f"COURSE = {str(ROOT / 'solutions')!r}\n{SEARCH}")
    assert found["found"] == [] and not found["course"], found
    assert not {"home", "srv", "mnt", "media", "boot"} & set(found["root"]), found["root"]
    assert all(name.startswith("rocm") for name in found["opt"]), found["opt"]


# /proc/self/cgroup: "ID:CONTROLLERS:PATH" per hierarchy (v1), "0::PATH" for the unified one
# (https://docs.kernel.org/admin-guide/cgroup-v2.html, "Processes"; man 7 cgroups, /proc/pid/cgroup)
CGROUP_PROBE = """
import json
lines = open("/proc/self/cgroup").read().splitlines()
print(json.dumps({kinds: path for _, kinds, path in (line.split(":", 2) for line in lines)}))
"""


def test_each_kernel_is_in_a_cgroup_of_its_own_with_the_labs_limits_removed_with_its_run(sandbox):
    """Issue 47: a kernel's memory (tmpfs included) and processes are bounded as a whole, by a
    cgroup of its own made from the sandbox's limits; it is gone once its run is cleaned up."""
    if sandbox.no_cgroup:
        assert sandbox.isolation["no_kernel_cgroup"] == sandbox.no_cgroup  # said, never silent
        pytest.skip(sandbox.no_cgroup)
    limits = sandbox.limits
    assert sandbox.isolation["kernel_cgroup"] == {
        "memory_max_mb": limits.memory_mb + limits.disk_mb,
        "pids_max": limits.max_processes,
    }
    seen = {}

    def cgroup_files(run):
        seen["name"], seen["folders"] = run.cgroup, KERNELS.folders(run.cgroup)
        seen["values"] = {
            name: (f / name).read_text().strip() for f in seen["folders"] for name in LIMIT_FILES if (f / name).exists()
        }

    found = _probe(sandbox, CGROUP_PROBE, after=cgroup_files)
    memory = next(path for kinds, path in found.items() if kinds in ("memory", ""))
    pids = next(path for kinds, path in found.items() if kinds in ("pids", ""))
    assert memory == pids == f"/{KERNELS.parent}/{seen['name']}", found
    expected_memory = str((limits.memory_mb + limits.disk_mb) * 2**20)
    assert {seen["values"].get(k) for k in ("memory.max", "memory.limit_in_bytes")} - {None} == {expected_memory}
    assert seen["values"]["pids.max"] == str(limits.max_processes)
    assert not any(folder.exists() for folder in seen["folders"])  # removed with the run


def fresh_attack(box) -> dict:
    """The harness record of a learner who attacks the fresh kernel (``tests/fresh_attack.py``),
    graded in a run of ``box`` as ``rocmlab grade`` runs it (``Run.execute`` with a harness)."""
    source = box.base / "attack.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in LEARNER]), source)
    run = box.new_run(0, 60)
    try:
        _, outcome = run.execute(source, run.private / "out.ipynb", {}, 60, 180, harness(str(run.private / "c.json")))
        assert outcome.status == "passed", outcome.reason
        return outcome.harness
    finally:
        run.cleanup()


FRESH_VERDICTS = [("in_fresh_kernel", True, "", ""), ("in_learner_kernel", True, "", "")]


def test_the_fresh_kernel_sees_none_of_the_learners_patches_or_processes(sandbox):
    """Issue 47: in the learner's own sandbox run, after its kernel and every process of its run
    (the rewriter cleared its environment and left the kernel's session) ended, a fresh kernel
    started with the run's kernelspec sees the course's launcher, ``subprocess`` and ``json``
    unpatched and nothing rewriting the work folder; its check ran after the learner's."""
    record = fresh_attack(sandbox)
    verdicts = [(c["name"], c["passed"], c["detail"], c["error"]) for c in record["checks"]]
    assert verdicts == FRESH_VERDICTS, json.dumps(record, indent=1)
    assert record["fresh_start_s"] > 0
    assert harness_errors(record) == []
