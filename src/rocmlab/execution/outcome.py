"""What one notebook run came to, and what the executed notebook shows.

``Outcome`` is the worker's answer for one run (rocmlab.execution.worker): passed, failed,
timeout or crashed, with the reason and the failing cell. ``inspect_output`` adds what the
executed notebook itself shows: the deprecation warnings in its stream outputs, and for each code
cell whether the kernel finished it and the error it raised. The run record, ``build --verify``
and the grader read a run through these.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..deprecations import find_deprecations


@dataclass
class Outcome:
    status: str  # passed | failed | timeout | crashed
    duration_s: float
    reason: str = ""
    failing_cell: dict | None = None
    warnings: list = field(default_factory=list)
    cells: list = field(default_factory=list)  # per code cell: {"index", "tags", "grade_id", "error"}
    harness: dict | None = None  # the trusted harness's record (rocmlab.harness), when the run asked for it


def inspect_output(outcome: Outcome, output: Path) -> Outcome:
    """Add what the executed notebook shows: warnings seen, and each code cell's error if any.

    A cell counts as executed only when the kernel gave it an execution count and it finished;
    papermill's own cell status cannot tell (after a timeout it marks unreached cells completed).
    The cell that was running when a run timed out or its kernel died gets that as its error.
    """
    try:
        nb = json.loads(output.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return outcome
    code_cells = [(i, c) for i, c in enumerate(nb.get("cells", [])) if c.get("cell_type") == "code"]
    started = [code_index for code_index, (_, c) in enumerate(code_cells) if _papermill(c).get("start_time")]
    for code_index, (index, cell) in enumerate(code_cells):
        error = None
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                text = "".join(out.get("text", ""))
                outcome.warnings.extend(find_deprecations(text, index, stream=out.get("name", "stdout")))
            elif out.get("output_type") == "error":
                error = {"ename": out.get("ename", ""), "evalue": out.get("evalue", "")}
        running = _papermill(cell).get("status") == "running"
        grading = cell.get("metadata", {}).get("nbgrader", {})
        outcome.cells.append(
            {
                "index": index,
                "code_index": code_index,
                "grade_id": grading.get("grade_id"),
                "graded": bool(grading.get("grade")),
                "error": error,
                "executed": cell.get("execution_count") is not None and not running,
            }
        )
    if started:
        _mark_interrupted_cell(outcome, outcome.cells[started[-1]])
    return outcome


def _papermill(cell: dict) -> dict:
    return cell.get("metadata", {}).get("papermill") or {}


def _mark_interrupted_cell(outcome: Outcome, last_started: dict) -> None:
    """The last cell papermill started is the one a timeout or a dead kernel stopped. Whether the
    kernel's execution count reached the client before it died is a race, so it is not asked."""
    if outcome.status not in ("timeout", "crashed"):
        return
    last_started["executed"] = True
    if last_started["error"] is None:
        last_started["error"] = {"ename": outcome.status, "evalue": outcome.reason}
