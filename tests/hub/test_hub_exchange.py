"""The hub's nbgrader exchange steps refuse what a cheating learner puts in the exchange.

Real nbgrader collect and release_feedback run on a temporary exchange in the per-learner layout
(``inbound/<learner>/``, ``feedback/<learner>/``): a submission holding a symlink to the
instructor's source is refused (nbgrader's own copytree follows it), a folder swapped for a link
while the collect copies fails it, the folder names the student, the submission's time is the one
the file system recorded (not the one in its name), and a folder with an odd name is skipped
instead of ending the collect for the class. tests/hub/test_hub_isolation.py does the same with real
Unix accounts.
"""

from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path

import pytest

from rocmlab.hub import exchange, safe_copy

STAMP = "2026-01-0{day} 00:00:00.000000 UTC"
pytestmark = pytest.mark.usefixtures("alembic_head_in_process")  # each collect opens a new gradebook


def me() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def submission(inbound: Path, student: str, day: int, text: str = "", folder: str | None = None) -> Path:
    """A submission of ``student`` in the inbound folder of ``folder`` (default: the student's)."""
    path = inbound / (folder or student) / f"{student}+lab+{STAMP.format(day=day)}+r{day}"
    path.mkdir(parents=True)
    (path / "timestamp.txt").write_text(STAMP.format(day=day))
    (path / "lab.ipynb").write_text(text or f"{student} day {day}")
    return path


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


def collect(tmp_path, monkeypatch, **options) -> Path:
    (tmp_path / "exchange" / "c" / "inbound").mkdir(parents=True, exist_ok=True)
    coursedir, config = nbgrader_config(tmp_path, monkeypatch)
    step = exchange.LearnerFolderCollect(coursedir=coursedir, config=config)
    for key, value in options.items():
        setattr(step, key, value)
    step.start()
    return tmp_path / "course" / "submitted"


@pytest.fixture
def solution(tmp_path) -> Path:
    secret = tmp_path / "instructor" / "source" / "lab.ipynb"
    secret.parent.mkdir(parents=True)
    secret.write_text("BEGIN SOLUTION the answer")
    return secret


def collected_text(submitted: Path) -> str:
    return "".join(p.read_text() for p in submitted.rglob("*") if p.is_file()) if submitted.exists() else ""


def inbound_of(tmp_path) -> Path:
    return tmp_path / "exchange" / "c" / "inbound"


def test_a_notebook_linked_to_the_solution_is_not_collected(tmp_path, monkeypatch, solution, caplog):
    folder = submission(inbound_of(tmp_path), me(), 1)
    (folder / "lab.ipynb").unlink()
    (folder / "lab.ipynb").symlink_to(solution)
    submitted = collect(tmp_path, monkeypatch)
    assert "the answer" not in collected_text(submitted)
    assert not (submitted / me()).exists()
    assert "is a symbolic link" in caplog.text and "not collected" in caplog.text


def test_a_submission_folder_that_is_a_link_is_not_collected(tmp_path, monkeypatch, solution, caplog):
    mine = inbound_of(tmp_path) / me()
    mine.mkdir(parents=True)
    (solution.parent / "timestamp.txt").write_text(STAMP.format(day=1))
    (mine / f"{me()}+lab+{STAMP.format(day=1)}+r1").symlink_to(solution.parent)
    submitted = collect(tmp_path, monkeypatch)
    assert "the answer" not in collected_text(submitted)
    assert "not collected" in caplog.text


def test_a_learners_inbound_folder_that_is_a_link_is_not_collected(tmp_path, monkeypatch, solution, caplog):
    elsewhere = tmp_path / "elsewhere"
    submission(elsewhere, me(), 1, text="BEGIN SOLUTION the answer")
    inbound_of(tmp_path).mkdir(parents=True)
    (inbound_of(tmp_path) / me()).symlink_to(elsewhere / me())
    submitted = collect(tmp_path, monkeypatch)
    assert "the answer" not in collected_text(submitted)
    assert "not collected" in caplog.text


def test_a_linked_folder_inside_a_submission_is_not_collected(tmp_path, monkeypatch, solution):
    folder = submission(inbound_of(tmp_path), me(), 1)
    (folder / "data").symlink_to(solution.parent, target_is_directory=True)
    submitted = collect(tmp_path, monkeypatch)
    assert "the answer" not in collected_text(submitted)


