"""The verdict per (lab, matrix entry), and whether a lab is fresh.

Each current entry of env/matrix.toml is a column, with or without runs; a previous entry is
one while the history holds runs of it; an environment outside the matrix (``local``) is shown
with its plain run status and never counts. A cell is:

- ``verified``: its latest attempt passed, on the current lab version, on the entry's exact
  pins (Python, and the CPU pins or PyTorch and ROCm), within the verification window;
- ``outdated``: verified, but upstream has released something newer the matrix lacks;
- ``failing`` (with the cell and error), ``flaky`` (passed only some of its repeats);
- ``stale``: its last pass is too old, on other pins, or of an older lab version;
- ``skipped`` (with the reason) when nothing was attempted, ``never run`` when nothing ran.

A lab is ``fresh`` only when it is verified on the newest current entry of each kind (ROCm, CPU).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from ..course.catalog import Lab
from ..deprecations import removal
from .history import FreezeStore, Run, canonical

DEFAULT_WINDOW_DAYS = 14
FAILING = ("failed", "timeout", "crashed")
VERIFIED = ("verified", "outdated")
KINDS = {"rocm": "ROCm", "cpu": "CPU"}


@dataclass
class Column:
    name: str
    kind: str  # rocm | cpu | other
    status: str  # current | previous | eol | not in matrix
    newest: bool = False  # the newest current entry of its kind: freshness is judged here
    entry: object | None = None  # releases.Entry
    upstream: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.name if self.status == "current" else f"{self.name} ({self.status})"


@dataclass
class Cell:
    verdict: str
    detail: str = ""
    last_run: Run | None = None
    last_pass: Run | None = None
    runs: list[Run] = field(default_factory=list)  # every run of the pair, oldest first
    changed_since_pass: list[str] = field(default_factory=list)


@dataclass
class LabRow:
    lab: Lab
    cells: dict[str, Cell]
    verdict: str  # fresh | stale | failing | flaky
    last_pass: Run | None = None
    last_run: Run | None = None
    warnings: list[dict] = field(default_factory=list)


@dataclass
class Freshness:
    columns: list[Column]
    rows: list[LabRow]
    generated_at: str
    window_days: int = DEFAULT_WINDOW_DAYS
    problems: list[str] = field(default_factory=list)

    @property
    def judged_on(self) -> list[Column]:
        newest = [c for c in self.columns if c.newest]
        return newest or self.columns[:1]


@dataclass
class Upstream:
    """What `rocmlab releases check --json` found newer than the matrix, by entry name."""

    notes: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def from_findings(cls, data: dict, entries: list) -> Upstream:
        notes: dict[str, list[str]] = {}
        for update in data.get("updates") or []:
            name, sep, text = str(update).partition(": ")
            if sep:
                notes.setdefault(name, []).append(text)
        newest_rocm = next((e.name for e in entries if e.kind == "rocm" and e.status == "current"), None)
        for proposal in data.get("new_entries") or []:
            if newest_rocm:
                text = f"ROCm {proposal.get('rocm')} released {proposal.get('released')}, not in the matrix"
                notes.setdefault(newest_rocm, []).append(text)
        return cls(notes)


def read_upstream(path: Path, entries: list) -> tuple[Upstream, list[str]]:
    """Findings saved from `rocmlab releases check --json`; an empty or broken file is a problem, not an error."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        return Upstream(), [f"{path}: no upstream findings read ({exc}); outdated entries cannot be shown"]
    if not isinstance(data, dict):
        return Upstream(), [f"{path}: expected the JSON object `rocmlab releases check --json` prints"]
    return Upstream.from_findings(data, entries), []


# ---------------------------------------------------------------- columns


def columns_for(entries: list, runs: list[Run], upstream: Upstream | None = None) -> list[Column]:
    """Current entries (ROCm newest first, then CPU), previous entries with runs, then environments
    outside the matrix that have runs."""
    upstream = upstream or Upstream()
    ran = {run.env for run in runs}
    columns, seen_kind = [], set()
    for entry in entries:
        if entry.status == "current":
            newest = entry.kind not in seen_kind
            seen_kind.add(entry.kind)
            columns.append(Column(entry.name, entry.kind, "current", newest, entry, upstream.notes.get(entry.name, [])))
    for entry in entries:
        if entry.status == "previous" and entry.name in ran:
            columns.append(Column(entry.name, entry.kind, "previous", False, entry, upstream.notes.get(entry.name, [])))
    in_matrix = {entry.name for entry in entries}
    columns += [Column(name, "other", "not in matrix") for name in sorted(ran - in_matrix)]
    return columns


