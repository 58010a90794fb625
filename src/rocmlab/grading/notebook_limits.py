"""A learner's notebook is parsed first by a child of its own, never by a root process.

Parsing JSON costs far more memory than the file: a 45 MB notebook of many small outputs took the
root grading worker to 15.7 GiB (issue 48). Before the live service queues a submission, a child
parses the spooled notebook and checks its structure: it runs as the learner (or ``nobody``), reads
the notebook from its stdin (opened by the service), may not write files, and has an address-space
and CPU ceiling, so a notebook built to exhaust memory costs that child, and is refused with the
limit it broke named. The grading worker checks again before it parses a learner's notebook
itself (rocmlab.live.attempted), as its copy may come over the service's HTTP API.

The child is this file's source run with ``python -I -S -c`` (nothing but the standard library), so
it imports nothing of the service's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

MAX_BYTES = 32 * 2**20  # the notebook file
MAX_CELLS = 2000
MAX_OUTPUTS = 200  # per code cell
MAX_VALUES = 500_000  # JSON values in the whole notebook (what makes parsing cost memory)
MAX_DEPTH = 40  # nesting of JSON containers
MAX_ATTACHMENT_BYTES = 8 * 2**20  # one attachment of a markdown cell, as base64 text
CHILD_MEMORY = 1 * 2**30  # address space of the child
CHILD_CPU_S = 30
NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"  # where this process's interpreter is private (a test machine's)


class NotebookRefused(Exception):
    """The notebook is not one the course's grader takes: the message names the limit and where."""


def structure_problem(nb) -> str:
    """What breaks the limits in a parsed notebook, or ''."""
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return "not a Jupyter notebook: no list of cells"
    if len(nb["cells"]) > MAX_CELLS:
        return f"{len(nb['cells'])} cells: at most {MAX_CELLS}"
    for index, cell in enumerate(nb["cells"], 1):
        if not isinstance(cell, dict):
            return f"cell {index} is not an object"
        outputs = cell.get("outputs", [])
        if not isinstance(outputs, list) or len(outputs) > MAX_OUTPUTS:
            return f"cell {index}: more than {MAX_OUTPUTS} outputs (clear its output)"
        for name, bundle in (cell.get("attachments") or {}).items():
            size = sum(len(v) for v in bundle.values() if isinstance(v, str)) if isinstance(bundle, dict) else 0
            if size > MAX_ATTACHMENT_BYTES:
                return f"cell {index}: attachment {name!r} is {size} bytes, at most {MAX_ATTACHMENT_BYTES}"
    values, stack = 0, [(nb, 1)]
    while stack:
        value, depth = stack.pop()
        values += 1
        if values > MAX_VALUES:
            return f"more than {MAX_VALUES} JSON values (clear the outputs)"
        if depth > MAX_DEPTH:
            return f"JSON nested deeper than {MAX_DEPTH}"
        if isinstance(value, dict):
            stack.extend((child, depth + 1) for child in value.values())
        elif isinstance(value, list):
            stack.extend((child, depth + 1) for child in value)
    return ""


def _child() -> None:
    """In the child: limits on itself, the notebook from stdin, one line of JSON verdict on stdout."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))
    resource.setrlimit(resource.RLIMIT_CPU, (CHILD_CPU_S, CHILD_CPU_S))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    data = sys.stdin.buffer.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        problem = f"the notebook is over {MAX_BYTES // 2**20} MiB"
    else:
        try:
            problem = structure_problem(json.loads(data))
        except MemoryError:
            problem = f"parsing it takes more than {CHILD_MEMORY // 2**20} MiB"
        except RecursionError:
            problem = "JSON nested too deep"
        except ValueError as exc:
            problem = f"not valid JSON: {exc}"
    sys.stdout.write(json.dumps({"problem": problem}) + "\n")


def child_account(learner: str = "") -> tuple[int, int] | None:
    """Who the child runs as: the learner's account where it exists, else nobody; None unless root."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        entry = pwd.getpwnam(learner) if learner else pwd.getpwuid(NOBODY)
    except KeyError:
        entry = pwd.getpwuid(NOBODY)
    if entry.pw_uid == 0:
        raise NotebookRefused(f"{learner} is root: no notebook of theirs is parsed as root")
    return entry.pw_uid, entry.pw_gid


def check_notebook(path, learner: str = "", timeout_s: float = 60) -> None:
    """Parse and check the notebook at ``path`` in a child; NotebookRefused naming what is wrong."""
    account = child_account(learner)
    ids = {"user": account[0], "group": account[1], "extra_groups": []} if account else {}
    with open(path, "rb") as notebook:  # opened here: the child need not reach the spool
        if os.fstat(notebook.fileno()).st_size > MAX_BYTES:
            raise NotebookRefused(f"{os.path.basename(path)}: the notebook is over {MAX_BYTES // 2**20} MiB")
        done = None
        for python in dict.fromkeys([sys.executable, SYSTEM_PYTHON]):  # the first the account may run
            notebook.seek(0)
            try:
                done = subprocess.run(
                    [python, "-I", "-S", "-c", CHILD_SOURCE],
                    stdin=notebook,
                    capture_output=True,
                    timeout=timeout_s,
                    cwd="/",
                    env={"PATH": "/usr/bin:/bin"},
                    check=False,
                    **ids,
                )
                break
            except PermissionError:
                continue
            except subprocess.TimeoutExpired:
                raise NotebookRefused(f"{os.path.basename(path)}: checking it took over {timeout_s:g} s") from None
        if done is None:
            raise NotebookRefused(f"{os.path.basename(path)}: no Python interpreter the checking account may run")
    try:
        problem = json.loads(done.stdout.decode().splitlines()[-1])["problem"]
    except (IndexError, ValueError, KeyError):
        problem = f"the check ended with status {done.returncode} (over its memory or CPU limit)"
    if problem:
        raise NotebookRefused(f"{os.path.basename(path)}: {problem}")


if __name__ == "__main__":  # the child (run with -c: it has no __file__)
    _child()
else:  # what the child runs: it need not be able to read this file
    with open(__file__, encoding="utf-8") as _source:
        CHILD_SOURCE = _source.read()
