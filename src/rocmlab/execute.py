"""Execute one notebook with papermill, in a worker process we can always clean up.

The parent starts ``python -m rocmlab.execute SPEC`` in a new session. The worker becomes a
child subreaper (orphans of the kernel re-parent to it), runs papermill, writes an outcome
file and ends what is left. The parent enforces the whole-lab timeout; every process that
carries the run's tag in its environment is ended, whatever happened to the worker.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from .results import write_json_atomic

RUN_TAG = "ROCMLAB_RUN_TAG"
# Optional modules that papermill's imports pull in (jsonschema's URI grammar, cloud I/O) and a
# local notebook run never uses; blocking them saves about 1.5 s of worker start-up.
UNUSED_IN_WORKER = ("rfc3987_syntax", "pyarrow", "gcsfs", "github", "azure", "boto3", "botocore")
KILL_GRACE_S = 5
WARNING_LINE = re.compile(
    r"^(?P<file>[^\n]*?):(?P<line>\d+): (?P<category>\w*(?:DeprecationWarning|FutureWarning)): (?P<message>.*)$",
    re.MULTILINE,
)


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


@dataclass
class Outcome:
    status: str                     # passed | failed | timeout | crashed
    duration_s: float
    reason: str = ""
    failing_cell: dict | None = None
    warnings: list = field(default_factory=list)
    cells: list = field(default_factory=list)   # per code cell: {"index", "tags", "grade_id", "error"}


def kernel_environment(tag: str, extra: dict) -> dict:
    env = dict(os.environ)
    env.update({
        RUN_TAG: tag,
        "PYTHONWARNINGS": "default::DeprecationWarning,default::FutureWarning",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        "HF_HUB_OFFLINE": env.get("HF_HUB_OFFLINE", "1"),
    })
    env.update({k: str(v) for k, v in extra.items()})
    return env


def tagged_processes(tag: str) -> list[psutil.Process]:
    """Every live process whose environment carries this run's tag."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == os.getpid():
            continue
        try:
            if proc.environ().get(RUN_TAG) == tag:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def end_processes(procs: list[psutil.Process], grace_s: float = KILL_GRACE_S) -> None:
    """SIGTERM, wait ``grace_s``, then SIGKILL whatever is still alive."""
    for proc in procs:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace_s)


def end_tree(root: psutil.Process | None, tag: str) -> None:
    """End ``root``, its descendants and anything else tagged with the run (kernel, torchrun ranks)."""
    procs = []
    if root is not None:
        try:
            procs = root.children(recursive=True) + [root]
        except psutil.Error:
            procs = []
    seen = {p.pid for p in procs}
    procs += [p for p in tagged_processes(tag) if p.pid not in seen]
    end_processes(procs)


# ---------------------------------------------------------------- parent side

def _write_spec(spec: Spec, folder: Path) -> Path:
    path = folder / f".run-{uuid.uuid4().hex[:8]}.json"
    write_json_atomic(path, spec.__dict__)
    return path


