"""shields.io endpoint badges, one per matrix entry: ``ci/badges/<entry>.json``.

A README shows one with
``https://img.shields.io/endpoint?url=<raw URL of ci/badges/rocm-10.0.json>``; the JSON follows
https://shields.io/badges/endpoint-badge (schemaVersion, label, message, color).
"""

from __future__ import annotations

import json
from pathlib import Path

from .verdict import VERIFIED, Column, Freshness

BADGES = Path("ci") / "badges"


def badge(report: Freshness, column: Column) -> dict:
    verdicts = [row.cells[column.name].verdict for row in report.rows]
    total, verified = len(verdicts), sum(v in VERIFIED for v in verdicts)
    failing, flaky = verdicts.count("failing"), verdicts.count("flaky")
    if failing:
        message, color = f"{failing} failing", "red"
    elif flaky:
        message, color = f"{flaky} flaky", "orange"
    elif total and verified == total:
        message, color = f"{total}/{total} verified", "brightgreen"
    elif not any(row.cells[column.name].runs for row in report.rows):
        message, color = "never run", "lightgrey"
    else:
        message, color = f"{verified}/{total} verified", "yellow"
    return {"schemaVersion": 1, "label": f"rocmlab {column.name}", "message": message, "color": color}


def write_badges(report: Freshness, root: Path) -> list[Path]:
    """One badge per matrix column; badges of entries no longer shown are removed. The files changed."""
    folder = root / BADGES
    folder.mkdir(parents=True, exist_ok=True)
    changed, wanted = [], set()
    for column in report.columns:
        if column.entry is None:
            continue
        path = folder / f"{column.name}.json"
        wanted.add(path.name)
        text = json.dumps(badge(report, column), ensure_ascii=False) + "\n"
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed.append(path)
    for old in folder.glob("*.json"):
        if old.name not in wanted:
            old.unlink()
            changed.append(old)
    return changed