def test_a_fifo_in_a_submission_is_refused_without_blocking(tmp_path, monkeypatch, caplog):
    folder = submission(inbound_of(tmp_path), me(), 1)
    os.mkfifo(folder / "pipe")
    submitted = collect(tmp_path, monkeypatch)
    assert not (submitted / me()).exists()
    assert "not a regular file" in caplog.text


def test_a_clean_submission_is_collected_whole(tmp_path, monkeypatch):
    folder = submission(inbound_of(tmp_path), me(), 1, text="my work")
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
    with pytest.raises(safe_copy.UnsafeSubmission, match="symbolic link"):
        safe_copy.copy_without_links(str(src), str(tmp_path / "dest"))
    (tmp_path / "link-to-src").symlink_to(src)
    with pytest.raises(safe_copy.UnsafeSubmission, match="a link"):
        safe_copy.copy_without_links(str(tmp_path / "link-to-src"), str(tmp_path / "dest2"))


# ------------------------------------------------------------------ swapped during the copy (finding 3)


def test_a_submission_swapped_for_a_link_during_the_copy_yields_only_the_learners_files(
    tmp_path, monkeypatch, solution
):
    """The collect holds a descriptor of the folder it copies: renaming it away and putting a link to
    the instructor's source in its place after the copy began changes nothing it reads."""
    folder = submission(inbound_of(tmp_path), me(), 1, text="my own work")
    (folder / "z-last.txt").write_text("z")
    real_file = safe_copy.TreeCopy._file
    swapped = []

    def swap_after_first_file(self, fd, name, dest, path):
        real_file(self, fd, name, dest, path)
        if dest is not None and not swapped:  # the copy itself (not the look before it) has begun
            folder.rename(folder.with_name("moved-away"))
            folder.symlink_to(solution.parent, target_is_directory=True)
            swapped.append(name)

    monkeypatch.setattr(safe_copy.TreeCopy, "_file", swap_after_first_file)
    submitted = collect(tmp_path, monkeypatch)
    assert swapped
    assert "the answer" not in collected_text(submitted)
    assert (submitted / me() / "lab" / "lab.ipynb").read_text() == "my own work"


def test_a_sub_folder_swapped_for_a_link_during_the_copy_fails_it(tmp_path, monkeypatch, solution, caplog):
    folder = submission(inbound_of(tmp_path), me(), 1)
    (folder / "z-data").mkdir()  # copied after lab.ipynb (names in order)
    (folder / "z-data" / "x.csv").write_text("1")
    real_file = safe_copy.TreeCopy._file

    def swap(self, fd, name, dest, path):
        real_file(self, fd, name, dest, path)
        if dest is not None and not (folder / "z-data").is_symlink():
            (folder / "z-data").rename(folder / "data-away")
            (folder / "z-data").symlink_to(solution.parent, target_is_directory=True)

    monkeypatch.setattr(safe_copy.TreeCopy, "_file", swap)
    submitted = collect(tmp_path, monkeypatch)
    assert (folder / "z-data").is_symlink()
    assert "the answer" not in collected_text(submitted)
    assert not (submitted / me() / "lab").exists()  # refused whole, nothing half-copied
    assert "not collected" in caplog.text


# ------------------------------------------------------------------ names and times (finding 9)


def test_odd_folder_names_are_skipped_and_the_class_is_still_collected(tmp_path, monkeypatch, caplog):
    inbound = inbound_of(tmp_path)
    submission(inbound, "bob", 1, text="bob's work")
    odd_names = ["ann+lab", "ann+lab+not a time+x", "+lab+", "ann+lab+++", "ann+lab+9999-99-99 99:99:99 UTC"]
    odd_names += [os.fsdecode(b"ann+lab+\xff\xfe"), "ann+lab+2026-01-01 00:00:00.000000 UTC\n", "a" * 255]
    for odd in odd_names:
        (inbound / "ann" / odd).mkdir(parents=True)
    submission(inbound, "ann", 2, text="ann's work")
    (inbound / "we ird").mkdir()  # not a user name
    (inbound / "file").write_text("x")
    submitted = collect(tmp_path, monkeypatch)
    assert (submitted / "bob" / "lab" / "lab.ipynb").read_text() == "bob's work"
    assert (submitted / "ann" / "lab" / "lab.ipynb").read_text() == "ann's work"


