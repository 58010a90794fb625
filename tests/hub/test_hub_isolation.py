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
import json
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

from rocmlab.course.course import Course
from rocmlab.hub import COURSE_ID, HubError, LocalHub, exchange, safe_copy
from rocmlab.hub.exchange_layout import ExchangeOwners, ExchangeRefused, prepare_exchange
from rocmlab.live.queue import LiveQueue
from rocmlab.sandbox.cgroups import LEARNERS, join, procs_files

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
        course=Course(world["course"]),
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
            "ROCMLAB_HUB_TMPFS_SIZE": "64M",  # each private tmpfs (issue 48: half the RAM each before)
            "ROCMLAB_HUB_SCOPE_CPU_PERCENT": "50",
            "ROCMLAB_HUB_SCOPE_MEMORY": "3G",
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
    # issue 48: learners' servers, not another instructor's (eve made a co-instructor in the hub only)
    colleague = names["eve"]
    hub.api("POST", f"/users/{colleague}")
    hub.api("POST", f"/groups/{world['groups']['instructors']}/users", {"users": [colleague]})
    try:
        assert status(f"{hub.url}/hub/api/users/{colleague}/server", "DELETE") in (403, 404)
        assert status(f"{hub.url}/hub/api/users/{names['bob']}/server", "POST") in (201, 202, 400)  # a learner's
    finally:
        hub.api("DELETE", f"/users/{colleague}")


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


# ------------------------------------------------------------------ issue 48: the services we added

TAKE_OVER = """
import socket, sys, time
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", int(sys.argv[1])))
    except PermissionError as exc:
        sys.exit(f"refused: {exc}")
    except OSError:
        sock.close()
        time.sleep(0.05)
        continue
    sock.listen()
    print("bound")
    sys.exit(0)
sys.exit("still in use")
"""

REACH = "import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])"


def live_service_process(hub):
    import psutil

    from rocmlab import processes

    found = []
    for process in processes.descendants(hub._process.pid):
        with contextlib.suppress(psutil.Error):
            if process.status() != psutil.STATUS_ZOMBIE and "rocmlab.live.service" in process.cmdline():
                found.append(process)
    assert found, "the live service is not running"
    return found[0]


