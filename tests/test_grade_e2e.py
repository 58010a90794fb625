"""``rocmlab grade`` end to end through the CLI: nbgrader layout, a gradebook URL, re-runs."""

import json
from pathlib import Path

import classroom
import pytest

from rocmlab.cli import main

pytestmark = pytest.mark.slow


def gradebook_rows(db: Path):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{db}") as gb:
        subs = gb.assignment_submissions(classroom.LAB)
        return sorted((s.student.id, s.score, len([g for nb in s.notebooks for g in nb.grades])) for s in subs)


def test_regrading_a_class_is_idempotent(tmp_path, capsys):
    base = classroom.student_notebook(classroom.COURSE, tmp_path)
    entries = {k: v for k, v in classroom.regular_class(base).items() if k in ("correct", "partial")}
    classroom.write_class(entries, tmp_path / "course" / "submitted", layout="nbgrader")
    db = tmp_path / "books" / "gradebook.db"
    db.parent.mkdir()
    argv = [
        "--root",
        str(classroom.COURSE),
        "grade",
        "01",
        "--submissions",
        str(tmp_path / "course"),
        "--jobs",
        "2",
        "--gradebook",
        f"sqlite:///{db}",
        "--out",
        str(tmp_path / "out"),
    ]
    assert main(argv) == 0
    first = gradebook_rows(db)
    assert first == [("correct", 5.0, 2), ("partial", 2.0, 2)]
    printed = capsys.readouterr().out
    assert "correct" in printed and "5 / 5" in printed
    before = json.loads((tmp_path / "out" / "summary.json").read_text())
    (tmp_path / "before.json").write_text(json.dumps(before))
    assert main([*argv, "--seeds", str(tmp_path / "before.json")]) == 0  # a regrade with the recorded inputs
    assert gradebook_rows(db) == first
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [s["score"] for s in summary["students"]] == [5.0, 2.0]
    assert [s["seed"] for s in summary["students"]] == [s["seed"] for s in before["students"]]
    assert [s["checks"] for s in summary["students"]] == [s["checks"] for s in before["students"]]
    assert main([*argv, "--seeds", str(tmp_path / "nope.json")]) == 2
    assert summary["gradebook"].endswith("gradebook.db")
