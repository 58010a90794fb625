"""What a fresh kernel (``rocmlab.harness.Fresh``, docs/grading.md item 12) adds per learner.

Runs one small notebook through a real worker (``rocmlab.execution.worker.Worker``, the path
every grading run takes), ``--runs`` times with a check that takes ``fresh`` and as often with the
same check asking the learner's kernel instead, alternating, and prints the harness record's
``fresh_start_s`` (killing the learner's kernel, ending its run, starting the fresh kernel until
it answers ``kernel_info``) and the wall time per run of each kind, unsandboxed. With
``--sandbox``, also ``fresh_start_s`` of runs graded as ``rocmlab grade`` runs them
(``Run.execute``) under each sandbox way here (as root: bubblewrap and namespaces, forked kernels
and a kernel per process).

    .venv/bin/python benchmarks/fresh_kernel_cost.py [--runs 5] [--sandbox]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import nbformat

from rocmlab.execution.worker import Spec, Worker

IN_KERNEL = "def answer():\n    return open('answer.txt').read()\n"
CHECK = """
from rocmlab.harness import check

@check("t-1", points=1, en="answer", zh="答案")
def answer(learner, variant{extra}):
    assert {asked}.run("answer") == "42"
"""


def spec(folder: Path, fresh: bool) -> Spec:
    notebook = folder / "learner.ipynb"
    cell = "open('answer.txt', 'w').write('42')"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)]), str(notebook))
    source = CHECK.format(extra=", fresh" if fresh else "", asked="fresh" if fresh else "learner")
    harness = {
        "source": source,
        "kernel": {"source": IN_KERNEL, "filename": "in_kernel.py"},
        "seed": 1,
        "out": str(folder / "checks.json"),
        "probe_timeout_s": 30.0,
        "answer_budget_s": 120.0,
        "budget_s": 300.0,
    }
    return Spec(
        input=str(notebook),
        output=str(folder / "out.ipynb"),
        cwd=str(folder / "work"),
        parameters={},
        cell_timeout_s=30,
        timeout_s=120,
        engine_options={"harness": harness},
    )


WAYS = [("bubblewrap", True), ("bubblewrap", False), ("namespaces", True), ("namespaces", False)]


def sandboxed(runs: int) -> None:
    """``fresh_start_s`` of ``runs`` graded runs per sandbox way (the course hidden as ``rocmlab grade`` hides it)."""
    from rocmlab.grading.preflight import course_view, sandbox_env
    from rocmlab.root import find_root
    from rocmlab.sandbox.limits import Sandbox

    root = find_root()
    hide, expose = course_view(root)
    for backend, forked in WAYS:
        box = Sandbox(backend=backend, slots=1, prestart=forked, hide=hide, expose=expose, env=sandbox_env(root))
        starts = []
        try:
            for _ in range(runs):
                run = box.new_run(0, 30)
                try:
                    graded = spec(box.base / run.folder.name, fresh=True)
                    _, outcome = run.execute(
                        Path(graded.input), run.private / "out.ipynb", {}, 30, 120,
                        {**graded.engine_options["harness"], "out": str(run.private / "checks.json")},
                    )  # fmt: skip
                    starts.append((outcome.harness or {}).get("fresh_start_s", float("nan")))
                finally:
                    run.cleanup()
        finally:
            box.close()
        way = f"{backend}, {'forked kernels' if forked else 'a kernel per process'}"
        print(f"{way}: fresh_start_s {', '.join(f'{s:.2f}' for s in starts)} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sandbox", action="store_true", help="also under each sandbox way here (root)")
    args = parser.parse_args()
    if args.sandbox:
        sandboxed(args.runs)
    walls: dict[bool, list[float]] = {True: [], False: []}
    starts = []
    with tempfile.TemporaryDirectory() as tmp, Worker() as worker:
        worker.start()
        for index in range(2 * args.runs):
            fresh = bool(index % 2)
            folder = Path(tmp) / f"run{index}"
            folder.mkdir()
            began = time.monotonic()
            outcome = worker.run(spec(folder, fresh))
            walls[fresh].append(time.monotonic() - began)
            checks = (outcome.harness or {}).get("checks") or [{}]
            if not checks[0].get("passed"):
                raise SystemExit(f"run {index}: the check did not pass: {outcome.harness or outcome.reason}")
            if fresh:
                starts.append(outcome.harness["fresh_start_s"])
    print(f"fresh_start_s: median {statistics.median(starts):.2f} s, range {min(starts):.2f}-{max(starts):.2f} s")
    for fresh, label in ((False, "without"), (True, "with")):
        print(f"wall per run {label} a fresh kernel: median {statistics.median(walls[fresh]):.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
