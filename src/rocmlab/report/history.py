"""The run history: an append-only ledger under ci/history/, one JSON line per lab run.

``ci/history/<env>.jsonl`` holds every run of every lab on one matrix entry: the result (status,
failing cell, traceback tail, warnings, repeats), where it ran (the environment fingerprint,
the image digest, the hash of its ``pip freeze``), what ran (repository commit, hash of the
lab's source), how long each cell took (papermill's cell metadata), and the CI run's URL. Whole freezes are stored once each, as
``ci/history/freeze/<sha256>.txt``. Lines are only ever added, never rewritten. Each line is read
against ``schemas/ledger.schema.json`` (its fingerprint: ``fingerprint.schema.json``, the record's).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..execution.fingerprint import freeze_hash
from ..execution.results import Record, RunResult, portable, portable_record, read_record
from ..schemas import validate

HISTORY = Path("ci") / "history"
FREEZE = "freeze"
SCHEMA = 1
TRACEBACK_LINES = 15
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass
class Run(RunResult):
    """One lab run as the ledger keeps it: a record's result, what its notebook showed, where it ran."""

    traceback_tail: str = ""
    freeze_sha256: str | None = None
    image_digest: str | None = None
    commit: str | None = None
    dirty: bool = False
    lab_source_sha256: str | None = None
    cells: list = field(default_factory=list)  # code cells: {"index", "label", "duration_s"}
    run_url: str | None = None
    notebook: str | None = None  # "<env>/<lab>.ipynb" inside the results folder (CI: the results-<env> artifact)
    schema: int = SCHEMA
    # Known while reporting, never written: the whole freeze, the executed notebook on this disk.
    freeze: list | None = field(default=None, compare=False, repr=False)
    notebook_path: Path | None = field(default=None, compare=False, repr=False)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.lab, self.env, self.started_at)

    def to_json(self) -> str:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in _TRANSIENT}
        fingerprint = self.fingerprint.to_data()
        data["fingerprint"] = {k: v for k, v in fingerprint.items() if k not in _KEPT_APART}
        return json.dumps(data, ensure_ascii=False, sort_keys=True)


_TRANSIENT = {"freeze", "notebook_path"}
_KEPT_APART = {"freeze", "freeze_sha256"}  # a line's fingerprint: the freeze is stored by its hash, a field of the line
_RETIRED = {"figures"}  # in the schema so that old lines read; dropped on reading


def run_from_json(text: str, where: str) -> Run:
    """One ledger line, read against ``schemas/ledger.schema.json``; a malformed one raises
    ValueError naming ``where`` (file:line) and the field."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not a JSON line ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a JSON object")  # noqa: TRY004 (a malformed line is a value error)
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{where}: field schema: expected {SCHEMA}, got {data.get('schema')!r}")
    validate(data, "ledger", where, ValueError)
    return Run(**{k: v for k, v in data.items() if k not in _RETIRED})


# ---------------------------------------------------------------- what a run is recorded with


@dataclass
class Context:
    """What the ledger needs beyond a record: the commit, the CI run, the lab sources."""

    root: Path
    commit: str | None = None
    dirty: bool = False
    run_url: str | None = None
    _sources: dict = field(default_factory=dict)

    @classmethod
    def detect(cls, root: Path) -> Context:
        commit, dirty = _git_state(root)
        return cls(root, os.environ.get("GITHUB_SHA") or commit, dirty, ci_run_url())

    def lab_source_sha256(self, lab_id: str) -> str | None:
        if lab_id not in self._sources:
            self._sources[lab_id] = source_hash(self.root / "solutions" / lab_id)
        return self._sources[lab_id]


def ci_run_url() -> str | None:
    """The GitHub Actions run this process belongs to, from the variables every job gets."""
    server, repo, run_id = (os.environ.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))
    if not (server and repo and run_id):
        return None
    attempt = os.environ.get("GITHUB_RUN_ATTEMPT")
    return f"{server}/{repo}/actions/runs/{run_id}" + (f"/attempts/{attempt}" if attempt and attempt != "1" else "")


def _git_state(root: Path) -> tuple[str | None, bool]:
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=30)
        if head.returncode != 0:
            return None, False
        status = subprocess.run(
            ["git", "status", "--porcelain", "--", "solutions", "src"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None, False
    return head.stdout.strip(), bool(status.stdout.strip())


def source_hash(folder: Path) -> str | None:
    """sha256 over a lab folder's files (relative names and bytes), None when it does not exist."""
    if not folder.is_dir():
        return None
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def run_from_record(record: Record, results: Path, context: Context) -> Run:
    """The ledger line of a fresh record, with what its executed notebook shows (machine paths made portable)."""
    roots = (str(context.root.resolve()),)
    record = portable_record(record, roots)
    fingerprint = record.fingerprint
    installed = fingerprint.freeze
    freeze_sha = fingerprint.freeze_sha256 or (freeze_hash(installed) if installed else None)
    notebook = results / record.env / record.notebook if record.notebook else None
    cells, traceback = read_notebook(notebook) if notebook and notebook.is_file() else ([], "")
    return Run(
        lab=record.lab,
        lab_version=record.lab_version,
        env=record.env,
        profile=record.profile,
        status=record.status,
        started_at=record.started_at,
        duration_s=record.duration_s,
        reason=record.reason,
        failing_cell=record.failing_cell,
        traceback_tail=portable(traceback, roots),
        repeats=[{k: r.get(k) for k in ("run", "status", "duration_s", "reason")} for r in record.repeats],
        warnings=record.warnings,
        fingerprint=dataclasses.replace(fingerprint, freeze=None, freeze_sha256=None),
        freeze_sha256=freeze_sha,
        image_digest=fingerprint.image_digest,
        commit=context.commit,
        dirty=context.dirty,
        lab_source_sha256=context.lab_source_sha256(record.lab),
        cells=cells,
        run_url=context.run_url,
        notebook=f"{record.env}/{record.notebook}" if record.notebook else None,
        freeze=installed,
        notebook_path=notebook if notebook and notebook.is_file() else None,
    )


