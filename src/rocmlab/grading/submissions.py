"""Finding and validating submissions, and the per-learner result records."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..course.catalog import LANGUAGES, Lab
from ..errors import LabError

FLAGS = (
    "invalid",
    "wrong_lab",
    "old_version",
    "tampered",
    "timeout",
    "crashed",
    "output_truncated",
    "memory_limit",
    "network",
)
NETWORK_ERRORS = ("ConnectionRefusedError", "gaierror", "ConnectionError", "TimeoutError")
STUDENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,63}")  # with re.fullmatch: no trailing newline
MAX_NOTEBOOK_BYTES = 50 * 2**20


def safe_text(text) -> str:
    """Learner-supplied text as it may be printed and stored: lone surrogates (from undecodable
    file names or JSON) become backslash escapes."""
    return str(text).encode("utf-8", "backslashreplace").decode("utf-8")


def valid_id(student: str) -> bool:
    """A learner id that may name a gradebook row, a CSV row and a folder."""
    return STUDENT_ID.fullmatch(student) is not None


@dataclass
class Submission:
    student: str
    path: Path
    problem: str = ""  # why it cannot be graded, found while looking for it (a symbolic link)


@dataclass
class GradedTest:
    grade_id: str
    max_points: float
    points: float = 0.0
    passed: bool = False
    message: str = ""  # the rules the harness found broken, in the learner's language
    rules: list = field(default_factory=list)  # per check: name, rule {en, zh}, points, max_points, passed


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
    seed: int = 0  # the variant of the hidden checks (``rocmlab grade --seeds`` regrades with it)
    checks: list = field(default_factory=list)  # the harness's record per check, details for the instructor
    # the run's test cells and the cells that raised (``Outcome.cells``): what the learner's own
    # notebook showed before the harness's verdicts replaced the test cells' outputs
    cells: list = field(default_factory=list)

    def flag(self, name: str, note: str = "") -> None:
        if name not in self.flags:
            self.flags.append(name)
        if note:
            self.notes.append(safe_text(note))


def find_submissions(folder: Path, lab_id: str) -> list[Submission]:
    """nbgrader's ``<student>/<lab>/*.ipynb`` (also under ``submitted/``) and flat ``<student>.ipynb``."""
    if not folder.is_dir():
        raise LabError(f"{folder}: no such submissions folder")
    if (folder / "submitted").is_dir():
        folder = folder / "submitted"
    found: dict[str, Submission] = {}
    for lab_folder in sorted(p for p in folder.glob(f"*/{lab_id}") if p.is_dir()):
        path = pick_lab_notebook(sorted(lab_folder.glob("*.ipynb")), lab_id)
        if path:
            found[lab_folder.parent.name] = Submission(lab_folder.parent.name, path, _link_problem(folder, path))
    for path in sorted(folder.glob("*.ipynb")):
        if path.stem in found:
            raise LabError(
                f"{safe_text(path)}: learner {safe_text(path.stem)!r} also has a submission in "
                f"{safe_text(found[path.stem].path)}"
            )
        found[path.stem] = Submission(path.stem, path, _link_problem(folder, path))
    if not found:
        raise LabError(
            f"{folder}: no submissions of {lab_id} found (expected <student>/{lab_id}/*.ipynb or <student>.ipynb)"
        )
    return [found[s] for s in sorted(found)]


def pick_lab_notebook(paths: list[Path], lab_id: str) -> Path | None:
    """The notebook to grade among a learner's: ``<lab>.ipynb`` or a newer version delivered beside
    it mid-course (``<lab>.v<version>.ipynb``, rocmlab.hub.delivery), whichever the learner saved
    last; any notebook when neither is there."""
    named = [
        p for p in paths if p.name == f"{lab_id}.ipynb" or re.fullmatch(rf"{re.escape(lab_id)}\.v[^/]+\.ipynb", p.name)
    ]
    if not named:
        return paths[0] if paths else None
    return max(named, key=lambda p: (p.lstat().st_mtime, p.name))


def _link_problem(folder: Path, path: Path) -> str:
    """Why a submission path cannot be trusted: a symbolic link on the way down from ``folder``
    (a learner's link to the instructor's notebook would be graded as theirs)."""
    part = path
    while part != folder and part != part.parent:
        if part.is_symlink():
            return f"{safe_text(part.relative_to(folder))} is a symbolic link: submit the notebook itself"
        part = part.parent
    return ""


def read_no_follow(path: Path) -> str:
    """The file's text, refusing a symbolic link even one swapped in after the submission was found."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as fh:
        if os.fstat(fh.fileno()).st_size > MAX_NOTEBOOK_BYTES:
            raise ValueError(f"larger than {MAX_NOTEBOOK_BYTES // 2**20} MB")
        return fh.read().decode("utf-8")


def read_notebook(path: Path):
    """A learner's notebook, checked as the grader needs it (``rocmlab check`` uses this too):
    at most ``MAX_NOTEBOOK_BYTES``, not a symbolic link, UTF-8 JSON, every cell a well-formed
    code, markdown or raw cell. Raises ``OSError`` or ``ValueError`` saying what is wrong."""
    nb = nbformat.reads(read_no_follow(path), as_version=4)
    if not isinstance(nb.get("cells"), list):
        raise ValueError("no list of cells")  # noqa: TRY004
    for index, cell in enumerate(nb.cells):
        if cell.get("cell_type") not in ("code", "markdown", "raw") or not isinstance(cell.get("source"), str):
            raise ValueError(f"cell {index + 1} is not a well-formed code, markdown or raw cell")
        cell.setdefault("metadata", nbformat.NotebookNode())
    return nb


def _semver(version: str) -> tuple:
    core = version.split("+")[0].split("-")[0]
    try:
        return tuple(int(part) for part in core.split("."))
    except ValueError:
        return ()


def load_submission(sub: Submission, lab: Lab, result: StudentResult):
    """The submission's notebook, or None when it cannot be graded (``result`` says why)."""
    if not valid_id(sub.student):
        result.status = "invalid"
        result.flag(
            "invalid",
            f"learner id {safe_text(sub.student)!r} is not a valid id (1-64 letters, digits, _.@+-, "
            "starting with a letter or digit): rename the folder or file",
        )
        return None
    if sub.problem:
        result.status = "invalid"
        result.flag("invalid", sub.problem)
        return None
    try:
        nb = read_notebook(sub.path)
    except Exception as exc:  # noqa: BLE001 (any parse failure of learner input is a verdict)
        result.status = "invalid"
        result.flag("invalid", f"{safe_text(sub.path.name)}: not a readable notebook: {str(exc)[:200]}")
        return None
    meta = nb.metadata.get("rocmlab")
    if not isinstance(meta, dict) or not meta.get("id"):
        result.status = "invalid"
        result.flag("invalid", f"{sub.path.name}: no rocmlab metadata (id, version): not a notebook of this course")
        return None
    result.submitted_version = safe_text(meta.get("version", ""))
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
