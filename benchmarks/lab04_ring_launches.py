"""What lab 04's ring rules add per learner since they launch the ring runs themselves (issue 47,
docs/grading.md item 12): ``in_kernel.ring_run`` once per rank count of the profile, run here (as a
fresh kernel runs it) with the solution's ``ring.py`` and ``init_plan.py`` in a temporary work
folder. Prints each launch's wall time and exit codes.

    .venv/bin/python benchmarks/lab04_ring_launches.py [--profile smoke]
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from pathlib import Path

from rocmlab.course.catalog import discover, select
from rocmlab.harness import lab_parameters
from rocmlab.root import find_root


def written_file(lab_py: Path, name: str) -> str:
    """The text of ``lab.py``'s ``%%writefile <name>`` cell (as the checks' ``course_script`` reads it)."""
    marker = f"# %%writefile {name}\n"
    (cell,) = [
        c for c in re.split(r"^(?=# %%)", lab_py.read_text(encoding="utf-8"), flags=re.M) if c.startswith(marker)
    ]
    return cell[len(marker) :]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="smoke")
    args = parser.parse_args()
    (lab,) = select(discover(find_root()), ["04"])
    folder = lab.checks.parent
    namespace: dict = {}
    exec(compile((folder / "in_kernel.py").read_text(encoding="utf-8"), "in_kernel.py", "exec"), namespace)  # noqa: S102
    parameters = lab_parameters(lab.checks, lab.profile(args.profile).parameters)
    scripts = {name: written_file(folder / "lab.py", name) for name in ("run_ring.py", "dist_common.py")}
    with tempfile.TemporaryDirectory() as work:
        for name in ("init_plan.py", "ring.py"):  # the solution's, as a learner's work folder holds them
            (Path(work) / name).write_text(written_file(folder / "lab.py", name), encoding="utf-8")
        os.chdir(work)
        for n in parameters["RING_WORLD_SIZES"]:
            began = time.monotonic()
            run = namespace["ring_run"](scripts, n, parameters["SEED"], parameters["RING_SIZES"], 50)
            print(f"{n} ranks: {time.monotonic() - began:.1f} s, exit codes {run['returncodes']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
