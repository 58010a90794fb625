"""Claims on grader users: two runs never hold the same one, a crashed run's users are free again
(swept first), and a lock folder anyone else could write is refused."""

import os
import subprocess
import sys

import pytest

from rocmlab.processes import is_root
from rocmlab.sandbox import grader_users
from rocmlab.sandbox.grader_users import UnsafeLockFolder, claim_users, lock_folder, release_users

pytestmark = pytest.mark.skipif(not is_root(), reason="the lock folder must be root's: claims are made as root")

FAKE_UID = 3_900_000  # no real user: nothing of anyone's is swept


@pytest.fixture
def swept(monkeypatch):
    """No user is created and no process killed: the uids each sweep was asked for."""
    asked = []
    monkeypatch.setattr(grader_users, "ensure_user", lambda index: (FAKE_UID + index, FAKE_UID + index))
    monkeypatch.setattr(grader_users.processes, "kill_user", asked.append)
    return asked


def test_two_claims_get_different_users_and_a_release_frees_them(tmp_path, swept):
    first = claim_users(3, tmp_path)
    second = claim_users(2, tmp_path)
    assert [u.index for u in first] == [0, 1, 2]
    assert [u.index for u in second] == [3, 4]
    assert (tmp_path / "rocmlab-grader-0.lock").read_text() == f"{os.getpid()}\n"
    release_users(first)
    again = claim_users(4, tmp_path)
    assert [u.index for u in again] == [0, 1, 2, 5]
    release_users([*second, *again])
    assert swept.count(FAKE_UID) == 4  # swept when claimed and when released, each time


def _holder(tmp_path, index):
    """Another process holding user ``index``'s lock, as a grading run does."""
    script = (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(tmp_path / f'rocmlab-grader-{index}.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    return proc


def test_a_user_another_process_holds_is_skipped_until_that_process_dies(tmp_path, swept):
    holder = _holder(tmp_path, 0)
    try:
        held = claim_users(1, tmp_path)
        assert [u.index for u in held] == [1]
    finally:
        holder.kill()
        holder.wait(10)
    swept.clear()
    recovered = claim_users(1, tmp_path)
    assert [u.index for u in recovered] == [0]
    assert swept == [FAKE_UID]  # what the dead holder left running as it is killed first
    release_users([*held, *recovered])


@pytest.mark.parametrize("mode", [0o777, 0o720, 0o702])
def test_a_lock_folder_others_can_write_is_refused(tmp_path, mode):
    folder = tmp_path / "locks"
    folder.mkdir()
    folder.chmod(mode)
    with pytest.raises(UnsafeLockFolder, match=str(folder)):
        lock_folder(folder)


def test_a_lock_folder_owned_by_another_user_or_a_symlink_is_refused(tmp_path):
    folder = tmp_path / "locks"
    folder.mkdir(mode=0o700)
    os.chown(folder, 65534, 65534)
    with pytest.raises(UnsafeLockFolder, match="owned by root"):
        lock_folder(folder)
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(UnsafeLockFolder, match="link"):
        lock_folder(tmp_path / "link")


def test_a_missing_lock_folder_is_made_root_only(tmp_path):
    folder = lock_folder(tmp_path / "run" / "locks")
    assert oct(folder.stat().st_mode & 0o777) == oct(0o700)
