"""The grader's cells: restoring the lab's test and parameters cells, writing the trusted
harness's scores into the test cells for nbgrader, and reading an executed notebook (unrun
tests, flags, failure messages). ``rocmlab check`` uses this public API too.

Nothing the learner's kernel printed decides a grade: a test cell's visible asserts are the
learner's self-check, and the graded score of each test cell is the sum of the lab's checks
that passed in the harness (``rocmlab.harness``), written here as the cell's only result
(``score_tests``). See docs/grading.md for the threat model.
"""

from __future__ import annotations

import json
import re

import nbformat

from ..execution.outcome import Outcome
from ..execution.papermill_engine import TIMEOUT_ENAME, TRUNCATED_MARK
from .submissions import NETWORK_ERRORS, StudentResult

NOT_RUN_ENAME = "NotRun"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def grading(cell) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader")
    return meta if isinstance(meta, dict) else {}


def cell_points(nb) -> dict[str, float]:
    """grade_id -> points of a notebook's test cells."""
    return {grading(c)["grade_id"]: float(grading(c)["points"]) for c in nb.cells if grading(c).get("grade")}


def _normalized(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.split("\n")).strip()


def _fresh(cell):
    new = nbformat.from_dict(json.loads(json.dumps(cell)))
    if new.cell_type == "code":
        new.outputs, new.execution_count = [], None
    return new


def restore_cells(nb, source_nb) -> tuple:
    """The submission with the source's test and parameters cells; returns (notebook, notes)."""
    tests = {(grading(c).get("grade_id")): c for c in source_nb.cells if grading(c).get("grade")}
    solutions = {
        grading(c).get("grade_id"): c
        for c in source_nb.cells
        if grading(c).get("solution") and not grading(c).get("grade")
    }
    params = next(c for c in source_nb.cells if "parameters" in c.metadata.get("tags", []))
    notes, seen, cells = [], set(), []
    for cell in nb.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if "injected-parameters" in tags:
            continue
        grade_id = grading(cell).get("grade_id")
        if grade_id in tests:
            if grade_id in seen:
                notes.append(f"duplicated test cell {grade_id} (the copy was dropped)")
                continue
            if _normalized(cell.get("source", "")) != _normalized(tests[grade_id].source):
                notes.append(f"edited test cell {grade_id} (restored from the source)")
            seen.add(grade_id)
            cells.append(_fresh(tests[grade_id]))
        elif grade_id in solutions:
            if grade_id in seen:  # a copied answer cell (Jupyter copies metadata): plain code now
                del cell.metadata["nbgrader"]
            else:
                seen.add(grade_id)
                cell.metadata["nbgrader"] = dict(grading(solutions[grade_id]))
            cells.append(cell)
        elif grade_id:
            notes.append(f"graded cell {grade_id} is unknown or duplicated (its grading metadata was removed)")
            del cell.metadata["nbgrader"]
            cells.append(cell)
        elif "parameters" in tags:
            restored = _fresh(params)
            restored.id = cell.get("id", restored.get("id"))
            cells.append(restored)
            seen.add("parameters")
        else:
            cells.append(cell)
    _reinsert_missing(cells, source_nb, seen, notes, params)
    nb.cells = cells
    nb.metadata["kernelspec"] = dict(source_nb.metadata["kernelspec"])
    return nb, notes


def _reinsert_missing(cells: list, source_nb, seen: set, notes: list, params) -> None:
    """Put back deleted test cells after the graded cell that precedes them in the source."""
    order = [c for c in source_nb.cells if grading(c).get("grade_id")]
    for index, source_cell in enumerate(order):
        grade_id = grading(source_cell)["grade_id"]
        if grade_id in seen or not grading(source_cell).get("grade"):
            continue
        notes.append(f"deleted test cell {grade_id} (put back from the source)")
        position = len(cells)
        for earlier in reversed(order[:index]):
            hits = [i for i, c in enumerate(cells) if grading(c).get("grade_id") == grading(earlier)["grade_id"]]
            if hits:
                position = hits[0] + 1
                break
        cells.insert(position, _fresh(source_cell))
        seen.add(grade_id)
    if "parameters" not in seen:
        first_graded = next((i for i, c in enumerate(cells) if grading(c)), len(cells))
        cells.insert(first_graded, _fresh(params))


