"""Sandbox plumbing that needs no kernel: folders, permissions, launchers, and the papermill
engine's output caps and timeout marks (in process: the engine patches nothing)."""

import asyncio
import json
import os
import queue
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

from rocmlab.execution.papermill_engine import (
    ENGINE_NAME,
    ERROR_KEEP,
    TIMEOUT_ENAME,
    TRUNCATED_MARK,
    LimitedEngine,
    LimitedNotebookClient,
    RunningNotebook,
    kernel_ready,
)
from rocmlab.grading.grader import lab_imports
from rocmlab.sandbox.entry import in_own_cgroup
from rocmlab.sandbox.limits import Limits, Sandbox, bubblewrap_works, is_root, thread_budget
from rocmlab.sandbox.paths import closed_ancestor, closed_ways, split_hidden


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
        assert "rocmlab.sandbox.entry worker" in launcher.read_text() and "unshare" not in launcher.read_text()
        spec = json.loads((run.private / "jupyter" / "kernels" / "rocmlab-sandbox" / "kernel.json").read_text())
        kernel = spec["argv"][len(in_own_cgroup(policy)) :]  # as root: after joining its own cgroup
        assert kernel[1:5] == ["-P", "-m", "rocmlab.sandbox.entry", "kernel"]  # -P: work folder not on sys.path
        assert run.env["HOME"] == str(run.work) and run.env["JUPYTER_PATH"].startswith(str(run.private))
        if sandbox.switch_user:
            assert run.work.stat().st_uid == policy["uid"] != 0
        run.cleanup()
        assert not run.folder.exists()
    finally:
        sandbox.close()
    assert not sandbox.base.exists()


def test_with_prestart_each_run_brings_the_next_and_a_slot_alternates_users():
    sandbox = Sandbox(slots=2, isolate=False, prestart=True)
    try:
        first = sandbox.new_run(0, 5)
        second = sandbox.new_run(0, 5)
        assert first.upcoming is second and second.upcoming is not None and second.upcoming.folder.exists()
        assert first.upcoming.kernel_spec().cwd == str(second.work)
        other_slot = sandbox.new_run(1, 5)
        assert other_slot.upcoming is not None and other_slot.worker is not first.worker
        assert sandbox.new_run(0, 7).cell_timeout_s == 7  # a run made for other limits is not used
        if sandbox.switch_user:  # two kernels of a slot live at once: never under one uid
            assert first.uid != second.uid and second.uid != second.upcoming.uid
            assert len({first.uid, second.uid, other_slot.uid, other_slot.upcoming.uid}) == 4
        for run in (first, second, other_slot):
            run.cleanup()
    finally:
        sandbox.close()
    assert not sandbox.base.exists()


def test_no_run_is_made_ahead_for_a_learner_no_slot_will_get():
    sandbox = Sandbox(slots=2, isolate=False, prestart=True)
    try:
        first = sandbox.new_run(0, 5, runs_left=1)  # one learner after this: slot 0 starts its kernel
        other = sandbox.new_run(1, 5, runs_left=1)  # slot 0's run made ahead is enough for them
        assert first.upcoming is not None and other.upcoming is None
        last = sandbox.new_run(0, 5, runs_left=0)
        assert last is first.upcoming and last.upcoming is None
        for run in (first, other, last):
            run.cleanup()
    finally:
        sandbox.close()


def test_kernels_preimport_only_the_heavy_libraries_the_lab_imports():
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import numpy as np\nfrom torch.nn import functional\nfrom . import local"),
        nbformat.v4.new_code_cell("import pandas", metadata={"nbgrader": {"solution": True}}),  # the learner's
        nbformat.v4.new_code_cell("not python ("),
    ]
    assert lab_imports(nb) == ["numpy", "torch"]
    sandbox = Sandbox(slots=1, isolate=False, preimport=["numpy", "matplotlib", "os"])
    try:
        run = sandbox.new_run(0, 5)
        assert json.loads((run.private / "policy.json").read_text())["preimport"] == ["numpy", "matplotlib"]
    finally:
        sandbox.close()


@pytest.mark.skipif(not is_root(), reason="namespaces need root")
def test_the_namespace_fallback_starts_workers_in_fresh_namespaces(tmp_path):
    sandbox = Sandbox(slots=1, backend="namespaces")
    try:
        assert sandbox.isolate and sandbox.isolation["backend"] == "namespaces"
        assert "unshare --net --pid --fork --mount-proc" in Path(sandbox.new_run(0, 5).worker.python).read_text()
    finally:
        sandbox.close()


