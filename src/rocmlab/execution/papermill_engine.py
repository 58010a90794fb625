"""The papermill engine every rocmlab run uses: nbclient with output caps and marked timeouts.

papermill picks an engine by name from its registry (``papermill.engines.papermill_engines``);
this module registers ``rocmlab`` there when imported. (Not through a ``papermill.engine`` entry
point: papermill loads those while it is itself being imported, which this module does.) The
engine is papermill's nbclient engine with one client class instead of papermill's,
``LimitedNotebookClient``, whose options are passed as
``papermill.execute_notebook(..., engine_name="rocmlab", **options)``:

- ``cell_output_limit`` / ``notebook_output_limit`` (bytes; 0: none): output kept per cell and
  per notebook, counting every part of a message (text, every display format, its metadata,
  an error's name, value and traceback); past a limit the rest is dropped and the cell gets one
  stderr line, ``TRUNCATED_MARK``. The first error of a cell is always kept, cut to
  ``ERROR_KEEP`` characters (it says why a test failed);
- ``store_widget_state`` (nbclient's own option): the grader turns it off, so widget comm
  state never reaches the notebook's metadata; a malformed comm message is ignored;
- ``ipc_path``: the kernel talks to the client over Unix sockets at this path prefix (a kernel
  in its own network namespace, ``rocmlab.sandbox.limits``), not over TCP;
- ``interrupt_on_timeout`` (nbclient's own option): a cell past its time limit is interrupted and
  the notebook goes on; the cell gets an error output named ``TIMEOUT_ENAME`` that says so;
- ``harness``: after the last cell, while the kernel still runs, the trusted harness asks it the
  lab's checks (``rocmlab.harness.run_harness``) and writes its record to ``harness["out"]``;
  ``reference``: the worker's reference kernel for those checks, or why there is none
  (``rocmlab.execution.reference_kernel``); ``fresh``: what starts the run's fresh kernel for the
  checks that take one (``rocmlab.execution.worker.FreshKernels``), after the learner's kernel ends.
- ``cells_done``: a callable, called after the last cell (before the harness): the worker tells
  its parent, whose whole-lab limit then gives way to the harness's own time budget.

papermill saves the notebook at each cell's start and end, so that a run stopped from outside
(its whole-lab limit, a crash) leaves each cell's state on disk. Those saves are compact JSON
(``RunningNotebook``); the final one is papermill's own, validated and laid out as nbformat writes
it. Through nbformat, each save deep-copied and validated the whole notebook and wrote it with
Python's pure-Python indenting encoder: with lab 01's 31 code cells and its plots, the worker's
CPU per notebook (its checks included) went from 2.3 s to 1.05 s.

Nothing is patched: a client made elsewhere in the process is nbclient's own.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import time
from pathlib import Path

import nbformat
from jupyter_core.utils import ensure_async, run_sync
from nbclient.util import run_hook
from papermill.clientwrap import PapermillNotebookClient
from papermill.engines import NBClientEngine, NotebookExecutionManager, catch_nb_assignment, papermill_engines
from papermill.log import logger
from papermill.utils import remove_args
from traitlets import Any, Dict, Integer

ENGINE_NAME = "rocmlab"
TRUNCATED_MARK = "[rocmlab] output truncated: this cell printed more than the grader keeps"
TIMEOUT_ENAME = "CellTimeoutError"
ERROR_KEEP = 8192  # characters of a kept error (name, value, traceback)
IOPUB_WAIT_S = 0.5  # for a request's idle status, before kernel_info is asked again
KILL_WAIT_S = 5


def message_size(msg: dict) -> int:
    """Characters of output a kernel message carries: every string in its content (text, every
    display format, metadata, an error's parts), keys included."""
    return _size(msg.get("content", {}))


def _size(value, depth: int = 0) -> int:
    if isinstance(value, str):
        return len(value)
    if depth > 32:  # deeper than any real output: counted as huge
        return 2**30
    if isinstance(value, dict):
        return sum(len(str(k)) + _size(v, depth + 1) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return sum(_size(v, depth + 1) for v in value)
    return len(str(value)) if value is not None else 0


def cut_error(content: dict) -> dict:
    """An error message's content cut to ``ERROR_KEEP`` characters in all."""
    budget = ERROR_KEEP
    ename = str(content.get("ename", ""))[:200]
    evalue = str(content.get("evalue", ""))[: budget // 4]
    budget -= len(ename) + len(evalue)
    traceback = []
    for line in content.get("traceback", []) or []:
        line = str(line)[:budget]
        if not line:
            break
        traceback.append(line)
        budget -= len(line)
    return {**content, "ename": ename, "evalue": evalue, "traceback": traceback}


class LimitedNotebookClient(PapermillNotebookClient):
    """papermill's client, keeping at most so much output and marking the cells it interrupts."""

    cell_output_limit = Integer(0, help="characters of stream/display output kept per cell (0: no limit)").tag(
        config=True
    )
    notebook_output_limit = Integer(0, help="characters of stream/display output kept per notebook (0: no limit)").tag(
        config=True
    )

    harness = Dict(
        default_value=None, allow_none=True, help="the checks to run after the last cell (rocmlab.harness)"
    ).tag(config=True)

    cells_done = Any(default_value=None, allow_none=True, help="called after the last cell, before the harness")

    def execute(self, **kwargs):
        """papermill's ``execute``, with the kernel's ``language_info`` asked right after the cells
        (``papermill_execute_cells``): by the end of the harness the learner's kernel may have been
        shut down for a fresh kernel (``rocmlab.harness.Fresh``)."""
        self.reset_execution_trackers()
        with self.setup_kernel(**kwargs):
            self.log.info(f"Executing notebook with kernel: {self.kernel_name}")
            self.papermill_execute_cells()
            self.set_widgets_metadata()
        return self.nb

    def papermill_execute_cells(self):
        super().papermill_execute_cells()
        info = self.wait_for_reply(self.kc.kernel_info())
        self.nb.metadata["language_info"] = info["content"]["language_info"]
        if self.cells_done is not None:
            self.cells_done()
        if self.harness:
            from ..harness import run_harness
            from .results import write_json_atomic

            record = run_harness(
                self.kc, self.km, self.harness, getattr(self, "reference", None), getattr(self, "fresh", None)
            )
            write_json_atomic(Path(self.harness["out"]), record)

    def reset_execution_trackers(self) -> None:
        super().reset_execution_trackers()
        self.output_kept: dict = {}
        self.truncated_cells: set = set()

    def output(self, outs, msg, display_id, cell_index):
        first_error = False
        if msg["msg_type"] == "error":
            msg = {**msg, "content": cut_error(msg.get("content", {}))}
            first_error = not any(o.get("output_type") == "error" for o in outs)
        over = msg["msg_type"] != "clear_output" and self._over_limit(msg, cell_index)
        if not over or first_error:  # a cell's first error is kept: it says why the cell failed
            return super().output(outs, msg, display_id, cell_index)
        if cell_index not in self.truncated_cells:
            self.truncated_cells.add(cell_index)
            outs.append(nbformat.v4.new_output("stream", name="stderr", text=TRUNCATED_MARK + "\n"))
        return None

    def _over_limit(self, msg: dict, cell_index: int) -> bool:
        size = message_size(msg)
        self.output_kept[cell_index] = self.output_kept.get(cell_index, 0) + size
        self.output_kept["notebook"] = self.output_kept.get("notebook", 0) + size
        return (0 < self.cell_output_limit < self.output_kept[cell_index]) or (
            0 < self.notebook_output_limit < self.output_kept["notebook"]
        )

    def _update_display_id(self, display_id, msg):
        """An update replaces earlier outputs in place: refused when it alone would pass a limit."""
        size = message_size(msg)
        if (0 < self.cell_output_limit < size) or (
            0 < self.notebook_output_limit < self.output_kept.get("notebook", 0) + size
        ):
            return None
        return super()._update_display_id(display_id, msg)

    def handle_comm_msg(self, outs, msg, cell_index):
        try:
            return super().handle_comm_msg(outs, msg, cell_index)
        except (KeyError, TypeError, AttributeError, ValueError):
            return None  # a malformed comm message from the kernel: nothing to keep

    async def _async_handle_timeout(self, timeout, cell=None):
        if self.interrupt_on_timeout and cell is not None:
            cell.outputs.append(
                nbformat.v4.new_output(
                    "error",
                    ename=TIMEOUT_ENAME,
                    evalue=f"the cell ran past its limit of {timeout} s and was interrupted",
                    traceback=[],
                )
            )
        return await super()._async_handle_timeout(timeout, cell)

    async def async_start_new_kernel_client(self):
        """nbclient's start, with ``kernel_ready`` as the wait (a started-ahead kernel is used at once)."""
        self.kc = self.km.client()
        try:
            await ensure_async(self.kc.start_channels())
            await kernel_ready(self.kc, self.startup_timeout)
        except Exception:
            await self._async_cleanup_kernel()
            raise
        self.kc.allow_stdin = False
        await run_hook(self.on_notebook_start, notebook=self.nb)
        return self.kc

    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    async def _async_cleanup_kernel(self):
        """``shutdown_kernel="immediate"``: SIGKILL and reap the kernel's process group at once,
        instead of jupyter_client's interrupt, kill and 0.1 s polls for its end."""
        process = kernel_process(self.km)
        if self.shutdown_kernel != "immediate" or process is None:
            return await super()._async_cleanup_kernel()
        try:
            await self.km.provisioner.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=KILL_WAIT_S)
        finally:
            await ensure_async(self.km.cleanup_resources())
            if self.kc is not None:
                self.kc.stop_channels()
            self.kc = self.km = None

    _cleanup_kernel = run_sync(_async_cleanup_kernel)


def ipc_config(ipc_path: str | None):
    """jupyter_client's config for a kernel without network (bubblewrap): ZMQ over Unix sockets at
    the ``ipc_path`` prefix; the default (TCP) without one."""
    from traitlets.config import Config

    return Config({"KernelManager": {"transport": "ipc", "ip": ipc_path}}) if ipc_path else Config()


def kernel_process(manager):
    """The kernel's own process (its ``Popen``) under a jupyter_client manager, or None."""
    return getattr(getattr(manager, "provisioner", None), "process", None)


async def kernel_ready(kc, timeout: float) -> None:
    """Wait until the kernel answers ``kernel_info`` and its idle status for that request comes on
    IOPub (the subscription is live). jupyter_client's ``wait_for_ready`` also waits for 0.2 s of
    IOPub silence on every start; not needed here, as outputs are matched to their request."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg_id = kc.kernel_info()
        reply = await _reply_to(kc.get_shell_msg, msg_id, min(1.0, deadline - time.monotonic()))
        if reply is not None and await _reply_to(kc.get_iopub_msg, msg_id, IOPUB_WAIT_S, idle=True):
            kc._handle_kernel_info_reply(reply)
            return
        if not await ensure_async(kc.is_alive()):
            raise RuntimeError("Kernel died before replying to kernel_info")
    raise RuntimeError(f"Kernel didn't respond in {timeout:g} seconds")


async def _reply_to(get_msg, msg_id: str, timeout: float, idle: bool = False):
    """The next message on a channel answering ``msg_id`` (with ``idle``: its idle status), or None."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            msg = await ensure_async(get_msg(timeout=left))
        except queue.Empty:
            return None
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        if not idle or msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle":
            return msg
    return None


class RunningNotebook(NotebookExecutionManager):
    """papermill's execution manager, whose saves before the notebook completes are compact JSON
    (C's encoder, no copy, no validation), each replacing the file whole; the final save is
    papermill's."""

    @catch_nb_assignment
    def save(self, **kwargs):
        if self.end_time is not None or not self.output_path:
            return super().save(**kwargs)
        path = Path(self.output_path)
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(json.dumps(self.nb, ensure_ascii=False), encoding="utf-8")
        os.replace(partial, path)
        self.last_save_time = self.now()
        return None


class LimitedEngine(NBClientEngine):
    """papermill's nbclient engine, executing with ``LimitedNotebookClient``."""

    @classmethod
    def execute_notebook(
        cls, nb, kernel_name, output_path=None, progress_bar=True, log_output=False, autosave_cell_every=30, **kwargs
    ):
        """papermill's ``Engine.execute_notebook``, tracking the run with ``RunningNotebook``."""
        nb_man = RunningNotebook(
            nb,
            output_path=output_path,
            progress_bar=progress_bar,
            log_output=log_output,
            autosave_cell_every=autosave_cell_every,
        )
        nb_man.notebook_start()
        try:
            cls.execute_managed_notebook(nb_man, kernel_name, log_output=log_output, **kwargs)
        finally:
            nb_man.cleanup_pbar()
            nb_man.notebook_complete()
        return nb_man.nb

    @classmethod
    def execute_managed_notebook(
        cls,
        nb_man,
        kernel_name,
        log_output=False,
        stdout_file=None,
        stderr_file=None,
        start_timeout=60,
        execution_timeout=None,
        **options,
    ):
        options = remove_args(["input_path", "timeout", "startup_timeout"], **options)
        ipc_path = options.pop("ipc_path", None)
        if ipc_path:
            options["config"] = ipc_config(ipc_path)
        kernel = options.pop("km", None)  # started ahead for this run (rocmlab.execution.worker): this run's alone
        reference = options.pop("reference", None)  # the worker's, kept across runs: never this client's
        fresh = options.pop("fresh", None)  # starts the run's fresh kernel (rocmlab.execution.worker.FreshKernels)
        client = LimitedNotebookClient(
            nb_man,
            km=kernel,
            timeout=execution_timeout,
            startup_timeout=start_timeout,
            kernel_name=kernel_name,
            log=logger,
            log_output=log_output,
            stdout_file=stdout_file,
            stderr_file=stderr_file,
            **options,
        )
        client.owns_km = True  # so that the client ends that kernel after the run, as one it started
        client.reference = reference
        client.fresh = fresh
        return client.execute()


papermill_engines.register(ENGINE_NAME, LimitedEngine)
