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
import sys
from pathlib import Path

from ..root import find_root
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
from .proposals import Findings, compare  # noqa: F401
from .pull_request import render_body, render_entries_toml  # noqa: F401
from .upstream import NetworkError, Recorded, Upstream, gather  # noqa: F401
from .upstream_pages import SourceError  # noqa: F401

EXIT_UP_TO_DATE = 0
EXIT_UPDATES = 10
EXIT_OFFLINE = 11  # a source failed: the answer is partial, never "up to date"
EXIT_PINS_BROKEN = 12
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


def main(*, releases_command: str, root=None, matrix=None, fixtures=None, **options) -> int:
    """Read the matrix (``matrix``, else env/matrix.toml of the course) and run one sub-command.

    ``fixtures``: a folder of recorded upstream responses, or ``":recorded:"`` for the
    repository's own; without it, check and verify-pins ask upstream over the network.
    """
    path = Path(matrix) if matrix else find_root(root) / MATRIX_RELATIVE
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
    """Upstream against the matrix: EXIT_UPDATES when something is newer or a pin is yanked,
    EXIT_OFFLINE when a source failed (or a release could not be read)."""
    entries = list(matrix.entries)
    found = gather(entries, fetch, timeout=timeout)
    caps = proposals.pyproject_caps(Path(pyproject) if pyproject else repo_root(matrix.path) / "pyproject.toml")
    findings = compare(entries, found, today=today, caps=caps)
    body = render_body(findings)
    if body_out:
        Path(body_out).write_text(body, encoding="utf-8")
    if apply and findings.anything:
        for change in pull_request.apply(matrix.path, findings, today=today):
            print(f"applied: {change}", file=sys.stderr)
    if as_json:
        print(json.dumps(findings.as_json(), indent=2, default=str))
    else:
        print(body)
    if findings.failures:
        print(f"partial check: {len(findings.failures)} source(s) could not be read:", file=sys.stderr)
        for failure in findings.failures:
            print(f"  {failure}", file=sys.stderr)
    for item in findings.unparsed:
        print(f"not understood: {item}", file=sys.stderr)
    if findings.anything:
        return EXIT_UPDATES
    return EXIT_OFFLINE if findings.failures else EXIT_UP_TO_DATE


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
