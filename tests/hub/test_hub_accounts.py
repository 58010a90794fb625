"""The workshop-server mode of the hub with real Unix accounts (root only).

Throw-away Unix users (an instructor, two learners, and one outsider in neither group) are
created with homes and passwords, and always removed again. The hub runs in server mode (PAM,
one process per Unix user) inside a private mount namespace in which the closed folders on the
way to the course's interpreter are covered the way the grading sandbox does it, so the users
can run it without any change to this machine's permissions. The test checks what only real
accounts show: who may log in, the uid and limits of each server, the ownership of the
delivered files, an nbgrader exchange between different Unix users that a forged submission
cannot fool, private homes, and that nothing of the users or the hub is left afterwards.
"""

import contextlib
import grp
import hashlib
import os
import pwd
import secrets
import shutil
import ssl
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nbformat
import pytest
from test_hub_e2e import call, login_status

from rocmlab.course.course import Course
from rocmlab.hub import COURSE_ID, HubError, LocalHub, find_proxy

pytestmark = [pytest.mark.slow, pytest.mark.machine_wide]

ROOT = Path(__file__).resolve().parents[2]
LAB = "01-rocm-setup"
MEMORY, PROCESSES = "6G", 300  # not the config's defaults, so they must come through
# Runs as the launcher of jupyterhub: argv = [-c, scratch, checkout, jupyterhub, ...].
EXPOSE = (
    "import os, sys; from pathlib import Path; from rocmlab.sandbox.paths import interpreter_paths; from rocmlab.sandbox.entry import expose_paths; "
    "expose_paths([*interpreter_paths(), Path(sys.argv[2])], Path(sys.argv[1])); "
    "os.execv(sys.argv[3], sys.argv[3:])"
)
TOOLS = ("useradd", "userdel", "groupadd", "groupdel", "chpasswd", "unshare")


def _skip_unless_possible():
    if os.geteuid() != 0:
        pytest.skip("real Unix accounts: needs root")
    missing = [tool for tool in TOOLS if not shutil.which(tool)]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, timeout=20, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"unshare --mount does not work here: {probe.stderr.decode(errors='replace').strip()}")
    try:
        find_proxy(ROOT)
    except HubError as exc:
        pytest.skip(str(exc))


def _run(*command: str, stdin: str | None = None) -> None:
    proc = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {proc.stderr.strip()}")


def _processes_of(uids) -> list:
    import psutil

    found = []
    for proc in psutil.process_iter(["uids"]):
        if proc.info["uids"] and proc.info["uids"].real in uids:
            found.append(proc)
    return found


def _end_processes(uids) -> None:
    import psutil

    for _ in range(3):
        procs = _processes_of(uids)
        if not procs:
            return
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(procs, timeout=5)


@contextlib.contextmanager
def accounts(base: Path):
    """Unix users teach (instructor group), ann and bob (learner group) and eve (neither), with homes
    under ``base/homes`` and one password; removed with their homes, groups and processes on exit."""
    tag = secrets.token_hex(3)
    names = {role: f"rmlhub-{tag}-{role}" for role in ("teach", "ann", "bob", "eve")}
    # kfd: the group /dev/kfd is closed to under the slices policy, which no account is in
    groups = {"learners": f"rmlhub-{tag}-learn", "instructors": f"rmlhub-{tag}-inst", "kfd": f"rmlhub-{tag}-kfd"}
    password = secrets.token_urlsafe(12)
    homes = base / "homes"
    homes.mkdir(mode=0o755)
    made_users, made_groups = [], []
    try:
        for group in groups.values():
            _run("groupadd", group)
            made_groups.append(group)
        member = {"teach": groups["instructors"], "ann": groups["learners"], "bob": groups["learners"], "eve": ""}
        for role, name in names.items():
            _run(
                "useradd",
                "--create-home",
                "--home-dir",
                str(homes / name),
                "--shell",
                "/bin/sh",
                "--user-group",
                *(["--groups", member[role]] if member[role] else []),
                name,
            )
            made_users.append(name)
        _run("chpasswd", stdin="".join(f"{name}:{password}\n" for name in names.values()))
        yield names, groups, password
    finally:
        uids = set()
        for name in made_users:
            with contextlib.suppress(KeyError):
                uids.add(pwd.getpwnam(name).pw_uid)
        _end_processes(uids)
        problems = []
        for name in made_users:
            proc = subprocess.run(
                ["userdel", "--remove", name], capture_output=True, text=True, timeout=60, check=False
            )
            if proc.returncode not in (0, 12):  # 12: home already gone / mail spool missing
                problems.append(f"userdel {name}: {proc.stderr.strip()}")
        for group in made_groups:
            proc = subprocess.run(["groupdel", group], capture_output=True, text=True, timeout=60, check=False)
            if proc.returncode != 0:
                problems.append(f"groupdel {group}: {proc.stderr.strip()}")
        if problems:
            raise RuntimeError("; ".join(problems))


