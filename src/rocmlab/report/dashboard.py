"""`rocmlab report --format html`: one self-contained page for maintainers.

Rendered from ``rocmlab/templates/dashboard.html.j2`` (jinja2, autoescaped). The matrix is
coloured by verdict; each lab has a plot of its runs (duration per run and environment, pass or
fail marked); links lead to each run's CI logs and executed notebook. Plots are PNGs drawn with
matplotlib and embedded as data URIs, so the file needs nothing else.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
from pathlib import Path

from ..course.catalog import LabError
from ..pages import render_page
from .diff import PairDiff
from .history import Run
from .render import cell_text, links, removal_text
from .verdict import Freshness, LabRow

RECENT_RUNS = 8
MARKERS = {  # status → (marker, colour)
    "passed": ("o", "#15803d"),
    "failed": ("X", "#b91c1c"),
    "timeout": ("X", "#b91c1c"),
    "crashed": ("X", "#7f1d1d"),
    "flaky": ("D", "#c2410c"),
    "skipped": ("s", "#9ca3af"),
}


def render_dashboard(report: Freshness, diffs: list[PairDiff] | None = None, relative_to: Path | None = None) -> str:
    """The page as a string; links to local notebooks are made relative to ``relative_to``."""
    try:
        import matplotlib  # noqa: F401 (checked here so that a missing plot library is one clear error)
    except ImportError:
        raise LabError("the dashboard draws its plots with matplotlib: pip install 'rocmlab[report]'") from None

    return render_page(
        "dashboard.html.j2",
        report=report,
        columns=report.columns,
        judged=[c.name for c in report.judged_on],
        rows=[_row_view(row, report, relative_to) for row in report.rows],
        diffs=[d for d in diffs or [] if d.anything],
    )


def _row_view(row: LabRow, report: Freshness, relative_to: Path | None) -> dict:
    runs = sorted({id(r): r for c in row.cells.values() for r in c.runs}.values(), key=lambda r: r.started_at)
    return {
        "lab": row.lab,
        "verdict": row.verdict,
        "cells": [
            {
                "column": column,
                "verdict": row.cells[column.name].verdict,
                "text": cell_text(row.cells[column.name], row, icons=False),
                "detail": row.cells[column.name].detail,
                "changed": row.cells[column.name].changed_since_pass,
                "links": links(row.cells[column.name].last_run, relative_to),
            }
            for column in report.columns
        ],
        "last_pass": row.last_pass,
        "last_run": row.last_run,
        "history_plot": history_plot(runs) if runs else None,
        "recent": [
            {"run": r, "links": links(r, relative_to), "facts": r.fingerprint.facts()}
            for r in reversed(runs[-RECENT_RUNS:])
        ],
        "warnings": [{**w, "removal_text": removal_text(w)} for w in row.warnings],
    }


def _when(run: Run) -> dt.datetime:
    return dt.datetime.fromisoformat(run.started_at)


def _png(figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _by_env(runs: list[Run]) -> dict[str, list[Run]]:
    grouped: dict[str, list[Run]] = {}
    for run in runs:
        grouped.setdefault(run.env, []).append(run)
    return grouped


def history_plot(runs: list[Run]) -> str:
    """Duration of each run, one line per environment, each point marked by the run's status."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 1.9))
    ax = figure.subplots()
    for env, env_runs in _by_env(runs).items():
        times, seconds = [_when(r) for r in env_runs], [r.duration_s for r in env_runs]
        (line,) = ax.plot(times, seconds, linewidth=1, alpha=0.6, label=env)
        for run, when, value in zip(env_runs, times, seconds):
            marker, colour = MARKERS.get(run.status, ("o", "#6b7280"))
            ax.plot([when], [value], marker=marker, color=colour, markersize=6, markeredgecolor=line.get_color())
    ax.set_ylabel("seconds")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", frameon=False)
    ax.tick_params(labelsize=7)
    figure.autofmt_xdate()
    return _png(figure)