def live_answers(hub, token: str) -> bool:
    request = urllib.request.Request(hub.live_url + "api/attempts", headers={"Authorization": f"token {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def test_a_learner_cannot_take_over_a_stopped_service_s_address(world, hub):
    """Issue 48, high: the live service goes down and ann binds its address at once, to serve her
    own page to an instructor. Its port is below 1024 (only root binds there), the hub's too, and
    the proxy's API is a Unix socket in root's state folder that she cannot reach."""
    ann = world["names"]["ann"]
    live_service_process(hub).kill()
    attack = as_user(ann, "/usr/bin/python3", "-c", TAKE_OVER, str(hub.live_port))
    assert attack.returncode != 0 and "refused" in attack.stderr, attack.stdout + attack.stderr
    for port in (hub.live_port, hub.internal_port):
        assert port < int(Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text())
    api_socket = hub.workdir / "hub" / "proxy-api.sock"
    assert api_socket.is_socket()
    assert as_user(ann, "/usr/bin/python3", "-c", REACH, str(api_socket)).returncode != 0
    token, deadline = hub.user_token(ann), time.monotonic() + 90  # the hub restarts its service (its poll, 30 s)
    while not live_answers(hub, token) and time.monotonic() < deadline:
        time.sleep(1)
    assert live_answers(hub, token), "the hub did not get its service back"


HUGE_NOTEBOOK = """
import json, sys
folder = sys.argv[1]
import os
os.makedirs(folder)
lines = ["a"] * 6_000_000  # about 30 MB of JSON (under the 32 MiB limit): tiny strings, costly to parse
output = {"output_type": "stream", "name": "stdout", "text": lines}
cell = {"cell_type": "code", "source": "print()", "metadata": {}, "outputs": [output], "execution_count": 1}
with open(os.path.join(folder, sys.argv[2]), "w") as out:
    json.dump({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, out)
"""


def live_submit(hub, token: str) -> tuple[int, dict]:
    request = urllib.request.Request(
        hub.live_url + "api/submit",
        data=b'{"lab": "' + LAB.encode() + b'"}',
        method="POST",
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def peak_rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))


def test_a_learners_notebook_is_parsed_by_a_child_with_a_ceiling_never_by_root(world, hub):
    """Issue 48, high: ann files a 30 MB notebook built to cost gigabytes to parse (millions of tiny
    strings; the 45 MB of the finding is over the 32 MiB limit) and asks the live service to grade it. A child of hers with a memory ceiling parses
    it and it is refused, naming the limit; nothing is queued for a root worker to parse, and the
    service's own peak memory stays small."""
    ann = world["names"]["ann"]
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    huge = hub.exchange / COURSE_ID / "inbound" / ann / f"{ann}+{LAB}+{stamp}+huge"
    made = as_user(ann, "/usr/bin/python3", "-c", HUGE_NOTEBOOK, str(huge), f"{LAB}.ipynb")
    assert made.returncode == 0, made.stderr
    try:
        service = live_service_process(hub)
        status, answer = live_submit(hub, hub.user_token(ann))
        assert status == 422 and "JSON values" in answer["error"], (status, answer)
        assert peak_rss_kib(service.pid) < 400 * 1024, peak_rss_kib(service.pid)
        assert not [a for a in LiveQueue(hub.live_queue).attempts(learner=ann)], "queued for a root worker"
    finally:
        can(ann, f'rm -rf "{huge}"')


def test_a_learners_submits_do_not_fill_roots_spool(world, hub):
    """Issue 48, medium: ann submits a small notebook beside a 64 MiB sparse file seven times (a
    new notebook each time; the rate limit is five). Only notebooks are copied into root's
    spool, a refused request copies nothing, and copies no attempt waits for are pruned."""
    ann = world["names"]["ann"]
    folder = hub.exchange / COURSE_ID / "inbound" / ann / f"{ann}+{LAB}+{datetime.now(UTC):%Y-%m-%d %H:%M:%S.%f} UTC"
    small = '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'
    can(ann, f"mkdir '{folder}' && echo '{small}' > '{folder}/{LAB}.ipynb' && truncate -s 64M '{folder}/data.bin'")
    token, statuses = hub.user_token(ann), []
    for n in range(7):  # new content each time: a byte-identical notebook is answered, not counted
        edited = small.replace('"metadata": {}', f'"metadata": {{"try": {n}}}')
        can(ann, f"echo '{edited}' > '{folder}/{LAB}.ipynb'")
        statuses.append(live_submit(hub, token)[0])
        time.sleep(0.01)
    assert statuses.count(429) >= 2, statuses
    spool = hub.workdir / "live" / "spool" / ann
    held = sum(p.stat().st_size for p in spool.rglob("*") if p.is_file())
    assert held < 2**20, f"ann's submits hold {held} bytes of root's spool"


def test_fifos_and_start_stop_cycles_leave_a_classmates_start_alone(world, hub):
    """Issue 48, medium-high: bob leaves FIFOs where the delivery reads and writes, and starts and
    stops his server in a loop. No delivery waits on a FIFO (opened without blocking: none runs
    into its timeout), each user has at most one delivery in flight, in a pool of the hub's own,
    and a stop kills the delivery under way; ann stops and starts meanwhile as usual."""
    names = world["names"]
    bob, ann = names["bob"], names["ann"]
    with contextlib.suppress(HubError):
        hub.stop_server(bob)
    lab = hub.home(bob) / LAB
    can(bob, f'rm -f "{lab}/.rocmlab-delivered.json" "{lab}/{LAB}.ipynb"')
    can(bob, f'mkfifo "{lab}/.rocmlab-delivered.json" "{lab}/{LAB}.ipynb"')
    log_before = len(hub.log_path.read_text())
    for _ in range(3):  # each cycle costs a server start here (about 15 s in CI)
        for method in ("POST", "DELETE"):
            with contextlib.suppress(HubError):
                hub.api(method, f"/users/{bob}/server")
    started = time.monotonic()
    hub.stop_server(ann)
    hub.start_server(ann)
    took = time.monotonic() - started
    log = hub.log_path.read_text()[log_before:]
    assert "no answer within" not in log, "a delivery waited on a FIFO until its timeout"
    assert took < 4 * float(os.environ.get("ROCMLAB_HUB_DELIVERY_TIMEOUT_S", "4")), took
    with contextlib.suppress(HubError):
        hub.start_server(bob)


def test_a_tmpfs_fill_and_a_cpu_storm_stay_within_the_learners_cgroup(world, hub):
    """Issue 48, medium: without systemd, ann's server and what it starts (a kernel) are in a
    cgroup of the hub's with her memory, CPU and process ceilings, bob's are not in it; filling
    her /tmp stops at its size; a CPU storm in her cgroup runs under her quota."""
    ann, bob = world["names"]["ann"], world["names"]["bob"]
    if not LEARNERS.version():
        pytest.skip("no cgroup hierarchy with memory, cpu and pids here")
    entry = pwd.getpwnam(ann)
    server = server_process(entry.pw_uid)
    assert server.pid in LEARNERS.members(ann)
    assert server_process(pwd.getpwnam(bob).pw_uid).pid not in LEARNERS.members(ann)
    folders = LEARNERS.folders(ann)
    if LEARNERS.version() == 2:
        assert (folders[0] / "cpu.max").read_text().split() == ["50000", "100000"]
        assert (folders[0] / "memory.max").read_text().strip() == str(3 * 2**30)
    else:
        assert (folders[1] / "cpu.cfs_quota_us").read_text().strip() == "50000"
        assert (folders[0] / "memory.limit_in_bytes").read_text().strip() == str(3 * 2**30)

    base, token = hub.start_server(ann), hub.user_token(ann)
    kernel = call(base, token, "POST", "api/kernels", {"name": "python3"})
    try:
        deadline = time.monotonic() + 60
        kernels = []
        while not kernels and time.monotonic() < deadline:
            kernels = [p for p in server.children(recursive=True) if "ipykernel" in " ".join(p.cmdline())]
            time.sleep(0.5)
        assert kernels and kernels[0].pid in LEARNERS.members(ann)  # inherited: nothing of hers is outside
    finally:
        call(base, token, "DELETE", f"api/kernels/{kernel['id']}")

    as_ann = ["nsenter", "-t", str(server.pid), "-m", "-S", str(entry.pw_uid), "-G", str(entry.pw_gid), "--"]
    fill = subprocess.run(
        [*as_ann, "dd", "if=/dev/zero", "of=/tmp/fill", "bs=1M", "count=200"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert fill.returncode != 0 and "No space left" in fill.stderr, fill.stderr
    subprocess.run([*as_ann, "rm", "-f", "/tmp/fill"], check=True, timeout=30)

    procs = procs_files(LEARNERS.folders(ann))
    storm = subprocess.Popen(  # started in her cgroup, as her kernel's children are
        [*as_ann, "/usr/bin/python3", "-c", "while True: pass"], preexec_fn=lambda: join(procs)
    )
    try:
        periods = LEARNERS.cpu_stat(ann).get("nr_periods", 0)
        deadline = time.monotonic() + 30
        while LEARNERS.cpu_stat(ann).get("nr_periods", 0) == periods and time.monotonic() < deadline:
            time.sleep(0.2)
        assert storm.poll() is None, "the storm did not run"
        assert storm.pid in LEARNERS.members(ann)
        # counted only under a quota (throttled too where the storm gets more than its half core;
        # on a loaded test machine it may get less, so that count is not asserted)
        assert LEARNERS.cpu_stat(ann)["nr_periods"] > periods, "her quota is not in force"
    finally:
        storm.kill()
        storm.wait(timeout=10)


DIRECT = """
import json, sys, urllib.error, urllib.request
base, token = sys.argv[1], sys.argv[2]
answers = {}
for method, path in json.loads(sys.argv[3]):
    body = json.dumps({"lab": "x", "grade_id": "y", "text_en": "forged", "text_zh": "forged"}).encode()
    request = urllib.request.Request(base + path, method=method, data=body if method == "POST" else None,
                                     headers={"Authorization": "token " + token, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            answers[path] = [response.status, response.read().decode()]
    except urllib.error.HTTPError as exc:
        answers[path] = [exc.code, exc.read().decode()]
print(json.dumps(answers))
"""
ROUTES = [
    ("GET", "api/attempts"),
    ("GET", "me/api/state"),
    ("GET", "instructor/api/state"),
    ("POST", "instructor/api/hints"),
    ("POST", "api/worker/claim"),
]


def server_token(name: str) -> str:
    """The API token in the environment of ``name``'s server (what code run in that JupyterLab reads)."""
    environ = Path(f"/proc/{server_process(pwd.getpwnam(name).pw_uid).pid}/environ").read_bytes()
    return next(v.split(b"=", 1)[1].decode() for v in environ.split(b"\0") if v.startswith(b"JUPYTERHUB_API_TOKEN="))


def direct(name: str, hub, token: str) -> dict:
    """``name`` calls the live service's own port (not the hub's proxy) on each of ``ROUTES``."""
    base = f"http://127.0.0.1:{hub.live_port}/services/rocmlab-live/"
    done = as_user(name, "/usr/bin/python3", "-c", DIRECT, base, token, json.dumps(ROUTES))
    assert done.returncode == 0, done.stderr
    return {path: (status, text) for path, (status, text) in json.loads(done.stdout).items()}


def test_the_live_services_own_port_gives_a_learners_token_her_own_data_only(world, hub):
    """ann reaches the live service's port directly, bypassing the proxy: with her server's token she
    reads her own attempts and page state, nothing of the instructor's pages or the workers' API;
    with the instructor's server token (learner code an instructor ran in their JupyterLab) she
    neither reads the room nor sends a hint: the instructor's routes want the scope only an
    instructor's browser session holds."""
    names = world["names"]
    ann, teach = names["ann"], names["teach"]
    hub.start_server(teach)
    hub.start_server(ann)
    own = direct(ann, hub, server_token(ann))
    assert own["api/attempts"][0] == 200 and json.loads(own["api/attempts"][1])["learner"] == ann
    assert own["me/api/state"][0] == 200
    for path in ("instructor/api/state", "instructor/api/hints", "api/worker/claim"):
        assert own[path][0] == 403, (path, own[path])
    stolen = direct(ann, hub, server_token(teach))
    assert json.loads(stolen["api/attempts"][1])["learner"] == teach  # the hub knows the token as teach's
    for path in ("instructor/api/state", "instructor/api/hints", "api/worker/claim"):
        assert stolen[path][0] == 403, (path, stolen[path])
    # refused by the scope rule (the service's log names it), not for want of a login
    assert "open in a browser logged in to the hub, not with an API token" in hub.log_path.read_text(errors="replace")
