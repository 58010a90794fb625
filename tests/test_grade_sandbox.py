"""Sandbox plumbing that needs no kernel: folders, permissions, launchers, and the papermill
engine's output caps and timeout marks (in process: the engine patches nothing)."""

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

from rocmlab.papermill_engine import ENGINE_NAME, TIMEOUT_ENAME, TRUNCATED_MARK, LimitedEngine, LimitedNotebookClient
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


def message(kind, content):
    return {"msg_type": kind, "header": {"msg_type": kind}, "parent_header": {"msg_id": "m"}, "content": content}


def limited_client(**options):
    client = LimitedNotebookClient(SimpleNamespace(nb=nbformat.v4.new_notebook()), **options)
    client.reset_execution_trackers()
    client.clear_before_next_output = False  # set by execute_cell before a cell's first output
    return client


def test_output_cap_keeps_errors_and_marks_truncation():
    client = limited_client(cell_output_limit=1024, notebook_output_limit=4096)
    outs = []
    for _ in range(5):
        client.output(outs, message("stream", {"name": "stdout", "text": "x" * 600}), None, 0)
    client.output(outs, message("error", {"ename": "E", "evalue": "v", "traceback": []}), None, 0)
    kinds = [(o.output_type, o.get("name")) for o in outs]
    assert kinds == [("stream", "stdout"), ("stream", "stderr"), ("error", None)], kinds
    assert TRUNCATED_MARK in outs[1].text


def test_the_notebook_cap_counts_every_cell_and_a_client_without_caps_keeps_all():
    capped = limited_client(cell_output_limit=0, notebook_output_limit=1000)
    outs = [[], [], []]
    for cell in range(3):
        capped.output(outs[cell], message("stream", {"name": "stdout", "text": "y" * 400}), None, cell)
    assert [len(o) for o in outs] == [1, 1, 1] and TRUNCATED_MARK in outs[2][0].text
    plain = limited_client()
    kept = []
    for _ in range(50):
        plain.output(kept, message("stream", {"name": "stdout", "text": "z" * 10_000}), None, 0)
    assert all(o.name == "stdout" for o in kept)


def test_an_interrupted_cell_is_marked_and_nbclient_itself_is_untouched():
    import asyncio

    from nbclient import NotebookClient

    client = limited_client(interrupt_on_timeout=True)
    client.km = SimpleNamespace(interrupt_kernel=lambda: None)
    cell = nbformat.v4.new_code_cell("while True: pass")
    assert asyncio.run(client._async_handle_timeout(7, cell)) is None
    assert [(o.output_type, o.ename) for o in cell.outputs] == [("error", TIMEOUT_ENAME)]
    assert "7 s" in cell.outputs[0].evalue
    assert NotebookClient.output is not LimitedNotebookClient.output  # nothing patched process-wide
    assert not NotebookClient(nbformat.v4.new_notebook()).interrupt_on_timeout


def test_the_engine_is_in_papermills_registry():
    from papermill.engines import papermill_engines

    assert papermill_engines.get_engine(ENGINE_NAME) is LimitedEngine


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
