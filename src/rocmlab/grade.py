"""``rocmlab grade LAB --submissions DIR``: autograde a class with nbgrader, in parallel, sandboxed.

For each submission: validate it (a notebook of this lab, this version or older), restore the
lab's test and parameters cells from the source (edits, deletions and duplicates are flagged),
execute it in the chosen profile inside the sandbox (``rocmlab.sandbox`` around
``rocmlab.execute``), then hand the executed notebook to nbgrader's autograde (without its
own execution) to write the grades. Executions run ``--jobs`` at a time; grades are written by
the main thread alone, so the gradebook never sees two writers.

Outputs under ``--out``: ``course/`` (nbgrader's folders and, by default, the sqlite
gradebook), ``feedback/<student>/<lab>.html``, ``grades.csv`` (nbgrader's CSV exporter) and
``summary.json`` (per learner: score, flags, tests).
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import logging
import os
import queue
import re
import shutil
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import nbformat

from . import processes
from .build import nbgrader_config, solution_notebook, write_notebook
from .catalog import LANGUAGES, Lab, Profile, discover, select
from .errors import ExitCode, InputError, LabError
from .execute import Outcome
from .grading import analytics, shards
from .papermill_engine import TIMEOUT_ENAME, TRUNCATED_MARK
from .results import write_json_atomic
from .root import find_root
from .sandbox import Limits, Sandbox
from .source import MARKERS

FLAGS = (
    "invalid",
    "wrong_lab",
    "old_version",
    "tampered",
    "monkeypatched",
    "timeout",
    "crashed",
    "output_truncated",
    "memory_limit",
    "network",
)
NETWORK_ERRORS = ("ConnectionRefusedError", "gaierror", "ConnectionError", "TimeoutError")
STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,63}$")
MAX_NOTEBOOK_BYTES = 50 * 2**20
INJECTED_TAG = "rocmlab-injected"
INTEGRITY_MARK = "ROCMLAB-INTEGRITY "
NOT_RUN_ENAME = "NotRun"
TRUSTED_CALL = re.compile(r"trusted\(([^)]*)\)")
CELL_LINE = re.compile(r"(?:Cell|Input) In ?\[\s*\d*\s*\], line (\d+)")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
HIDDEN_BEGIN, HIDDEN_END = MARKERS["test"]


@dataclass
class Submission:
    student: str
    path: Path


@dataclass
class GradedTest:
    grade_id: str
    max_points: float
    points: float = 0.0
    passed: bool = False
    hidden_failed: bool = False
    message: str = ""


@dataclass
class StudentResult:
    student: str
    file: str
    lang: str = "en"
    status: str = "graded"  # graded | invalid
    score: float = 0.0
    max_score: float = 0.0
    flags: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    tests: list = field(default_factory=list)
    duration_s: float = 0.0
    submitted_version: str = ""

    def flag(self, name: str, note: str = "") -> None:
        if name not in self.flags:
            self.flags.append(name)
        if note:
            self.notes.append(note)


# ------------------------------------------------------------------ finding and validating


def find_submissions(folder: Path, lab_id: str) -> list[Submission]:
    """nbgrader's ``<student>/<lab>/*.ipynb`` (also under ``submitted/``) and flat ``<student>.ipynb``."""
    if not folder.is_dir():
        raise LabError(f"{folder}: no such submissions folder")
    if (folder / "submitted").is_dir():
        folder = folder / "submitted"
    found: dict[str, Submission] = {}
    for path in sorted(folder.glob(f"*/{lab_id}/*.ipynb")):
        student = path.parent.parent.name
        preferred = path.name == f"{lab_id}.ipynb"
        if student not in found or preferred:
            found[student] = Submission(student, path)
    for path in sorted(folder.glob("*.ipynb")):
        if path.stem in found:
            raise LabError(f"{path}: learner {path.stem!r} also has a submission in {found[path.stem].path}")
        found[path.stem] = Submission(path.stem, path)
    if not found:
        raise LabError(
            f"{folder}: no submissions of {lab_id} found (expected <student>/{lab_id}/*.ipynb or <student>.ipynb)"
        )
    return [found[s] for s in sorted(found)]


def _semver(version: str) -> tuple:
    core = version.split("+")[0].split("-")[0]
    try:
        return tuple(int(part) for part in core.split("."))
    except ValueError:
        return ()


