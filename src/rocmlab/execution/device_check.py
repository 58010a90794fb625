"""The device check (``ci/device_check.sh``): every lab of a profile on a GPU machine lent for a few
minutes, with the kit of ``device_kit``, and one Markdown table of what came of it.

- ``run``: the labs with the course model in place of a hub checkpoint (the ``MODEL`` parameter,
  as the smoke profile sets it: the labs' sources are not touched) and each lab's time limits cut
  to a cap, several at once, as ``rocmlab run`` runs them (records and executed notebooks in
  ``<results>/<entry>/``);
- ``summary``: the table, from the records, and a bundle of the records and the notebooks of the
  labs that did not pass (the device returns at most 8 files).

A CUDA machine is its own matrix entry (``[[cuda]]`` in env/matrix.toml), never a ROCm verdict:
the summary says so, and names each lab's ROCm-only steps (``ROCM_ONLY``) as not applicable there
rather than counting them among what passed.
"""

from __future__ import annotations

import argparse
import sys
import tarfile
from dataclasses import dataclass, replace
from pathlib import Path

from ..course.catalog import COURSE_MODEL, GPU, SMOKE, Lab
from ..errors import ExitCode, InputError
from ..markdown_table import cell
from .fingerprint import Fingerprint, fingerprint
from .results import Record, RecordError, read_record

DRY_RUN_ENTRY = "device-dry-run"  # the dry run's results folder: a CPU rehearsal, no matrix entry
DEFAULT_CAP_S = 240


@dataclass(frozen=True)
class RocmOnly:
    """A step of a lab that only a ROCm machine exercises."""

    step: str
    anchor: str  # text of the lab's source where it branches on the vendor (tests check it is there)
    elsewhere: str  # what the lab does on another vendor instead


ROCM_ONLY = {
    "01-rocm-setup": (
        RocmOnly(
            "gfx target and wavefront size from gcnArchName",
            'getattr(torch.cuda.get_device_properties(0), "gcnArchName", "-")',
            "a CUDA build has no gcnArchName; the lab reads sm_NN",
        ),
    ),
    "04-collectives-rccl": (
        RocmOnly(
            "RCCL as backend nccl",
            'label = "rccl" if hip_version is not None else "nccl"',
            "NCCL, or gloo when there are fewer GPUs than ranks",
        ),
    ),
    "07-triton-kernels": (
        RocmOnly(
            "AMD-only Triton keys (waves_per_eu, matrix_instr_nonkdim, kpack) and wave64",
            "_amd_options = interpret or torch.version.hip is not None",
            "CUDA's Triton rejects those keys: the search space leaves them out",
        ),
    ),
    "08-low-precision": (
        RocmOnly(
            "FP8 GEMM in e4m3fnuz (gfx942)",
            'if arch == "gfx942":\n        return torch.float8_e4m3fnuz',
            "e4m3fn (OCP) on sm_89 and newer",
        ),
    ),
    "09-profiling": (
        RocmOnly(
            "rocprofv3 and rocprof-compute",
            'ROCPROF = DATA / "rocprofv3"',
            "the traces recorded on ROCm in data/ are read; nothing is recorded live",
        ),
        RocmOnly(
            "TunableOp validators of this machine",
            'if GPU and getattr(torch.version, "hip", None):',
            "the illustrative validators are kept",
        ),
    ),
}


def vendor(fingerprint_: Fingerprint) -> str:
    """ROCm, CUDA or CPU: what a run's fingerprint says its torch build drove."""
    if fingerprint_.hip:
        return "ROCm"
    if fingerprint_.cuda and fingerprint_.gpus:
        return "CUDA"
    return "CPU"


def on_device(lab: Lab, profile_name: str, cap_s: int) -> Lab:
    """``lab`` with its ``profile_name`` profile run on the course model and within ``cap_s``.

    A ``MODEL`` that names a hub checkpoint becomes the course model, which needs what the smoke
    profile (written for that model) requires of the cache; every other parameter stays."""
    profile = lab.profiles.get(profile_name)
    if profile is None:
        return lab
    params, requires = dict(profile.params), profile.requires
    if params.get("MODEL", COURSE_MODEL) != COURSE_MODEL:
        params["MODEL"] = COURSE_MODEL
        smoke = lab.profiles[SMOKE].requires
        requires = replace(requires, course_model=True, qc_adapter=smoke.qc_adapter)
    capped = replace(
        profile,
        params=params,
        requires=requires,
        timeout_s=min(profile.timeout_s, cap_s),
        cell_timeout_s=min(profile.cell_timeout_s, cap_s),
    )
    return replace(lab, profiles={**lab.profiles, profile_name: capped})


