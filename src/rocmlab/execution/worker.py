"""Execute notebooks with papermill, in a worker process we can always clean up.

A ``Worker`` is a ``python -m rocmlab.execution.worker --serve`` process in its own session that runs
notebooks one after another: for each it reads a request naming the spec, runs papermill,
writes an outcome file and ends what the run left behind. It is a child subreaper, so orphans
of the kernel re-parent to it. The parent enforces the whole-lab timeout; on a timeout or a
crash it ends the worker, and the next run starts a fresh one. Every process that carries a
run's tag in its environment is ended after that run, whatever happened to the worker.
Reusing a worker saves a Python start-up and the notebook machinery's imports per notebook.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import processes
from ..harness import read_results
from ..startup import block_unused_imports  # sandbox.entry starts its worker with it too
from .outcome import Outcome, inspect_output
from .results import write_json_atomic
from .schedule import run_by_need

RUN_TAG = "ROCMLAB_RUN_TAG"
# kills every process of the cgroups whose cgroup.procs files it is given, waiting up to so many
# seconds; the pids still there (rocmlab.sandbox.cgroups.kill_all, which the sandbox's worker gets)
KillCgroups = Callable[[list[str], float], set[int]]
KILL_GRACE_S = 5
# what the worker says of a run: its reference kernel is up (the lab's limit starts anew: the
# reference's run of the solution is the grader's time, not the learner's); its cells ended; it ended
BEGAN, CELLS_DONE, DONE = b"began\n", b"cells\n", b"done\n"
# What ``kernel_environment`` sets for every kernel (a sandboxed kernel keeps these of the
# grader's environment, and what its run sets: ``rocmlab.sandbox.runs.kernel_variables``).
KERNEL_VARIABLES = (RUN_TAG, "PYTHONWARNINGS", "PYDEVD_DISABLE_FILE_VALIDATION", "HF_HUB_OFFLINE")


@dataclass
class Spec:
    """What the worker runs: one notebook, its parameters, its folder and its limits."""

    input: str
    output: str
    cwd: str
    parameters: dict
    cell_timeout_s: int
    timeout_s: int
    allow_errors: bool = False
    python: str = sys.executable
    kernel_name: str = "python3"
    extra_env: dict = field(default_factory=dict)
    engine_options: dict = field(default_factory=dict)  # LimitedNotebookClient's (rocmlab.execution.papermill_engine)


def kernel_environment(tag: str, extra: dict) -> dict:
    env = dict(os.environ)
    env.update(
        {
            RUN_TAG: tag,
            "PYTHONWARNINGS": "default::DeprecationWarning,default::PendingDeprecationWarning,default::FutureWarning",
            "PYDEVD_DISABLE_FILE_VALIDATION": "1",
            "HF_HUB_OFFLINE": env.get("HF_HUB_OFFLINE", "1"),
        }
    )
    env.update({k: str(v) for k, v in extra.items()})
    return env


def end_run(tag: str, root_pid: int | None = None, grace_s: float = KILL_GRACE_S) -> None:
    """End every process tagged with the run (kernel, torchrun ranks) and ``root_pid``'s tree;
    ``grace_s`` 0: SIGKILL at once, without waiting for them to go."""
    found = processes.marked(RUN_TAG, tag)
    if root_pid is not None:
        found += processes.descendants(root_pid)
    processes.end(found, grace_s)


# ---------------------------------------------------------------- parent side


class Worker:
    """One worker process, started on first use, reused until it times out, crashes or is closed."""

    def __init__(self, python: str = sys.executable):
        self.python = python
        self.tag = uuid.uuid4().hex
        self.proc: subprocess.Popen | None = None
        self.log = None
        self._tags: dict[str, str] = {}  # a prestarted kernel's folder -> the tag it runs under

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> subprocess.Popen:
        """Start the worker process now (it loads papermill while the caller prepares the first run);
        a run starts it otherwise."""
        if self.proc is not None and self.proc.poll() is None:
            return self.proc
        with _LIVE_LOCK:
            _LIVE.add(self)
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [self.python, "-P", "-m", "rocmlab.execution.worker", "--serve"],
            env=kernel_environment(self.tag, {}),
            start_new_session=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
        )
        return self.proc

    def run(self, spec: Spec, prestart: Spec | None = None) -> Outcome:
        """Execute ``spec.input`` into ``spec.output``; never hangs, never leaves a process behind.

        ``prestart``: the kernel of the next run (its ``cwd``, kernel and environment), which the
        worker starts now, so that it is ready when that run comes; only for specs that bring their
        own ``TMPDIR`` (a sandbox run). A prestarted kernel carries its run's tag from the start."""
        Path(spec.output).parent.mkdir(parents=True, exist_ok=True)
        Path(spec.cwd).mkdir(parents=True, exist_ok=True)
        tag = self._tags.pop(spec.cwd, None) or uuid.uuid4().hex
        request = Path(spec.output).parent / f".run-{tag[:8]}.json"
        outcome_path = request.with_suffix(".outcome.json")
        # The run's own temporary folder, removed after it: a killed kernel leaves its connection
        # file, and labs their temporary files, in $TMPDIR (a sandbox run brings its own).
        scratch = None if "TMPDIR" in spec.extra_env else tempfile.mkdtemp(prefix="rocmlab-run-")
        env = kernel_environment(tag, {**({"TMPDIR": scratch} if scratch else {}), **spec.extra_env})
        message = {"spec": spec.__dict__, "env": env, "outcome": str(outcome_path)}
        if prestart is not None and "TMPDIR" in prestart.extra_env:
            self._tags[prestart.cwd] = next_tag = uuid.uuid4().hex
            message["prestart"] = {
                "spec": prestart.__dict__,
                "env": kernel_environment(next_tag, prestart.extra_env),
            }
        harness = spec.engine_options.get("harness")
        if harness:  # only the harness of this run writes it
            Path(harness["out"]).unlink(missing_ok=True)
        write_json_atomic(request, message)
        started = time.monotonic()
        try:
            outcome = self._wait(request, outcome_path, spec, started)
            if harness:
                outcome.harness = read_results(Path(harness["out"]))
        finally:
            end_run(tag)
            request.unlink(missing_ok=True)
            outcome_path.unlink(missing_ok=True)
            if harness:
                Path(harness["out"]).unlink(missing_ok=True)
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)
        return inspect_output(outcome, Path(spec.output))

    def _wait(self, request: Path, outcome_path: Path, spec: Spec, started: float) -> Outcome:
        harness_s = float((spec.engine_options.get("harness") or {}).get("budget_s", 0))
        answered = self._request(request, spec.timeout_s, harness_s)
        duration = time.monotonic() - started
        if answered is False:
            self.close(kill=True)
            return Outcome("timeout", duration, f"the lab ran past its limit of {spec.timeout_s} s and was stopped")
        try:
            data = json.loads(outcome_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            tail = self._log_tail()
            returncode = self.close(kill=True)
            return Outcome(
                "crashed",
                duration,
                f"the runner exited with status {returncode} without a result: " + (" | ".join(tail) or "no output"),
            )
        return Outcome(data["status"], duration, data.get("reason", ""), data.get("failing_cell"))

    def _request(self, request: Path, limit_s: float, harness_s: float = 0.0) -> bool | None:
        """True when the worker answered, False on the deadline, None when it died first. The
        cells have ``limit_s`` (the whole-lab limit), counted anew once the worker says its
        reference kernel is up; when the worker says they are done,
        the harness has ``harness_s`` from then, or what is left of the limit if that is more (a broken kernel that times out every cell is
        stopped at the lab's limit, not at the lab's limit plus the harness's budget)."""
        proc = self.start()
        self._log_start = self.log.seek(0, os.SEEK_END)
        try:
            proc.stdin.write(f"{request}\n".encode())
            proc.stdin.flush()
        except (OSError, ValueError):
            return None
        fd, said, deadline = proc.stdout.fileno(), b"", time.monotonic() + limit_s
        while (left := deadline - time.monotonic()) > 0:
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 4096)
                if not chunk:
                    return None
                said += chunk
                if DONE in said:
                    return True
                if BEGAN in said:
                    said = said.replace(BEGAN, b"")
                    deadline = time.monotonic() + limit_s
                if CELLS_DONE in said:
                    said = said.replace(CELLS_DONE, b"")
                    deadline = max(deadline, time.monotonic() + harness_s)
        return False

    def _log_tail(self) -> list[str]:
        try:
            self.log.seek(self._log_start)
            return self.log.read()[-4000:].decode("utf-8", "replace").strip().splitlines()[-5:]
        except (OSError, ValueError):  # closed by another thread's close()
            return []

    def close(self, kill: bool = False, grace_s: float = KILL_GRACE_S) -> int | None:
        """Stop the worker (politely unless ``kill``) and end everything it started, giving each
        process ``grace_s`` after SIGTERM; its exit status."""
        with _LIVE_LOCK:
            proc, self.proc = self.proc, None
            _LIVE.discard(self)
        if proc is None:
            return None
        if not kill:
            try:
                proc.stdin.close()
                proc.wait(timeout=KILL_GRACE_S)
            except (OSError, subprocess.TimeoutExpired):
                pass
        end_run(self.tag, proc.pid if proc.poll() is None else None, grace_s)
        returncode = proc.wait()
        for stream in (proc.stdin, proc.stdout, self.log):
            with contextlib.suppress(OSError):
                stream.close()
        return returncode