def load_submission(sub: Submission, lab: Lab, result: StudentResult):
    """The submission's notebook, or None when it cannot be graded (``result`` says why)."""
    if not STUDENT_ID.match(sub.student):
        result.status = "invalid"
        result.flag("invalid", f"learner id {sub.student!r} is not a valid id (letters, digits, _.@+-)")
        return None
    try:
        if sub.path.stat().st_size > MAX_NOTEBOOK_BYTES:
            raise ValueError(f"larger than {MAX_NOTEBOOK_BYTES // 2**20} MB")
        nb = nbformat.reads(sub.path.read_text(encoding="utf-8"), as_version=4)
        if not isinstance(nb.get("cells"), list):
            raise ValueError("no list of cells")  # noqa: TRY004
        for index, cell in enumerate(nb.cells):
            if cell.get("cell_type") not in ("code", "markdown", "raw") or not isinstance(cell.get("source"), str):
                raise ValueError(f"cell {index + 1} is not a well-formed code, markdown or raw cell")
            cell.setdefault("metadata", nbformat.NotebookNode())
    except Exception as exc:  # noqa: BLE001 (any parse failure of learner input is a verdict)
        result.status = "invalid"
        result.flag("invalid", f"{sub.path.name}: not a readable notebook: {str(exc)[:200]}")
        return None
    meta = nb.metadata.get("rocmlab")
    if not isinstance(meta, dict) or not meta.get("id"):
        result.status = "invalid"
        result.flag("invalid", f"{sub.path.name}: no rocmlab metadata (id, version): not a notebook of this course")
        return None
    result.submitted_version = str(meta.get("version", ""))
    result.lang = meta.get("lang") if meta.get("lang") in LANGUAGES else "en"
    if meta["id"] != lab.id:
        result.status = "invalid"
        result.flag("wrong_lab", f"{sub.path.name}: a notebook of lab {meta['id']!r}, not {lab.id!r}")
        return None
    submitted, current = _semver(result.submitted_version), _semver(lab.version)
    if not submitted or submitted > current:
        result.status = "invalid"
        result.flag(
            "invalid", f"{sub.path.name}: lab version {result.submitted_version!r} is not {lab.version} or older"
        )
        return None
    if submitted < current:
        result.flag("old_version", f"made from lab version {result.submitted_version}, graded against {lab.version}")
    return nb


# ------------------------------------------------------------------ restoring the lab's cells


def _grading(cell) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader")
    return meta if isinstance(meta, dict) else {}


def visible_part(source: str) -> str:
    """A test cell as the learner sees it: nbgrader removes the hidden block and its markers."""
    kept, hidden = [], False
    for line in source.split("\n"):
        if HIDDEN_BEGIN in line:
            hidden = True
        elif HIDDEN_END in line:
            hidden = False
        elif not hidden:
            kept.append(line.rstrip())
    return "\n".join(kept).strip()


def _fresh(cell):
    new = nbformat.from_dict(json.loads(json.dumps(cell)))
    if new.cell_type == "code":
        new.outputs, new.execution_count = [], None
    return new


def trusted_names(source_nb) -> list[str]:
    names = []
    for cell in source_nb.cells:
        if _grading(cell).get("grade"):
            for args in TRUSTED_CALL.findall(cell.source):
                names += [n for n in re.findall(r"[\"']([\w.]+)[\"']", args) if n not in names]
    return names


def injected_cells(names: list[str]) -> tuple:
    capture = nbformat.v4.new_code_cell(
        "# rocmlab grader: remember pristine functions before any learner code runs\n"
        "from rocmlab.lab import integrity as _rocmlab_integrity\n"
        f"_rocmlab_integrity.capture({names!r})"
    )
    report = nbformat.v4.new_code_cell(
        "# rocmlab grader: report functions replaced by learner code\n"
        "import json as _json, rocmlab.lab.integrity as _rocmlab_integrity\n"
        f"print({INTEGRITY_MARK!r} + _json.dumps(_rocmlab_integrity.patched()))"
    )
    for cell, cell_id in ((capture, "rocmlab-capture"), (report, "rocmlab-integrity")):
        cell.metadata["tags"] = [INJECTED_TAG]
        cell.id = cell_id
    return capture, report


