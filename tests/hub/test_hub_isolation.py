"""The workshop server shares nothing writable between learners (issue 33), with real Unix accounts.

The attacks of a learner with a login and a terminal, each against the hub of
tests/hub/test_hub_accounts.py (server mode, PAM, TLS, one process per Unix user), here run by the
learners ``ann`` and ``bob``, the instructor ``teach`` and the outsider ``eve`` of that test:

- reading the hub's log, a classmate's submission or feedback, or replacing them;
- making ``exchange/<course>`` (or any exchange folder) before the hub or the instructor does;
- swapping one's submission for a link to the instructor's source while the collect copies it;
- pointing the instructor's ``~/course/source`` at a folder of root's;
- planting code in a classmate's torch.compile cache under /tmp;
- leaving processes behind a server that exited on its own;
- stalling the hub with a FIFO in one's home;
- an instructor acting as a learner through the hub.

The accounts and the hub are made once for the module (starting a hub with real accounts takes a
minute here); every test removes nothing the others need. Homes, the course and the hub's data
live under /var/lib (not /tmp, which each server gets empty and of its own).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from test_hub_accounts import (
    EXPOSE,
    LAB,
    _end_processes,
    _skip_unless_possible,
    accounts,
    as_user,
    course_copy,
    server_process,
    submit_as,
)
from test_hub_e2e import call

from rocmlab.hub import COURSE_ID, HubError, LocalHub, exchange, safe_copy
from rocmlab.hub.exchange_layout import ExchangeOwners, ExchangeRefused, prepare_exchange

pytestmark = [pytest.mark.slow, pytest.mark.machine_wide]
BASE = Path("/var/lib")


@pytest.fixture(scope="module")
def world():
    """The accounts and a course copy, in a folder of root's outside /tmp."""
    _skip_unless_possible()
    base = Path(tempfile.mkdtemp(prefix="rmlhub-iso-", dir=BASE))
    base.chmod(0o755)
    uids = set()
    try:
        with accounts(base) as (names, groups, password):
            uids.update(pwd.getpwnam(name).pw_uid for name in names.values())
            yield {"base": base, "names": names, "groups": groups, "password": password, "course": course_copy(base)}
    finally:
        _end_processes(uids)
        shutil.rmtree(base, ignore_errors=True)


def launcher(scratch: Path) -> list[str]:
    return ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", EXPOSE, str(scratch), str(ROOT)]


ROOT = Path(__file__).resolve().parents[2]


def make_hub(world, data: Path, scratch: Path, **options) -> LocalHub:
    names, groups = world["names"], world["groups"]
    return LocalHub(
        data,
        demo=False,
        learners=(names["ann"], names["bob"]),
        instructors=(names["teach"],),
        labs=(LAB,),
        learner_group=groups["learners"],
        instructor_group=groups["instructors"],
        launcher=launcher(scratch),
        check_install=False,
        root=world["course"],
        **options,
    )


@pytest.fixture(scope="module")
def hub(world):
    names = world["names"]
    scratch = Path(tempfile.mkdtemp(prefix="rmlhub-mounts-"))
    source_target = world["base"] / "root-owned"  # what teach will aim ~/course/source at
    source_target.mkdir(mode=0o755)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {
            "ROCMLAB_HUB_CULL_IDLE_S": "0",
            "ROCMLAB_HUB_POLL_S": "2",
            "ROCMLAB_HUB_DELIVERY_TIMEOUT_S": "4",
        }.items():
            patch.setenv(name, value)
        instance = make_hub(world, world["base"] / "hub", scratch, timeout_s=150, ip="")
        patch.setattr(
            ssl, "_create_default_https_context", lambda: ssl.create_default_context(cafile=instance.tls_cert)
        )
        try:
            with instance:
                for name in (names["teach"], names["ann"], names["bob"]):
                    instance.start_server(name)
                yield instance
        finally:
            _end_processes({pwd.getpwnam(name).pw_uid for name in names.values()})
            for mount in scratch.glob("keep*"):
                mount.rmdir()
            scratch.rmdir()


def cannot(name: str, script: str) -> None:
    proc = as_user(name, "sh", "-c", script)
    assert proc.returncode != 0, f"{name} could: {script}\n{proc.stdout}"


def can(name: str, script: str) -> str:
    proc = as_user(name, "sh", "-c", script)
    assert proc.returncode == 0, f"{name} could not: {script}\n{proc.stderr}"
    return proc.stdout


# ------------------------------------------------------------------ without a hub: the exchange's folders