def run_check(root: Path, labs: list[Lab], profile: str, entry: str, out: Path, *, cap_s: int, jobs: int) -> list:
    """Run ``labs`` as ``on_device`` makes them, here, recorded under ``out/<entry>/``."""
    from .run import Target, run_labs

    target = Target(entry, sys.executable, fingerprint())
    return run_labs(root, [on_device(lab, profile, cap_s) for lab in labs], profile, target, out, jobs=jobs)


def read_records(env_dir: Path, labs: list[Lab]) -> dict[str, Record | None]:
    """Each lab's record in ``env_dir``, None where the run left none (it ran out of time)."""
    found = {}
    for lab in labs:
        try:
            found[lab.id] = read_record(env_dir / f"{lab.id}.json")
        except RecordError:
            found[lab.id] = None
    return found


def world_sizes(labs: list[Lab], profile: str) -> dict[str, int]:
    """The ranks each lab's profile starts (its ``WORLD_SIZE`` parameter), for the labs that set one."""
    sizes = {}
    for lab in labs:
        size = lab.profiles[profile].params.get("WORLD_SIZE") if profile in lab.profiles else None
        if isinstance(size, int) and size > 0:
            sizes[lab.id] = size
    return sizes


def summary(
    records: dict[str, Record | None],
    *,
    entry: str,
    profile: str,
    doctor_status: int,
    jobs: int,
    ranks: dict[str, int] | None = None,
) -> str:
    """The one-table Markdown summary of a device check; ``ranks``: ``world_sizes`` of its labs."""
    ran = [r for r in records.values() if r is not None]
    fp = ran[0].fingerprint if ran else Fingerprint()
    where = vendor(fp)
    gpus = ", ".join(f"{g.get('name')} ({g.get('arch')})" for g in fp.gpus) or "no GPU"
    at_once = min(jobs, len(ran)) or 1
    build = f"hip {fp.hip}" if fp.hip else (f"CUDA {fp.cuda}" if fp.cuda else "CPU build")
    torch_version = fp.packages.get("torch")
    counts = {}
    for record in records.values():
        status = record.status if record else "not run"
        counts[status] = counts.get(status, 0) + 1
    lines = [
        f"# Device check: {entry}, profile {profile}",
        "",
        f"{where}: {gpus}; torch {torch_version} ({build}); python {fp.python}.",
        _verdict_line(where),
        f"`rocmlab doctor`: exit status {doctor_status} (its findings: doctor.txt).",
        f"Labs ran up to {at_once} at a time on one machine: their timings are not benchmark figures.",
        *([_model_line(profile)] if profile != SMOKE else []),
        "Result: "
        + ", ".join(f"{n} {status}" for status, n in sorted(counts.items(), key=lambda kv: (kv[0] != "passed", kv[0])))
        + ".",
        "",
        "| lab | status | seconds | ROCm-only steps | why it did not pass |",
        "| --- | --- | --- | --- | --- |",
    ]
    for lab_id, record in records.items():
        status = record.status if record else "not run (the check's time ran out)"
        seconds = f"{record.duration_s:.0f}" if record else ""
        why = record.failure if record and not record.passed else ""
        cells = [lab_id, status, seconds, _rocm_only_cell(lab_id, where), why]
        lines.append("| " + " | ".join(cell(c) for c in cells) + " |")
    gpu_count = len(fp.gpus)
    short = sorted(lab for lab, size in (ranks or {}).items() if records.get(lab) and size > gpu_count)
    if short and where != "CPU":
        lines += [
            "",
            f"{', '.join(short)}: more ranks than GPUs ({gpu_count}), so their ranks ran with gloo on the CPU "
            "(nccl needs a GPU per rank): their multi-GPU path did not run.",
        ]
    return "\n".join(lines) + "\n"


def _verdict_line(where: str) -> str:
    if where == "ROCm":
        return "A ROCm machine: its verdicts come from the freshness workflow's runs (ci/freshness_job.sh), not from this check."
    if where == "CPU":
        return "A rehearsal on a CPU: no GPU path ran, and it is no verdict for any matrix entry."
    return (
        f"A {where} run: its own matrix entry, never a ROCm verdict. A passed lab passed its vendor-neutral "
        "path; its ROCm-only steps did not run."
    )