def restore_cells(nb, source_nb, inject: bool = True) -> tuple:
    """The submission with the source's test and parameters cells; returns (notebook, notes)."""
    tests = {(_grading(c).get("grade_id")): c for c in source_nb.cells if _grading(c).get("grade")}
    solutions = {
        _grading(c).get("grade_id"): c
        for c in source_nb.cells
        if _grading(c).get("solution") and not _grading(c).get("grade")
    }
    params = next(c for c in source_nb.cells if "parameters" in c.metadata.get("tags", []))
    notes, seen, cells = [], set(), []
    for cell in nb.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if "injected-parameters" in tags or INJECTED_TAG in tags:
            continue
        grade_id = _grading(cell).get("grade_id")
        if grade_id in tests:
            if grade_id in seen:
                notes.append(f"duplicated test cell {grade_id} (the copy was dropped)")
                continue
            if visible_part(cell.get("source", "")) != visible_part(tests[grade_id].source):
                notes.append(f"edited test cell {grade_id} (restored from the source)")
            seen.add(grade_id)
            cells.append(_fresh(tests[grade_id]))
        elif grade_id in solutions:
            if grade_id in seen:  # a copied answer cell (Jupyter copies metadata): plain code now
                del cell.metadata["nbgrader"]
            else:
                seen.add(grade_id)
                cell.metadata["nbgrader"] = dict(_grading(solutions[grade_id]))
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
    if inject:
        capture, report = injected_cells(trusted_names(source_nb))
        cells = [capture, *cells, report]
    nb.cells = cells
    nb.metadata["kernelspec"] = dict(source_nb.metadata["kernelspec"])
    return nb, notes


def _reinsert_missing(cells: list, source_nb, seen: set, notes: list, params) -> None:
    """Put back deleted test cells after the graded cell that precedes them in the source."""
    order = [c for c in source_nb.cells if _grading(c).get("grade_id")]
    for index, source_cell in enumerate(order):
        grade_id = _grading(source_cell)["grade_id"]
        if grade_id in seen or not _grading(source_cell).get("grade"):
            continue
        notes.append(f"deleted test cell {grade_id} (put back from the source)")
        position = len(cells)
        for earlier in reversed(order[:index]):
            hits = [i for i, c in enumerate(cells) if _grading(c).get("grade_id") == _grading(earlier)["grade_id"]]
            if hits:
                position = hits[0] + 1
                break
        cells.insert(position, _fresh(source_cell))
        seen.add(grade_id)
    if "parameters" not in seen:
        first_graded = next((i for i, c in enumerate(cells) if _grading(c)), len(cells))
        cells.insert(first_graded, _fresh(params))


# ------------------------------------------------------------------ reading an executed notebook


def _errors(cell) -> list:
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def mark_unrun_tests(nb) -> int:
    """Give every test cell that never finished an error output, so nbgrader cannot count it as passed."""
    count = 0
    for cell in nb.cells:
        if not _grading(cell).get("grade") or cell.cell_type != "code":
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


def failure_message(cell, source_cell) -> tuple[bool, str]:
    """(hidden, message) for a failed test cell; a hidden failure's message is never returned."""
    errors = _errors(cell)
    if not errors:
        return False, "wrote to stderr (counted as a failure)"
    error = errors[0]
    if error.get("ename") in (NOT_RUN_ENAME, TIMEOUT_ENAME):
        return False, f"{error['ename']}: {error.get('evalue', '')}"
    text = ANSI.sub("", "\n".join(error.get("traceback", [])))
    match = CELL_LINE.search(text)
    lines = source_cell.source.split("\n")
    begin = next((i for i, line in enumerate(lines) if HIDDEN_BEGIN in line), None)
    end = next((i for i, line in enumerate(lines) if HIDDEN_END in line), len(lines))
    if match is None:
        return True, ""
    line = int(match.group(1)) - 1
    if begin is not None and begin <= line <= end:
        return True, ""
    return False, f"{error.get('ename', '')}: {error.get('evalue', '')}".strip()[:1000]


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
            if INJECTED_TAG in cell.metadata.get("tags", []) and INTEGRITY_MARK in text:
                patched = json.loads(text.split(INTEGRITY_MARK, 1)[1].splitlines()[0])
                if patched:
                    result.flag(
                        "monkeypatched",
                        "replaced functions the tests rely on: "
                        + ", ".join(patched)
                        + " (the tests used the originals)",
                    )


# ------------------------------------------------------------------ nbgrader course and gradebook