def test_a_course_folder_squatted_in_an_old_exchange_stops_the_hub(world, tmp_path):
    """Finding 2: an exchange made world-writable by an older hub, where ann made ``rocmlab/`` first
    (a fake lab in its outbound/). The hub refuses to start and names the folder."""
    ann = world["names"]["ann"]
    data = world["base"] / "squatted"
    (data / "exchange").mkdir(parents=True)
    (data / "exchange").chmod(0o1777)
    can(
        ann,
        f"mkdir -p {data}/exchange/{COURSE_ID}/outbound/{LAB} && echo fake > {data}/exchange/{COURSE_ID}/outbound/{LAB}/{LAB}.ipynb",
    )
    scratch = Path(tempfile.mkdtemp(prefix="rmlhub-mounts-"))
    try:
        with pytest.raises(HubError, match="owned by uid"):
            with make_hub(world, data, scratch, timeout_s=60):
                pass
    finally:
        for mount in scratch.glob("keep*"):
            mount.rmdir()
        scratch.rmdir()
    assert (data / "exchange").stat().st_mode & 0o002 == 0  # closed by the hub before it refused
    uid = pwd.getpwnam(ann).pw_uid
    with pytest.raises(ExchangeRefused, match=f"owned by uid {uid}"):
        prepare_exchange(data, COURSE_ID, ExchangeOwners(0, 0), {})


def test_a_learners_folder_owned_by_a_classmate_stops_the_hub(world):
    names = world["names"]
    data = world["base"] / "borrowed"
    data.mkdir()
    ann, bob = (pwd.getpwnam(names[who]).pw_uid for who in ("ann", "bob"))
    prepare_exchange(data, COURSE_ID, ExchangeOwners(0, 0), {names["ann"]: ann})
    os.chown(data / "exchange" / COURSE_ID / "inbound" / names["ann"], bob, -1)  # as if bob had made it
    with pytest.raises(ExchangeRefused, match=f"owned by uid {bob}"):
        prepare_exchange(data, COURSE_ID, ExchangeOwners(0, 0), {names["ann"]: ann})


def test_the_collect_race_with_a_real_learner(world, tmp_path, monkeypatch):
    """Finding 3: ann swaps her whole submission folder for a link to the instructor's solution while
    the collect copies it (here at a chosen moment instead of by inotify). The collect, even as root,
    copies only what was in her folder when it opened it, or refuses."""
    names = world["names"]
    ann = names["ann"]
    data = world["base"] / "race"
    data.mkdir()
    entry = pwd.getpwnam(ann)
    prepare_exchange(data, COURSE_ID, ExchangeOwners(0, 0), {ann: entry.pw_uid})
    secret = world["base"] / "race-solution"
    secret.mkdir(mode=0o755)
    (secret / f"{LAB}.ipynb").write_text("BEGIN SOLUTION the answer")
    (secret / "timestamp.txt").write_text("2026-01-01 00:00:00.000000 UTC")
    mine = data / "exchange" / COURSE_ID / "inbound" / ann
    folder = mine / f"{ann}+{LAB}+2026-01-01 00:00:00.000000 UTC+r"
    can(ann, f'mkdir "{folder}" && echo "my own work" > "{folder}/{LAB}.ipynb" && echo x > "{folder}/z.txt"')
    real_file, swapped = safe_copy.TreeCopy._file, []

    def swap(self, fd, name, dest, path):
        real_file(self, fd, name, dest, path)
        if dest is not None and not swapped:
            can(ann, f'mv "{folder}" "{mine}/away" && ln -s "{secret}" "{folder}"')
            swapped.append(name)

    monkeypatch.setattr(safe_copy.TreeCopy, "_file", swap)
    from test_hub_exchange import nbgrader_config

    coursedir, config = nbgrader_config(tmp_path, monkeypatch, assignment_id=LAB, course_id=COURSE_ID)
    config.Exchange.root = str(data / "exchange")
    config.LearnerFolderCollect.owner_is_account = True
    exchange.LearnerFolderCollect(coursedir=coursedir, config=config).start()
    assert swapped and folder.is_symlink()
    collected = tmp_path / "course" / "submitted" / ann / LAB
    assert (collected / f"{LAB}.ipynb").read_text() == "my own work\n"
    # a second collect sees the link itself and refuses it; what was collected stays hers
    monkeypatch.setattr(safe_copy.TreeCopy, "_file", real_file)
    exchange.LearnerFolderCollect(coursedir=coursedir, config=config).start()
    assert "the answer" not in "".join(p.read_text() for p in collected.rglob("*") if p.is_file())


# ------------------------------------------------------------------ on the hub