def read_notebook(path: Path) -> tuple[list, str]:
    """Per code cell its papermill duration, and the last error's traceback tail."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return [], ""
    cells, traceback = [], ""
    for index, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        duration = (cell.get("metadata", {}).get("papermill") or {}).get("duration")
        if isinstance(duration, int | float):
            cells.append({"index": index, "label": _cell_label(cell), "duration_s": round(duration, 3)})
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                lines = ANSI.sub("", "\n".join(out.get("traceback", []))).strip().splitlines()
                traceback = "\n".join(lines[-TRACEBACK_LINES:])
    return cells, traceback


def _cell_label(cell: dict) -> str:
    grade_id = (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id")
    if grade_id:
        return grade_id
    source = cell.get("source", "")
    source = "".join(source) if isinstance(source, list) else source
    first = next((line.strip() for line in source.splitlines() if line.strip() and not line.startswith("#")), "")
    return first[:60]


# ---------------------------------------------------------------- reading and appending


def load_results(dirs: list[Path], context: Context) -> tuple[list[Run], list[str]]:
    """Runs from the records under ``dir/<env>/<lab>.json``; unreadable records are reported, never fatal."""
    runs, problems = [], []
    for folder in dirs:
        for path in sorted(folder.glob("*/*.json")):
            if path.name.startswith("."):
                continue
            try:
                runs.append(run_from_record(read_record(path), folder, context))
            except ValueError as exc:
                problems.append(str(exc))
    return runs, problems


def read_ledger(root: Path) -> tuple[list[Run], list[str]]:
    """Every run in ci/history/*.jsonl, oldest first; malformed lines are reported with file:line."""
    runs, problems = [], []
    for path in sorted((root / HISTORY).glob("*.jsonl")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                runs.append(run_from_json(line, f"{path.relative_to(root)}:{number}"))
            except ValueError as exc:
                problems.append(str(exc))
    return sorted(runs, key=lambda r: r.started_at), problems


def merge(history: list[Run], new: list[Run]) -> list[Run]:
    """History and new runs together, each run once (a new run already in the ledger keeps its
    ledger line but gains what is known only now: its freeze and its executed notebook)."""
    by_key = {run.key: run for run in history}
    for run in new:
        kept = by_key.get(run.key)
        if kept is None:
            by_key[run.key] = run
        else:
            kept.freeze = kept.freeze or run.freeze
            kept.notebook_path = kept.notebook_path or run.notebook_path
    return sorted(by_key.values(), key=lambda r: r.started_at)


def append(root: Path, runs: list[Run]) -> list[Path]:
    """Add the runs the ledger does not hold yet (and their freezes); the files changed."""
    held = {run.key for run in read_ledger(root)[0]}
    changed: list[Path] = []
    by_env: dict[str, list[Run]] = {}
    for run in sorted(runs, key=lambda r: r.started_at):
        if run.key not in held:
            held.add(run.key)
            by_env.setdefault(run.env, []).append(run)
    for env, fresh in sorted(by_env.items()):
        path = root / HISTORY / f"{env}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as ledger:
            for run in fresh:
                ledger.write(run.to_json() + "\n")
        changed.append(path)
        for run in fresh:
            changed += store_freeze(root, run)
    return changed


def store_freeze(root: Path, run: Run) -> list[Path]:
    if not (run.freeze and run.freeze_sha256):
        return []
    path = root / HISTORY / FREEZE / f"{run.freeze_sha256}.txt"
    if path.is_file():
        return []
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(run.freeze) + "\n", encoding="utf-8")
    return [path]


class FreezeStore:
    """Whole freezes by hash: the run's own when it has one, else ci/history/freeze/."""

    def __init__(self, root: Path | None):
        self.root = root
        self._cache: dict[str, dict[str, str] | None] = {}

    def packages(self, run: Run) -> dict[str, str]:
        """name → version of everything installed where the run ran (the fingerprint's few if no freeze is known)."""
        return self.installed(run)[0]

    def installed(self, run: Run) -> tuple[dict[str, str], bool]:
        """The packages, and whether they are the whole freeze (False: only the fingerprint's few)."""
        if run.freeze:
            return parse_freeze(run.freeze), True
        if run.freeze_sha256 and self.root is not None:
            if run.freeze_sha256 not in self._cache:
                path = self.root / HISTORY / FREEZE / f"{run.freeze_sha256}.txt"
                lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else None
                self._cache[run.freeze_sha256] = parse_freeze(lines) if lines else None
            if self._cache[run.freeze_sha256]:
                return self._cache[run.freeze_sha256], True
        return {canonical(k): v for k, v in run.fingerprint.packages.items() if v}, False


def parse_freeze(lines: list[str]) -> dict[str, str]:
    found = {}
    for line in lines:
        name, sep, version = line.partition("==")
        if sep:
            found[canonical(name)] = version.strip()
    return found


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