def _fast_sqlite_commits() -> None:
    """WAL journal and synchronous=NORMAL for sqlite gradebooks: nbgrader commits about 30 times per
    notebook, and each fsync of the default journal costs more than the grading itself. A crash can
    lose the last grades written (a re-run restores them), never corrupt the file."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    if not event.contains(Engine, "connect", _sqlite_pragmas):
        event.listen(Engine, "connect", _sqlite_pragmas)


@contextlib.contextmanager
def shared_gradebook_engines():
    """nbgrader opens a new Gradebook, with a new engine and a check of every table, about ten
    times per autograded notebook; within one grading run they share one engine per database."""
    import nbgrader.api

    original, engines = nbgrader.api.create_engine, {}

    def create_engine(url, **kwargs):
        if url not in engines:
            engines[url] = original(url, **kwargs)
        return engines[url]

    nbgrader.api.create_engine = create_engine
    try:
        yield
    finally:
        nbgrader.api.create_engine = original
        for engine in engines.values():
            engine.dispose()


def _sqlite_pragmas(connection, _record) -> None:
    if type(connection).__module__.startswith("sqlite3"):
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()


class Course:
    """nbgrader's course folder and gradebook for one lab; only the main thread calls it."""

    def __init__(self, root: Path, lab: Lab, folder: Path, db_url: str | None):
        from nbconvert.preprocessors import ClearMetadataPreprocessor
        from nbgrader.preprocessors import (
            AssignLatePenalties,
            CheckCellMetadata,
            DeduplicateIds,
            IgnorePattern,
            LimitOutput,
            OverwriteCells,
            OverwriteKernelspec,
            SaveAutoGrades,
        )

        self.lab, self.folder = lab, folder
        self._nbgrader = None
        folder.mkdir(parents=True, exist_ok=True)
        self.db_url = db_url or f"sqlite:///{folder / 'gradebook.db'}"
        self.config = nbgrader_config(root, folder, self.db_url)
        # The notebook was executed in the sandbox: nbgrader must neither clear its outputs nor run it again.
        self.config.Autograde.sanitize_preprocessors = [
            DeduplicateIds,
            OverwriteKernelspec,
            OverwriteCells,
            CheckCellMetadata,
        ]
        self.config.Autograde.autograde_preprocessors = [
            IgnorePattern,
            ClearMetadataPreprocessor,
            LimitOutput,
            SaveAutoGrades,
            AssignLatePenalties,
            CheckCellMetadata,
        ]
        logging.getLogger("traitlets").setLevel(logging.ERROR)
        if self.db_url.startswith("sqlite"):
            _fast_sqlite_commits()
        warnings.filterwarnings("ignore", module="nbgrader")  # its own SQLAlchemy session warnings

    def _api(self):
        from nbgrader.apps import NbGraderAPI
        from nbgrader.coursedir import CourseDirectory

        if self._nbgrader is None:
            self._nbgrader = NbGraderAPI(coursedir=CourseDirectory(config=self.config), config=self.config)
        return self._nbgrader

    def create_assignment(self, source_nb) -> None:
        """The gradebook's source assignment: the solution notebook, through generate_assignment."""
        source = self.folder / "source" / self.lab.id
        shutil.rmtree(source, ignore_errors=True)
        write_notebook(source_nb, source / f"{self.lab.id}.ipynb")
        if self.lab.data_dir.is_dir():
            shutil.copytree(self.lab.data_dir, source / "data")
        result = self._api().generate_assignment(self.lab.id, force=True, create=True)
        if not result["success"]:
            log = (result.get("log") or "") + (result.get("error") or "")
            raise LabError(
                f"{self.lab.source}: nbgrader generate_assignment into the gradebook failed "
                f"({self.db_url}):\n{log.strip()[-2000:]}"
            )

    def record(self, student: str, executed_nb) -> None:
        """Autograde one executed notebook (or zero an ungradable one) in the gradebook."""
        folder = self.folder / "submitted" / student / self.lab.id
        shutil.rmtree(folder, ignore_errors=True)
        if executed_nb is None:
            self._zero(student)
            return
        write_notebook(executed_nb, folder / f"{self.lab.id}.ipynb")
        result = self._api().autograde(self.lab.id, student, force=True, create=True)
        if not result["success"]:
            log = (result.get("log") or "") + (result.get("error") or "")
            raise RuntimeError(f"nbgrader autograde failed for {student}: {log.strip()[-1500:]}")

    def _zero(self, student: str) -> None:
        from nbgrader.api import Gradebook, MissingEntry

        with Gradebook(self.db_url) as gb:
            gb.update_or_create_student(student)
            try:
                gb.remove_submission(self.lab.id, student)
            except MissingEntry:
                pass
            submission = gb.add_submission(self.lab.id, student)
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    grade.auto_score, grade.needs_manual_grade = 0, False
            gb.db.commit()

    def scores(self, student: str) -> tuple[float, float, dict]:
        from nbgrader.api import Gradebook

        with Gradebook(self.db_url) as gb:
            submission = gb.find_submission(self.lab.id, student)
            grades = {g.name: (g.score, g.max_score) for nb in submission.notebooks for g in nb.grades}
            return submission.score, submission.max_score, grades

    def export_csv(self, path: Path) -> None:
        from nbgrader.api import Gradebook
        from nbgrader.plugins import CsvExportPlugin

        plugin = CsvExportPlugin(to=str(path), assignment=[self.lab.id])
        with Gradebook(self.db_url) as gb:
            plugin.export(gb)