def test_the_hub_log_is_private_and_each_server_logs_to_its_own_file(world, hub):
    """Finding 1 (the log that named every submission folder)."""
    names = world["names"]
    assert hub.log_path.stat().st_mode & 0o777 == 0o600 and hub.log_path.stat().st_uid == 0
    cannot(names["ann"], f"cat {hub.log_path}")
    for name in (names["ann"], names["bob"], names["teach"]):
        log = hub.home(name) / ".rocmlab-server.log"
        assert log.stat().st_uid == pwd.getpwnam(name).pw_uid and log.stat().st_mode & 0o077 == 0
        assert "ServerApp" in log.read_text()
    assert "ServerApp" not in hub.log_path.read_text()  # the servers' own lines are not in the hub's log


def test_no_learner_can_make_or_write_a_shared_exchange_folder(world, hub):
    """Finding 2: nothing in the exchange is writable by every user; a learner's two folders are theirs."""
    names = world["names"]
    root = hub.exchange
    world_writable = [p for p in [root, *root.rglob("*")] if not p.is_symlink() and p.lstat().st_mode & 0o002]
    assert not world_writable
    for where in (
        root,
        root / COURSE_ID,
        root / COURSE_ID / "outbound",
        root / COURSE_ID / "inbound",
        root / COURSE_ID / "feedback",
        root.parent / "exchange-views",
        root.parent / "exchange-views" / names["ann"],
    ):
        cannot(names["ann"], f"mkdir {where}/squat")
    cannot(names["ann"], f"mkdir {root.parent}/exchange-views/{names['ann']}/{COURSE_ID}/x")
    cannot(names["ann"], f"ln -sfn /tmp {root.parent}/exchange-views/{names['ann']}/{COURSE_ID}/inbound")
    cannot(names["ann"], f"ls {root / COURSE_ID / 'inbound'}")  # not even the classmates' names
    can(names["ann"], f"touch {root / COURSE_ID / 'inbound' / names['ann'] / 'mine'}")


def test_a_classmate_can_neither_read_nor_replace_a_submission_or_its_feedback(world, hub):
    """Finding 1: bob reads and replaces ann's submission and feedback; and the collect's time."""
    names = world["names"]
    ann, bob, teach = names["ann"], names["bob"], names["teach"]
    teacher, token = f"{hub.url}/user/{teach}/", hub.user_token(teach)
    for step in ("assign", "release"):
        result = call(teacher, token, "POST", f"formgrader/api/assignment/{LAB}/{step}")
        assert result["success"], (step, result)
    submit_as(hub, ann, "ann's answer")
    inbound = hub.exchange / COURSE_ID / "inbound" / ann
    (submitted,) = [p for p in inbound.iterdir() if p.name.startswith(f"{ann}+{LAB}+")]
    assert submitted.stat().st_uid == pwd.getpwnam(ann).pw_uid
    for script in (
        f'ls "{inbound}"',
        f'cat "{submitted}/{LAB}.ipynb"',
        f'echo replaced > "{submitted}/{LAB}.ipynb"',
        f'mv "{submitted}" "{inbound}/gone"',
        f'mkdir "{inbound}/{ann}+{LAB}+2099-01-01 00:00:00.000000 UTC+x"',
    ):
        cannot(bob, script)
    feedback = hub.exchange / COURSE_ID / "feedback" / ann
    can(teach, f'echo "feedback for ann" > "{feedback}/page.html" && chmod 644 "{feedback}/page.html"')
    assert can(ann, f'cat "{feedback}/page.html"') == "feedback for ann\n"
    cannot(bob, f'ls "{feedback}"')
    cannot(bob, f'cat "{feedback}/page.html"')
    cannot(bob, f'echo x > "{feedback}/page.html"')
    # ann backdates a copy by its name: the collected time is the file system's
    late = f"{ann}+{LAB}+2020-01-01 00:00:00.000000 UTC+old"
    copied_at = datetime.now(UTC).replace(tzinfo=None)
    can(
        ann,
        f'cp -r "{submitted}" "{inbound}/{late}" && echo 2020-01-01 00:00:00.000000 UTC > "{inbound}/{late}/timestamp.txt"',
    )
    collected = call(teacher, token, "POST", f"formgrader/api/assignment/{LAB}/collect")
    assert collected["success"], collected
    copy = hub.home(teach) / "course" / "submitted" / ann / LAB
    assert "ann's answer" in (copy / f"{LAB}.ipynb").read_text()
    from nbgrader.utils import parse_utc

    recorded = parse_utc((copy / "timestamp.txt").read_text())
    assert recorded >= copied_at - timedelta(seconds=1), recorded  # the copy's time, not 2020's


