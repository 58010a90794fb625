"""`rocmlab report`: the ledger and new results → verdicts, diff, dashboard, stamp, dead-man check."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path

from ..course.catalog import GPU, SMOKE, Lab
from ..course.course import Course
from ..errors import InputError, LabError
from . import history
from .dashboard import render_dashboard
from .diff import diff_runs
from .diff import to_data as diff_data
from .diff import to_markdown as diff_markdown
from .render import to_json, to_markdown, to_summary
from .stamp import stamp as stamp_ledger
from .verdict import DEFAULT_WINDOW_DAYS, age_days, build, newest_gpu_verification, read_upstream

EXIT_OK, EXIT_DEAD_MAN = 0, 1
FORMATS = ("md", "html", "json")


def read_entries(root: Path) -> tuple[list, int, list[str]]:
    """The course's matrix entries (none without env/matrix.toml), the verification window, problems."""
    from ..freshness.matrix import MATRIX_RELATIVE, MatrixError, read_matrix

    path = root / MATRIX_RELATIVE
    if not path.is_file():
        return [], DEFAULT_WINDOW_DAYS, []
    try:
        matrix = read_matrix(path)
    except MatrixError as exc:
        return [], DEFAULT_WINDOW_DAYS, [f"release matrix not read: {exc}"]
    return list(matrix.entries), getattr(matrix, "verify_days", None) or DEFAULT_WINDOW_DAYS, []


def skipped_runs(specs: list[str], labs: list[Lab], entries: list, context: history.Context) -> list[history.Run]:
    """``ENTRY=REASON`` → a skipped run of every lab on that entry, now (a job that never ran)."""
    names = {e.name: e for e in entries}
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    runs = []
    for spec in specs:
        name, sep, reason = spec.partition("=")
        if not sep or not reason.strip():
            raise LabError(f"--skip {spec!r}: expected ENTRY=REASON, e.g. rocm-10.0='no runner picked the job up'")
        if name not in names:
            raise LabError(f"--skip {spec!r}: {name!r} is not a matrix entry ({', '.join(names)})")
        profile = GPU if names[name].kind == "rocm" else SMOKE
        runs += [
            history.Run(
                lab=lab.id,
                lab_version=lab.version,
                env=name,
                profile=profile,
                status="skipped",
                started_at=now,
                reason=reason.strip(),
                commit=context.commit,
                run_url=context.run_url,
                lab_source_sha256=context.lab_source_sha256(lab.id),
            )
            for lab in labs
        ]
    return runs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "The verdict per lab and matrix entry (verified, outdated, failing, flaky, stale, skipped, never "
        "run) from the ledger `ci/history/` and new result records (docs/freshness.md). --diff: what changed "
        "since each pair's previous run; --format html: the dashboard; --stamp: append to the ledger, "
        "refresh the README table and the badges."
    )
    parser.add_argument("--results", nargs="*", metavar="DIR", help="folders of new result records (default results/)")
    parser.add_argument("--format", default="md", choices=FORMATS, help="html: the dashboard")
    parser.add_argument("--output", metavar="FILE", help="write to this file instead of stdout")
    parser.add_argument("--diff", action="store_true", help="show what changed since the previous run of each pair")
    parser.add_argument(
        "--stamp",
        action="store_true",
        help="append new runs to ci/history, refresh ci/results/freshness.json, ci/badges and the README table",
    )
    parser.add_argument(
        "--upstream", metavar="JSON", help="findings of `rocmlab releases check --json`: entries with newer releases"
    )
    parser.add_argument(
        "--skip", action="append", metavar="ENTRY=REASON", help="record every lab on ENTRY as skipped (repeatable)"
    )
    parser.add_argument("--github-summary", action="store_true", help="append a summary to $GITHUB_STEP_SUMMARY")
    parser.add_argument(
        "--max-gpu-age",
        type=float,
        metavar="DAYS",
        help="dead-man check: exit 1 when no ROCm entry passed anything in DAYS days",
    )