# ---------------------------------------------------------------- one cell


def _when(run: Run) -> dt.datetime:
    when = dt.datetime.fromisoformat(run.started_at)
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def judge(lab: Lab, column: Column, runs: list[Run], now: dt.datetime, window_days: int, freezes: FreezeStore) -> Cell:
    """The verdict of one (lab, column) pair from that pair's runs, oldest first."""
    current = [r for r in runs if r.lab_version == lab.version]
    last_pass = next((r for r in reversed(current) if r.passed), None)
    cell = Cell("never run", last_run=runs[-1] if runs else None, last_pass=last_pass, runs=runs)
    if not runs:
        return cell
    if column.entry is None:
        latest = runs[-1]
        cell.verdict, cell.detail = latest.status, latest.reason
        return cell
    if not current:
        cell.verdict, cell.detail = "stale", f"only v{runs[-1].lab_version} ran; the lab is v{lab.version}"
        return cell
    attempted = [r for r in current if r.status != "skipped"]
    if not attempted:
        cell.verdict, cell.detail = "skipped", current[-1].reason
        return cell
    latest = attempted[-1]
    if latest.status in FAILING:
        cell.verdict, cell.detail = "failing", latest.failure
        cell.changed_since_pass = package_changes(last_pass, latest, freezes) if last_pass else []
    elif latest.status == "flaky":
        cell.verdict, cell.detail = (
            "flaky",
            f"{latest.repeats_passed}/{len(latest.repeats)} runs passed; {latest.failure}",
        )
    else:
        _judge_pass(cell, column, latest, current[-1], now, window_days, freezes)
    return cell


def _judge_pass(cell: Cell, column: Column, passed: Run, latest: Run, now, window_days, freezes) -> None:
    differ = pins_differ(passed, column.entry, freezes.packages(passed))
    age = (now - _when(passed)).days
    if differ:
        why = "not on the entry's pins: " + ", ".join(differ)
    elif age > window_days:
        why = f"last pass {passed.started_at[:10]} is {age} days old (window {window_days} days)"
    else:
        cell.verdict = "outdated" if column.upstream else "verified"
        cell.detail = f"passed {passed.started_at[:10]} on the entry's pins"
        if column.upstream:
            cell.detail += "; upstream has newer: " + "; ".join(column.upstream)
        return
    if latest.status == "skipped":
        cell.verdict, cell.detail = "skipped", f"{latest.reason} ({why})"
    else:
        cell.verdict, cell.detail = "stale", why


# ---------------------------------------------------------------- pins


def _same_version(installed: str, pinned: str) -> bool:
    try:
        have, want = Version(installed), Version(pinned)
    except InvalidVersion:
        return installed == pinned
    return have == want or (not want.local and have.public == want.public)


def _same_series(recorded: str, pinned: str) -> bool:
    """Equal as far as both go, and at least major.minor: Python 3.11.7 is the pinned 3.11; ROCm 7.14
    (read from torch.version.hip) is the pinned 7.14.0, ROCm 7.14.1 is not."""
    try:
        have, want = Version(recorded).release, Version(pinned).release
    except InvalidVersion:
        return recorded == pinned
    common = min(len(have), len(want))
    return common >= 2 and have[:common] == want[:common]


def pins_differ(run: Run, entry, packages: dict[str, str]) -> list[str]:
    """How the run's environment differs from what the entry pins; empty when it is exactly that."""
    differ = []
    python = run.fingerprint.python or ""
    if entry.python and not _same_series(python, entry.python):
        differ.append(f"Python {python or 'not recorded'} (pinned {entry.python})")
    if entry.kind == "cpu":
        for line in entry.pins:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            pinned = next(iter(req.specifier)).version
            installed = packages.get(canonical(req.name))
            if installed is None:
                differ.append(f"{req.name} not recorded (pinned {pinned})")
            elif not _same_version(installed, pinned):
                differ.append(f"{req.name} {installed} (pinned {pinned})")
        return differ
    torch = packages.get("torch")
    if torch is None or not _same_version(torch, entry.pytorch):
        differ.append(f"torch {torch or 'not recorded'} (pinned {entry.pytorch})")
    rocm = run.fingerprint.rocm
    if not rocm or not _same_series(rocm, entry.rocm):
        differ.append(f"ROCm {rocm or 'not recorded'} (pinned {entry.rocm})")
    return differ


