"""A release in the workshop server's exchange is its instructor's (issue 48, low: instructors could
replace each other's releases), with real Unix accounts.

The accounts of tests/hub/test_hub_accounts.py: ``teach`` (instructor), ``ann`` (learner) and ``eve``,
made a co-instructor here. The exchange is the hub's (``prepare_exchange`` as root); each release is
nbgrader's step ``rocmlab.hub.exchange.CourseReleaseAssignment`` run as the instructor.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import tempfile
from pathlib import Path

import pytest
from test_hub_accounts import _run, _skip_unless_possible, accounts, as_user

from rocmlab.hub.exchange import CourseReleaseAssignment
from rocmlab.hub.exchange_layout import ExchangeOwners, prepare_exchange

pytestmark = pytest.mark.machine_wide
COURSE = "c"


def release(course: Path, root: Path, text: str, force: bool) -> None:
    """nbgrader's release of ``course``'s lab ``lab`` into the exchange ``root``, as this process."""
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    source = course / "release" / "lab"
    source.mkdir(parents=True, exist_ok=True)
    (source / "lab.ipynb").write_text(text)
    config = Config()
    config.CourseDirectory.root = str(course)
    config.CourseDirectory.course_id = COURSE
    config.CourseDirectory.assignment_id = "lab"
    config.Exchange.root = str(root)
    config.ExchangeReleaseAssignment.force = force
    CourseReleaseAssignment(coursedir=CourseDirectory(config=config), config=config).start()


def as_account(name: str, function, *args) -> tuple[int, str]:
    """``function(*args)`` in a child of this process that became ``name`` (uid, gid, groups, HOME):
    (0, "") or (1, the error). A fork, since the test's interpreter under /root is not theirs to run."""
    entry = pwd.getpwnam(name)
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 1
        try:
            os.close(reader)
            os.setgroups(os.getgrouplist(name, entry.pw_gid))
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)
            os.environ["HOME"] = entry.pw_dir
            function(*args)
            status = 0
        except BaseException as exc:  # noqa: BLE001 (reported to the parent)
            os.write(writer, f"{type(exc).__name__}: {exc}".encode())
        finally:
            os._exit(status)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        message = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), message


@pytest.fixture(scope="module")
def class_exchange():
    _skip_unless_possible()
    base = Path(tempfile.mkdtemp(prefix="rmlhub-rel-", dir="/var/lib"))
    base.chmod(0o755)
    try:
        with accounts(base) as (names, groups, _):
            _run("usermod", "--append", "--groups", groups["instructors"], names["eve"])  # a co-instructor
            data = base / "hub"
            data.mkdir(mode=0o755)
            owners = ExchangeOwners(uid=0, gid=grp.getgrnam(groups["instructors"]).gr_gid)
            root = prepare_exchange(data, COURSE, owners, {})
            yield names, root
    finally:
        shutil.rmtree(base, ignore_errors=True)


def release_as(name: str, root: Path, text: str, force: bool = False) -> tuple[int, str]:
    return as_account(name, release, Path(pwd.getpwnam(name).pw_dir) / "course", root, text, force)


def test_a_co_instructor_can_neither_replace_nor_change_anothers_release(class_exchange):
    names, root = class_exchange
    outbound = root / COURSE / "outbound"
    released = outbound / "lab" / "lab.ipynb"
    first = release_as(names["teach"], root, "teach's lab")
    assert first == (0, ""), first
    assert released.read_text() == "teach's lab"

    status, error = release_as(names["eve"], root, "eve's lab", force=True)
    assert status != 0 and f"released by {names['teach']}" in error, error
    for attack in (
        f"rm -rf {outbound}/lab",  # the kernel's sticky-folder rule
        f"mv {outbound}/lab {outbound}/old",
        f"echo eve > {released}",
        f"touch {outbound}/lab/extra.ipynb",
        f"chmod 777 {outbound}/lab",
    ):
        assert as_user(names["eve"], "sh", "-c", attack).returncode != 0, attack
    assert released.read_text() == "teach's lab"
    assert sorted(p.name for p in outbound.iterdir()) == ["lab"]
    assert sorted(p.name for p in (outbound / "lab").iterdir()) == ["lab.ipynb"]
    assert as_user(names["ann"], "cat", str(released)).stdout == "teach's lab"  # learners read it


def test_an_instructor_replaces_their_own_release_and_root_may_hand_it_over(class_exchange):
    names, root = class_exchange
    released = root / COURSE / "outbound" / "lab" / "lab.ipynb"
    if not released.exists():
        assert release_as(names["teach"], root, "teach's lab") == (0, "")
    again = release_as(names["teach"], root, "teach's lab, fixed", force=True)
    assert again == (0, ""), again
    assert released.read_text() == "teach's lab, fixed"
    assert release_as(names["ann"], root, "ann's lab", force=True)[0] != 0  # a learner releases nothing
    _run("chown", "-R", names["eve"], str(released.parent))  # root hands the release over
    handed = release_as(names["eve"], root, "eve's lab", force=True)
    assert handed == (0, ""), handed
    assert released.read_text() == "eve's lab"