# ------------------------------------------------------------------ feedback


TEXT = {
    "en": {
        "title": "Feedback",
        "score": "Score",
        "test": "Test",
        "points": "Points",
        "result": "Result",
        "message": "Message",
        "pass": "passed",
        "fail": "failed",
        "hidden": "a hidden test failed (its code is not shown)",
        "notes": "Notes from the grader",
        "invalid": "This submission could not be graded.",
        "flags": {
            "invalid": "not a gradable notebook of this lab",
            "wrong_lab": "a notebook of another lab",
            "old_version": "made from an older version of the lab",
            "tampered": "test cells were changed: the original tests were used",
            "monkeypatched": "functions the tests rely on were replaced: the originals were used",
            "timeout": "a time limit was reached",
            "crashed": "the notebook's kernel stopped",
            "output_truncated": "too much output: it was cut",
            "memory_limit": "the memory limit was reached",
            "network": "a network connection was refused",
        },
    },
    "zh": {
        "title": "评分反馈",
        "score": "得分",
        "test": "测试",
        "points": "分数",
        "result": "结果",
        "message": "信息",
        "pass": "通过",
        "fail": "未通过",
        "hidden": "隐藏测试未通过（不显示其代码）",
        "notes": "评分说明",
        "invalid": "该提交无法评分。",
        "flags": {
            "invalid": "不是本实验可评分的笔记本",
            "wrong_lab": "是另一个实验的笔记本",
            "old_version": "基于旧版本的实验",
            "tampered": "测试单元被改动：已使用原始测试",
            "monkeypatched": "测试依赖的函数被替换：已使用原始函数",
            "timeout": "超出时间限制",
            "crashed": "笔记本内核已终止",
            "output_truncated": "输出过多，已被截断",
            "memory_limit": "超出内存限制",
            "network": "网络连接被拒绝（评分时离线）",
        },
    },
}


def feedback_html(lab: Lab, result: StudentResult) -> str:
    t = TEXT[result.lang]
    esc = html.escape
    rows = []
    for test in result.tests:
        verdict = t["pass"] if test.passed else t["fail"]
        message = t["hidden"] if test.hidden_failed else test.message
        rows.append(
            f'<tr class="{"pass" if test.passed else "fail"}"><td><code>{esc(test.grade_id)}</code></td>'
            f"<td>{test.points:g} / {test.max_points:g}</td><td>{verdict}</td><td>{esc(message)}</td></tr>"
        )
    flags = "".join(f"<li>{esc(t['flags'][f])}</li>" for f in result.flags)
    status = f"<p>{t['invalid']}</p>" if result.status == "invalid" else ""
    return (
        f'<!DOCTYPE html>\n<html lang="{result.lang}"><head><meta charset="utf-8">'
        f"<title>{esc(lab.title[result.lang])} — {t['title']}</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{border:1px solid #ccc;padding:.3em .6em}"
        "table{border-collapse:collapse}tr.pass td:nth-child(3){color:#070}tr.fail td:nth-child(3){color:#b00}"
        "</style></head><body>"
        f"<h1>{esc(lab.title[result.lang])} ({esc(lab.id)} {esc(lab.version)})</h1>"
        f"<p>{esc(result.student)} — {t['score']}: <b>{result.score:g} / {result.max_score:g}</b></p>{status}"
        f"<table><tr><th>{t['test']}</th><th>{t['points']}</th><th>{t['result']}</th><th>{t['message']}</th></tr>"
        f"{''.join(rows)}</table>" + (f"<h2>{t['notes']}</h2><ul>{flags}</ul>" if flags else "") + "</body></html>\n"
    )


