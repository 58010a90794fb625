"""The freshness matrix as Markdown (README, terminal), JSON (CI, issue routing) and a step summary."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .history import Run
from .verdict import KINDS, Cell, Column, Freshness, LabRow

ICONS = {
    "verified": "✅",
    "outdated": "🆕",
    "stale": "⏳",
    "failing": "❌",
    "flaky": "🔁",
    "skipped": "⏭️",
    "never run": "",
    "passed": "✅",
    "failed": "❌",
    "timeout": "⏱️",
    "crashed": "💥",
}
LAB_VERDICTS = {"fresh": "✅ fresh", "stale": "⚠️ stale", "failing": "❌ failing", "flaky": "🔁 flaky"}
COUNTED = ("verified", "outdated", "failing", "flaky", "stale", "skipped", "never run")


def links(run: Run | None, relative_to: Path | None = None) -> dict:
    """Where to read a run: its CI run (the job logs), and its executed notebook: the file on this
    disk when there is one (relative to ``relative_to``), else the CI run's artifacts."""
    if run is None:
        return {"log": None, "notebook": None}
    notebook = None
    if run.notebook_path is not None and run.notebook_path.is_file():
        target = run.notebook_path.resolve()
        notebook = os.path.relpath(target, relative_to.resolve()) if relative_to else str(target)
    elif run.run_url and run.notebook:
        notebook = f"{run.run_url}#artifacts"
    return {"log": run.run_url, "notebook": notebook}


def cell_text(cell: Cell, row: LabRow, icons: bool = True) -> str:
    """``✅ verified 6s``: the verdict, the run's duration, its lab version when older, its warnings."""
    run = cell.last_pass if cell.verdict in ("verified", "outdated") else cell.last_run
    text = f"{ICONS.get(cell.verdict, '') if icons else ''} {cell.verdict}".strip()
    if cell.verdict == "flaky" and run is not None and run.repeats:
        text += f" {run.repeats_passed}/{len(run.repeats)}"
    elif run is not None and cell.verdict not in ("skipped", "never run", "stale"):
        text += f" {run.duration_s:.0f}s"
    if run is not None and run.lab_version != row.lab.version:
        text += f" (v{run.lab_version})"
    if cell.last_run is not None and cell.last_run.warnings:
        count = len(cell.last_run.warnings)
        text += f" ⚠️{count}" if icons else f" · {count} warning{'s' if count > 1 else ''}"
    return text


def _when(run: Run | None) -> str:
    return "never" if run is None else f"{run.started_at[:10]} on {run.env}"