def test_the_time_of_a_submission_is_the_file_systems_not_its_name(tmp_path, monkeypatch):
    """A learner backdates a late submission by its folder name and its timestamp.txt: the collected
    timestamp.txt holds when the files last changed."""
    before = datetime.datetime.now(datetime.UTC).replace(tzinfo=None) - datetime.timedelta(seconds=5)
    folder = submission(inbound_of(tmp_path), me(), 1)  # named 2026-01-01, written now
    os.utime(folder / "lab.ipynb", (0, 0))  # mtime can be set back; ctime cannot
    submitted = collect(tmp_path, monkeypatch)
    from nbgrader.utils import parse_utc

    recorded = parse_utc((submitted / me() / "lab" / "timestamp.txt").read_text())
    assert recorded >= before, recorded


def test_the_newest_submission_is_chosen_by_its_recorded_time(tmp_path, monkeypatch):
    first = submission(inbound_of(tmp_path), me(), 9, text="older, named later")
    import time

    time.sleep(0.05)
    submission(inbound_of(tmp_path), me(), 1, text="newer, named earlier")
    assert first.exists()
    submitted = collect(tmp_path, monkeypatch)
    assert (submitted / me() / "lab" / "lab.ipynb").read_text() == "newer, named earlier"


# ------------------------------------------------------------------ one folder per learner


def test_each_learners_folder_names_the_student(tmp_path, monkeypatch, caplog):
    inbound = inbound_of(tmp_path)
    submission(inbound, "ann", 1, text="ann's first")
    import time

    time.sleep(0.05)
    submission(inbound, "ann", 2, text="ann's second")
    submission(inbound, "bob", 3, text="forged by ann", folder="ann")  # she may write any name in hers
    submission(inbound, "bob", 1, text="bob's own")
    submitted = collect(tmp_path, monkeypatch)
    assert sorted(p.name for p in submitted.iterdir()) == ["ann", "bob"]
    assert (submitted / "ann" / "lab" / "lab.ipynb").read_text() == "ann's second"
    assert (submitted / "bob" / "lab" / "lab.ipynb").read_text() == "bob's own"
    assert "filed under bob in the inbound folder of ann" in caplog.text


def test_feedback_is_released_into_each_learners_own_folder(tmp_path, monkeypatch):
    from nbgrader.utils import notebook_hash

    coursedir, config = nbgrader_config(tmp_path, monkeypatch)
    released = tmp_path / "exchange" / "c" / "feedback"
    released.mkdir(parents=True)
    planted = tmp_path / "instructor-file"
    planted.write_text("the instructor's")
    for student in ("ann", "bob"):
        feedback = tmp_path / "course" / "feedback" / student / "lab"
        feedback.mkdir(parents=True)
        (feedback / "lab.html").write_text(f"feedback of {student}")
        (feedback / "timestamp.txt").write_text(STAMP.format(day=1))
        (feedback / "submission_secret.txt").write_text(f"secret-{student}")
    (released / "ann").mkdir()
    page = f"{notebook_hash(secret='secret-ann', notebook_id='lab')}.html"
    (released / "ann" / page).symlink_to(planted)  # ann plants a link where her page will go
    exchange.LearnerFolderReleaseFeedback(coursedir=coursedir, config=config).start()
    for student in ("ann", "bob"):
        page = released / student / f"{notebook_hash(secret=f'secret-{student}', notebook_id='lab')}.html"
        assert page.read_text() == f"feedback of {student}" and not page.is_symlink()
    assert planted.read_text() == "the instructor's"  # the link was replaced, never followed
    assert sorted(p.name for p in released.iterdir()) == ["ann", "bob"]  # nothing shared by the class


def test_the_exchange_steps_never_ask_for_a_world_writable_root(tmp_path, monkeypatch):
    root = tmp_path / "exchange"
    (root / "c" / "outbound").mkdir(parents=True)
    root.chmod(0o755)
    coursedir, config = nbgrader_config(tmp_path, monkeypatch)
    release = tmp_path / "course" / "release" / "lab"
    release.mkdir(parents=True)
    (release / "lab.ipynb").write_text("{}")
    exchange.CourseReleaseAssignment(coursedir=coursedir, config=config).start()
    assert root.stat().st_mode & 0o777 == 0o755  # nbgrader's own release makes it 777
    assert (root / "c" / "outbound" / "lab" / "lab.ipynb").read_text() == "{}"
