"""The hub's nbgrader exchange steps refuse what a cheating learner puts in the exchange.

Real nbgrader collect and release_feedback run on a temporary exchange: a submission holding a
symlink to the instructor's source is refused (nbgrader's own copytree follows it), and the
per-learner layout of the Kubernetes hub names the student by the folder, not by the file name.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from rocmlab.hub import exchange

STAMP = "2026-01-0{day} 00:00:00.000000 UTC"


def submission(inbound: Path, student: str, day: int, text: str = "") -> Path:
    folder = inbound / f"{student}+lab+{STAMP.format(day=day)}+r{day}"
    folder.mkdir(parents=True)
    (folder / "timestamp.txt").write_text(STAMP.format(day=day))
    (folder / "lab.ipynb").write_text(text or f"{student} day {day}")
    return folder


def nbgrader_config(tmp_path: Path, monkeypatch, **coursedir):
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    (tmp_path / "course").mkdir(exist_ok=True)
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))  # alembic
    config = Config()
    config.CourseDirectory.root = str(tmp_path / "course")
    config.CourseDirectory.course_id = "c"
    config.CourseDirectory.assignment_id = "lab"
    for key, value in coursedir.items():
        setattr(config.CourseDirectory, key, value)
    config.Exchange.root = str(tmp_path / "exchange")
    return CourseDirectory(config=config), config


def collect(tmp_path, monkeypatch, step=exchange.OwnerCheckedCollect, caplog=None) -> Path:
    coursedir, config = nbgrader_config(tmp_path, monkeypatch)
    step(coursedir=coursedir, config=config).start()
    return tmp_path / "course" / "submitted"


def me() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


@pytest.fixture
def solution(tmp_path) -> Path:
    secret = tmp_path / "instructor" / "source" / "lab.ipynb"
    secret.parent.mkdir(parents=True)
    secret.write_text("BEGIN SOLUTION the answer")
    return secret


def collected_text(submitted: Path) -> str:
    return "".join(p.read_text() for p in submitted.rglob("*") if p.is_file()) if submitted.exists() else ""


def test_a_notebook_linked_to_the_solution_is_not_collected(tmp_path, monkeypatch, solution, caplog):
    inbound = tmp_path / "exchange" / "c" / "inbound"
    folder = submission(inbound, me(), 1)
    (folder / "lab.ipynb").unlink()
    (folder / "lab.ipynb").symlink_to(solution)
    submitted = collect(tmp_path, monkeypatch)
    assert "the answer" not in collected_text(submitted)
    assert not (submitted / me()).exists()
    assert "is a symbolic link" in caplog.text and "not collected" in caplog.text


def test_a_submission_folder_that_is_a_link_is_not_collected(tmp_path, monkeypatch, solution, caplog):
    inbound = tmp_path / "exchange" / "c" / "inbound"
    inbound.mkdir(parents=True)
    (solution.parent / "timestamp.txt").write_text(STAMP.format(day=1))
    (inbound / f"{me()}+lab+{STAMP.format(day=1)}+r1").symlink_to(solution.parent)
    submitted = collect(tmp_path, monkeypatch)
    assert "the answer" not in collected_text(submitted)
    assert "is a symbolic link" in caplog.text


def test_a_linked_folder_inside_a_submission_is_not_collected(tmp_path, monkeypatch, solution):
    folder = submission(tmp_path / "exchange" / "c" / "inbound", me(), 1)
    (folder / "data").symlink_to(solution.parent, target_is_directory=True)
    submitted = collect(tmp_path, monkeypatch)
    assert "the answer" not in collected_text(submitted)


def test_a_fifo_in_a_submission_is_refused_without_blocking(tmp_path, monkeypatch, caplog):
    folder = submission(tmp_path / "exchange" / "c" / "inbound", me(), 1)
    os.mkfifo(folder / "pipe")
    submitted = collect(tmp_path, monkeypatch)
    assert not (submitted / me()).exists()
    assert "not a regular file" in caplog.text


def test_a_clean_submission_is_collected_whole(tmp_path, monkeypatch):
    folder = submission(tmp_path / "exchange" / "c" / "inbound", me(), 1, text="my work")
    (folder / "data").mkdir()
    (folder / "data" / "x.csv").write_text("1,2")
    submitted = collect(tmp_path, monkeypatch)
    assert (submitted / me() / "lab" / "lab.ipynb").read_text() == "my work"
    assert (submitted / me() / "lab" / "data" / "x.csv").read_text() == "1,2"


def test_the_copy_never_opens_a_link(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "ok").write_text("x")
    (src / "link").symlink_to(src / "ok")
    with pytest.raises(exchange.UnsafeSubmission, match="symbolic link"):
        exchange.copy_without_links(str(src), str(tmp_path / "dest"))
    with pytest.raises(exchange.UnsafeSubmission, match="replaced by a link"):
        exchange.copy_regular_file(str(src / "link"), str(tmp_path / "out"))


# ------------------------------------------------------------------ one folder per learner (Kubernetes)


def test_each_learners_folder_names_the_student(tmp_path, monkeypatch, caplog):
    inbound = tmp_path / "exchange" / "c" / "inbound"
    submission(inbound / "ann", "ann", 1, text="ann's first")
    submission(inbound / "ann", "ann", 2, text="ann's second")
    submission(inbound / "ann", "bob", 3, text="forged by ann")  # her pod: she may write any name
    submission(inbound / "bob", "bob", 1, text="bob's own")
    submitted = collect(tmp_path, monkeypatch, step=exchange.LearnerFolderCollect)
    assert sorted(p.name for p in submitted.iterdir()) == ["ann", "bob"]
    assert (submitted / "ann" / "lab" / "lab.ipynb").read_text() == "ann's second"
    assert (submitted / "bob" / "lab" / "lab.ipynb").read_text() == "bob's own"
    assert "filed under bob in the inbound folder of ann" in caplog.text


def test_learner_folders_refuse_links_too(tmp_path, monkeypatch, solution):
    folder = submission(tmp_path / "exchange" / "c" / "inbound" / "ann", "ann", 1)
    (folder / "lab.ipynb").unlink()
    (folder / "lab.ipynb").symlink_to(solution)
    submitted = collect(tmp_path, monkeypatch, step=exchange.LearnerFolderCollect)
    assert "the answer" not in collected_text(submitted)


def test_feedback_is_released_into_each_learners_own_folder(tmp_path, monkeypatch):
    from nbgrader.utils import notebook_hash

    coursedir, config = nbgrader_config(tmp_path, monkeypatch)
    (tmp_path / "exchange" / "c").mkdir(parents=True)
    for student in ("ann", "bob"):
        feedback = tmp_path / "course" / "feedback" / student / "lab"
        feedback.mkdir(parents=True)
        (feedback / "lab.html").write_text(f"feedback of {student}")
        (feedback / "timestamp.txt").write_text(STAMP.format(day=1))
        (feedback / "submission_secret.txt").write_text(f"secret-{student}")
    exchange.LearnerFolderReleaseFeedback(coursedir=coursedir, config=config).start()
    released = tmp_path / "exchange" / "c" / "feedback"
    for student in ("ann", "bob"):
        page = released / student / f"{notebook_hash(secret=f'secret-{student}', notebook_id='lab')}.html"
        assert page.read_text() == f"feedback of {student}"
    assert sorted(p.name for p in released.iterdir()) == ["ann", "bob"]  # nothing shared by the class
