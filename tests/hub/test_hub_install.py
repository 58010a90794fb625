"""A workshop server's course checkout: learners read what their servers need, never the answers.

A small course tree (solutions with lab.toml, a git history, executed results, built labs) is
closed by ``rocmlab.hub.install.close_course`` and read as ``nobody`` (root only).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from rocmlab.hub.install import close_course


def _nobody():
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        return None


pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or _nobody() is None, reason="reading as another user needs root and a `nobody` account"
)


def as_nobody(*command: str) -> subprocess.CompletedProcess:
    entry = _nobody()
    return subprocess.run(
        command, user=entry.pw_uid, group=entry.pw_gid, extra_groups=[], capture_output=True, text=True, timeout=30
    )


@pytest.fixture
def course():
    root = Path(tempfile.mkdtemp(prefix="rmlcourse-"))
    root.chmod(0o755)
    files = {
        "solutions/01-x/lab.toml": 'id = "01-x"',
        "solutions/01-x/lab.py": "answer = 42  # BEGIN SOLUTION",
        "solutions/01-x/data/hidden_tests.csv": "secret",
        "solutions/README.md": "sources",
        ".git/objects/ab/cdef": "every past solution",
        "results/local/01-x.ipynb": "executed solution",
        "tests/fixtures/course/solutions/01-x/lab.py": "a copy of an answer",
        "labs/en/01-x/01-x.ipynb": "student notebook",
        "autograder/nbgrader_config.py": "c = get_config()",
        "env/jupyterhub/nbgrader_config.py": "c = get_config()",
        "src/rocmlab/__init__.py": "",
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for path in [root, *root.rglob("*")]:  # what `git clone` with umask 022 leaves
        path.chmod(0o755 if path.is_dir() else 0o644)
    yield root
    shutil.rmtree(root)


def test_learners_cannot_read_answers_history_or_results(course):
    assert as_nobody("cat", str(course / "solutions/01-x/lab.py")).returncode == 0  # today's clone: open
    close_course(course, "root")
    for secret in (
        "solutions/01-x/lab.py",
        "solutions/01-x/data/hidden_tests.csv",
        "solutions/README.md",
        ".git/objects/ab/cdef",
        "results/local/01-x.ipynb",
        "tests/fixtures/course/solutions/01-x/lab.py",
    ):
        proc = as_nobody("cat", str(course / secret))
        assert proc.returncode != 0 and "secret" not in proc.stdout, secret
    assert as_nobody("ls", str(course / "solutions/01-x")).returncode != 0  # lab folders are not listable
    assert as_nobody("ls", str(course / ".git")).returncode != 0


def test_learners_still_read_what_their_servers_need(course):
    close_course(course, "root")
    for needed in (
        "labs/en/01-x/01-x.ipynb",
        "autograder/nbgrader_config.py",
        "env/jupyterhub/nbgrader_config.py",
        "src/rocmlab/__init__.py",
        "solutions/01-x/lab.toml",
    ):
        assert as_nobody("cat", str(course / needed)).returncode == 0, needed
    listed = as_nobody("ls", str(course / "solutions")).stdout.split()
    assert "01-x" in listed  # so that rocmlab check finds solutions/*/lab.toml


def test_the_instructor_group_reads_everything_closed(course):
    close_course(course, "root")
    for path in (course / "solutions/01-x/lab.py", course / ".git/objects/ab/cdef", course / "results"):
        status = path.stat()
        assert status.st_gid == 0 and status.st_mode & 0o040, path
        assert not status.st_mode & 0o007, oct(status.st_mode)


def test_links_in_the_checkout_are_not_followed(course, tmp_path):
    outside = tmp_path / "outside"
    outside.write_text("x")
    outside.chmod(0o644)
    (course / "results" / "link").symlink_to(outside)
    close_course(course, "root")
    assert outside.stat().st_mode & 0o777 == 0o644


def test_a_lab_added_while_the_hub_runs_is_closed_within_the_interval(course):
    """Finding 10: the checkout was closed at hub start only; a lab pulled in later kept git's
    world-readable mode until the next start."""
    from rocmlab.hub.install import keep_closed

    close_course(course, "root")
    hub = subprocess.Popen(["sleep", "3"])
    try:
        added = course / "solutions" / "02-y" / "lab.py"
        added.parent.mkdir(mode=0o755)
        added.write_text("answer = 7  # BEGIN SOLUTION")
        added.chmod(0o644)
        (course / "solutions" / "02-y" / "lab.toml").write_text('id = "02-y"')
        (course / "solutions" / "02-y" / "lab.toml").chmod(0o644)
        assert as_nobody("cat", str(added)).returncode == 0  # open, as git leaves it
        assert keep_closed(hub, course, "root", every_s=0.5) == 0
    finally:
        hub.kill()
    proc = as_nobody("cat", str(added))
    assert proc.returncode != 0 and "answer" not in proc.stdout
    assert as_nobody("cat", str(course / "solutions" / "02-y" / "lab.toml")).returncode == 0