def server_process(uid: int):
    """The single-user server (jupyterhub-singleuser) running as ``uid``."""
    found = [p for p in _processes_of({uid}) if "jupyterhub-singleuser" in _command_line(p)]
    assert len(found) == 1, [_command_line(p) for p in found]
    return found[0]


def _command_line(proc) -> str:
    """The process's command line; "" for one that has ended or is a zombie (a server's short-lived child)."""
    import psutil

    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


def limits(pid: int) -> dict:
    """Soft limits from /proc/<pid>/limits, by name ("Max processes": "300")."""
    table = {}
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines()[1:]:
        name, soft = line[:26].strip(), line[26:47].strip()
        table[name] = soft
    return table


def device_nodes(base: Path) -> list[Path]:
    """base/dev/kfd (root:render-like group, 0666 as ROCm's udev rule makes it) and the render
    nodes of the recorded node, renderD128-191: character devices with /dev/null's numbers."""
    (base / "dev" / "dri").mkdir(parents=True)
    for folder in (base / "dev", base / "dev" / "dri"):
        folder.chmod(0o755)
    null = os.stat("/dev/null").st_rdev
    os.mknod(base / "dev" / "kfd", 0o666 | stat.S_IFCHR, null)
    (base / "dev" / "kfd").chmod(0o666)
    nodes = []
    for minor in range(128, 192):
        node = base / "dev" / "dri" / f"renderD{minor}"
        os.mknod(node, 0o660 | stat.S_IFCHR, null)
        node.chmod(0o666)  # open to all until the hub closes them: the test then shows it did
        nodes.append(node)
    return nodes


def supplementary_groups(pid: int) -> set[int]:
    status = Path(f"/proc/{pid}/status").read_text()
    return {int(g) for g in next(line for line in status.splitlines() if line.startswith("Groups:")).split()[1:]}


def opens(name: str, path: Path) -> bool:
    """Whether ``name`` (with their groups, no *_VISIBLE_DEVICES) can open ``path`` read-write."""
    return as_user(name, "sh", "-c", ': <> "$0"', str(path)).returncode == 0