@pytest.mark.skipif(not bubblewrap_works(), reason="bubblewrap is not installed (apt-get install bubblewrap)")
def test_bubblewrap_is_chosen_where_installed_and_wraps_each_kernel():
    tmp_path = Path(tempfile.mkdtemp(prefix="rocmlab-test-"))  # pytest's own are closed to others
    tmp_path.chmod(0o755)
    (tmp_path / "course" / "solutions").mkdir(parents=True)
    (tmp_path / "course" / "keep.toml").write_text("x")
    sandbox = Sandbox(slots=1, hide=[tmp_path / "course"], expose=[tmp_path / "course" / "keep.toml"])
    try:
        assert sandbox.backend == "bubblewrap" and sandbox.isolation["private_tmp"]
        run = sandbox.new_run(0, 5)
        policy = json.loads((run.private / "policy.json").read_text())
        argv = policy["bwrap"]
        for option in ("--unshare-net", "--unshare-pid", "--die-with-parent"):
            assert option in argv
        assert "/" not in argv  # an allow-list: no bind of the whole file system
        binds = [argv[i + 1] for i, a in enumerate(argv) if a == "--ro-bind"]
        assert "/usr" in binds and os.path.realpath(sys.prefix) in binds
        assert not any(b in ("/home", "/srv", "/opt", "/root", "/work", "/mnt") for b in binds), binds
        private = {argv[i + 1] for i, a in enumerate(argv) if a == "--tmpfs"}  # without root: a tmpfs each
        private |= {
            argv[i + 2] for i, a in enumerate(argv) if a == "--bind" and argv[i + 1].startswith(str(run.folder))
        }
        assert {"/tmp", "/var/tmp", "/dev/shm"} <= private  # as root: folders of the run's own space
        assert str((tmp_path / "course" / "solutions").resolve()) not in argv  # not in the view at all
        keep = str((tmp_path / "course" / "keep.toml").resolve())
        # below /tmp, which each kernel gets empty: shown read-only, the way down listable by the grader user
        at = argv.index(keep)
        assert argv[at - 1 : at + 2] == ["--ro-bind", keep, keep]
        assert argv[at - 5 : at - 1] == ["--perms", "0755", "--dir", str(Path(keep).parent)]
        assert run.engine_options["ipc_path"].startswith(str(run.folder))
        assert "unshare" not in Path(run.worker.python).read_text()
        spec = json.loads((run.private / "jupyter" / "kernels" / "rocmlab-sandbox" / "kernel.json").read_text())
        joins = in_own_cgroup(policy)  # as root: bwrap starts in the kernel's own cgroup
        assert spec["argv"][: len(joins)] == joins and (joins == []) == (sandbox.no_cgroup != "")
        kernel = spec["argv"][len(joins) :]
        inside = kernel.index("kernel-inside")  # bwrap starts the kernel's entry point itself
        assert kernel[: len(argv)] == argv and kernel[inside - 3 : inside] == ["-P", "-m", "rocmlab.sandbox.entry"]
        assert ["--ro-bind", "{connection_file}", "{connection_file}"] == kernel[len(argv) + 2 : len(argv) + 5]
    finally:
        sandbox.close()
        shutil.rmtree(tmp_path)


def test_hiding_a_folder_keeps_only_what_is_exposed_below_it(tmp_path):
    for name in ("a/b/keep", "a/b/other", "a/c", "d"):
        (tmp_path / name).mkdir(parents=True)
    covered = split_hidden([tmp_path], [tmp_path / "a" / "b" / "keep"])
    assert sorted(covered) == sorted(tmp_path / n for n in ("a/b/other", "a/c", "d"))
    assert split_hidden([tmp_path / "d"], []) == [tmp_path / "d"]


def message(kind, content, parent="m"):
    return {"msg_type": kind, "header": {"msg_type": kind}, "parent_header": {"msg_id": parent}, "content": content}


def limited_client(**options):
    client = LimitedNotebookClient(
        SimpleNamespace(nb=nbformat.v4.new_notebook(), autosave_cell=lambda: None), **options
    )
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


