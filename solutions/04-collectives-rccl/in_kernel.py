"""Lab 04's kernel-side helpers: what a hidden check runs in the kernel (``learner.run``).

``busbw_vs_peak`` (the learner's, the notebook's own name) takes an ``Interconnect`` row, which
the check cannot send as plain data: these build the row in the kernel and return the learner's
answer for ``checks.py`` to judge against its reference. ``uneven_run`` launches the course's
uneven script with the learner's ``hang_tools.py`` (the guarded and fixed runs) or under the
variables the learner's ``debug_env`` answered (the desync run), and ``ring_run`` the course's ring
driver with the learner's ``ring.py`` and ``init_plan.py``, never reading the notebook's ``ring_runs``,
``guarded``, ``fixed`` or ``desync`` records or its runs04/ files, which any later cell may rebind or
write. The checks run both in a fresh kernel (``rocmlab.harness.Fresh``) that ran none of the
learner's cells: only module-level imports here, no name of the notebook's.
"""

import json
import shutil
import tempfile
from pathlib import Path

from rocmlab.lab.datasheets import Interconnect, interconnect
from rocmlab.lab.launch import run_torchrun

LEARNER_MODULES = ("init_plan.py", "hang_tools.py", "ring.py")  # the learner's answers the course's scripts import


def peak_of_row(busbw, key, n):
    """``busbw_vs_peak`` against the course table's row ``key``."""
    return busbw_vs_peak(busbw, interconnect(key), n)


def peak_of_fabric(busbw, fields, n):
    """``busbw_vs_peak`` against a fabric made from ``fields`` (``Interconnect``'s, in order)."""
    return busbw_vs_peak(busbw, Interconnect(*fields), n)


def uneven_run(scripts, env, nproc, timeout_s, tag="desync", flags=()):
    """A run of section 5's ``train_uneven.py`` launched again by the check: ``scripts`` (the
    course's ``train_uneven.py`` and ``dist_common.py``, name -> text) beside the learner's own
    ``init_plan.py`` and ``hang_tools.py`` in a folder of their own, under ``env``, with ``--tag tag``
    and ``flags`` (``--guard``, ``--fix``); its outcome, each rank's exit status and output, and the
    JSON each rank wrote (None where it wrote none)."""
    if flags and not Path("hang_tools.py").is_file():  # the guard and the fix import it: nothing to launch
        return _nothing_launched("hang_tools.py")
    return _launch(
        scripts, "train_uneven.py", lambda runs: ["--runs", str(runs), "--tag", tag, *flags], env, nproc, timeout_s, tag
    )


def ring_run(scripts, nproc, seed, sizes, timeout_s):
    """Section 2's ring run launched again by the check: ``scripts`` (the course's ``run_ring.py``
    and ``dist_common.py``) beside the learner's own ``init_plan.py`` and ``ring.py``, on ``nproc``
    ranks with ``seed`` and ``sizes``; as ``uneven_run``'s."""
    if not Path("ring.py").is_file():
        return _nothing_launched("ring.py")
    args = [str(seed), *(str(size) for size in sizes)]
    return _launch(scripts, "run_ring.py", lambda runs: [str(runs), *args], {}, nproc, timeout_s, "ring")


def _nothing_launched(missing):
    return {"missing": missing, "timed_out": False, "returncode": None, "returncodes": [], "outputs": [], "records": []}


def _launch(scripts, script, args_of, env, nproc, timeout_s, tag):
    """``script`` of ``scripts`` under torchrun, in a folder of its own with the learner's modules."""
    folder = Path(tempfile.mkdtemp(prefix=f"{tag}-", dir=".")).resolve()
    try:
        for name, text in scripts.items():
            (folder / name).write_text(text, encoding="utf-8")
        for name in LEARNER_MODULES:
            if Path(name).is_file():
                shutil.copyfile(name, folder / name)
        (folder / "runs").mkdir()
        run = run_torchrun(
            folder / script,
            nproc=nproc,
            args=args_of(folder / "runs"),
            env=env,
            timeout_s=timeout_s,
            cwd=folder,
            show=False,
        )
        ranks = sorted(run.ranks, key=lambda r: r.rank)
        return {
            "timed_out": run.timed_out,
            "returncode": run.returncode,
            "returncodes": [r.returncode for r in ranks],
            "outputs": [r.output for r in ranks],
            "records": [_rank_record(folder / "runs" / f"{tag}_ws{nproc}_rank{rank}.json") for rank in range(nproc)],
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _rank_record(path):
    """The JSON one rank wrote, or None where it wrote none or not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