def run_notebook(spec: Spec) -> Outcome:
    """Execute ``spec.input`` into ``spec.output``; never hangs, never leaves a process behind."""
    Path(spec.output).parent.mkdir(parents=True, exist_ok=True)
    Path(spec.cwd).mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex
    spec_path = _write_spec(spec, Path(spec.output).parent)
    outcome_path = spec_path.with_suffix(".outcome.json")
    env = kernel_environment(tag, spec.extra_env)
    started = time.monotonic()
    worker = subprocess.Popen(
        [spec.python, "-m", "rocmlab.execute", str(spec_path), str(outcome_path)],
        env=env, start_new_session=True, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    root = psutil.Process(worker.pid)
    timed_out = False
    try:
        _, stderr = worker.communicate(timeout=spec.timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        end_tree(root, tag)
        _, stderr = worker.communicate()
    finally:
        end_tree(None, tag)
    duration = time.monotonic() - started
    try:
        outcome = _read_outcome(outcome_path, timed_out, spec, worker.returncode, stderr, duration)
    finally:
        spec_path.unlink(missing_ok=True)
        outcome_path.unlink(missing_ok=True)
    return inspect_output(outcome, Path(spec.output))


def _read_outcome(path: Path, timed_out: bool, spec: Spec, returncode: int, stderr: bytes,
                  duration: float) -> Outcome:
    if timed_out:
        return Outcome("timeout", duration, f"the lab ran past its limit of {spec.timeout_s} s and was stopped")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        tail = stderr.decode("utf-8", "replace").strip().splitlines()[-5:]
        return Outcome("crashed", duration, f"the runner exited with status {returncode} without a result: "
                       + (" | ".join(tail) or "no output"))
    return Outcome(data["status"], duration, data.get("reason", ""), data.get("failing_cell"))


def inspect_output(outcome: Outcome, output: Path) -> Outcome:
    """Add what the executed notebook shows: warnings seen, and each code cell's error if any.

    A cell counts as executed only when the kernel gave it an execution count and it finished;
    papermill's own cell status cannot tell (after a timeout it marks unreached cells completed).
    The cell that was running when a run timed out or its kernel died gets that as its error.
    """
    try:
        nb = json.loads(output.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return outcome
    code_cells = [(i, c) for i, c in enumerate(nb.get("cells", [])) if c.get("cell_type") == "code"]
    for code_index, (index, cell) in enumerate(code_cells):
        error = None
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                outcome.warnings.extend(_warnings_in("".join(out.get("text", "")), index))
            elif out.get("output_type") == "error":
                error = {"ename": out.get("ename", ""), "evalue": out.get("evalue", "")}
        meta = cell.get("metadata", {})
        running = meta.get("papermill", {}).get("status") == "running"
        grading = meta.get("nbgrader", {})
        outcome.cells.append({
            "index": index, "code_index": code_index, "grade_id": grading.get("grade_id"),
            "graded": bool(grading.get("grade")), "error": error,
            "executed": cell.get("execution_count") is not None and not running,
        })
    _mark_interrupted_cell(outcome)
    return outcome


def _mark_interrupted_cell(outcome: Outcome) -> None:
    if outcome.status not in ("timeout", "crashed"):
        return
    ran = [c for c in outcome.cells if c["executed"]]
    if ran and ran[-1]["error"] is None:
        ran[-1]["error"] = {"ename": outcome.status, "evalue": outcome.reason}


def _warnings_in(text: str, cell_index: int) -> list[dict]:
    seen, found = set(), []
    for match in WARNING_LINE.finditer(text):
        key = (match["category"], match["file"], match["line"], match["message"])
        if key in seen:
            continue
        seen.add(key)
        found.append({"category": match["category"], "message": match["message"].strip(),
                      "filename": match["file"].strip(), "lineno": int(match["line"]), "cell": cell_index})
    return found


# ---------------------------------------------------------------- worker side

def _become_subreaper() -> None:
    PR_SET_CHILD_SUBREAPER = 36
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the parent's tag sweep still ends what is left


def _execute(spec: Spec) -> dict:
    import papermill
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from papermill.exceptions import PapermillExecutionError

    try:
        papermill.execute_notebook(
            spec.input, spec.output, parameters=spec.parameters, kernel_name=spec.kernel_name,
            cwd=spec.cwd, execution_timeout=spec.cell_timeout_s, progress_bar=False,
            allow_errors=spec.allow_errors, start_timeout=120,
        )
        return {"status": "passed"}
    except PapermillExecutionError as exc:
        cell = {"index": exc.cell_index, "ename": exc.ename, "evalue": str(exc.evalue)[:2000],
                "source": exc.source[:2000]}
        return {"status": "failed", "reason": f"cell {exc.cell_index}: {exc.ename}: {str(exc.evalue)[:300]}",
                "failing_cell": cell}
    except CellTimeoutError as exc:
        preview = [line for line in str(exc).splitlines() if line.strip() and not line.startswith(("-", "A cell", "The message", "Here is"))]
        return {"status": "timeout", "reason": f"a cell ran past its limit of {spec.cell_timeout_s} s"
                + (f" (it starts: {preview[0][:80]!r})" if preview else "")}
    except DeadKernelError as exc:
        return {"status": "crashed", "reason": f"the kernel died: {str(exc)[:300]}"}
    except Exception as exc:  # papermill or kernel start-up failed: record it, never lose the run
        return {"status": "crashed", "reason": f"{type(exc).__name__}: {str(exc)[:500]}"}


def block_unused_imports() -> None:
    for name in UNUSED_IN_WORKER:
        sys.modules.setdefault(name, None)


def worker_main(spec_path: str, outcome_path: str) -> int:
    _become_subreaper()
    spec = Spec(**json.loads(Path(spec_path).read_text(encoding="utf-8")))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        result = _execute(spec)
    finally:
        me = psutil.Process()
        end_processes(me.children(recursive=True))
    write_json_atomic(Path(outcome_path), result)
    return 0


if __name__ == "__main__":
    block_unused_imports()
    sys.exit(worker_main(sys.argv[1], sys.argv[2]))
