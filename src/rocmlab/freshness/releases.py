"""`rocmlab releases show | check | verify-pins`: the release matrix against upstream.

The work lives in one module per job: ``matrix`` (env/matrix.toml and its schema),
``upstream`` (what TheRock, the wheel indexes, Docker Hub and PyPI have published),
``proposals`` (what to change in the matrix), ``pull_request`` (the PR body and the edited
matrix file) and ``pins`` (pin liveness).
This module is the command and keeps the names other modules import from it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from pathlib import Path

from ..course.course import Course
from . import pins, proposals, pull_request, upstream
from .matrix import (  # noqa: F401 (re-exported: environments, report, ci/ import them from here)
    MATRIX_RELATIVE,
    STATUSES,
    Entry,
    Install,
    Matrix,
    MatrixError,
    Source,
    era_of,
    find_matrix,
    job_matrix,
    load_matrix,
    newest_environment,
    read_matrix,
    repo_root,
    runner_labels,
    sort_newest_first,
)
from .proposals import Findings, compare
from .pull_request import render_body, render_entries_toml  # noqa: F401
from .upstream import NetworkError, Recorded, Upstream, gather  # noqa: F401
from .upstream_pages import SourceError  # noqa: F401

# The one table of exit codes: `releases check` and `verify-pins` return them, ci/release_check.sh
# reads them (`rocmlab releases exit-codes`), docs/release-matrix.md lists them (a test compares).
EXIT_CODES = (
    (
        "EXIT_UP_TO_DATE",
        0,
        "up to date: nothing newer upstream, nothing that needs a person; the tracking issue is closed",
    ),
    ("EXIT_UPDATES", 10, "updates found or a pin is yanked: the matrix edit goes to the bot's pull request"),
    (
        "EXIT_OFFLINE",
        11,
        "partial: a source failed or a release could not be read; never 'up to date', the issue stays open",
    ),
    ("EXIT_PINS_BROKEN", 12, "verify-pins: a pin is missing, yanked or moved, or a source is stale"),
    (
        "EXIT_NEEDS_PERSON",
        13,
        "nothing to edit, but a person is needed (a release waiting for torch, a major held at a cap, an "
        "unmarked major, a release nothing proposes); the issue stays open",
    ),
)
EXIT_UP_TO_DATE, EXIT_UPDATES, EXIT_OFFLINE, EXIT_PINS_BROKEN, EXIT_NEEDS_PERSON = (code for _n, code, _m in EXIT_CODES)
FIXTURES_RELATIVE = Path("tests") / "fixtures" / "upstream"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`rocmlab releases show | check | verify-pins`."""
    sub = parser.add_subparsers(dest="releases_command", required=True)
    show_p = sub.add_parser("show", help="list the matrix, newest first, with unverified facts")
    show_p.add_argument("--matrix", type=Path, help="matrix file (default: env/matrix.toml of this repository)")
    show_p.add_argument(
        "--json", dest="as_json", action="store_true", help="print the CI job matrix for current ROCm entries"
    )
    check_p = sub.add_parser("check", help="find upstream releases newer than env/matrix.toml")
    verify_p = sub.add_parser("verify-pins", help="check that every pin of every current entry still resolves")
    sub.add_parser("exit-codes", help="print the exit codes as shell assignments (ci/release_check.sh reads them)")
    for p in (check_p, verify_p):
        p.add_argument("--matrix", type=Path, help="matrix file (default: env/matrix.toml of this repository)")
        p.add_argument(
            "--fixtures",
            type=Path,
            nargs="?",
            const=":recorded:",
            help=f"answer from recorded responses (default folder: {FIXTURES_RELATIVE})",
        )
        p.add_argument("--timeout", type=float, default=15.0, help="seconds per upstream request")
        p.add_argument("--today", type=dt.date.fromisoformat, help="the date to stamp and judge ages with")
        p.add_argument("--json", dest="as_json", action="store_true", help="print the result as JSON")
    check_p.add_argument("--body-out", type=Path, help="write the PR / issue body (Markdown) here")
    check_p.add_argument("--apply", action="store_true", help="write the findings into the matrix file")
    check_p.add_argument(
        "--pyproject",
        type=Path,
        help="the pyproject.toml whose caps hold majors back (default: the one beside env/, if any)",
    )
    verify_p.add_argument("--out", type=Path, help="write the report (digests included) as JSON here")


def needs_course(options: dict) -> bool:
    """Only to read the course's env/matrix.toml: not with ``--matrix``, nor for ``exit-codes``."""
    return not options.get("matrix") and options["releases_command"] != "exit-codes"


def main(*, releases_command: str, course: Course | None = None, matrix=None, fixtures=None, **options) -> int:
    """Read the matrix (``matrix``, else env/matrix.toml of the course) and run one sub-command.

    ``fixtures``: a folder of recorded upstream responses, or ``":recorded:"`` for the
    repository's own; without it, check and verify-pins ask upstream over the network.
    """
    if releases_command == "exit-codes":
        print("\n".join(f"{name}={code}" for name, code, _meaning in EXIT_CODES))
        return EXIT_UP_TO_DATE
    path = Path(matrix) if matrix else course.matrix_path
    loaded = read_matrix(path)
    if releases_command == "show":
        return show(loaded, **options)
    handlers = {"check": check, "verify-pins": verify_pins}
    return handlers[releases_command](loaded, fetcher(fixtures, path), **options)


