"""Hints of the live workshop: the instructor writes one for an exercise, it reaches the stuck.

Stored in two tables of the live queue's SQLite file (WAL, so the queue's workers are not held
up): ``hints`` (lab, grade_id, the text in zh and en, author, time) and
``live_hint_deliveries`` (which learner got which hint, when, or why not). Who gets a hint is
decided when it is posted (``view.stuck_learners``: the learners whose latest graded attempt
failed the exercise); each of them finds ``HINT-<lab>.md`` beside the notebook they work on,
holding every hint of that lab they were sent. Their notebook is never touched. A learner has
the lab twice: the copy nbgrader's Assignment List fetched (``~/rocmlab/<lab>/``, the one they
submit) and the hub's practice copy (``~/<lab>/``); the hint goes beside the one whose notebook
was saved last.

The file is written by a child process that has become the learner (``delivery.as_user``, so
root never writes in a home), opening the lab folder with ``O_NOFOLLOW`` and replacing the file
by rename: a link planted at either place is neither followed nor written through.
"""

from __future__ import annotations

import os
import re
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..hub.delivery import as_user
from ..hub.labs import COURSE_ID
from .tables import QueueTables

HINT_CHARS = 4000
WRITE_TIMEOUT_S = 20
LAB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
GRADE_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._:-]{0,127}")

SCHEMA = """
CREATE TABLE IF NOT EXISTS live_hints (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    lab TEXT NOT NULL,
    grade_id TEXT NOT NULL,
    text_en TEXT NOT NULL,
    text_zh TEXT NOT NULL,
    author TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS live_hint_deliveries (
    hint_id INTEGER NOT NULL REFERENCES live_hints(id),
    learner TEXT NOT NULL,
    delivered_at REAL NOT NULL,
    file TEXT NOT NULL DEFAULT '',
    error TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (hint_id, learner)
);
"""


@dataclass
class Hint:
    id: int
    lab: str
    grade_id: str
    text: dict  # lang -> text
    author: str
    created_at: float


def check_hint(lab: str, grade_id: str, text: dict) -> dict:
    """The hint's text by language, or InputError naming the field that is wrong."""
    if not LAB_ID.fullmatch(lab or ""):
        raise InputError(f"hint field lab: {lab!r} is not a lab id")
    if not GRADE_ID.fullmatch(grade_id or ""):
        raise InputError(f"hint field grade_id: {grade_id!r} is not an exercise id")
    cleaned = {lang: (text.get(lang) or "").strip() for lang in ("en", "zh")}
    if not any(cleaned.values()):
        raise InputError("hint fields text_en, text_zh: write the hint in at least one language")
    for lang, value in cleaned.items():
        if len(value) > HINT_CHARS:
            raise InputError(f"hint field text_{lang}: {len(value)} characters, at most {HINT_CHARS}")
    return cleaned


class HintStore(QueueTables):
    """The hints and their deliveries, in ``path`` (the live queue's database)."""

    SCHEMA = SCHEMA

    def add(self, lab: str, grade_id: str, text: dict, author: str, now: float | None = None) -> Hint:
        text = check_hint(lab, grade_id, text)
        created = time.time() if now is None else now
        with closing(self._connect()) as db, db:
            cursor = db.execute(
                "INSERT INTO live_hints (lab, grade_id, text_en, text_zh, author, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (lab, grade_id, text["en"], text["zh"], author, created),
            )
        return Hint(cursor.lastrowid, lab, grade_id, text, author, created)

    def record_delivery(self, hint_id: int, learner: str, file: str = "", error: str = "") -> None:
        with closing(self._connect()) as db, db:
            db.execute(
                "INSERT OR REPLACE INTO live_hint_deliveries (hint_id, learner, delivered_at, file, error) "
                "VALUES (?, ?, ?, ?, ?)",
                (hint_id, learner, time.time(), file, error),
            )

    def hints(self, lab: str | None = None) -> list[Hint]:
        query, args = "SELECT * FROM live_hints", ()
        if lab is not None:
            query, args = query + " WHERE lab = ?", (lab,)
        with closing(self._connect()) as db:
            return [_hint(row) for row in db.execute(query + " ORDER BY id", args)]

    def hints_for(self, learner: str, lab: str | None = None) -> list[Hint]:
        """The hints sent to ``learner`` (of ``lab``), oldest first."""
        query = (
            "SELECT h.* FROM live_hints h JOIN live_hint_deliveries d ON d.hint_id = h.id WHERE d.learner = ?"
            + (" AND h.lab = ?" if lab is not None else "")
            + " ORDER BY h.id"
        )
        with closing(self._connect()) as db:
            return [_hint(row) for row in db.execute(query, (learner, lab) if lab is not None else (learner,))]

    def deliveries(self, hint_id: int) -> dict[str, str]:
        """learner -> '' when the file was written, else why not."""
        with closing(self._connect()) as db:
            rows = db.execute("SELECT learner, error FROM live_hint_deliveries WHERE hint_id = ?", (hint_id,))
            return dict(rows.fetchall())