# ------------------------------------------------------------------ one submission, the class


@dataclass
class Plan:
    root: Path
    lab: Lab
    profile: Profile
    sandbox: Sandbox
    sources: dict  # lang -> solution notebook


def copy_learner_files(notebook: Path, lab: Lab, work: Path) -> None:
    """In nbgrader's layout, the learner's other files (helper modules, outputs) beside the notebook;
    the lab's own data/ is copied over them afterwards."""
    folder = notebook.parent
    if folder.name != lab.id:
        return
    files = [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink() and p.suffix != ".ipynb"]
    if sum(p.stat().st_size for p in files) > MAX_NOTEBOOK_BYTES:
        return
    for path in files:
        target = work / path.relative_to(folder)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


def execute_submission(plan: Plan, nb, result: StudentResult, slot: int):
    """Restore, execute in the sandbox, mark unrun tests; returns the executed notebook."""
    lab, profile = plan.lab, plan.profile
    prepared, notes = restore_cells(nb, plan.sources[result.lang])
    for note in notes:
        result.flag("tampered", note)
    run = plan.sandbox.new_run(slot, profile.cell_timeout_s)
    try:
        copy_learner_files(Path(result.file), lab, run.work)
        if lab.data_dir.is_dir():
            shutil.copytree(lab.data_dir, run.work / "data", dirs_exist_ok=True)
        source = run.private / "input" / f"{lab.id}.ipynb"
        write_notebook(prepared, source)
        executed, outcome = run.execute(
            source,
            run.private / "output" / f"{lab.id}.ipynb",
            profile.parameters,
            profile.cell_timeout_s,
            profile.timeout_s,
        )
        executed = executed or prepared
    finally:
        run.cleanup()
    read_flags(executed, outcome, result)
    mark_unrun_tests(executed)
    return executed


def fill_tests(plan: Plan, executed, result: StudentResult, grades: dict) -> None:
    source_tests = {_grading(c)["grade_id"]: c for c in plan.sources[result.lang].cells if _grading(c).get("grade")}
    cells = {_grading(c).get("grade_id"): c for c in (executed.cells if executed else [])}
    for grade_id, source_cell in source_tests.items():
        points, max_points = grades.get(grade_id, (0.0, float(_grading(source_cell)["points"])))
        test = GradedTest(grade_id, float(max_points), float(points or 0.0))
        test.passed = test.points >= test.max_points
        if not test.passed and grade_id in cells:
            test.hidden_failed, test.message = failure_message(cells[grade_id], source_cell)
        result.tests.append(test)


def grade_class(root: Path, lab: Lab, submissions: list[Submission], out: Path, **options) -> list[StudentResult]:
    with shared_gradebook_engines():
        return _grade_class(root, lab, submissions, out, **options)