def test_an_instructor_cannot_act_as_a_learner_through_the_hub(world, hub):
    """Finding 10: instructors have a role of their own, not the hub's admin."""
    names = world["names"]
    token = hub.user_token(names["teach"])

    def status(url: str, method: str = "GET") -> int:
        request = urllib.request.Request(url, method=method, headers={"Authorization": f"token {token}"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code

    assert status(f"{hub.url}/hub/api/users") == 200  # the class list, who runs what
    assert status(f"{hub.url}/hub/api/users/{names['ann']}/tokens", "POST") == 403
    assert status(f"{hub.url}/user/{names['ann']}/api/contents") in (403, 404)  # not ann's files
    user = call(f"{hub.url}/hub/", token, "GET", f"api/users/{names['teach']}")
    assert user["admin"] is False


def test_each_server_has_its_own_tmp_and_caches_no_classmate_writes(world, hub):
    """Finding 5: ann plants code in bob's torch.compile cache under /tmp."""
    names = world["names"]
    ann, bob = names["ann"], names["bob"]
    can(ann, f"mkdir -p /tmp/torchinductor_{bob} && echo planted > /tmp/torchinductor_{bob}/x.py")
    try:
        server = server_process(pwd.getpwnam(bob).pw_uid)
        tmp = Path(f"/proc/{server.pid}/root/tmp")
        assert not (tmp / f"torchinductor_{bob}").exists()
        assert tmp.stat().st_mode & 0o7777 == 0o1777
        mounts = Path(f"/proc/{server.pid}/mountinfo").read_text().splitlines()
        for private in [f for f in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock") if os.path.isdir(f)]:
            assert any(line.split()[4] == private and " tmpfs " in line for line in mounts), (private, mounts)
        env = dict(
            item.split("=", 1) for item in Path(f"/proc/{server.pid}/environ").read_text().split("\0") if "=" in item
        )
        home = str(hub.home(bob))
        for name in ("TMPDIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "HF_MODULES_CACHE", "XDG_CACHE_HOME"):
            assert env[name].startswith(home + "/"), (name, env[name])
            cannot(ann, f'mkdir -p "{env[name]}/x" || exit 1; touch "{env[name]}/x/y"')
        assert Path(env["TMPDIR"]).is_dir() and Path(env["TMPDIR"]).stat().st_uid == pwd.getpwnam(bob).pw_uid
    finally:
        shutil.rmtree(f"/tmp/torchinductor_{bob}", ignore_errors=True)


def test_the_processes_of_a_server_that_exited_on_its_own_are_ended(world, hub):
    """Finding 6: bob ends his own server; what he started in the background goes with it."""
    bob = world["names"]["bob"]
    uid = pwd.getpwnam(bob).pw_uid
    detached = subprocess.Popen(["sleep", "600"], user=uid, start_new_session=True)
    try:
        can(bob, f"kill -9 {server_process(uid).pid}")
        assert detached.wait(timeout=60) is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and hub.api("GET", f"/users/{bob}").get("servers"):
            time.sleep(0.5)
        assert not hub.api("GET", f"/users/{bob}").get("servers")
    finally:
        with contextlib.suppress(ProcessLookupError):
            detached.kill()


def test_a_fifo_in_a_home_stalls_neither_the_hub_nor_the_start(world, hub):
    """Finding 7: a FIFO where the delivery reads blocks that delivery (for its timeout), in a
    thread; the hub answers meanwhile."""
    names = world["names"]
    bob = names["bob"]
    hub.stop_server(bob)
    manifest = hub.home(bob) / LAB / ".rocmlab-delivered.json"
    can(bob, f'rm -f "{manifest}" && mkfifo "{manifest}"')
    notebook = hub.home(bob) / LAB / f"{LAB}.ipynb"
    can(bob, f'rm -f "{notebook}" && mkfifo "{notebook}"')
    hub.api("POST", f"/users/{bob}/server")
    slowest, started = 0.0, time.monotonic()
    while time.monotonic() < started + 6:
        before = time.monotonic()
        hub.api("GET", f"/users/{names['ann']}")
        slowest = max(slowest, time.monotonic() - before)
        time.sleep(0.2)
    assert slowest < 2, slowest
    hub.start_server(bob)  # started after the delivery gave up
    assert "not delivered" in hub.log_path.read_text()


def test_root_never_writes_where_the_instructor_points_course_source(world, hub):
    """Finding 4: teach aims ~/course/source at a folder of root's; the sources are written as teach."""
    teach = world["names"]["teach"]
    target = world["base"] / "root-owned"
    hub.stop_server(teach)
    home = hub.home(teach)
    can(
        teach,
        f'mv "{home}/course" "{home}/course-old" && mkdir "{home}/course" && ln -s "{target}" "{home}/course/source"',
    )
    hub.start_server(teach)
    assert list(target.iterdir()) == []
    assert "course sources not written" in hub.log_path.read_text()