def as_user(name: str, *command: str) -> subprocess.CompletedProcess:
    entry = pwd.getpwnam(name)
    return subprocess.run(
        command,
        user=entry.pw_uid,
        group=entry.pw_gid,
        extra_groups=os.getgrouplist(name, entry.pw_gid),  # the user's Unix groups, as at a login
        cwd="/",
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def owner(path: Path) -> str:
    return pwd.getpwuid(path.stat().st_uid).pw_name


AUTOGRADE_ATTACK = (  # a learner's cell: proof it ran, left in the home of whoever ran it
    "import getpass, pathlib; (pathlib.Path.home() / f'autograded-as-{getpass.getuser()}').write_text('x')"
)


def submit_as(hub: LocalHub, name: str, marker: str, code: str = "") -> None:
    """``name`` fetches the lab, writes ``marker`` (and a cell of ``code``) into it and submits it,
    through its server's APIs."""
    base, token = hub.start_server(name), hub.user_token(name)
    fetched = call(base, token, "POST", "assignments/fetch", form={"course_id": COURSE_ID, "assignment_id": LAB})
    assert [(a["assignment_id"], a["status"]) for a in fetched["value"]] == [(LAB, "fetched")], fetched
    path = f"{COURSE_ID}/{LAB}/{LAB}.ipynb"
    nb = nbformat.from_dict(call(base, token, "GET", f"api/contents/{path}?content=1")["content"])
    nb.cells.append(nbformat.v4.new_markdown_cell(marker))
    if code:
        nb.cells.append(nbformat.v4.new_code_cell(code))
    call(base, token, "PUT", f"api/contents/{path}", {"type": "notebook", "format": "json", "content": nb})
    submitted = call(base, token, "POST", "assignments/submit", form={"course_id": COURSE_ID, "assignment_id": LAB})
    assert submitted["success"], submitted


def forge_submission(hub: LocalHub, forger: str, victim: str) -> None:
    """``forger`` tries to put a newer submission under ``victim``'s name into the exchange: the
    class's inbound and the victim's folder refuse it; the forger's own folder takes it."""
    stamp = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    inbound = hub.exchange / COURSE_ID / "inbound"
    for where in (inbound, inbound / victim, inbound / forger):
        folder = where / f"{victim}+{LAB}+{stamp}+forged"
        script = (
            f'mkdir "{folder}" && echo "{stamp}" > "{folder}/timestamp.txt" && echo FORGED > "{folder}/{LAB}.ipynb"'
        )
        proc = as_user(forger, "sh", "-c", script)
        assert (proc.returncode == 0) == (where == inbound / forger), (where, proc.stderr)


def link_submission(hub: LocalHub, learner: str, target: Path) -> None:
    """``learner`` files a submission of their own whose notebook is a symlink to ``target``."""
    stamp = (datetime.now(UTC) + timedelta(hours=2)).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    folder = hub.exchange / COURSE_ID / "inbound" / learner / f"{learner}+{LAB}+{stamp}+linked"
    script = f'mkdir "{folder}" && echo "{stamp}" > "{folder}/timestamp.txt" && ln -s "{target}" "{folder}/{LAB}.ipynb"'
    proc = as_user(learner, "sh", "-c", script)
    assert proc.returncode == 0, proc.stderr


def course_copy(base: Path) -> Path:
    """The course as a workshop server installs it (``git clone`` leaves it world-readable), with a
    git history and executed results that hold answers; its .venv is this checkout's."""
    course = base / "course"
    for folder in ("labs", "autograder", "env", "solutions"):
        shutil.copytree(ROOT / folder, course / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (course / ".venv").symlink_to(ROOT / ".venv")
    for name, text in ((".git/objects/ab/cdef", "git history"), ("results/local/lab.ipynb", "executed answers")):
        (course / name).parent.mkdir(parents=True)
        (course / name).write_text(text)
    for path in [course, *course.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
    return course


def test_workshop_server_mode_with_real_accounts(monkeypatch):
    _skip_unless_possible()
    import psutil

    monkeypatch.setenv("ROCMLAB_HUB_MEM_LIMIT", MEMORY)
    monkeypatch.setenv("ROCMLAB_HUB_MAX_PROCESSES", str(PROCESSES))
    monkeypatch.setenv("ROCMLAB_HUB_CULL_IDLE_S", "0")
    started = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="rmlhub-", dir="/var/lib"))  # not /tmp: each server gets its own
    scratch = Path(tempfile.mkdtemp(prefix="rmlhub-mounts-"))  # root-only: the namespace's bind bookkeeping
    base.chmod(0o755)
    # GPU slices on a recorded MI300X node in CPX/NPS4, its render nodes made with mknod under base/dev
    monkeypatch.setenv("ROCMLAB_HUB_GPU_POLICY", "slices")
    monkeypatch.setenv("ROCMLAB_HUB_MACHINE", str(ROOT / "tests" / "fixtures" / "machines" / "mi300x-cpx-nps4"))
    monkeypatch.setenv("ROCMLAB_HUB_DEV_ROOT", str(base))
    monkeypatch.delenv("ROCR_VISIBLE_DEVICES", raising=False)
    render_nodes = device_nodes(base)
    uids, marker = set(), ""
    try:
        with accounts(base) as (names, groups, password):
            teach, ann, bob, eve = (names[role] for role in ("teach", "ann", "bob", "eve"))
            uids = {pwd.getpwnam(name).pw_uid for name in names.values()}
            monkeypatch.setenv("ROCMLAB_HUB_KFD_GROUP", groups["kfd"])
            kfd_gid = grp.getgrnam(groups["kfd"]).gr_gid
            launcher = [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                sys.executable,
                "-c",
                EXPOSE,
                str(scratch),
                str(ROOT),
            ]
            course = course_copy(base)
            hub = LocalHub(
                base / "hub",
                demo=False,
                learners=(ann, bob),
                instructors=(teach,),
                labs=(LAB,),
                learner_group=groups["learners"],
                instructor_group=groups["instructors"],
                launcher=launcher,
                check_install=False,
                timeout_s=120,
                course=Course(course),
                ip="",  # every address: TLS with a self-signed certificate, trusted below by its file only
            )
            monkeypatch.setattr(
                ssl, "_create_default_https_context", lambda: ssl.create_default_context(cafile=hub.tls_cert)
            )
            marker = hub.marker
            with hub:
                assert hub.url.startswith("https://")
                served = ssl.get_server_certificate(("127.0.0.1", hub.port))
                assert hashlib.sha256(
                    ssl.PEM_cert_to_DER_cert(served)
                ).hexdigest().upper() == hub.tls_fingerprint.replace(":", "")
                with pytest.raises(OSError):  # no plain HTTP on the public port
                    urllib.request.urlopen(f"http://127.0.0.1:{hub.port}/hub/login", timeout=10).read()
                assert login_status(hub, ann, password) == 302
                assert login_status(hub, ann, password + "x") == 403
                assert login_status(hub, eve, password) == 403  # a real account, but in neither group

                teacher = hub.start_server(teach)
                for name in (teach, ann, bob):
                    hub.start_server(name)
                    entry = pwd.getpwnam(name)
                    server = server_process(entry.pw_uid)
                    assert server.uids().real == server.uids().effective == entry.pw_uid
                    assert server.gids().real == entry.pw_gid
                    table = limits(server.pid)
                    assert table["Max processes"] == str(PROCESSES), table
                    assert table["Max address space"] == str(6 * 2**30), table
                    delivered = hub.home(name) / LAB
                    assert (delivered / f"{LAB}.ipynb").is_file()
                    assert {owner(p) for p in [delivered, *delivered.rglob("*")]} == {name}
                    assert hub.home(name).stat().st_mode & 0o077 == 0, oct(hub.home(name).stat().st_mode)
                # each learner holds a different slice; the other's (and a free one) cannot be opened
                held = {
                    name: [n for n in render_nodes if n.stat().st_uid == pwd.getpwnam(name).pw_uid]
                    for name in (ann, bob)
                }
                assert len(held[ann]) == len(held[bob]) == 1 and held[ann] != held[bob], held
                free = next(n for n in render_nodes if n not in held[ann] + held[bob])
                assert (free.stat().st_uid, free.stat().st_mode & 0o777) == (0, 0o600)
                assert not [n for n in render_nodes if n.stat().st_uid == pwd.getpwnam(teach).pw_uid]
                for name, other in ((ann, bob), (bob, ann)):
                    assert opens(name, held[name][0]) and not opens(name, free)
                    assert not opens(name, held[other][0])
                    # /dev/kfd: her server's (its group), not her login's
                    assert not opens(name, base / "dev" / "kfd")
                    assert kfd_gid in supplementary_groups(server_process(pwd.getpwnam(name).pw_uid).pid)
                assert kfd_gid not in supplementary_groups(server_process(pwd.getpwnam(teach).pw_uid).pid)
                for secret in (f"solutions/{LAB}/lab.py", ".git/objects/ab/cdef", "results/local/lab.ipynb"):
                    assert as_user(ann, "cat", str(course / secret)).returncode != 0, secret
                    assert as_user(teach, "cat", str(course / secret)).returncode == 0, secret  # graders read it
                assert as_user(ann, "cat", str(course / "solutions" / LAB / "lab.toml")).returncode == 0
                source = hub.home(teach) / "course" / "source" / LAB / f"{LAB}.ipynb"
                assert owner(source) == owner(source.parent.parent) == teach
                assert not (hub.home(ann) / "course").exists()

                token = hub.user_token(teach)
                for step in ("assign", "release"):
                    result = call(teacher, token, "POST", f"formgrader/api/assignment/{LAB}/{step}")
                    assert result["success"], (step, result)
                released = hub.exchange / COURSE_ID / "outbound" / LAB / f"{LAB}.ipynb"
                assert owner(released) == teach
                mark = f"answer of ann {secrets.token_hex(4)}"
                submit_as(hub, ann, mark, code=AUTOGRADE_ATTACK)
                inbound = list((hub.exchange / COURSE_ID / "inbound" / ann).glob(f"{ann}+{LAB}+*"))
                assert [owner(p) for p in inbound] == [ann]
                forge_submission(hub, bob, ann)
                link_submission(hub, bob, source)  # bob cannot read it; the instructor's collect could

                assert as_user(bob, "cat", str(hub.home(ann) / LAB / f"{LAB}.ipynb")).returncode != 0
                assert as_user(bob, "ls", str(hub.home(ann) / COURSE_ID)).returncode != 0
                assert as_user(ann, "ls", str(hub.home(ann) / COURSE_ID / LAB)).returncode == 0

                detached = subprocess.Popen(  # a learner's process that left the server's session
                    ["sleep", "600"], user=pwd.getpwnam(bob).pw_uid, start_new_session=True
                )
                hub.stop_server(bob)
                assert detached.wait(timeout=30) is not None  # ended with bob's server
                assert server_process(pwd.getpwnam(teach).pw_uid)  # instructors' servers untouched
                assert (held[bob][0].stat().st_uid, held[bob][0].stat().st_mode & 0o777) == (0, 0o600)
                assert not opens(bob, held[bob][0])  # the slice went back with the server

                collected = call(teacher, token, "POST", f"formgrader/api/assignment/{LAB}/collect")
                assert collected["success"], collected
                assert "not collected" in collected.get("log", ""), collected  # the forgery, named
                assert "is a symbolic link" in collected.get("log", ""), collected  # the link, named
                submitted = hub.home(teach) / "course" / "submitted"
                assert sorted(p.name for p in submitted.iterdir()) == [ann]
                text = (submitted / ann / LAB / f"{LAB}.ipynb").read_text()
                assert mark in text and "FORGED" not in text
                assert not any("BEGIN SOLUTION" in p.read_text() for p in submitted.rglob("*.ipynb"))

                # issue 48: the formgrader's Autograde would run ann's cell as teach, unsandboxed
                graded = call(teacher, token, "POST", f"formgrader/api/submission/{LAB}/{ann}/autograde")
                assert not graded["success"], graded
                assert "rocmlab" in graded.get("log", "") + graded.get("error", ""), graded  # how to grade
                assert not list(hub.home(teach).glob("autograded-as-*")), "ann's code ran as teach"
            assert not _processes_of(uids), [_command_line(p) for p in _processes_of(uids)]
        for name in names.values():
            with pytest.raises(KeyError):
                pwd.getpwnam(name)
            assert not (base / "homes" / name).exists()
        for group in groups.values():
            with pytest.raises(KeyError):
                grp.getgrnam(group)
    finally:
        _end_processes(uids)
        shutil.rmtree(base, ignore_errors=True)
        for mount in scratch.glob("keep*"):  # only bound inside the namespace: empty here
            mount.rmdir()
        scratch.rmdir()
    left = [p.cmdline() for p in psutil.process_iter() if _of(p, marker)]
    assert not left, left
    print(f"hub with real accounts: {time.monotonic() - started:.1f} s")


def _of(proc, marker: str) -> bool:
    try:
        return bool(marker) and proc.environ().get("ROCMLAB_HUB_ID") == marker
    except Exception:  # noqa: BLE001 (gone or not readable)
        return False
