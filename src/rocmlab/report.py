"""Result records → the freshness matrix (lab × environment), as Markdown, HTML or JSON.

A lab is stale when its current version has no passing run on the newest environment, and
flaky when its latest run there (``run --repeat``) passed only some of the time.
Environments are ordered newest first by the release matrix when it names them, otherwise
by the torch version in their fingerprint.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from packaging.version import InvalidVersion, Version

from .catalog import Lab
from .results import Record, read_record

ICONS = {"passed": "✅", "failed": "❌", "timeout": "⏱️", "crashed": "💥", "skipped": "⏭️", "flaky": "🔁"}
REMOVAL = re.compile(
    r"(?:removed|removal|deleted|dropped)\s+(?:in|from|by)\s+(?:version\s+|v)?(?P<version>\d+\.\d+(?:\.\d+)?)",
    re.IGNORECASE,
)


@dataclass
class LabRow:
    lab: Lab
    cells: dict[str, Record]
    stale: bool
    last_verified: Record | None
    warnings: list[dict] = field(default_factory=list)
    newest_env: str | None = None

    @property
    def verdict(self) -> str:
        """fresh, stale, or flaky: the latest run on the newest environment passed only sometimes."""
        newest = self.cells.get(self.newest_env)
        if newest is not None and newest.status == "flaky" and newest.lab_version == self.lab.version:
            return "flaky"
        return "stale" if self.stale else "fresh"


@dataclass
class Freshness:
    environments: list[str]
    rows: list[LabRow]
    generated_at: str
    problems: list[str] = field(default_factory=list)

    @property
    def newest(self) -> str | None:
        return self.environments[0] if self.environments else None


def load_records(dirs: list[Path]) -> tuple[list[Record], list[str]]:
    """Records under ``dir/<env>/<lab>.json``; unreadable files are reported, never fatal."""
    records, problems = [], []
    for folder in dirs:
        for path in sorted(folder.glob("*/*.json")):
            if path.name.startswith("."):
                continue
            try:
                records.append(read_record(path))
            except ValueError as exc:
                problems.append(str(exc))
    return records, problems


def _torch_version(record: Record) -> Version:
    raw = (record.fingerprint.get("packages") or {}).get("torch") or "0"
    try:
        return Version(raw.split("+", 1)[0])
    except InvalidVersion:
        return Version("0")


def order_environments(records: list[Record], matrix_order: list[str] | None = None) -> list[str]:
    """Newest first: release-matrix order for the names it knows, then by torch version, then name."""
    matrix_order = matrix_order if matrix_order is not None else _matrix_order()
    newest_torch: dict[str, Version] = {}
    for record in records:
        newest_torch[record.env] = max(newest_torch.get(record.env, Version("0")), _torch_version(record))
    position = {name: i for i, name in enumerate(matrix_order)}
    return sorted(
        newest_torch, key=lambda env: (position.get(env, len(position)), -_version_key(newest_torch[env]), env)
    )


def _version_key(version: Version) -> float:
    major, minor, micro = (list(version.release) + [0, 0, 0])[:3]
    return major * 1e6 + minor * 1e3 + micro


def _matrix_order() -> list[str]:
    try:
        from .releases import load_matrix
    except ImportError:
        return []
    try:
        return [entry.name for entry in load_matrix()]
    except Exception:  # noqa: BLE001 (a broken matrix must not hide the results; `rocmlab releases` reports it)
        return []


def removal_version(message: str) -> str | None:
    match = REMOVAL.search(message)
    return match["version"] if match else None


def freshness(labs: list[Lab], records: list[Record], matrix_order: list[str] | None = None) -> Freshness:
    envs = order_environments(records, matrix_order)
    latest: dict[tuple[str, str], Record] = {}
    for record in sorted(records, key=lambda r: r.started_at):
        latest[(record.lab, record.env)] = record
    rows = []
    for lab in labs:
        cells = {env: latest[(lab.id, env)] for env in envs if (lab.id, env) in latest}
        current_passes = [r for r in records if r.lab == lab.id and r.passed and r.lab_version == lab.version]
        newest = envs[0] if envs else None
        stale = not any(r.env == newest for r in current_passes)
        last = max(current_passes, key=lambda r: r.started_at, default=None)
        warnings = _unique_warnings(cells.values())
        rows.append(LabRow(lab, cells, stale, last, warnings, newest))
    generated = datetime.now(UTC).isoformat(timespec="seconds")
    return Freshness(envs, rows, generated)


def _unique_warnings(records) -> list[dict]:
    seen, out = set(), []
    for record in records:
        for w in record.warnings:
            key = (w.get("category"), w.get("message"))
            if key not in seen:
                seen.add(key)
                out.append({**w, "env": record.env, "removal": removal_version(w.get("message", ""))})
    return out


def _cell_text(record: Record | None, lab: Lab) -> str:
    if record is None:
        return "—"
    text = f"{ICONS[record.status]} {record.status}"
    if record.status != "skipped":
        text += f" {record.duration_s:.0f}s"
    if record.lab_version != lab.version:
        text += f" (v{record.lab_version})"
    if record.warnings:
        text += f" ⚠️{len(record.warnings)}"
    return text


def _verified_text(row: LabRow) -> str:
    if row.last_verified is None:
        return "never"
    return f"{row.last_verified.started_at[:10]} on {row.last_verified.env}"


def to_markdown(report: Freshness, timestamp: bool = True) -> str:
    envs = report.environments
    lines = [
        "| lab | version | " + " | ".join(envs) + " | last verified | freshness |",
        "|---|---|" + "---|" * len(envs) + "---|---|",
    ]
    for row in report.rows:
        cells = " | ".join(_cell_text(row.cells.get(env), row.lab) for env in envs)
        fresh = {"fresh": "fresh", "stale": "⚠️ stale", "flaky": "🔁 flaky"}[row.verdict]
        lines.append(f"| {row.lab.id} | {row.lab.version} | {cells} | {_verified_text(row)} | {fresh} |")
    lines.append("")
    if report.newest:
        when = f" Generated {report.generated_at}." if timestamp else ""
        lines.append(
            f"Newest environment: **{report.newest}**. A lab is stale when its current version has no "
            f"passing run there.{when}"
        )
    details = _markdown_details(report)
    return "\n".join(lines + details) + "\n"


def _markdown_details(report: Freshness) -> list[str]:
    out = []
    for row in report.rows:
        for env, record in row.cells.items():
            if record.status in ("failed", "timeout", "crashed", "flaky"):
                reason = " ".join(record.reason.split())[:300]
                out.append(f"- **{row.lab.id}** on {env}: {record.status}: {reason}")
        for w in row.warnings:
            removal = f" (removal announced for {w['removal']})" if w["removal"] else ""
            out.append(f"- {row.lab.id} on {w['env']}: {w['category']}: {w['message'][:200]}{removal}")
    for problem in report.problems:
        out.append(f"- unreadable record: {problem}")
    return ["", "Details:", ""] + out if out else []


def to_json(report: Freshness, timestamp: bool = True) -> str:
    data = {
        "generated_at": report.generated_at if timestamp else None,
        "environments": report.environments,
        "newest": report.newest,
        "problems": report.problems,
        "labs": [
            {
                "id": row.lab.id,
                "version": row.lab.version,
                "title": row.lab.title,
                "stale": row.stale,
                "verdict": row.verdict,
                "last_verified": None
                if row.last_verified is None
                else {"env": row.last_verified.env, "at": row.last_verified.started_at},
                "runs": {
                    env: {
                        "status": r.status,
                        "lab_version": r.lab_version,
                        "profile": r.profile,
                        "duration_s": r.duration_s,
                        "warnings": len(r.warnings),
                        "reason": r.reason,
                    }
                    for env, r in row.cells.items()
                },
                "warnings": row.warnings,
            }
            for row in report.rows
        ],
    }
    return json.dumps(data, ensure_ascii=False, indent=2)


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:.35em .7em;text-align:left}th{background:#f3f3f3}
.passed{background:#e6f6e6}.failed,.crashed,.timeout{background:#fde8e8}.skipped{background:#f4f4f4}
.stale,.flaky{color:#b45309;font-weight:600}.fresh{color:#15803d}li{margin:.2em 0}"""


