"""What changed between the last two runs of each (lab, environment) pair: `rocmlab report --diff`."""

from __future__ import annotations

from dataclasses import dataclass, field

from .history import FreezeStore, Run
from .verdict import FAILING, package_changes

# A cell "got much slower" when it took at least this many times as long, and this many seconds more.
SLOWER_RATIO = 1.5
SLOWER_MIN_S = 2.0


@dataclass
class PairDiff:
    lab: str
    env: str
    before: Run
    after: Run
    status: str = ""  # "newly failing" | "fixed" | "" (unchanged)
    new_warnings: list[str] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)
    environment: list[str] = field(default_factory=list)  # the fingerprint's facts that changed
    slower_cells: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def anything(self) -> bool:
        return bool(self.status or self.new_warnings or self.packages or self.environment or self.slower_cells)


def diff_runs(runs: list[Run], freezes: FreezeStore, only: set[tuple[str, str]] | None = None) -> list[PairDiff]:
    """One entry per pair that ran at least twice (of the pairs in ``only`` when given: those with a
    new run): its latest run against the one before."""
    by_pair: dict[tuple[str, str], list[Run]] = {}
    for run in sorted(runs, key=lambda r: r.started_at):
        by_pair.setdefault((run.lab, run.env), []).append(run)
    return [
        compare(history[-2], history[-1], freezes)
        for pair, history in sorted(by_pair.items())
        if len(history) >= 2 and (only is None or pair in only)
    ]


def compare(before: Run, after: Run, freezes: FreezeStore) -> PairDiff:
    diff = PairDiff(after.lab, after.env, before, after)
    bad = (*FAILING, "flaky")
    if before.passed and after.status in bad:
        diff.status = f"newly {after.status}: {after.failure}"
    elif before.status in bad and after.passed:
        diff.status = f"fixed (was {before.status}: {before.failure})"
    elif before.status != after.status:
        diff.status = f"{before.status} → {after.status}" + (f": {after.reason}" if after.reason else "")
    diff.new_warnings = [
        f"{w.get('category')}: {w.get('message')}"
        for w in after.warnings
        if w.get("message") not in before.warning_messages
    ]
    diff.packages = package_changes(before, after, freezes)
    diff.environment = _environment_changes(before, after)
    if before.lab_version != after.lab_version:
        diff.notes.append(f"lab version {before.lab_version} → {after.lab_version}")
    diff.slower_cells = _slower_cells(before, after, diff.notes)
    return diff


def _environment_changes(before: Run, after: Run) -> list[str]:
    """Each fact of the fingerprint that changed, the packages aside (``package_changes`` names them one by one)."""
    old, new = before.fingerprint.facts(without={"packages"}), after.fingerprint.facts(without={"packages"})
    return [
        f"{label} {old.get(label) or '(none)'} → {new.get(label) or '(none)'}"
        for label in dict.fromkeys([*old, *new])
        if old.get(label) != new.get(label)
    ]


def _slower_cells(before: Run, after: Run, notes: list[str]) -> list[str]:
    """Cells that took much longer, compared only when both runs executed the same lab source."""
    if not (before.cells and after.cells):
        return []
    if before.lab_source_sha256 != after.lab_source_sha256 or before.lab_version != after.lab_version:
        notes.append("the lab's source changed: cell timings not compared")
        return []
    old = {c["index"]: c for c in before.cells}
    slower = []
    for cell in after.cells:
        prior = old.get(cell["index"])
        if prior is None:
            continue
        was, now = prior["duration_s"], cell["duration_s"]
        if now >= was * SLOWER_RATIO and now - was >= SLOWER_MIN_S:
            slower.append(f"cell {cell['index']} ({cell.get('label') or '?'}): {was:.1f} s → {now:.1f} s")
    return slower


def to_markdown(diffs: list[PairDiff]) -> str:
    lines = ["## What changed since the previous run", ""]
    changed = [d for d in diffs if d.anything]
    if not changed:
        compared = f"{len(diffs)} pair(s) compared" if diffs else "no pair has run twice yet"
        return "\n".join(lines + [f"Nothing changed ({compared}).", ""])
    for d in changed:
        lines.append(f"### {d.lab} on {d.env}")
        lines.append(f"{d.before.started_at} → {d.after.started_at}")
        lines.append("")
        if d.status:
            lines.append(f"- status: {d.status}")
        lines += [f"- package versions changed: {p}" for p in d.packages]
        lines += [f"- environment: {e}" for e in d.environment]
        lines += [f"- new warning: {w[:300]}" for w in d.new_warnings]
        lines += [f"- much slower: {c}" for c in d.slower_cells]
        lines += [f"- note: {n}" for n in d.notes]
        lines.append("")
    unchanged = len(diffs) - len(changed)
    if unchanged:
        lines.append(f"{unchanged} other pair(s) unchanged.")
        lines.append("")
    return "\n".join(lines)


def to_data(diffs: list[PairDiff]) -> list[dict]:
    return [
        {
            "lab": d.lab,
            "env": d.env,
            "before": d.before.started_at,
            "after": d.after.started_at,
            "status": d.status,
            "packages": d.packages,
            "environment": d.environment,
            "new_warnings": d.new_warnings,
            "slower_cells": d.slower_cells,
            "notes": d.notes,
        }
        for d in diffs
    ]
