"""The result record of one lab run (JSON, written atomically); what it ran on is its ``Fingerprint``.

Records are committed and shared, so they carry no path of the machine that wrote them:
``write_record`` rewrites site-packages, interpreter, home, temporary and repository paths
(``portable``) in every text a record holds.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypedDict

from ..errors import InputError
from ..schemas import validate
from .fingerprint import Fingerprint

SCHEMA = 1
STATUSES = ("passed", "failed", "timeout", "crashed", "skipped", "flaky")


class RecordError(InputError, ValueError):
    """A result record on disk is not one: the message names the file and the field."""


class FailingCell(TypedDict, total=False):
    index: int | None
    ename: str
    evalue: str
    source: str


class Repeat(TypedDict, total=False):
    """One of the runs of ``run --repeat N``."""

    run: int
    status: str
    duration_s: float
    reason: str
    failing_cell: FailingCell | None
    notebook: str


@dataclass
class RunResult:
    """What one lab run on one environment came to: the fields a result record (``Record``) and a
    ledger line (``report.history.Run``) share, and what is read from them."""

    lab: str
    lab_version: str
    profile: str
    env: str
    status: str
    started_at: str
    duration_s: float = 0.0
    reason: str = ""
    failing_cell: FailingCell | None = None
    warnings: list[dict] = field(default_factory=list)  # rocmlab.deprecations notices
    fingerprint: Fingerprint = field(default_factory=Fingerprint)  # its JSON form is converted
    repeats: list[Repeat] = field(
        default_factory=list
    )  # with `run --repeat N`: each run's status, reason, failing cell

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {self.status!r}")
        if isinstance(self.fingerprint, dict):
            self.fingerprint = Fingerprint.from_data(self.fingerprint, f"{self.lab} on {self.env}: fingerprint")

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def repeats_passed(self) -> int:
        return sum(r.get("status") == "passed" for r in self.repeats)

    @property
    def failure(self) -> str:
        """What went wrong, in one line: the failing cell's error when known, else the reason."""
        cell = self.failing_cell or {}
        if cell.get("ename"):
            evalue = " ".join(str(cell.get("evalue", "")).split())[:200]
            return f"cell {cell.get('index')}: {cell['ename']}: {evalue}"
        return " ".join(self.reason.split())[:300]

    @property
    def warning_messages(self) -> set[str]:
        return {w.get("message") for w in self.warnings}


@dataclass
class Record(RunResult):
    """A result record, ``results/<env>/<lab>.json``: ``schemas/record.schema.json`` is its JSON form."""

    notebook: str = ""
    student: bool = False
    checks_sandbox: str = ""  # where the lab's hidden checks ran (``run.CHECKS_SANDBOX``); "" without checks
    schema: int = SCHEMA


def write_json_atomic(path: Path, data) -> None:
    """Write JSON so that a reader sees the old file or the whole new one, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, ensure_ascii=False, indent=2, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_record(record: Record, path: Path) -> None:
    write_json_atomic(path, asdict(portable_record(record)))


def read_record(path: Path) -> Record:
    """Load a record; a malformed file raises RecordError (a ValueError) naming the file and the field."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RecordError(f"{path}: not a readable JSON result record ({exc})") from None
    if not isinstance(data, dict):
        raise RecordError(f"{path}: expected a JSON object")
    if data.get("schema") != SCHEMA:
        raise RecordError(f"{path}: field schema: expected {SCHEMA}, got {data.get('schema')!r}")
    validate(data, "record", path, RecordError)
    return Record(**data)


# Order matters: a venv's site-packages lies under the repository, the interpreter under home.
_NOT_IN_PATH = r"[^\s:'\"()\[\]<>,]"
_PATH_START = r"(?<![\w.~/:$-])"
_PATH_RULES = (
    (re.compile(_PATH_START + r"/" + _NOT_IN_PATH + r"*?/(?:site|dist)-packages/"), ""),
    (re.compile(_PATH_START + r"/" + _NOT_IN_PATH + r"*?/lib/(python3\.\d+)/"), r"\1/"),
    (re.compile(_PATH_START + r"/__w/[^\s/]+/[^\s/]+/"), ""),  # a GitHub runner's workspace (torch's build tree)
    (re.compile(_PATH_START + r"/" + _NOT_IN_PATH + r"*?/rocmlab-\d\d-[\w.-]+/"), ""),  # a lab's run folder (run.py)
)
_HOME_AND_TMP = (
    (re.compile(_PATH_START + r"/(?:home/[^\s/]+|root|Users/[^\s/]+)(?=/)"), "~"),
    (re.compile(_PATH_START + r"/(?:tmp|var/tmp)/[^\s/]+(?=/)"), "$TMPDIR"),
)


def portable(text: str, roots: tuple[str, ...] = ()) -> str:
    """``text`` with this machine's paths made relative: site-packages and stdlib files by their
    package path, ``roots`` (the repository) removed, home as ``~``, temporary folders as ``$TMPDIR``."""
    for pattern, replacement in _PATH_RULES:
        text = pattern.sub(replacement, text)
    for root in sorted((r.rstrip("/") for r in roots if r and r != "/"), key=len, reverse=True):
        text = re.sub(_PATH_START + re.escape(root) + r"/", "", text)
    for pattern, replacement in _HOME_AND_TMP:
        text = pattern.sub(replacement, text)
    return text


def portable_record(record: Record, roots: tuple[str, ...] | None = None) -> Record:
    """A copy of ``record`` with every text it holds made portable (see ``portable``)."""
    roots = roots if roots is not None else (str(Path.cwd()),)
    return dataclasses.replace(
        record,
        reason=portable(record.reason, roots),
        failing_cell=_portable_value(record.failing_cell, roots),
        warnings=_portable_value(record.warnings, roots),
        repeats=_portable_value(record.repeats, roots),
    )


def _portable_value(value, roots):
    if isinstance(value, str):
        return portable(value, roots)
    if isinstance(value, list):
        return [_portable_value(v, roots) for v in value]
    if isinstance(value, dict):
        return {k: _portable_value(v, roots) for k, v in value.items()}
    return value