def fetcher(fixtures, matrix_path: Path):
    """What answers upstream requests: the network, or a folder of recorded responses."""
    if fixtures is None:
        return upstream.http_get
    folder = repo_root(matrix_path) / FIXTURES_RELATIVE if str(fixtures) == ":recorded:" else Path(fixtures)
    if not (folder / "manifest.json").is_file():
        raise MatrixError(f"{folder}: no manifest.json of recorded responses (see {FIXTURES_RELATIVE}/README.md)")
    return Recorded(folder)


def show(matrix: Matrix, *, as_json: bool = False) -> int:
    if as_json:
        print(json.dumps(job_matrix(list(matrix.entries))))
        return EXIT_UP_TO_DATE
    for e in matrix.entries + matrix.canaries:
        if e.kind == "rocm":
            detail = f"ROCm {e.rocm} ({e.released}) PyTorch {e.pytorch} py{e.python} {e.install.method} runner {e.runner_gfx}"
        elif e.kind == "cpu":
            detail = ", ".join(e.pins)
        else:
            detail = f"{e.target}: {', '.join(e.requirements)} (pre: {', '.join(e.pre) or '-'})"
        flag = f"  [unverified: {', '.join(e.unverified)}]" if e.unverified else ""
        print(f"{e.name:24} {e.status:9} {detail}{flag}")
    return EXIT_UP_TO_DATE


def check(
    matrix: Matrix,
    fetch,
    *,
    timeout: float = 15.0,
    today: dt.date | None = None,
    as_json: bool = False,
    body_out=None,
    apply: bool = False,
    pyproject=None,
) -> int:
    """Upstream against the matrix, exit codes from EXIT_CODES: EXIT_UPDATES when there is a matrix edit
    or a yanked pin; else EXIT_OFFLINE when a source failed or a release could not be read (partial);
    else EXIT_NEEDS_PERSON when something needs a person (``Findings.needs_person``); else EXIT_UP_TO_DATE.
    With ``apply``, the matrix edit and the sentences of README/docs that name the newest entries are
    written."""
    entries = list(matrix.entries)
    found = gather(entries, fetch, timeout=timeout)
    caps = proposals.pyproject_caps(Path(pyproject) if pyproject else repo_root(matrix.path) / "pyproject.toml")
    findings = compare(entries, found, today=today, caps=caps)
    body = render_body(findings, runs=runs_again(matrix, findings))
    if body_out:
        Path(body_out).write_text(body, encoding="utf-8")
    if apply and findings.anything:
        for change in pull_request.apply(matrix.path, findings, today=today):
            print(f"applied: {change}", file=sys.stderr)
        for changed in pull_request.rewrite_sentences(repo_root(matrix.path)):
            print(f"applied: {changed} (the sentences that name the newest entries)", file=sys.stderr)
    if as_json:
        print(json.dumps(findings.as_json() | {"runs": runs_again(matrix, findings)}, indent=2, default=str))
    else:
        print(body)
    if findings.failures:
        print(f"partial check: {len(findings.failures)} source(s) could not be read:", file=sys.stderr)
        for failure in findings.failures:
            print(f"  {failure}", file=sys.stderr)
    for reason in findings.needs_person:
        print(f"needs a person: {reason}", file=sys.stderr)
    return exit_code(findings)


def exit_code(findings: Findings) -> int:
    if findings.anything:
        return EXIT_UPDATES
    if findings.partial:
        return EXIT_OFFLINE
    return EXIT_NEEDS_PERSON if findings.needs_person else EXIT_UP_TO_DATE


def runs_again(matrix: Matrix, findings: Findings) -> list[dict]:
    """What the freshness run of the bot's branch runs: every changed entry (current or previous, the rule
    of ci/matrix_json.py --only), CPU entries on GitHub's runners, ROCm entries on a GPU runner, or on
    none where the repository has none (ROCMLAB_GPU_RUNNERS=none). The PR body says exactly this."""
    kinds = {e.name: e.kind for e in matrix.entries} | {e["name"]: "rocm" for e in findings.new_entries}
    gpu = "none" if os.environ.get("ROCMLAB_GPU_RUNNERS") == "none" else "gpu"
    return [{"entry": name, "runner": gpu if kinds[name] == "rocm" else "github"} for name in findings.changed_entries]


def verify_pins(
    matrix: Matrix, fetch, *, timeout: float = 15.0, today: dt.date | None = None, as_json: bool = False, out=None
) -> int:
    """Every pin of every current entry: EXIT_PINS_BROKEN when one no longer resolves, EXIT_OFFLINE when unreachable."""
    report = pins.verify(list(matrix.entries), fetch, today=today, timeout=timeout)
    if out:
        Path(out).write_text(json.dumps(report.as_json(), indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report.as_json(), indent=2) if as_json else pins.render(report))
    if report.broken or report.stale_sources:
        return EXIT_PINS_BROKEN
    return EXIT_OFFLINE if report.unreachable else EXIT_UP_TO_DATE