def _model_line(profile: str) -> str:
    return (
        f"Parameters: the {profile} profile's, with MODEL = {COURSE_MODEL} (4 M parameters) in place of a hub "
        "checkpoint; a check sized for the larger model can fail for that alone (the notebook shows the values)."
    )


def _rocm_only_cell(lab_id: str, where: str) -> str:
    steps = ROCM_ONLY.get(lab_id, ())
    if not steps:
        return "none"
    if where == "ROCm":
        return "ran: " + "; ".join(s.step for s in steps)
    return f"not applicable on {where}: " + "; ".join(f"{s.step} ({s.elsewhere})" for s in steps)


def bundle(env_dir: Path, records: dict[str, Record | None], target: Path) -> list[str]:
    """``target`` (a .tar.gz) with every record and the executed notebook of each lab that did not
    pass; the names it holds."""
    names = [f"{lab}.json" for lab, r in records.items() if r is not None]
    names += [r.notebook for r in records.values() if r is not None and not r.passed and r.notebook]
    names = [n for n in names if (env_dir / n).is_file()]
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(target, "w:gz") as tar:
        for name in names:
            tar.add(env_dir / name, arcname=f"{env_dir.name}/{name}")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="step", required=True)
    run = sub.add_parser("run", help="run the labs as the device check does")
    summarise = sub.add_parser("summary", help="the Markdown summary and the bundle of records")
    for p in (run, summarise):
        p.add_argument("labs", nargs="*", metavar="LAB", help="lab ids or their numbers (default: all)")
        p.add_argument("--profile", default=GPU, choices=[SMOKE, GPU])
        p.add_argument("--entry", required=True, help="the environment's name: a [[cuda]] entry, or device-dry-run")
        p.add_argument("--results", required=True, metavar="DIR", help="results folder (records in DIR/ENTRY/)")
        p.add_argument("--jobs", type=int, default=4, metavar="N", help="labs run at once")
        p.add_argument("--root", default=None, help="the course checkout (default: found from here)")
    run.add_argument("--cap-s", type=int, default=DEFAULT_CAP_S, metavar="S", help="each lab's time limit, at most")
    summarise.add_argument("--doctor-status", type=int, required=True, help="`rocmlab doctor`'s exit status")
    summarise.add_argument("--summary", required=True, metavar="FILE", help="where the Markdown table goes")
    summarise.add_argument("--bundle", required=True, metavar="FILE", help="the .tar.gz of records and notebooks")


def check_entry(entry: str, profile: str, root: Path) -> None:
    """A GPU run is recorded under a [[cuda]] entry of the release matrix; the dry run under its own name."""
    from ..freshness.matrix import read_matrix

    if profile == SMOKE and entry == DRY_RUN_ENTRY:
        return
    names = [e.name for e in read_matrix(root / "env" / "matrix.toml").cuda]
    if entry not in names:
        raise InputError(f"--entry: expected a [[cuda]] entry of env/matrix.toml ({', '.join(names)}), got {entry!r}")


def main(argv=None) -> int:
    from ..course.catalog import discover, select
    from ..processes import exit_on_sigterm
    from ..root import find_root

    parser = argparse.ArgumentParser(
        prog="python -m rocmlab.execution.device_check", description=__doc__.split("\n\n")[0]
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        if args.jobs < 1:
            raise InputError(f"--jobs: expected a positive number, got {args.jobs}")
        root = find_root(args.root)
        check_entry(args.entry, args.profile, root)
        labs = select(discover(root), args.labs)
    except InputError as err:
        print(f"device_check {args.step}: error: {err}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    results = Path(args.results)
    if args.step == "run":
        exit_on_sigterm()  # the script's time limit ends every kernel before this process goes
        records = run_check(root, labs, args.profile, args.entry, results, cap_s=args.cap_s, jobs=args.jobs)
        return ExitCode.OK if all(r.passed for r in records) else ExitCode.FAILED
    env_dir = results / args.entry
    records = read_records(env_dir, labs)
    table = summary(
        records,
        entry=args.entry,
        profile=args.profile,
        doctor_status=args.doctor_status,
        jobs=args.jobs,
        ranks=world_sizes(labs, args.profile),
    )
    Path(args.summary).write_text(table, encoding="utf-8")
    bundle(env_dir, records, Path(args.bundle))
    print(table)
    return ExitCode.OK if all(r is not None and r.passed for r in records.values()) else ExitCode.FAILED


if __name__ == "__main__":
    raise SystemExit(main())