def to_html(report: Freshness) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(env)}</th>" for env in report.environments)
    body = []
    for row in report.rows:
        cells = "".join(
            f'<td class="{row.cells[env].status if env in row.cells else ""}" title="{esc(row.cells[env].reason if env in row.cells else "")}">'
            f"{esc(_cell_text(row.cells.get(env), row.lab))}</td>"
            for env in report.environments
        )
        fresh = f'<span class="{row.verdict}">{row.verdict}</span>'
        body.append(
            f"<tr><td>{esc(row.lab.id)}<br><small>{esc(row.lab.title['zh'])} · {esc(row.lab.title['en'])}</small></td>"
            f"<td>{esc(row.lab.version)}</td>{cells}<td>{esc(_verified_text(row))}</td><td>{fresh}</td></tr>"
        )
    details = "".join(f"<li>{esc(line[2:])}</li>" for line in _markdown_details(report) if line.startswith("- "))
    return (
        f'<!doctype html><html lang="en"><meta charset="utf-8"><title>rocmlab freshness</title>'
        f"<style>{_CSS}</style><h1>rocmlab freshness matrix</h1>"
        f"<p>Newest environment: <b>{esc(report.newest or 'none')}</b>. Generated {esc(report.generated_at)}.</p>"
        f"<table><tr><th>lab</th><th>version</th>{head}<th>last verified</th><th>freshness</th></tr>"
        f"{''.join(body)}</table>" + (f"<h2>Details</h2><ul>{details}</ul>" if details else "") + "</html>\n"
    )


RENDERERS = {"md": to_markdown, "html": to_html, "json": to_json}


README_START, README_END = "<!-- freshness:start -->", "<!-- freshness:end -->"


def stamp(report: Freshness, records: list[Record], root: Path) -> list[Path]:
    """Keep the latest records in ci/results/ and refresh the README's freshness table.

    Outputs carry no generation time, so stamping the same records twice changes nothing.
    """
    from .results import write_record

    changed = []
    latest = {(row.lab.id, env): rec for row in report.rows for env, rec in row.cells.items()}
    for (lab_id, env), record in sorted(latest.items()):
        path = root / "ci" / "results" / env / f"{lab_id}.json"
        if not path.is_file() or read_record(path) != record:
            write_record(record, path)
            changed.append(path)
    summary = root / "ci" / "results" / "freshness.json"
    changed += _write_if_changed(summary, to_json(report, timestamp=False) + "\n")
    readme = root / "README.md"
    if readme.is_file():
        text = readme.read_text(encoding="utf-8")
        if README_START not in text or README_END not in text:
            raise ValueError(f"{readme}: add the markers {README_START} and {README_END} where the table goes")
        head, rest = text.split(README_START, 1)
        _, tail = rest.split(README_END, 1)
        table = to_markdown(report, timestamp=False)
        changed += _write_if_changed(readme, f"{head}{README_START}\n{table}{README_END}{tail}")
    return changed


def _write_if_changed(path: Path, text: str) -> list[Path]:
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return []
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return [path]
