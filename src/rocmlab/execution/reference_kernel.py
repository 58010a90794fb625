"""The reference kernel: a second, trusted kernel per worker that ran the lab's solution.

A check that needs the lab's model or runtime for its reference asks this kernel the same
question, on the same inputs, as the learner's (``rocmlab.harness.Reference``): differential
checking. The kernel runs only the solution's code (the course's ``solutions/``, which no learner
sees) and the checks' requests; it never sees learner code.

Its cost is paid once per worker, not per learner: the worker starts it on the first run whose
harness names it (``reference_options``), runs the solution's code cells in it (the profile's
parameters set after the parameters cell), and keeps it for every
later run with the same key. It starts through the same kernelspec as a learner's kernel (the
sandbox's run made for it: the same view, limits and fork server, its own grader user), in its own
work folder with the lab's data. It ends with its worker (the sandbox's close), or when a run
names another key. A reference that failed to start is not started again for that key: every
check that needs it is then a grading error that says why.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ..harness import PROBE_TIMEOUT_S, KernelChannel
from .papermill_engine import kernel_process, kernel_ready

READY_S = 120  # for the kernel to start and answer kernel_info


def reference_options(run, notebook, parameters: dict, cell_timeout_s: int, timeout_s: int, env: dict) -> dict:
    """The harness's ``reference`` option for a sandbox ``run`` made for the reference kernel:
    ``notebook`` (the solution) written into the run's root-only folder, the kernel's spec and
    environment (``env``, as ``worker.kernel_environment`` makes it), and its key."""
    import nbformat

    path = Path(run.private) / "reference.ipynb"
    if not path.exists():
        nbformat.write(notebook, str(path))
    spec = run.kernel_spec().__dict__
    text = json.dumps([path.read_text(encoding="utf-8"), parameters, spec["kernel_name"]], sort_keys=True)
    return {
        "key": hashlib.sha256(f"{run.folder}\n{text}".encode()).hexdigest()[:16],
        "notebook": str(path),
        "parameters": dict(parameters),
        "spec": spec,
        "env": env,
        "cell_timeout_s": int(cell_timeout_s),
        "timeout_s": int(timeout_s),
    }


def solution_cells(nb, parameters: dict) -> list[str]:
    """The code the reference kernel runs: every code cell of the notebook, as a run of it runs
    them (its visible tests too: a later cell may use what one defines), with the
    ``parameters`` assigned right after the cell tagged ``parameters`` (as papermill does)."""
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cells.append(cell.source)
        if "parameters" in cell.get("metadata", {}).get("tags", []) and parameters:
            cells.append("\n".join(f"{name} = {value!r}" for name, value in parameters.items()))
    return cells


@dataclass
class Kept:
    """The reference kernel a worker keeps across its runs (one at a time)."""

    key: str = ""
    manager: object = None
    client: object = None
    channel: KernelChannel | None = None
    failed: str = ""  # why the kernel of ``key`` did not become a reference
    started_s: float = 0.0  # what starting it and running the solution took
    pids: set = field(default_factory=set)

    def channel_for(self, options: dict, start):
        """A channel to the reference kernel of ``options`` (``reference_options``), started with
        ``start(spec, env)`` (the worker's kernel start) when none with its key lives; or why
        there is none (a string)."""
        if self.key == options["key"] and (self.failed or (self.channel and not self.channel.broken)):
            return self.failed or self.channel
        self.close()
        self.key, began = options["key"], time.monotonic()
        try:
            self._start(options, start)
        except Exception as exc:  # noqa: BLE001 (a reference that cannot start grades nothing that needs it)
            self.close(keep_key=True)
            self.failed = f"it did not run the solution: {type(exc).__name__}: {str(exc)[:300]}"
            return self.failed
        self.started_s = round(time.monotonic() - began, 2)
        return self.channel

    def _start(self, options: dict, start) -> None:
        import nbformat
        from jupyter_core.utils import run_sync

        nb = nbformat.read(options["notebook"], as_version=4)
        self.manager = start(options["spec"], options["env"])
        self.pids = _pids(self.manager)
        self.client = self.manager.client()
        self.client.start_channels()
        run_sync(kernel_ready)(self.client, READY_S)
        deadline = time.monotonic() + float(options["timeout_s"])
        for index, code in enumerate(solution_cells(nb, options["parameters"])):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the solution ran past {options['timeout_s']} s")
            reply = run_sync(self.client.execute_interactive)(
                code,
                timeout=min(left, float(options["cell_timeout_s"])),
                store_history=False,
                allow_stdin=False,
                output_hook=lambda msg: None,
            )
            content = reply.get("content", {})
            if content.get("status") != "ok":
                raise RuntimeError(f"code cell {index}: {content.get('ename')}: {str(content.get('evalue'))[:200]}")
        timeout_s = min(PROBE_TIMEOUT_S, float(options["cell_timeout_s"]))
        self.channel = KernelChannel(self.client, self.manager, timeout_s)
        self.pids = _pids(self.manager)

    def close(self, keep_key: bool = False) -> None:
        """End the kernel (its process, then the manager's own shutdown)."""
        from jupyter_core.utils import run_sync

        client, manager = self.client, self.manager
        self.client = self.manager = self.channel = None
        self.failed, self.pids = "", set()
        if not keep_key:
            self.key = ""
        if client is not None:
            with contextlib.suppress(Exception):
                client.stop_channels()
        if manager is not None:
            with contextlib.suppress(Exception):
                if (process := kernel_process(manager)) is not None:
                    process.kill()
            with contextlib.suppress(Exception):
                run_sync(manager.shutdown_kernel)(now=True)


def _pids(manager) -> set[int]:
    from .. import processes

    process = kernel_process(manager)
    if process is None:
        return set()
    return {process.pid} | {p.pid for p in processes.descendants(process.pid)}


def reference_tag() -> str:
    """The run tag of a reference kernel: its own, so that no learner run's sweep ends it."""
    return f"reference-{uuid.uuid4().hex}"