def _table_row(cells: list[str]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def to_markdown(report: Freshness, committed: bool = False) -> str:
    """The matrix as a table; ``committed`` (the README's) leaves out what is of this machine and moment: the generation time."""
    header = ["lab", "version", *(c.label for c in report.columns), "last pass", "last run", "freshness"]
    lines = [_table_row(header), "|" + "---|" * len(header)]
    for row in report.rows:
        cells = [cell_text(row.cells[c.name], row) for c in report.columns]
        values = [row.lab.id, row.lab.version, *cells, _when(row.last_pass), _when(row.last_run)]
        lines.append(_table_row([*values, LAB_VERDICTS[row.verdict]]))
    lines += ["", _rule(report) + ("" if committed else f" Generated {report.generated_at}.")]
    return "\n".join(lines + _details(report, committed)) + "\n"


def _rule(report: Freshness) -> str:
    if not report.columns:
        return "No matrix entry and no run yet."
    judged = ", ".join(f"**{c.name}** ({KINDS.get(c.kind, c.kind)})" for c in report.judged_on)
    if not any(c.entry is not None for c in report.columns):
        return f"No release matrix: labs are judged on {judged}."
    return (
        f"A lab is fresh when it is verified on the newest current entry of each kind: {judged}. "
        f"Verified: passed on the entry's exact pins within the last {report.window_days} days."
    )


def _details(report: Freshness, committed: bool) -> list[str]:
    out = []
    for column in report.columns:
        out += [f"- {column.name}: upstream has newer: {note}" for note in column.upstream]
        out += _ran_on(report, column, committed)
    for row in report.rows:
        for name, cell in row.cells.items():
            if cell.verdict in ("failing", "flaky", "failed", "timeout", "crashed", "skipped", "stale") and cell.detail:
                out.append(f"- **{row.lab.id}** on {name}: {cell.verdict}: {cell.detail[:300]}")
            if cell.changed_since_pass:
                out.append(f"  - changed since the last pass: {', '.join(cell.changed_since_pass[:20])}")
        for w in row.warnings:
            out.append(
                f"- {row.lab.id} on {w['env']}: {w.get('category')}: {w.get('message', '')[:200]}{removal_text(w)}"
            )
    out += [f"- problem: {problem}" for problem in report.problems]
    return ["", "Details:", ""] + out if out else []


def _ran_on(report: Freshness, column: Column, committed: bool) -> list[str]:
    """What the entry's newest run ran on: the fingerprint's facts (``committed``: the machine-specific left out)."""
    runs = [row.cells[column.name].last_run for row in report.rows if row.cells[column.name].last_run]
    if not runs:
        return []
    facts = max(runs, key=lambda run: run.started_at).fingerprint.facts(committed=committed)
    return (
        [f"- {column.name} ran on: " + "; ".join(f"{label} {text}" for label, text in facts.items())] if facts else []
    )


def removal_text(warning: dict) -> str:
    if not warning.get("removal"):
        return ""
    version = f"{warning['package']} {warning['removal']}" if warning.get("package") else f"v{warning['removal']}"
    return f" (to be removed in {version})"


def run_data(run: Run | None, relative_to: Path | None = None, committed: bool = False) -> dict | None:
    """One run as data. ``committed`` keeps when, where, status, CI URL and the facts of the
    fingerprint that are not machine-specific: no local path, nothing that differs between machines."""
    if run is None:
        return None
    environment = run.fingerprint.facts(committed=committed)
    if committed:
        return {
            "at": run.started_at,
            "env": run.env,
            "status": run.status,
            "run_url": run.run_url,
            "environment": environment,
        }
    return {
        "at": run.started_at,
        "env": run.env,
        "status": run.status,
        "lab_version": run.lab_version,
        "profile": run.profile,
        "duration_s": run.duration_s,
        "reason": run.reason,
        "failing_cell": run.failing_cell,
        "traceback_tail": run.traceback_tail,
        "commit": run.commit,
        "run_url": run.run_url,
        "environment": environment,
        "links": links(run, relative_to),
    }


def _column_data(column: Column) -> dict:
    return {
        "name": column.name,
        "kind": column.kind,
        "status": column.status,
        "newest": column.newest,
        "upstream": column.upstream,
    }


def to_data(report: Freshness, committed: bool = False, relative_to: Path | None = None) -> dict:
    """The report as data. ``committed`` is the form the repository keeps (ci/results/freshness.json):
    no generation time, each run as ``run_data`` commits it."""

    def run(r: Run | None) -> dict | None:
        return run_data(r, relative_to, committed)

    return {
        "generated_at": None if committed else report.generated_at,
        "window_days": report.window_days,
        "judged_on": [c.name for c in report.judged_on],
        "columns": [_column_data(c) for c in report.columns],
        "problems": report.problems,
        "labs": [
            {
                "id": row.lab.id,
                "version": row.lab.version,
                "title": row.lab.title,
                "verdict": row.verdict,
                "last_pass": run(row.last_pass),
                "last_run": run(row.last_run),
                "cells": {
                    name: {
                        "verdict": cell.verdict,
                        "detail": cell.detail,
                        "last_run": run(cell.last_run),
                        "last_pass": run(cell.last_pass),
                        "changed_since_pass": cell.changed_since_pass,
                    }
                    for name, cell in row.cells.items()
                },
                "warnings": row.warnings,
            }
            for row in report.rows
        ],
    }


def to_json(report: Freshness, committed: bool = False, relative_to: Path | None = None) -> str:
    return json.dumps(to_data(report, committed, relative_to), ensure_ascii=False, indent=2)


def to_summary(report: Freshness, diff_markdown: str = "") -> str:
    """A short block for $GITHUB_STEP_SUMMARY: counts per entry, what fails, what changed."""
    lines = ["## rocmlab freshness", "", _table_row(["entry", *COUNTED]), "|" + "---|" * (len(COUNTED) + 1)]
    for column in report.columns:
        verdicts = [row.cells[column.name].verdict for row in report.rows]
        lines.append(_table_row([column.label, *(str(verdicts.count(v)) for v in COUNTED)]))
    fresh = sum(row.verdict == "fresh" for row in report.rows)
    lines += ["", f"{fresh} of {len(report.rows)} lab(s) fresh. {_rule(report)}", ""]
    for row in report.rows:
        for name, cell in row.cells.items():
            if cell.verdict in ("failing", "flaky"):
                lines.append(f"- ❌ **{row.lab.id}** on {name}: {cell.detail[:300]}")
    if diff_markdown:
        lines += ["", diff_markdown]
    return "\n".join(lines) + "\n"