def _grade_class(
    root: Path,
    lab: Lab,
    submissions: list[Submission],
    out: Path,
    *,
    profile_name: str = "smoke",
    jobs: int = 1,
    db_url: str | None = None,
    limits: Limits | None = None,
    extra_hidden: list[Path] = (),
    progress=print,
) -> list[StudentResult]:
    profile = lab.profile(profile_name)
    out.mkdir(parents=True, exist_ok=True)
    course = Course(root, lab, out / "course", db_url)
    sources = {lang: solution_notebook(lab, lang) for lang in LANGUAGES}
    course.create_assignment(sources["en"])
    submitted = os.path.commonpath([str(Path(s.path).resolve().parent) for s in submissions])
    hidden = [root / "solutions", out, *extra_hidden, Path(submitted)]
    if db_url and db_url.startswith("sqlite:///"):
        hidden.append(Path(db_url[len("sqlite:///") :]).parent)
    sandbox = Sandbox(limits, hide=hidden, slots=max(1, jobs))
    plan = Plan(root, lab, profile, sandbox, sources)
    if not sandbox.isolate or not sandbox.switch_user:
        progress(
            "warning: limited sandbox: "
            + ("" if sandbox.isolate else "no network, PID or mount isolation (needs root and unshare); ")
            + ("" if sandbox.switch_user else "kernels run as this user; ")
            + "time, memory, process and output limits still apply"
        )
    slots: queue.Queue = queue.Queue()
    for slot in range(max(1, jobs)):
        slots.put(slot)

    def run_one(sub: Submission):
        result = StudentResult(sub.student, str(sub.path))
        started = time.monotonic()
        nb = load_submission(sub, lab, result)
        executed = None
        if nb is not None:
            slot = slots.get()
            try:
                executed = execute_submission(plan, nb, result, slot)
            except Exception as exc:  # noqa: BLE001 (one learner's odd notebook never stops the class)
                result.status, executed = "invalid", None
                result.flag("invalid", f"could not be prepared or run: {type(exc).__name__}: {str(exc)[:300]}")
            finally:
                slots.put(slot)
        result.duration_s = round(time.monotonic() - started, 2)
        return result, executed

    results = []
    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        futures = [pool.submit(run_one, sub) for sub in submissions]
        for future in as_completed(futures):
            result, executed = future.result()
            try:
                course.record(result.student, executed if result.status == "graded" else None)
            except RuntimeError as exc:  # nbgrader refused this notebook: zero it, say why, go on
                result.status, executed = "invalid", None
                result.flag("invalid", str(exc)[:500])
                course.record(result.student, None)
            result.score, result.max_score, grades = course.scores(result.student)
            fill_tests(plan, executed, result, grades)
            results.append(result)
            progress(
                f"graded {result.student:<20} {result.score:g}/{result.max_score:g} "
                f"{','.join(result.flags)} ({result.duration_s:.1f}s)"
            )
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        sandbox.close()  # ends the kernels of runs still going, so their workers return at once
        pool.shutdown(wait=True)
    results.sort(key=lambda r: r.student)
    write_outputs(lab, profile, course, results, out, sandbox.isolation)
    return results


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def write_outputs(
    lab: Lab, profile: Profile, course: Course, results: list[StudentResult], out: Path, isolation: dict
) -> None:
    for result in results:
        path = out / "feedback" / result.student / f"{lab.id}.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(feedback_html(lab, result), encoding="utf-8")
    course.export_csv(out / "grades.csv")
    summary = {
        "lab": lab.id,
        "version": lab.version,
        "profile": profile.name,
        "graded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "gradebook": _safe_url(course.db_url),
        "sandbox": isolation,
        "students": [asdict(r) for r in results],
        "flag_counts": {f: sum(f in r.flags for r in results) for f in FLAGS},
    }
    write_json_atomic(out / "summary.json", summary)


def stage_feedback(course_root: Path, lab_id: str, grades: Path) -> list[str]:
    """Put ``rocmlab grade``'s feedback (``<grades>/feedback/<student>/<lab>.html``) where nbgrader's
    release_feedback takes it: ``<course_root>/feedback/<student>/<lab>/<lab>.html`` beside the
    timestamp and secret of the collected submission. Returns the learners staged."""
    staged = []
    for html_file in sorted((grades / "feedback").glob(f"*/{lab_id}.html")):
        student = html_file.parent.name
        submitted = course_root / "submitted" / student / lab_id
        if not (submitted / "timestamp.txt").is_file():
            continue
        dest = course_root / "feedback" / student / lab_id
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(html_file, dest / f"{lab_id}.html")
        for name in ("timestamp.txt", "submission_secret.txt"):
            if (submitted / name).is_file():
                shutil.copyfile(submitted / name, dest / name)
        staged.append(student)
    return staged