_LIVE: set[Worker] = set()  # workers with a process, so that an interrupt can end them all
_LIVE_LOCK = threading.Lock()


def close_all_workers() -> None:
    """End every worker of this process and what it runs (an interrupted run or grade)."""
    with _LIVE_LOCK:
        workers = list(_LIVE)
    for worker in workers:
        worker.close(kill=True)


def parallel_map(function, items, jobs: int) -> list:
    """``function`` over ``items``, ``jobs`` at a time, in order. Interrupted (Ctrl-C, SIGTERM
    through ``processes.exit_on_sigterm``), it ends every running notebook before it re-raises."""
    return run_by_need(function, list(items), jobs, needs=lambda _: 0, stages=[], unmet=None, stop=close_all_workers)


def run_notebook(spec: Spec) -> Outcome:
    """Execute one notebook in a worker of its own."""
    with Worker(spec.python) as worker:
        return worker.run(spec)


# ---------------------------------------------------------------- worker side


def _become_subreaper() -> None:
    PR_SET_CHILD_SUBREAPER = 36
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the parent's tag sweep still ends what is left


def _start_kernel(spec: Spec, env: dict):
    """Start (not wait for) the kernel of a coming run, as papermill would start it; its manager."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from jupyter_core.utils import run_sync

    from .papermill_engine import ipc_config

    config = ipc_config(spec.engine_options.get("ipc_path"))
    specs = KernelSpecManager()
    if env.get("JUPYTER_PATH"):
        specs = KernelSpecManager(
            kernel_dirs=[os.path.join(p, "kernels") for p in env["JUPYTER_PATH"].split(os.pathsep)]
        )
    manager = AsyncKernelManager(kernel_name=spec.kernel_name, kernel_spec_manager=specs, config=config)
    runtime = env.get("JUPYTER_RUNTIME_DIR") or tempfile.mkdtemp(prefix="rocmlab-runtime-")
    os.makedirs(runtime, mode=0o700, exist_ok=True)
    manager.connection_file = os.path.join(runtime, f"kernel-{uuid.uuid4().hex}.json")
    run_sync(manager.start_kernel)(env=env, cwd=spec.cwd)
    return manager


def _kernel_pids(manager) -> set[int]:
    from .papermill_engine import kernel_process

    process = kernel_process(manager)
    if process is None:
        return set()
    return {process.pid} | {p.pid for p in processes.descendants(process.pid)}


def _kill_kernel(manager) -> None:
    from .papermill_engine import kernel_process

    with contextlib.suppress(OSError):
        if (process := kernel_process(manager)) is not None:
            process.kill()


FRESH_READY_S = 120  # for a fresh kernel to start and answer kernel_info
SWEEP_S = 10  # for the learner's run to end: a process forked meanwhile is found on the next round


class FreshKernels:
    """A run's fresh kernel (``rocmlab.harness.Fresh``), started on the harness's first request to
    it: first the learner's kernel is killed and every process of the learner's run ended
    (``end_learner_run``), then a kernel starts as the run's own did: the same kernelspec (the
    sandbox's run: view, limits, user, cgroup, fork server), environment and work folder. The
    learner's cells never ran in it. ``kill_cgroups``: how the sweep's cgroups are killed
    (``end_learner_run``)."""

    def __init__(self, spec: Spec, env: dict, kept, sweep: dict, kill_cgroups: KillCgroups | None = None):
        self.spec, self.env, self.kept, self.sweep = spec, dict(env), kept, dict(sweep or {})
        self.kill_cgroups = kill_cgroups
        self.manager = self.client = None
        self.started_s = 0.0

    def open(self, learner_manager):
        from jupyter_core.utils import run_sync

        from .papermill_engine import kernel_ready

        began = time.monotonic()
        end_learner_run(learner_manager, self.env.get(RUN_TAG, ""), self.kept(), self.sweep, self.kill_cgroups)
        self.manager = _start_kernel(self.spec, self.env)
        self.client = self.manager.client()
        self.client.start_channels()
        run_sync(kernel_ready)(self.client, FRESH_READY_S)
        self.started_s = time.monotonic() - began
        return self.client, self.manager

    def close(self) -> None:
        client, manager, self.client, self.manager = self.client, self.manager, None, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.stop_channels()
        if manager is not None:
            _kill_kernel(manager)
            with contextlib.suppress(Exception):
                from jupyter_core.utils import run_sync

                run_sync(manager.shutdown_kernel)(now=True)


class LearnerRunLeft(RuntimeError):
    """A process of the learner's run outlived the sweep: no fresh kernel starts beside it."""