def main(
    *,
    course: Course,
    results=None,
    format: str = "md",
    output=None,
    diff: bool = False,
    stamp: bool = False,
    upstream=None,
    skip=None,
    github_summary: bool = False,
    max_gpu_age: float | None = None,
) -> int:
    """The report of ``course``; EXIT_DEAD_MAN when ``max_gpu_age`` finds no recent GPU verification."""
    if format not in FORMATS:
        raise InputError(f"--format {format!r}: expected one of {', '.join(FORMATS)}")
    root = course.root
    labs = course.labs()
    entries, window, problems = read_entries(root)
    context = history.Context.detect(root)
    ledger, ledger_problems = history.read_ledger(root)
    dirs = [Path(d) for d in results] if results else [root / "results"]
    new, result_problems = history.load_results([d for d in dirs if d.is_dir()], context)
    new += skipped_runs(skip or [], labs, entries, context)
    runs = history.merge(ledger, new)
    newer, upstream_problems = read_upstream(Path(upstream), entries) if upstream else (None, [])
    freezes = history.FreezeStore(root)
    report = build(labs, runs, entries, window_days=window, upstream=newer, freezes=freezes)
    report.problems = problems + ledger_problems + result_problems + upstream_problems
    diffs = diff_runs(runs, freezes, only={(r.lab, r.env) for r in new} if new else None)
    if stamp:
        # What the repository shows is the matrix's: runs elsewhere (local) are printed, never committed.
        names = {e.name for e in entries}
        committed = build(
            labs, [r for r in runs if r.env in names], entries, window_days=window, upstream=newer, freezes=freezes
        )
        committed.problems = report.problems
        _stamp(committed, new, root, entries)
    if github_summary:
        _append_step_summary(to_summary(report, diff_markdown(diffs)))
    _write(_render(report, diffs, format, diff, Path(output) if output else None), Path(output) if output else None)
    if max_gpu_age is not None:
        return dead_man(runs, entries, max_gpu_age)
    return EXIT_OK


def _stamp(report, new: list[history.Run], root: Path, entries: list) -> None:
    try:
        changed = stamp_ledger(report, new, root, {e.name for e in entries})
    except ValueError as exc:
        raise LabError(str(exc)) from None
    for path in changed:
        print(f"stamped {path.relative_to(root)}", file=sys.stderr)
    print(f"{len(changed)} file(s) changed", file=sys.stderr)
    outside = sorted({r.env for r in new} - {e.name for e in entries})
    if outside:
        print(f"not recorded in ci/history (not matrix entries): {', '.join(outside)}", file=sys.stderr)


def _render(report, diffs, format: str, diff: bool, output: Path | None) -> str:
    relative_to = output.resolve().parent if output else Path.cwd()
    if format == "html":
        return render_dashboard(report, diffs, relative_to)
    if diff:
        return diff_markdown(diffs) if format == "md" else _json_diff(diffs)
    return to_markdown(report) if format == "md" else to_json(report, relative_to=relative_to) + "\n"


def _write(text: str, output: Path | None) -> None:
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
        print(f"wrote {output}", file=sys.stderr)
    else:
        sys.stdout.write(text)


def _json_diff(diffs) -> str:
    import json

    return json.dumps(diff_data(diffs), ensure_ascii=False, indent=2) + "\n"


def _append_step_summary(text: str) -> None:
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        raise LabError("--github-summary: $GITHUB_STEP_SUMMARY is not set (it is, inside a GitHub Actions step)")
    with open(path, "a", encoding="utf-8") as summary:
        summary.write(text + "\n")


def dead_man(runs: list[history.Run], entries: list, max_days: float, now: dt.datetime | None = None) -> int:
    """Fail loudly when no ROCm entry has passed anything within ``max_days``."""
    now = now or dt.datetime.now(dt.UTC)
    newest = newest_gpu_verification(runs, entries)
    if newest is not None and age_days(newest, now) <= max_days:
        print(f"newest GPU verification: {newest.lab} on {newest.env}, {newest.started_at}", file=sys.stderr)
        return EXIT_OK
    said = (
        "no GPU verification has ever been recorded"
        if newest is None
        else f"the newest GPU verification ({newest.lab} on {newest.env}, {newest.started_at}) is "
        f"{age_days(newest, now):.0f} days old"
    )
    message = f"dead-man check: {said}; the limit is {max_days:g} days. Are the ROCm runners online?"
    if os.environ.get("GITHUB_ACTIONS"):
        print(f"::error title=No recent GPU verification::{message}")
    print(f"rocmlab: {message}", file=sys.stderr)
    return EXIT_DEAD_MAN
