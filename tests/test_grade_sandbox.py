"""Sandbox plumbing that needs no kernel: folders, permissions, launchers, the output cap."""

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from rocmlab.sandbox import Limits, Sandbox, closed_ancestor, is_root


def test_closed_ancestor_finds_the_first_folder_others_cannot_enter():
    top = Path(tempfile.mkdtemp(prefix="rocmlab-test-"))
    try:
        top.chmod(0o755)
        inner = top / "open" / "closed" / "python"
        inner.mkdir(parents=True)
        (top / "open").chmod(0o755)
        (top / "open" / "closed").chmod(0o700)
        assert closed_ancestor(inner) == (top / "open" / "closed", inner)
        assert closed_ancestor(top / "open") is None
    finally:
        shutil.rmtree(top)


def test_a_run_keeps_its_private_files_from_the_kernel(tmp_path):
    sandbox = Sandbox(Limits(memory_mb=1024), hide=[tmp_path, tmp_path / "missing"], slots=1, isolate=False)
    try:
        run = sandbox.new_run(0, 5)
        assert stat.S_IMODE(run.private.stat().st_mode) == 0o700 and run.private.stat().st_uid == os.getuid()
        policy = json.loads((run.private / "policy.json").read_text())
        assert policy["limits"]["memory_mb"] == 1024 and policy["cell_timeout_s"] == 5
        assert policy["hide"] == [str(tmp_path.resolve())]
        launcher = Path(run.worker.python)
        assert stat.S_IMODE(launcher.parent.stat().st_mode) == 0o700
        assert "rocmlab.sandbox worker" in launcher.read_text() and "unshare" not in launcher.read_text()
        spec = json.loads((run.private / "jupyter" / "kernels" / "rocmlab-sandbox" / "kernel.json").read_text())
        assert spec["argv"][1:4] == ["-m", "rocmlab.sandbox", "kernel"]
        assert run.env["HOME"] == str(run.work) and run.env["JUPYTER_PATH"].startswith(str(run.private))
        if sandbox.switch_user:
            assert run.work.stat().st_uid == policy["uid"] != 0
        run.cleanup()
        assert not run.folder.exists()
    finally:
        sandbox.close()
    assert not sandbox.base.exists()


@pytest.mark.skipif(not is_root(), reason="namespaces need root")
def test_isolated_runs_start_in_fresh_namespaces(tmp_path):
    sandbox = Sandbox(slots=1)
    try:
        assert sandbox.isolate, "unshare --net --pid --mount should work for root here"
        assert "unshare --net --pid --fork --mount-proc" in Path(sandbox.new_run(0, 5).worker.python).read_text()
    finally:
        sandbox.close()


def test_output_cap_keeps_errors_and_marks_truncation():
    script = textwrap.dedent("""
        import nbformat
        from nbclient import NotebookClient
        from rocmlab.sandbox import TRUNCATED_MARK, patch_notebook_client
        patch_notebook_client({"max_cell_output_kb": 1, "max_output_kb": 4})
        client = NotebookClient(nbformat.v4.new_notebook())
        client.reset_execution_trackers()
        client.clear_before_next_output = False
        assert client.interrupt_on_timeout
        def msg(kind, content):
            return {"msg_type": kind, "header": {"msg_type": kind}, "parent_header": {"msg_id": "m"},
                    "content": content, "metadata": {}}
        outs = []
        for _ in range(5):
            client.output(outs, msg("stream", {"name": "stdout", "text": "x" * 600}), None, 0)
        client.output(outs, msg("error", {"ename": "E", "evalue": "v", "traceback": []}), None, 0)
        kinds = [(o.output_type, o.get("name")) for o in outs]
        assert kinds == [("stream", "stdout"), ("stream", "stderr"), ("error", None)], kinds
        assert TRUNCATED_MARK in outs[1].text
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


@pytest.mark.slow
def test_without_root_powers_the_limits_still_apply():
    """The fallback a non-root grader or learner gets: no namespaces, no user switch, same limits."""
    import nbformat

    sandbox = Sandbox(Limits(memory_mb=2048), slots=1, isolate=False, switch_user=False)
    run = sandbox.new_run(0, 20)
    try:
        nb = nbformat.v4.new_notebook(
            cells=[
                nbformat.v4.new_code_cell(
                    "import os, resource\nprint(resource.getrlimit(resource.RLIMIT_AS)[0] // 2**20, os.getuid() == os.geteuid())"
                )
            ]
        )
        source = run.private / "in.ipynb"
        nbformat.write(nb, str(source))
        executed, outcome = run.execute(source, run.private / "out.ipynb", {}, 20, 60)
        assert outcome.status == "passed", outcome.reason
        assert executed.cells[0].outputs[0].text.split() == ["2048", "True"]
    finally:
        run.cleanup()
        sandbox.close()