def end_learner_run(manager, tag: str, kept: set[int], sweep: dict, kill_cgroups: KillCgroups | None = None) -> None:
    """Kill the learner's kernel, then every process of the learner's run, by every mark this
    worker can see: the run's tag in the environment, this worker's descendants (it is a child
    subreaper: a kernel's orphans, double-forked or not, stay below it) but ``kept`` (the reference
    kernel, a kernel started ahead for the next run), the run's grader user (``sweep["uid"]``, as
    root) and the kernel's cgroup (``sweep["cgroup"]``: its ``cgroup.procs`` files, killed by
    ``kill_cgroups``, the sandbox's ``rocmlab.sandbox.cgroups.kill_all``). A kernel in its own PID
    namespace (bubblewrap, a forked kernel) takes that namespace with it. Raises
    ``LearnerRunLeft`` if something still runs, or if cgroups are named and no way to kill them given."""
    from .papermill_engine import kernel_process

    process = kernel_process(manager)
    if process is not None:
        with contextlib.suppress(OSError):
            process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            process.wait(timeout=KILL_GRACE_S)
    import psutil

    groups = sweep.get("cgroup") or []
    if groups and kill_cgroups is None:
        raise LearnerRunLeft(f"the run's cgroups {groups} cannot be swept: this worker was given no way to kill them")
    deadline = time.monotonic() + SWEEP_S
    while True:
        members = kill_cgroups(groups, 0) if groups else set()
        found = _learner_processes(tag, kept, sweep.get("uid"))
        if not found and not members:
            return
        if time.monotonic() > deadline:
            pids = sorted({p.pid for p in found} | members)
            raise LearnerRunLeft(f"processes of the learner's run outlived the sweep: {pids}")
        processes.send(found, signal.SIGKILL)
        psutil.wait_procs(found, timeout=1.0)
        if members and not found:  # killed, not yet out of the cgroup
            time.sleep(0.1)