# ------------------------------------------------------------------ CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Autograde a class with nbgrader, in parallel and sandboxed: each submission re-run in the profile "
        "with the test cells restored from the source; grades.csv, summary.json (score and flags per learner) "
        "and a feedback page per learner in --out."
    )
    parser.add_argument("lab", metavar="LAB", help="lab id or its number; `merge`: merge the shard outputs OUT...")
    parser.add_argument(
        "--submissions",
        metavar="DIR",
        help="folder of submitted/<student>/<lab>/*.ipynb or of <student>.ipynb files (required to grade)",
    )
    # ---- scale-out (grading/shards.py): grade a part of the class, merge the parts
    parser.add_argument("shard_outputs", nargs="*", metavar="OUT", help="with `merge`: the --out folders of the shards")
    parser.add_argument(
        "--shard",
        metavar="K/N",
        help="grade only the K-th of N deterministic parts of the class (learners by id, round-robin); "
        "`rocmlab grade merge OUT... --out DIR` joins the N outputs",
    )
    parser.description += (
        " Also class.html (the class at a glance) with its CSV files. With --shard K/N only a part of the class; "
        "`rocmlab grade merge OUT... --out DIR` merges the parts into one gradebook, as one run would have written it."
    )
    # ----
    parser.add_argument("--jobs", type=int, default=1, metavar="N", help="submissions executed at once")
    parser.add_argument("--profile", default="smoke", choices=["smoke", "gpu", "multi-gpu"])
    parser.add_argument("--gradebook", metavar="URL", help="SQLAlchemy URL of the gradebook (default: sqlite in --out)")
    parser.add_argument("--out", metavar="DIR", help="output folder (default grades/<lab>/ in the course root)")
    parser.add_argument(
        "--memory-mb",
        type=int,
        metavar="MB",
        help=f"address-space limit per kernel process (default {Limits.memory_mb} in the smoke "
        "profile, none in GPU profiles, whose runtimes reserve large virtual ranges; 0: none)",
    )
    parser.add_argument(
        "--max-processes",
        type=int,
        default=Limits.max_processes,
        metavar="N",
        help="processes and threads a kernel may have",
    )
    parser.add_argument(
        "--max-output-kb", type=int, default=Limits.max_cell_output_kb, metavar="KB", help="output kept per cell"
    )
    parser.add_argument(
        "--feedback-to",
        metavar="COURSE_ROOT",
        help="also put each learner's feedback page in this nbgrader course's feedback/ folder, "
        "ready for `nbgrader release_feedback` (submissions collected by nbgrader only)",
    )


def main(
    *,
    lab: str,
    submissions: str | None = None,
    shard_outputs: list[str] = (),
    shard: str | None = None,
    jobs: int = 1,
    profile: str = "smoke",
    gradebook: str | None = None,
    out: str | None = None,
    memory_mb: int | None = None,
    max_processes: int = Limits.max_processes,
    max_output_kb: int = Limits.max_cell_output_kb,
    feedback_to: str | None = None,
    root: str | None = None,
) -> int:
    processes.exit_on_sigterm()  # finally blocks end the kernels and remove the sandbox
    root = find_root(root)
    # ---- scale-out (grading/shards.py)
    if lab == "merge":
        return shards.merge_command(root, shard_outputs, out, gradebook, submissions, shard, feedback_to)
    if shard_outputs or not submissions:
        raise InputError("grade: expected `rocmlab grade LAB --submissions DIR` (OUT folders only with `merge`)")
    part = shards.parse_shard(shard) if shard else None
    # ----
    lab = select(discover(root), [lab])[0]
    if jobs < 1:
        raise InputError(f"--jobs: expected a positive number, got {jobs}")
    everyone = submissions = find_submissions(Path(submissions).resolve(), lab.id)
    out = Path(out).resolve() if out else root / "grades" / lab.id
    # ---- scale-out: this shard's learners; a shard without any still writes its summary for merge
    if part:
        submissions = shards.select_shard(everyone, part)
        if not submissions:
            shards.write_empty_shard(out, lab, profile, part, everyone)
            print(f"shard {part}: no learner of the {len(everyone)} falls in this shard: {out / 'summary.json'}")
            return ExitCode.OK
    # ----
    memory_mb = memory_mb if memory_mb is not None else Limits.memory_mb if profile == "smoke" else 0
    limits = Limits(memory_mb=memory_mb, max_processes=max_processes, max_cell_output_kb=max_output_kb)

    def say(msg):
        print(msg, file=sys.stderr, flush=True)

    results = grade_class(
        root,
        lab,
        submissions,
        out,
        profile_name=profile,
        jobs=jobs,
        db_url=gradebook,
        limits=limits,
        progress=say,
    )
    if part:  # ---- scale-out
        shards.record_shard(out, part, everyone)
    analytics.write_class_page(out)  # ---- the instructor's class page
    for r in results:
        print(f"{r.student:<24} {r.score:>6g} / {r.max_score:<6g} {','.join(r.flags) or '-'}")
    print(
        f"graded {len(results)} submission(s) of {lab.id} {lab.version}: {out / 'grades.csv'}, "
        f"{out / 'summary.json'}, {out / analytics.PAGE}, feedback in {out / 'feedback'}"
    )
    if feedback_to:
        course_root = Path(feedback_to).resolve()
        staged = stage_feedback(course_root, lab.id, out)
        print(
            f"feedback of {len(staged)} learner(s) staged in {course_root / 'feedback'}: "
            f"release it with `nbgrader release_feedback {lab.id}`"
        )
    return ExitCode.OK