def _hint(row) -> Hint:
    hint_id, lab, grade_id, text_en, text_zh, author, created_at = row
    return Hint(hint_id, lab, grade_id, {"en": text_en, "zh": text_zh}, author, created_at)


# ------------------------------------------------------------------ the HINT file


def hint_file_name(lab: str) -> str:
    return f"HINT-{lab}.md"


def hint_markdown(lab: str, hints: list[Hint]) -> str:
    lines = [
        f"# {lab}: 提示 · Hints",
        "",
        "老师发来的提示（你的笔记本没有被修改）· From your instructor (your notebook is unchanged).",
        "",
    ]
    for hint in hints:
        stamp = time.strftime("%H:%M", time.localtime(hint.created_at))
        lines += [f"## {hint.grade_id} ({stamp})", ""]
        lines += [hint.text[lang] + "\n" for lang in ("zh", "en") if hint.text.get(lang)]
    return "\n".join(lines).rstrip() + "\n"


def write_in_lab_folder(lab: str, name: str, text: str) -> str:
    """Replace ``./<lab>/<name>`` (cwd: the learner's home) with ``text``; links are not followed."""
    folder = os.open(lab, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        temp = f".{name}.{os.getpid()}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            os.unlink(temp, dir_fd=folder)
            raise
    finally:
        os.close(folder)
    return f"{lab}/{name}"


def lab_folders(lab: str) -> tuple[str, ...]:
    """Where a learner's home holds the lab, relative to it: the fetched copy first."""
    return (f"{COURSE_ID}/{lab}", lab)


def newest_notebook_s(folder: str) -> float:
    """When a notebook in ``folder`` (cwd-relative) was last saved; -1 when there is none or no folder."""
    try:
        names = [n for n in os.listdir(folder) if n.endswith(".ipynb")]
        return max((os.stat(os.path.join(folder, n), follow_symlinks=False).st_mtime for n in names), default=-1.0)
    except OSError:
        return -1.0


def worked_in(lab: str) -> str:
    """The learner's folder of ``lab`` (cwd: their home) whose notebook was saved last (a tie: the
    fetched copy); the practice copy's place when neither is there (the write then says why)."""
    there = [folder for folder in lab_folders(lab) if os.path.lexists(folder)]
    return max(there, key=newest_notebook_s) if there else lab


def deliver_hint_file(home: Path, owner: tuple[int, int], lab: str, hints: list[Hint]) -> str:
    """Write ``HINT-<lab>.md`` with ``hints`` beside the notebook the learner works on (``worked_in``),
    as ``owner``; its path in the home. OSError when the folder is missing, a link, or the child
    does not answer in time."""
    text = hint_markdown(lab, hints)
    name = hint_file_name(lab)
    return as_user(
        owner, home, lambda: write_in_lab_folder(worked_in(lab), name, text), WRITE_TIMEOUT_S, f"writing {name}"
    )


def send_hint(store: HintStore, hint: Hint, learners, home_of) -> dict[str, str]:
    """Record ``hint`` for each learner and write their HINT file; learner -> '' or the error.
    ``home_of(learner)`` gives (home, (uid, gid))."""
    results = {}
    for learner in learners:
        store.record_delivery(hint.id, learner)
        try:
            home, owner = home_of(learner)
            file = deliver_hint_file(home, owner, hint.lab, store.hints_for(learner, hint.lab))
            store.record_delivery(hint.id, learner, file=file)
            results[learner] = ""
        except (OSError, KeyError) as exc:
            store.record_delivery(hint.id, learner, error=str(exc))
            results[learner] = str(exc)
    return results
