"""The papermill engine every rocmlab run uses: nbclient with output caps and marked timeouts.

papermill picks an engine by name from its registry (``papermill.engines.papermill_engines``);
this module registers ``rocmlab`` there when imported. (Not through a ``papermill.engine`` entry
point: papermill loads those while it is itself being imported, which this module does.) The
engine is papermill's nbclient engine with one client class instead of papermill's,
``LimitedNotebookClient``, whose options are passed as
``papermill.execute_notebook(..., engine_name="rocmlab", **options)``:

- ``cell_output_limit`` / ``notebook_output_limit`` (bytes; 0: none): stream and display output
  kept per cell and per notebook; past a limit the rest is dropped and the cell gets one stderr
  line, ``TRUNCATED_MARK``. Errors are always kept (they say why a test failed);
- ``interrupt_on_timeout`` (nbclient's own option): a cell past its time limit is interrupted and
  the notebook goes on; the cell gets an error output named ``TIMEOUT_ENAME`` that says so.

Nothing is patched: a client made elsewhere in the process is nbclient's own.
"""

from __future__ import annotations

import nbformat
from papermill.clientwrap import PapermillNotebookClient
from papermill.engines import NBClientEngine, papermill_engines
from papermill.log import logger
from papermill.utils import remove_args
from traitlets import Integer

ENGINE_NAME = "rocmlab"
TRUNCATED_MARK = "[rocmlab] output truncated: this cell printed more than the grader keeps"
TIMEOUT_ENAME = "CellTimeoutError"


def message_size(msg: dict) -> int:
    """Characters of output a kernel message carries (stream text or every display format)."""
    content = msg.get("content", {})
    if "text" in content:
        return len(content["text"])
    return sum(len(str(value)) for value in content.get("data", {}).values())


class LimitedNotebookClient(PapermillNotebookClient):
    """papermill's client, keeping at most so much output and marking the cells it interrupts."""

    cell_output_limit = Integer(0, help="characters of stream/display output kept per cell (0: no limit)").tag(
        config=True
    )
    notebook_output_limit = Integer(0, help="characters of stream/display output kept per notebook (0: no limit)").tag(
        config=True
    )

    def reset_execution_trackers(self) -> None:
        super().reset_execution_trackers()
        self.output_kept: dict = {}
        self.truncated_cells: set = set()

    def output(self, outs, msg, display_id, cell_index):
        if msg["msg_type"] in ("error", "clear_output") or not self._over_limit(msg, cell_index):
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


class LimitedEngine(NBClientEngine):
    """papermill's nbclient engine, executing with ``LimitedNotebookClient``."""

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
        client = LimitedNotebookClient(
            nb_man,
            timeout=execution_timeout,
            startup_timeout=start_timeout,
            kernel_name=kernel_name,
            log=logger,
            log_output=log_output,
            stdout_file=stdout_file,
            stderr_file=stderr_file,
            **options,
        )
        return client.execute()


papermill_engines.register(ENGINE_NAME, LimitedEngine)