def _learner_processes(tag: str, kept: set[int], uid: int | None) -> list:
    import psutil

    found = processes.marked(RUN_TAG, tag) if tag else []
    found += [p for p in processes.descendants(os.getpid(), include_self=False) if p.pid not in kept]
    if uid is not None and processes.is_root():
        for proc in psutil.process_iter(["uids"]):
            with contextlib.suppress(psutil.Error, TypeError):
                if proc.info["uids"].real == uid and proc.pid != os.getpid():
                    found.append(proc)
    return processes.alive(found)


def _reference(spec: Spec, kept) -> dict:
    """The engine option ``reference`` of a run whose harness names a reference kernel: the one
    the worker keeps (``kept``), started as a prestarted kernel is when it is not yet there."""
    options = (spec.engine_options.get("harness") or {}).get("reference")
    if kept is None or not isinstance(options, dict):
        return {}
    return {"reference": kept.channel_for(options, lambda s, env: _start_kernel(Spec(**s), env))}


def _fresh(spec: Spec, kept_pids, kill_cgroups: KillCgroups | None) -> dict:
    """The engine option ``fresh`` of a run whose harness has checks (``FreshKernels``)."""
    harness = spec.engine_options.get("harness")
    if not harness:
        return {}
    return {"fresh": FreshKernels(spec, dict(os.environ), kept_pids, harness.get("sweep") or {}, kill_cgroups)}


