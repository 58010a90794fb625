"""`rocmlab report --stamp`: record new runs in the ledger and refresh what the repository shows.

Appends the runs on matrix entries to ci/history/ (runs elsewhere, such as ``local``, are shown
but never recorded), writes the summary ci/results/freshness.json, the shields.io badges under
ci/badges/ and the README's freshness table between its markers. The summary and the table are
the committed views (``committed=True``): no generation time and no machine-specific fact of a
run's fingerprint, so stamping the same runs twice, or the same pins run on another machine, changes nothing.
"""

from __future__ import annotations

from pathlib import Path

from . import history
from .badges import write_badges
from .render import to_json, to_markdown
from .verdict import Freshness

SUMMARY = Path("ci") / "results" / "freshness.json"
README_START, README_END = "<!-- freshness:start -->", "<!-- freshness:end -->"


def stamp(report: Freshness, new_runs: list[history.Run], root: Path, matrix_names: set[str]) -> list[Path]:
    """The files changed (ledger, freezes, summary, badges, README)."""
    readme = root / "README.md"
    text = readme.read_text(encoding="utf-8") if readme.is_file() else None
    if text is not None and (README_START not in text or README_END not in text):
        raise ValueError(f"{readme}: add the markers {README_START} and {README_END} where the table goes")
    changed = history.append(root, [run for run in new_runs if run.env in matrix_names])
    changed += _write_if_changed(root / SUMMARY, to_json(report, committed=True) + "\n")
    changed += write_badges(report, root)
    if text is not None:
        head, rest = text.split(README_START, 1)
        _, tail = rest.split(README_END, 1)
        table = to_markdown(report, committed=True)
        changed += _write_if_changed(readme, f"{head}{README_START}\n{table}{README_END}{tail}")
    return changed


def _write_if_changed(path: Path, text: str) -> list[Path]:
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return []
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return [path]