# ------------------------------------------------------------------ reading an executed notebook


def _errors(cell) -> list:
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def mark_unrun_tests(nb) -> int:
    """Give every test cell that never finished an error output, so nbgrader cannot count it as passed."""
    count = 0
    for cell in nb.cells:
        if not grading(cell).get("grade") or cell.cell_type != "code":
            continue
        # papermill marks cells after a dead kernel "completed" too: only the kernel's reply proves it ran
        replied = "shell.execute_reply" in cell.metadata.get("execution", {})
        if not replied and not _errors(cell):
            cell.setdefault("outputs", []).append(
                nbformat.v4.new_output(
                    "error",
                    ename=NOT_RUN_ENAME,
                    traceback=[],
                    evalue="this test did not run: the notebook stopped earlier (time limit or crash)",
                )
            )
            count += 1
    return count


def shown_message(ename: str, evalue: str, limit: int = 300) -> str:
    """An error from the learner's kernel as ``rocmlab check`` prints it: a name that looks like
    an exception's name (else ``Error``), the value without terminal colours, cut to ``limit``."""
    ename = ename if re.fullmatch(r"[A-Za-z_][\w.]{0,79}", ename or "") else "Error"
    return f"{ename}: {ANSI.sub('', str(evalue or ''))[:limit]}".strip()


def read_flags(nb, outcome: Outcome, result: StudentResult) -> None:
    if outcome.status == "timeout":
        result.flag("timeout", outcome.reason)
    elif outcome.status == "crashed":
        result.flag("crashed", outcome.reason)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error" and out.get("ename") == TIMEOUT_ENAME:
                result.flag("timeout", f"a cell ran past its limit: {out.get('evalue', '')}")
            if out.get("output_type") == "error" and out.get("ename") == "MemoryError":
                result.flag("memory_limit", "a cell ran out of its memory limit (MemoryError)")
            if out.get("output_type") == "error" and (
                out.get("ename") in NETWORK_ERRORS or "Network is unreachable" in out.get("evalue", "")
            ):
                result.flag("network", f"a network connection failed: {out.get('ename')} (grading is offline)")
            text = out.get("text", "") if out.get("output_type") == "stream" else ""
            if TRUNCATED_MARK in text:
                result.flag("output_truncated", "a cell printed more output than the grader keeps")


# ------------------------------------------------------------------ the harness's scores


def check_results(record: dict | None, checks: list, reason: str) -> list[dict]:
    """The harness's result per check, or every check failed with ``reason`` when it never ran."""
    if record and not record.get("error") and len(record.get("checks", [])) == len(checks):
        return record["checks"]
    error = (record or {}).get("error")  # the checks did not load: the grader's fault
    return [
        {
            "grade_id": c.grade_id,
            "name": c.name,
            "points": 0.0,
            "max_points": c.points,
            "rule": c.rule,
            "passed": False,
            "detail": "" if error else reason,
            "error": f"check {c.name}: {error}" if error else "",
        }
        for c in checks
    ]


def score_tests(nb, results: list[dict], lang: str) -> None:
    """Replace each test cell's outputs with its checks' rules (shown) and their score, the one
    result nbgrader reads (an ``execute_result`` holding a number is partial credit)."""
    by_cell: dict[str, list] = {}
    for result in results:
        by_cell.setdefault(result["grade_id"], []).append(result)
    for cell in nb.cells:
        grade_id = grading(cell).get("grade_id")
        if not grading(cell).get("grade") or cell.cell_type != "code":
            continue
        rules = by_cell.get(grade_id, [])
        lines = [f"{_mark(r)} {r['rule'][lang]} ({r['points']:g}/{r['max_points']:g})" for r in rules]
        score = sum(r["points"] for r in rules)
        cell.outputs = [
            nbformat.v4.new_output("display_data", data={"text/plain": "\n".join(lines)}),
            nbformat.v4.new_output("execute_result", data={"text/plain": f"{score:g}"}, execution_count=None),
        ]


def _mark(result: dict) -> str:
    """✓ passed, ✗ broken by the learner's answer, ⚠ not graded (the check itself failed)."""
    return "⚠" if result.get("error") else "✓" if result["passed"] else "✗"