def test_the_cap_counts_errors_and_display_metadata_and_keeps_one_cut_error():
    client = limited_client(cell_output_limit=10_000, notebook_output_limit=20_000)
    outs = []
    big = {"ename": "E", "evalue": "v" * 50_000, "traceback": ["t" * 50_000] * 20}
    for _ in range(10):
        client.output(outs, message("error", big), None, 0)
    errors = [o for o in outs if o.output_type == "error"]
    assert len(errors) == 1 and len(json.dumps(errors[0])) <= 2 * ERROR_KEEP
    meta = {"data": {"text/plain": "1"}, "metadata": {"x": "m" * 30_000}}
    other = []
    client.output(other, message("display_data", meta), None, 1)
    assert [o.output_type for o in other] == ["stream"] and TRUNCATED_MARK in other[0].text


def test_display_updates_and_widget_state_stay_within_the_caps():
    client = limited_client(cell_output_limit=1000, notebook_output_limit=2000, store_widget_state=False)
    cell = nbformat.v4.new_code_cell("")
    cell.metadata["execution"] = {}
    client.nb.cells = [cell]
    shown = message("display_data", {"data": {"text/plain": "a"}, "metadata": {}, "transient": {"display_id": "d"}})
    client.process_message(shown, cell, 0)
    huge = message(
        "update_display_data", {"data": {"text/plain": "b" * 50_000}, "metadata": {}, "transient": {"display_id": "d"}}
    )
    client.process_message(huge, cell, 0)
    outs = cell.outputs
    assert outs and len(json.dumps(outs)) < 1000
    state = message("comm_msg", {"comm_id": "c", "data": {"state": {"v": "s" * 50_000}}})
    client.handle_comm_msg(outs, state, 0)
    assert client.widget_state == {}
    client.handle_comm_msg(outs, message("comm_msg", {"data": None}), 0)  # malformed: ignored


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


