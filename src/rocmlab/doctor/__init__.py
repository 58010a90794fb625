"""`rocmlab doctor`: probe a machine, judge it, print what to fix.

Each check returns findings with a status (ok, skip, warn, fail), what was seen, a fix hint in
Chinese and English and a doc link. Probes read through ``rocmlab.probes.Machine`` so that the
tests replay recorded machines (tests/fixtures/machines/).

- ``facts``: findings, what the probes learned, the release table;
- ``checks_gpu``, ``checks_env``: the checks; ``checks_case``: the learner's device (partition, peak),
  TheRock's readiness for its gfx and the known traps;
- this module: the checks in order, the report, the command.

Exit status of ``rocmlab doctor``: 0 nothing worse than ok/skip, 1 the worst finding is a warning,
3 at least one failure, 2 bad input (a --machine or --matrix that cannot be read).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from .. import probes
from ..course.course import Course
from ..probes import Machine
from .checks_case import check_partition, check_readiness, check_traps
from .checks_env import check_disk, check_hub, check_iommu, check_nccl, check_numa, check_visible
from .checks_gpu import (
    check_access,
    check_driver,
    check_gpus,
    check_os,
    check_rocm,
    check_torch,
    check_torch_arch,
)
from .facts import (
    BUILTIN_RELEASES,
    EXIT_CODES,
    SEVERITY,
    STATUSES,
    Facts,
    Finding,
    gather,
    load_releases,
    release_for,
)

__all__ = [
    "BUILTIN_RELEASES",
    "EXIT_CODES",
    "STATUSES",
    "Facts",
    "Finding",
    "add_arguments",
    "check_os",
    "diagnose",
    "load_releases",
    "main",
    "release_for",
    "render_table",
]

CHECKS = [
    check_os,
    check_driver,
    check_rocm,
    check_gpus,
    check_access,
    check_torch,
    check_torch_arch,
    check_partition,
    check_readiness,
    check_traps,
    check_visible,
    check_iommu,
    check_numa,
    check_nccl,
    check_disk,
    check_hub,
]


# ---- report ----------------------------------------------------------------------------------


def diagnose(machine: Machine | None = None, *, matrix: Path | None = None) -> dict:
    """Run every check on ``machine`` (this computer by default); the JSON-ready report."""
    machine = machine or probes.LiveMachine()
    releases, source = load_releases(matrix)
    facts = gather(machine)
    findings: list[Finding] = []
    for check in CHECKS:
        try:
            findings.extend(check(machine, facts, releases))
        except Exception as exc:  # noqa: BLE001 (one broken probe must not hide the others)
            findings.append(
                Finding(
                    check.__name__.removeprefix("check_"),
                    check.__name__,
                    "warn",
                    f"the check itself failed: {type(exc).__name__}: {exc}",
                )
            )
    worst = max((f.status for f in findings), key=SEVERITY.__getitem__, default="ok")
    torch_info = facts.torch or {}
    return {
        "schema": 1,
        "machine": getattr(machine, "name", "this machine"),
        "worst": worst,
        "exit_code": EXIT_CODES[worst],
        "summary": {s: sum(f.status == s for f in findings) for s in STATUSES},
        "facts": {
            "vendor": facts.vendor,
            "rocm_version": facts.rocm_version,
            "gpus": facts.gpus,
            "torch": {
                "version": torch_info.get("version"),
                "backend": facts.torch_backend,
                "hip": torch_info.get("hip"),
                "cuda": torch_info.get("cuda"),
                "arch_list": torch_info.get("arch_list", []),
            },
            "release_table": source,
        },
        "findings": [asdict(f) for f in findings],
    }


_MARK = {"ok": "OK  ", "skip": "--  ", "warn": "WARN", "fail": "FAIL"}


def render_table(report: dict, lang: str = "both") -> str:
    rows = [(f["status"], f["check"], f["detail"]) for f in report["findings"]]
    width = max(len(r[1]) for r in rows) if rows else 5
    lines = [f"rocmlab doctor: {report['machine']}", ""]
    for status, check, detail in rows:
        lines.append(f"{_MARK[status]}  {check:<{width}}  {detail}")
    fixes = [f for f in report["findings"] if f["status"] in ("warn", "fail") and (f["fix_en"] or f["fix_zh"])]
    if fixes:
        lines += ["", "How to fix / 修复建议:"]
        for f in fixes:
            lines.append(f"- [{f['status']}] {f['check']}")
            if lang in ("zh", "both") and f["fix_zh"]:
                lines.append(f"    {f['fix_zh']}")
            if lang in ("en", "both") and f["fix_en"]:
                lines.append(f"    {f['fix_en']}")
            if f["doc"]:
                lines.append(f"    {f['doc']}")
    summary = ", ".join(f"{n} {s}" for s, n in report["summary"].items() if n)
    lines += ["", f"worst: {report['worst']} ({summary}); exit status {report['exit_code']}"]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Probe this machine (driver, ROCm, groups, torch build, gfx support, the device or partition and its peak, "
        "TheRock readiness, known traps, RCCL settings), judge it against "
        "the release matrix and print fixes in Chinese and English. Exit 0 all ok, 1 the worst finding is a "
        "warning, 3 a check failed."
    )
    parser.epilog = (
        "exit status: 0 all ok (or skipped), 1 worst finding is a warning, 3 at least one failure; 2 bad input"
    )
    parser.add_argument("--json", dest="json_out", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--machine",
        metavar="DIR",
        help="replay a recorded machine (a folder with machine.json) instead of probing this one",
    )
    parser.add_argument("--lang", choices=("zh", "en", "both"), default="both", help="language of fix hints")
    parser.add_argument(
        "--matrix",
        metavar="TOML",
        help="release matrix (default: env/matrix.toml of the course, else a built-in table)",
    )


def needs_course(options: dict) -> bool:
    """Never: the doctor runs on any machine, with its built-in release table outside a course."""
    return False


def main(
    *, course: Course | None = None, json_out: bool = False, machine: str | None = None, lang: str = "both", matrix=None
) -> int:
    """Exit status: 0 ok, 1 warnings, 3 failures; bad input raises InputError."""
    probed = probes.RecordedMachine(machine) if machine else probes.LiveMachine()
    report = diagnose(probed, matrix=Path(matrix) if matrix else course_matrix(course))
    text = json.dumps(report, ensure_ascii=False, indent=2) if json_out else render_table(report, lang)
    try:
        print(text)
    except BrokenPipeError:  # `rocmlab doctor | head`
        sys.stderr.close()
    return report["exit_code"]


def course_matrix(course: Course | None) -> Path | None:
    """env/matrix.toml of the course, or None outside one (or a course without one)."""
    path = course.matrix_path if course else None
    return path if path and path.is_file() else None
