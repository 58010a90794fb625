"""The world a sandboxed kernel sees is consistent and its own (issue 47), on every backend here:
its working folder, ``.`` and the folder's absolute path are one file system (a rename from one
spelling to the other works, as safetensors' save does), and its environment is an allow-list
(nothing of the grader's shell leaks in)."""

import json
import os

import nbformat
import pytest

from rocmlab.sandbox.limits import Sandbox, bubblewrap_works, is_root, namespaces_work

pytestmark = pytest.mark.slow

PLANTED = "ROCMLAB_INSTRUCTOR_SECRET"

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
    box = Sandbox(backend=backend, slots=1, prestart=forked)
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
print(json.dumps(found))
"""


def _probe(sandbox) -> dict:
    source = sandbox.base / "probe.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(PROBE)]), source)
    run = sandbox.new_run(0, 60)
    try:
        executed, outcome = run.execute(source, run.private / "out.ipynb", {}, 60, 120)
        assert outcome.status == "passed", (outcome.reason, executed and executed.cells[0].get("outputs"))
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
