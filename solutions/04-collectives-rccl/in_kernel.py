"""Lab 04's kernel-side helpers: what a hidden check runs in the kernel (``learner.run``).

``busbw_vs_peak`` (the learner's, the notebook's own name) takes an ``Interconnect`` row, which
the check cannot send as plain data: these build the row in the kernel and return the learner's
answer for ``checks.py`` to judge against its reference. ``uneven_run`` launches the course's
uneven script under the variables the learner's ``debug_env`` answered, never the notebook's
``desync`` record, which any later cell may rebind.
"""

import shutil
import tempfile
from pathlib import Path

from rocmlab.lab.datasheets import Interconnect, interconnect
from rocmlab.lab.launch import run_torchrun


def peak_of_row(busbw, key, n):
    """``busbw_vs_peak`` against the course table's row ``key``."""
    return busbw_vs_peak(busbw, interconnect(key), n)


def peak_of_fabric(busbw, fields, n):
    """``busbw_vs_peak`` against a fabric made from ``fields`` (``Interconnect``'s, in order)."""
    return busbw_vs_peak(busbw, Interconnect(*fields), n)


def uneven_run(scripts, env, nproc, timeout_s):
    """The uneven run of section 5 launched again by the check: ``scripts`` (the course's
    ``train_uneven.py`` and ``dist_common.py``, name -> text) beside the learner's ``init_plan.py``
    in a folder of their own, under ``env``; its outcome and each rank's output."""
    folder = Path(tempfile.mkdtemp(prefix="uneven-", dir=".")).resolve()
    try:
        for name, text in scripts.items():
            (folder / name).write_text(text, encoding="utf-8")
        if Path("init_plan.py").is_file():
            shutil.copyfile("init_plan.py", folder / "init_plan.py")
        (folder / "runs").mkdir()
        run = run_torchrun(
            folder / "train_uneven.py",
            nproc=nproc,
            args=["--runs", str(folder / "runs"), "--tag", "desync"],
            env=env,
            timeout_s=timeout_s,
            cwd=folder,
            show=False,
        )
        return {"timed_out": run.timed_out, "returncode": run.returncode, "outputs": [r.output for r in run.ranks]}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
