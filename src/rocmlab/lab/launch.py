"""Run a script under torchrun from a notebook, with a timeout and per-rank output.

``run_torchrun`` starts ``python -m torch.distributed.run --standalone`` in its own session
(so a free rendezvous port is picked and nothing is inherited from the notebook's process
group). Every rank runs through a tiny entry wrapper (this module, ``-m``) that
writes the rank's output and exit status to a per-rank file, keyed by the rank and the
restart attempt (``TORCHELASTIC_RESTART_COUNT``). After ``timeout_s`` every process the
launch created (torchrun, the wrappers, the ranks and anything they started) is ended
by ``rocmlab.processes``: SIGTERM, a short grace period, then SIGKILL.

torchrun starts each worker in a new session of its own, so killing torchrun's process
group does not reach the ranks; the launcher tracks every descendant while it runs.

A rank script written from a notebook's functions sees only what the script imports:
``import_lines(namespace)`` writes an import for every module and importable object the
notebook has bound to a name (``import re``, ``from pathlib import Path``, ``import numpy as
np``), so that a learner's ``import re`` in any cell reaches the ranks too.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

GRACE_S = 3.0
POLL_S = 0.25
_LOG_NAME = re.compile(r"^rank(\d+)\.attempt(\d+)\.log$")
_LAUNCHED: dict = {}  # every process any launch from this interpreter started, by pid


def import_lines(namespace: dict) -> str:
    """Import statements that bind, in a fresh interpreter, each name of ``namespace`` bound to a
    module or to a class or function that its module exports under that qualified name (the
    notebook's own definitions, instances and private names are left out)."""
    lines = []
    for name, value in namespace.items():
        if name.startswith("_"):
            continue
        line = _import_of(name, value)
        if line:
            lines.append(line)
    return "\n".join(sorted(set(lines), key=lambda line: (line.startswith("from"), line))) + "\n"


def _import_of(name: str, value) -> str:
    if isinstance(value, ModuleType):
        module = value.__name__
        if module == "__main__" or sys.modules.get(module) is not value:
            return ""
        if "." in module and module.rsplit(".", 1)[1] == name:
            return f"from {module.rsplit('.', 1)[0]} import {name}"
        return f"import {module}" if module == name else f"import {module} as {name}"
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if not (isinstance(module, str) and isinstance(qualname, str)) or "." in qualname or module == "__main__":
        return ""
    if (
        not (isinstance(value, type) or callable(value))
        or getattr(sys.modules.get(module), qualname, None) is not value
    ):
        return ""
    return f"from {module} import {qualname}" + ("" if qualname == name else f" as {name}")


@dataclass
class RankOutput:
    """One rank's output and exit status (last attempt); ``returncode`` is None if unknown,
    negative when the rank was ended by that signal."""

    rank: int
    returncode: int | None
    output: str


@dataclass
class TorchrunResult:
    """What a torchrun launch did: torchrun's exit status, timeout, and each rank's run."""

    returncode: int
    timed_out: bool
    elapsed_s: float
    ranks: list[RankOutput] = field(default_factory=list)
    output: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def rank(self, rank: int) -> RankOutput:
        for item in self.ranks:
            if item.rank == rank:
                return item
        raise KeyError(f"no output for rank {rank}; ranks seen: {[r.rank for r in self.ranks]}")

    def summary(self) -> str:
        state = "TIMED OUT" if self.timed_out else f"exit {self.returncode}"
        per_rank = ", ".join(f"rank {r.rank}: {_status_text(r.returncode)}" for r in self.ranks)
        return f"torchrun {state} after {self.elapsed_s:.1f} s ({per_rank})"


def run_torchrun(
    script,
    *,
    nproc: int = 2,
    args=(),
    env: dict | None = None,
    timeout_s: float = 120,
    max_restarts: int = 0,
    cwd=None,
    show: bool = True,
) -> TorchrunResult:
    """Run ``script`` on ``nproc`` local ranks under torchrun; end everything after ``timeout_s``.

    ``env`` is merged over ``os.environ`` (a value of None removes the variable).
    ``max_restarts`` is passed to torchrun (``--max-restarts``); ranks see the attempt in
    ``TORCHELASTIC_RESTART_COUNT``. ``show=True`` prints each rank's output under a header.
    """
    script_path = _check_inputs(script, nproc, timeout_s, max_restarts, cwd)
    work = Path(tempfile.mkdtemp(prefix="rocmlab-torchrun-"))
    try:
        command = _torchrun_command(script_path, nproc, args, max_restarts, work)
        result = _launch(command, _child_env(env), cwd, timeout_s, work)
        result.ranks = _collect_ranks(work, nproc)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if show:
        _print_result(result)
    return result


def leftover_processes() -> list:
    """Processes started by any ``run_torchrun`` call in this interpreter that are still alive
    (psutil.Process objects). A lab's last cell asserts this is empty."""
    from rocmlab.processes import alive

    return alive(_LAUNCHED.values())


def _check_inputs(script, nproc, timeout_s, max_restarts, cwd) -> Path:
    if not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
        raise ValueError(f"run_torchrun: nproc must be a positive integer, got {nproc!r}")
    if not isinstance(max_restarts, int) or max_restarts < 0:
        raise ValueError(f"run_torchrun: max_restarts must be an integer >= 0, got {max_restarts!r}")
    if not timeout_s or timeout_s <= 0:
        raise ValueError(f"run_torchrun: timeout_s must be > 0 seconds, got {timeout_s!r}")
    if cwd is not None and not Path(cwd).is_dir():
        raise FileNotFoundError(f"run_torchrun: cwd {str(cwd)!r} is not a directory")
    path = Path(script)
    if not path.is_absolute():
        path = Path(cwd or os.getcwd()) / path
    if not path.is_file():
        raise FileNotFoundError(
            f"run_torchrun: script {str(script)!r} not found (looked at {path}); write it first, e.g. with %%writefile"
        )
    return path.resolve()


def _torchrun_command(script: Path, nproc, args, max_restarts, work: Path) -> list[str]:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]
    if max_restarts:
        command += ["--max-restarts", str(max_restarts)]
    command += ["-m", "rocmlab.lab.launch", str(work), str(script)]
    return command + [str(a) for a in args]