def test_saves_while_running_are_whole_compact_files_and_the_last_is_nbformats(tmp_path):
    """Each cell's start and end is on disk for a run stopped from outside; only the save after
    the last cell pays for nbformat's copy, validation and layout."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1"), nbformat.v4.new_markdown_cell("é")])
    nb.metadata["papermill"] = {}  # papermill.execute_notebook adds it before the engine runs
    out = tmp_path / "out.ipynb"
    manager = RunningNotebook(nb, output_path=str(out), progress_bar=False)
    manager.notebook_start()
    manager.cell_start(nb.cells[0], 0)
    on_disk = json.loads(out.read_text(encoding="utf-8"))
    assert on_disk["cells"][0]["metadata"]["papermill"]["status"] == "running"
    assert "\n" not in out.read_text(encoding="utf-8") and not list(tmp_path.glob(".*"))
    manager.cell_complete(nb.cells[0], 0)
    assert json.loads(out.read_text(encoding="utf-8"))["cells"][0]["metadata"]["papermill"]["status"] == "completed"
    manager.notebook_complete()
    assert out.read_text(encoding="utf-8") == nbformat.writes(nb)
    nbformat.validate(nbformat.read(out, as_version=4))


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


def test_without_root_bubblewrap_gets_its_own_user_namespace(monkeypatch):
    """The instructor's path (#26): not root, so no grader users, but a user namespace with no
    capabilities around each kernel, and the same hidden paths and private temp folders."""
    from rocmlab.sandbox import limits as sandbox_module

    monkeypatch.setattr(sandbox_module, "is_root", lambda: False)
    box = Sandbox(slots=1, backend="bubblewrap", hide=[Path.home()])
    try:
        assert not box.switch_user and box.isolation["backend"] == "bubblewrap"
        run = box.new_run(0, 5)
        argv = json.loads((run.private / "policy.json").read_text())["bwrap"]
        assert argv[1] == "--unshare-user" and "--unshare-net" in argv
        at = argv.index("/tmp")  # its own, of the size a kernel may write
        assert ["--perms", "1777", "--size", str(2048 * 2**20), "--tmpfs", "/tmp"] == argv[at - 5 : at + 1]
        assert run.uid is None and "--bind" in argv and str(run.work) in argv
    finally:
        box.close()


def test_paths_below_a_closed_folder_are_grouped_under_it():
    top = Path(tempfile.mkdtemp(prefix="rocmlab-test-"))
    try:
        top.chmod(0o755)
        for name in ("home/python/bin", "home/cache/models", "open/x"):
            (top / name).mkdir(parents=True)
        (top / "home").chmod(0o700)
        ways = closed_ways([top / "home" / "python", top / "home" / "cache" / "models", top / "open" / "x"])
        assert ways == {str(top / "home"): [str(top / "home" / "python"), str(top / "home" / "cache" / "models")]}
    finally:
        shutil.rmtree(top)


@pytest.mark.slow
@pytest.mark.skipif(not is_root(), reason="namespaces need root")
def test_the_namespace_fallback_gives_each_kernel_private_temp_folders():
    marker = f"rocmlab-litter-{os.getpid()}"
    sandbox = Sandbox(Limits(), slots=1, backend="namespaces")
    run = sandbox.new_run(0, 20)
    try:
        code = (
            f"import os\nfor d in ('/tmp', '/var/tmp', '/dev/shm'):\n    open(os.path.join(d, {marker!r}), 'w').write('x')\n"
            "print('ok', os.getcwd() == os.environ['HOME'], len(os.listdir('/dev/shm')))"
        )
        source = run.private / "in.ipynb"
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)]), str(source))
        executed, outcome = run.execute(source, run.private / "out.ipynb", {}, 20, 60)
        assert outcome.status == "passed", outcome.reason
        assert executed.cells[0].outputs[0].text.strip() == "ok True 1"
    finally:
        run.cleanup()
        sandbox.close()
    assert not any(os.path.exists(os.path.join(d, marker)) for d in ("/tmp", "/var/tmp", "/dev/shm"))


class FakeKernelClient:
    """A kernel client without a kernel: ``shell`` replies in turn; each ``kernel_info`` request
    publishes on IOPub what ``published`` holds for its msg id (msg ids: info-0, info-1, ...)."""

    def __init__(self, shell, published, alive=True, iopub=()):
        self.shell, self.published, self.alive = list(shell), published, alive
        self.iopub, self.asked, self.handled = list(iopub), [], None

    def kernel_info(self):
        self.asked.append(f"info-{len(self.asked)}")
        self.iopub += self.published.get(self.asked[-1], [])
        return self.asked[-1]

    @staticmethod
    async def _next(messages):
        if not messages:
            raise queue.Empty
        return messages.pop(0)

    async def get_shell_msg(self, timeout=None):
        return await self._next(self.shell)

    async def get_iopub_msg(self, timeout=None):
        return await self._next(self.iopub)

    async def is_alive(self):
        return self.alive

    def _handle_kernel_info_reply(self, msg):
        self.handled = msg


def status(parent, state):
    return message("status", {"execution_state": state}, parent)


def test_a_kernel_is_ready_once_its_info_reply_and_idle_status_arrive():
    reply = message("kernel_info_reply", {}, "info-0")
    kc = FakeKernelClient(
        [message("execute_reply", {}, "older"), reply],
        {"info-0": [status("info-0", "busy"), status("info-0", "idle")]},
        iopub=[status("startup", "starting")],
    )
    asyncio.run(kernel_ready(kc, 5))
    assert kc.asked == ["info-0"] and kc.handled is reply and kc.iopub == []


def test_a_kernel_whose_idle_status_was_missed_is_asked_again():
    # the first request's status went out before IOPub was subscribed: only the second one's arrives
    shell = [message("kernel_info_reply", {}, "info-0"), message("kernel_info_reply", {}, "info-1")]
    kc = FakeKernelClient(shell, {"info-1": [status("info-1", "idle")]})
    asyncio.run(kernel_ready(kc, 5))
    assert kc.asked == ["info-0", "info-1"] and kc.handled is not None
    assert kc.handled["parent_header"]["msg_id"] == "info-1"


def test_a_dead_kernel_is_not_waited_for():
    with pytest.raises(RuntimeError, match="died"):
        asyncio.run(kernel_ready(FakeKernelClient([], {}, alive=False), 5))


def test_each_kernel_gets_its_share_of_the_cores_for_its_thread_pools(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "3")  # the instructor's own setting stays
    assert thread_budget(4) == {"OMP_NUM_THREADS": "4", "OPENBLAS_NUM_THREADS": "4", "MKL_NUM_THREADS": "3"}
    assert thread_budget(32)["OMP_NUM_THREADS"] == "1"
    sandbox = Sandbox(slots=2, isolate=False)
    try:
        assert sandbox.new_run(0, 5).env["OPENBLAS_NUM_THREADS"] == "8"
    finally:
        sandbox.close()