def _execute(spec: Spec, kernel=None, kept=None, cells_done=None, began=None, kept_pids=set, kill_cgroups=None) -> dict:
    import papermill
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from papermill.exceptions import PapermillExecutionError

    from .papermill_engine import ENGINE_NAME

    reference = _reference(spec, kept)
    if reference and began is not None:
        began()
    try:
        papermill.execute_notebook(
            spec.input,
            str(Path(spec.output).absolute()),  # the engine's saves run with the kernel's folder as cwd
            parameters=spec.parameters,
            engine_name=ENGINE_NAME,
            kernel_name=spec.kernel_name,
            cwd=spec.cwd,
            execution_timeout=spec.cell_timeout_s,
            progress_bar=False,
            allow_errors=spec.allow_errors,
            start_timeout=120,
            **({"km": kernel} if kernel is not None else {}),
            **({"cells_done": cells_done} if cells_done is not None else {}),
            **spec.engine_options,
            **reference,
            **_fresh(spec, kept_pids, kill_cgroups),
        )
        return {"status": "passed"}
    except PapermillExecutionError as exc:
        cell = {
            "index": exc.cell_index,
            "ename": exc.ename,
            "evalue": str(exc.evalue)[:2000],
            "source": exc.source[:2000],
        }
        return {
            "status": "failed",
            "reason": f"cell {exc.cell_index}: {exc.ename}: {str(exc.evalue)[:300]}",
            "failing_cell": cell,
        }
    except CellTimeoutError as exc:
        preview = [
            line
            for line in str(exc).splitlines()
            if line.strip() and not line.startswith(("-", "A cell", "The message", "Here is"))
        ]
        return {
            "status": "timeout",
            "reason": f"a cell ran past its limit of {spec.cell_timeout_s} s"
            + (f" (it starts: {preview[0][:80]!r})" if preview else ""),
        }
    except DeadKernelError as exc:
        return {"status": "crashed", "reason": f"the kernel died: {str(exc)[:300]}"}
    except Exception as exc:  # noqa: BLE001 (papermill or kernel start-up failed: record it, never lose the run)
        return {"status": "crashed", "reason": f"{type(exc).__name__}: {str(exc)[:500]}"}


def serve(kill_cgroups: KillCgroups | None = None) -> int:
    """The worker's loop: one request path per line on stdin; on stdout ``cells`` when a run's
    cells have ended (its harness starts) and ``done`` when the run has ended. ``kill_cgroups``:
    how a sandboxed run's cgroups are swept before its fresh kernel (``end_learner_run``)."""
    _become_subreaper()
    processes.die_with_parent()
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything printed (papermill, a kernel) goes to the log, not into the answers
    processes.exit_on_sigterm()
    from .reference_kernel import Kept

    warm: dict = {}  # a coming run's folder -> its kernel, started ahead (Worker.run's prestart)
    reference = Kept()  # the reference kernel, kept across runs (rocmlab.execution.reference_kernel)
    for line in sys.stdin:
        request = json.loads(Path(line.strip()).read_text(encoding="utf-8"))
        os.environ.clear()
        os.environ.update(request["env"])  # the kernel inherits the run's tag and settings
        tempfile.tempdir = None  # read $TMPDIR again: the last run's folder is gone
        spec = Spec(**request["spec"])
        kernel = warm.pop(spec.cwd, None)
        for unused in warm.values():  # a kernel for a run that did not come next (a forked one is
            _kill_kernel(unused)  # no descendant of this worker, so the sweep below misses it)
        warm.clear()
        try:
            if request.get("prestart"):
                coming = Spec(**request["prestart"]["spec"])
                with contextlib.suppress(Exception):  # then that run starts its kernel itself
                    warm[coming.cwd] = _start_kernel(coming, request["prestart"]["env"])
            result = _execute(
                spec,
                kernel,
                reference,
                cells_done=lambda: _say(answer, CELLS_DONE),
                began=lambda: _say(answer, BEGAN),
                kept_pids=lambda: set().union(*(_kernel_pids(k) for k in [*warm.values(), reference.manager] if k)),
                kill_cgroups=kill_cgroups,
            )
        finally:
            leftovers = processes.descendants(os.getpid(), include_self=False)
            if leftovers:  # a forked kernel started ahead is no descendant: nothing to walk then
                kept = set().union(reference.pids, *(_kernel_pids(k) for k in warm.values()))
                leftovers = [p for p in leftovers if p.pid not in kept]
            processes.end(leftovers, KILL_GRACE_S)
        write_json_atomic(Path(request["outcome"]), result)
        _say(answer, DONE)
    reference.close()
    return 0


def _say(answer, what: bytes) -> None:
    answer.write(what.decode())
    answer.flush()


if __name__ == "__main__":
    if sys.argv[1:] != ["--serve"]:
        sys.exit(
            "usage: python -m rocmlab.execution.worker --serve (requests on stdin; see rocmlab.execution.worker.Worker)"
        )
    block_unused_imports()
    sys.exit(serve())