def package_changes(before: Run, after: Run, freezes: FreezeStore) -> list[str]:
    """``name old → new`` for each package whose version differs between two runs' environments.
    When one side knows only the fingerprint's few packages, only those are compared."""
    (old, old_whole), (new, new_whole) = freezes.installed(before), freezes.installed(after)
    if old_whole and new_whole:
        names = set(old) | set(new)
    else:
        names = (set() if old_whole else set(old)) | (set() if new_whole else set(new))
    changes = []
    for name in sorted(names):
        if old.get(name) != new.get(name):
            changes.append(f"{name} {old.get(name) or '(none)'} → {new.get(name) or '(none)'}")
    return changes


# ---------------------------------------------------------------- the whole matrix


def build(
    labs: list[Lab],
    runs: list[Run],
    entries: list,
    *,
    now: dt.datetime | None = None,
    window_days: int = DEFAULT_WINDOW_DAYS,
    upstream: Upstream | None = None,
    freezes: FreezeStore | None = None,
) -> Freshness:
    now = now or dt.datetime.now(dt.UTC)
    freezes = freezes or FreezeStore(None)
    columns = columns_for(entries, runs, upstream)
    by_pair: dict[tuple[str, str], list[Run]] = {}
    for run in sorted(runs, key=lambda r: r.started_at):
        by_pair.setdefault((run.lab, run.env), []).append(run)
    report = Freshness(columns, [], now.isoformat(timespec="seconds"), window_days)
    for lab in labs:
        cells = {c.name: judge(lab, c, by_pair.get((lab.id, c.name), []), now, window_days, freezes) for c in columns}
        report.rows.append(_row(lab, cells, report.judged_on, columns))
    return report


def _row(lab: Lab, cells: dict[str, Cell], judged: list[Column], columns: list[Column]) -> LabRow:
    verdicts = [cells[c.name].verdict for c in judged]
    if any(v in ("failing", *FAILING) for v in verdicts):
        verdict = "failing"
    elif "flaky" in verdicts:
        verdict = "flaky"
    elif verdicts and all(v in (*VERIFIED, "passed") for v in verdicts):
        verdict = "fresh"
    else:
        verdict = "stale"
    counted = [c for c in columns if c.entry is not None] or columns
    passes = [cells[c.name].last_pass for c in counted if cells[c.name].last_pass]
    last = [cells[c.name].last_run for c in counted if cells[c.name].last_run]
    return LabRow(
        lab,
        cells,
        verdict,
        last_pass=max(passes, key=lambda r: r.started_at, default=None),
        last_run=max(last, key=lambda r: r.started_at, default=None),
        warnings=_warnings(cells),
    )


def _warnings(cells: dict[str, Cell]) -> list[dict]:
    seen, found = set(), []
    for env, cell in cells.items():
        for w in cell.last_run.warnings if cell.last_run else []:
            key = (w.get("category"), w.get("message"))
            if key not in seen:
                seen.add(key)
                announced = removal(w.get("message", "")) or {}
                found.append(
                    {
                        **w,
                        "env": env,
                        "removal": w.get("removal") or announced.get("version"),
                        "package": w.get("package") or announced.get("package"),
                    }
                )
    return found


def newest_gpu_verification(runs: list[Run], entries: list) -> Run | None:
    """The newest passing run on any ROCm entry of the matrix: the dead-man check watches its age."""
    rocm = {e.name for e in entries if e.kind == "rocm"}
    return max((r for r in runs if r.env in rocm and r.passed), key=lambda r: r.started_at, default=None)


def age_days(run: Run, now: dt.datetime) -> float:
    return (now - _when(run)).total_seconds() / 86400