def _child_env(overrides: dict | None) -> dict[str, str]:
    merged = dict(os.environ)
    for key, value in (overrides or {}).items():
        if value is None:
            merged.pop(str(key), None)
        else:
            merged[str(key)] = str(value)
    merged["PYTHONUNBUFFERED"] = "1"
    return merged


def _launch(command, env, cwd, timeout_s, work: Path) -> TorchrunResult:
    from rocmlab.processes import Tree

    log_path = work / "torchrun.log"
    start = time.monotonic()
    timed_out = False
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            command,
            env=env,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        tree = Tree(proc.pid)
        try:
            while proc.poll() is None:
                tree.track()  # ranks run in sessions of their own: remember them while torchrun knows them
                if time.monotonic() - start > timeout_s:
                    timed_out = True
                    break
                time.sleep(POLL_S)
        finally:
            tree.end(GRACE_S)
            proc.wait()
            _LAUNCHED.update(tree.seen)
    elapsed = time.monotonic() - start
    output = log_path.read_text(encoding="utf-8", errors="replace")
    return TorchrunResult(proc.returncode, timed_out, elapsed, [], output)


def _collect_ranks(work: Path, nproc: int) -> list[RankOutput]:
    """The last attempt's output and exit status for each rank (None if it never wrote one)."""
    latest: dict[int, int] = {}
    for path in work.iterdir():
        match = _LOG_NAME.match(path.name)
        if match:
            rank, attempt = int(match.group(1)), int(match.group(2))
            latest[rank] = max(attempt, latest.get(rank, -1))
    ranks = []
    for rank in sorted(set(range(nproc)) | set(latest)):
        if rank not in latest:
            ranks.append(RankOutput(rank, None, ""))
            continue
        stem = work / f"rank{rank}.attempt{latest[rank]}"
        output = Path(f"{stem}.log").read_text(encoding="utf-8", errors="replace")
        ranks.append(RankOutput(rank, _read_status(Path(f"{stem}.rc")), output))
    return ranks


def _read_status(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _status_text(returncode: int | None) -> str:
    if returncode is None:
        return "no exit status (killed before it finished)"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit {returncode}"


def _print_result(result: TorchrunResult) -> None:
    for item in result.ranks:
        print(f"───── rank {item.rank} · {_status_text(item.returncode)} ─────")
        print(item.output.rstrip() or "(no output)")
    if not result.ok:
        print("───── torchrun ─────")
        print(result.output.rstrip()[-4000:] or "(no output)")
    print(result.summary())


# ---------------------------------------------------------------- rank entry (in each rank)


def _rank_main(argv: list[str]) -> int:
    """Run ``python -u script *args`` for this rank, saving its output and exit status."""
    work, script, *script_args = argv
    rank = os.environ.get("RANK", "0")
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    stem = Path(work) / f"rank{rank}.attempt{attempt}"
    with open(Path(f"{stem}.log"), "wb") as log:
        child = subprocess.Popen([sys.executable, "-u", script, *script_args], stdout=log, stderr=subprocess.STDOUT)

        def forward(signum, _frame):
            try:
                child.send_signal(signum)
            except ProcessLookupError:
                pass

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, forward)
        returncode = child.wait()
    tmp = Path(f"{stem}.rc.tmp")
    tmp.write_text(str(returncode))
    os.replace(tmp, Path(f"{stem}.rc"))
    return returncode


def _exit_like(returncode: int) -> None:
    if returncode < 0:
        try:
            signal.signal(-returncode, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # SIGKILL / SIGSTOP cannot be handled, and need not be reset
        os.kill(os.getpid(), -returncode)
    sys.exit(returncode if 0 <= returncode < 256 else 1)


if __name__ == "__main__":
    _exit_like(_rank_main(sys.argv[1:]))
