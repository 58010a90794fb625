"""The hub's config per mode, its spawners and the ``rocmlab hub`` command, without starting a hub."""

import argparse
import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote

import pytest
from traitlets.config.loader import PyFileConfigLoader

from rocmlab import hub, processes
from rocmlab.course.course import Course
from rocmlab.errors import InputError, LabError
from rocmlab.hub import exchange as rocmlab_exchange
from rocmlab.hub import launch as hub_launch
from rocmlab.hub import loopback, server_child, setup_checks
from rocmlab.hub import spawner as rocmlab_spawner
from rocmlab.hub.settings import LiveWorkers

ROOT = Path(__file__).resolve().parents[2]
HUB_DIR = ROOT / "env" / "jupyterhub"
FIXTURE_COURSE = Path(__file__).parents[1] / "fixtures" / "course"

HUB_VARIABLES = [name for name in os.environ if name.startswith("ROCMLAB_")]


def load(path: Path, monkeypatch, **variables):
    for name in HUB_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, str(value))
    return PyFileConfigLoader(path.name, path=str(path.parent)).load_config()


def hub_config(monkeypatch, tmp_path, checked=False, **variables):
    variables.setdefault("ROCMLAB_HUB_IP", "127.0.0.1")  # beyond loopback needs TLS (test_hub_tls.py)
    if not checked:  # these run in /tmp, without the Unix groups: the refusal has its own tests below
        monkeypatch.setattr(setup_checks, "problems", lambda *_: [])
    return load(HUB_DIR / "jupyterhub_config.py", monkeypatch, ROCMLAB_HUB_DATA=tmp_path / "data", **variables)


# ------------------------------------------------------------------ jupyterhub_config.py


def test_a_server_s_services_listen_where_no_learner_can_bind(monkeypatch, tmp_path):
    """Issue 48: the proxy's API on a Unix socket in root's state folder; the hub and the live
    service on ports only root binds; a port any account could bind is refused, naming the fix."""
    c = hub_config(monkeypatch, tmp_path, ROCMLAB_HUB_INTERNAL_PORT=881, ROCMLAB_LIVE_PORT=1011)
    assert c.ConfigurableHTTPProxy.api_url == "http+unix://" + quote(
        str(tmp_path / "data" / "hub" / "proxy-api.sock"), safe=""
    )
    assert c.JupyterHub.hub_port == 881
    assert "tmpfs_max" not in c.CourseSpawner  # a quarter of the memory ceiling (CourseSpawner.tmpfs_size)
    assert hub_config(monkeypatch, tmp_path, ROCMLAB_HUB_TMPFS_SIZE="64M").CourseSpawner.tmpfs_max == "64M"
    with pytest.raises(ValueError, match=r"ROCMLAB_LIVE_PORT=10101: any account may bind.*below 1024"):
        hub_config(monkeypatch, tmp_path, ROCMLAB_LIVE_PORT=10101)
    with pytest.raises(ValueError, match="ROCMLAB_HUB_INTERNAL_PORT=8081"):
        hub_config(monkeypatch, tmp_path, ROCMLAB_HUB_INTERNAL_PORT=8081)
    assert c.JupyterHub.bind_url.endswith(":443")  # the proxy's public port: only root binds it either
    with pytest.raises(ValueError, match="ROCMLAB_HUB_PORT=8000: any account may bind"):
        hub_config(monkeypatch, tmp_path, ROCMLAB_HUB_PORT=8000)
    assert loopback.open_ports({"X": 600}, start=0) == [
        "X=600: any account may bind 127.0.0.1:600 while the service is down "
        "(net.ipv4.ip_unprivileged_port_start=0); choose a port below 0 and "
        "`sysctl net.ipv4.ip_unprivileged_port_start=1024`"
    ]
    demo = hub_config(monkeypatch, tmp_path, ROCMLAB_HUB_MODE="demo", ROCMLAB_HUB_PASSWORD="s3cret-pw")
    assert demo.ConfigurableHTTPProxy.api_url.startswith("http://127.0.0.1:")  # one account: nothing to guard


def test_a_proxy_older_than_5_is_refused_for_a_workshop_server(tmp_path):
    """configurable-http-proxy 4 has no --api-socket: the hub would not start; say so up front."""
    for version, refused in (("4.6.3", True), ("5.3.0", False)):
        package = tmp_path / version / "configurable-http-proxy"
        (package / "bin").mkdir(parents=True)
        (package / "package.json").write_text(json.dumps({"name": "configurable-http-proxy", "version": version}))
        (package / "bin" / "configurable-http-proxy").write_text("#!/bin/sh\n")
        if refused:
            with pytest.raises(hub.HubError, match="configurable-http-proxy 4.6.3 .* needs 5 or later"):
                hub_launch.check_proxy_version(package / "bin" / "configurable-http-proxy")
        else:
            hub_launch.check_proxy_version(package / "bin" / "configurable-http-proxy")
    hub_launch.check_proxy_version(tmp_path / "nowhere")  # unknown: not checked


def test_a_set_up_that_weakens_isolation_is_refused_at_start(monkeypatch, tmp_path):
    """Issue 48: a cache (or the checkout, the data, a home) under /tmp would leave every server's
    /tmp shared; a group that does not exist leaves the wrong people in charge. Both are refused,
    each named with its fix."""
    with pytest.raises(ValueError) as refused:
        hub_config(
            monkeypatch,
            tmp_path,
            checked=True,
            ROCMLAB_CACHE="/tmp/rocmlab-cache",
            ROCMLAB_HUB_LEARNER_GROUP="no-such-group-48",
        )
    message = str(refused.value)
    assert "the course model cache (ROCMLAB_CACHE) /tmp/rocmlab-cache is under /tmp" in message
    assert f"the hub's data (ROCMLAB_HUB_DATA) {tmp_path / 'data'} is under /tmp" in message
    assert "ROCMLAB_HUB_LEARNER_GROUP='no-such-group-48': no such Unix group (`groupadd no-such-group-48`" in message
    assert "Move it out of /tmp" in message
    assert setup_checks.temp_problems({"a home": "/home/ann", "the data": "/srv/hub"}) == []
    assert setup_checks.temp_problems({"a cache": "/dev/shm/x"})[0].startswith("a cache /dev/shm/x is under /dev/shm")


def test_demo_mode_is_a_shared_password_on_loopback(monkeypatch, tmp_path):
    monkeypatch.delenv("SUDO_USER", raising=False)
    c = hub_config(
        monkeypatch,
        tmp_path,
        ROCMLAB_HUB_MODE="demo",
        ROCMLAB_HUB_IP="0.0.0.0",
        ROCMLAB_HUB_PORT=8123,
        ROCMLAB_HUB_PASSWORD="s3cret",
        ROCMLAB_HUB_INSTRUCTORS="ann,bob",
        ROCMLAB_HUB_LABS="01-rocm-setup",
    )
    assert c.JupyterHub.bind_url == "http://127.0.0.1:8123"
    assert c.JupyterHub.authenticator_class == "shared-password"
    assert c.SharedPasswordAuthenticator.user_password == "s3cret"
    assert c.JupyterHub.spawner_class == "rocmlab.hub.spawner.DemoCourseSpawner"
    assert c.JupyterHub.load_groups == {"instructors": {"users": ["ann", "bob"]}}
    assert c.DemoCourseSpawner.max_processes == 0
    assert c.DemoCourseSpawner.home_dir_template == str(tmp_path / "data" / "homes" / "{username}")
    assert c.CourseSpawner.labs == ["01-rocm-setup"]
    assert "--ServerApp.allow_root=True" not in c.Spawner.args  # never a learner as root
    assert c.DemoCourseSpawner.run_as == ("nobody" if os.geteuid() == 0 else "")


def test_server_mode_uses_pam_accounts_and_limits(monkeypatch, tmp_path):
    c = hub_config(
        monkeypatch,
        tmp_path,
        ROCMLAB_HUB_IP="10.0.0.5",
        ROCMLAB_HUB_INSECURE_HTTP=1,
        ROCMLAB_HUB_MEM_LIMIT="6G",
        ROCMLAB_HUB_INSTRUCTOR_GROUP="teachers",
        ROCMLAB_HUB_LEARNER_GROUP="class",
    )
    assert c.JupyterHub.bind_url == "http://10.0.0.5:443"
    assert c.JupyterHub.authenticator_class == "pam"
    assert c.PAMAuthenticator.allowed_groups == {"class", "teachers"}
    assert not c.PAMAuthenticator.admin_groups  # instructors are not hub admins: a role of their own
    (instructor,) = [role for role in c.JupyterHub.load_roles if role["name"] == "rocmlab-instructor"]
    assert instructor["groups"] == ["teachers"]
    assert "admin:users" not in instructor["scopes"] and "access:servers" not in instructor["scopes"]
    assert {"list:users", "read:servers", "admin-ui"} <= set(instructor["scopes"])
    assert "servers!group=rocmlab-learners" in instructor["scopes"] and "servers" not in instructor["scopes"]
    assert set(c.JupyterHub.load_groups) == {"teachers", "rocmlab-learners"}  # learners' servers only (issue 48)
    assert c.JupyterHub.spawner_class == "rocmlab.hub.spawner.CourseSpawner"
    assert c.CourseSpawner.max_processes == 512 and c.Spawner.mem_limit == "6G"
    assert c.Spawner.cmd == [str(Path(sys.executable).parent / "jupyterhub-singleuser")]
    assert "--MappingKernelManager.cull_idle_timeout=1800" in c.Spawner.args
    assert "--ServerApp.allow_root=True" not in c.Spawner.args
    assert [s["name"] for s in c.JupyterHub.services][:2] == ["idle-culler", "rocmlab-live"]
    workers = LiveWorkers.from_environment({}).count  # the hub's own, by default (issue 49)
    assert [s["name"] for s in c.JupyterHub.services][2:] == [f"rocmlab-live-worker-{n}" for n in range(1, workers + 1)]
    assert "--timeout=3600" in c.JupyterHub.services[0]["command"]
    assert {"ROCMLAB_CACHE", "HF_HOME", "HF_HUB_OFFLINE"} <= set(c.Spawner.env_keep)  # shared model caches
    built = sorted(p.name for p in (ROOT / "labs" / "en").iterdir() if p.is_dir())
    assert c.CourseSpawner.labs == built


def test_the_labs_folder_comes_from_the_environment(monkeypatch, tmp_path):
    assert hub_config(monkeypatch, tmp_path).CourseSpawner.labs_dir == str(ROOT / "labs" / "en")
    rendered = tmp_path / "labs-gpu" / "zh"
    (rendered / "01-rocm-setup").mkdir(parents=True)
    c = hub_config(monkeypatch, tmp_path, ROCMLAB_HUB_LABS_DIR=rendered, ROCMLAB_HUB_LANG="zh")
    assert c.CourseSpawner.labs_dir == str(rendered)
    assert c.CourseSpawner.labs == ["01-rocm-setup"]  # every lab of that folder


def test_state_is_private_and_no_exchange_folder_is_world_writable(monkeypatch, tmp_path):
    c = hub_config(monkeypatch, tmp_path)
    data = tmp_path / "data"
    assert (data / "hub").stat().st_mode & 0o777 == 0o700
    exchange = data / "exchange"
    assert c.CourseSpawner.exchange_root == str(exchange)
    folders = [exchange, *exchange.rglob("*")]
    assert {p.relative_to(exchange).as_posix() for p in folders} >= {".", "rocmlab/outbound", "rocmlab/inbound"}
    assert not [p for p in folders if p.stat().st_mode & 0o002], "world-writable"
    assert {p.stat().st_uid for p in folders} == {os.geteuid()}
    assert c.JupyterHub.db_url == f"sqlite:///{data / 'hub' / 'jupyterhub.sqlite'}"


def test_culling_can_be_off_and_the_admin_service_on(monkeypatch, tmp_path):
    c = hub_config(
        monkeypatch,
        tmp_path,
        ROCMLAB_HUB_CULL_IDLE_S=0,
        ROCMLAB_HUB_KERNEL_IDLE_S=0,
        ROCMLAB_HUB_ADMIN_TOKEN="abc",
        ROCMLAB_HUB_MEM_LIMIT=0,
        ROCMLAB_LIVE_WORKERS=0,
    )
    assert [s["name"] for s in c.JupyterHub.services] == ["rocmlab-admin", "rocmlab-live"]
    assert c.JupyterHub.services[0]["api_token"] == "abc"
    assert "tokens" in c.JupyterHub.load_roles[0]["scopes"]
    assert c.Spawner.args == [] and c.Spawner.mem_limit is None


def test_the_live_service_is_managed_and_open_to_every_user_and_server_token(monkeypatch, tmp_path):
    c = hub_config(monkeypatch, tmp_path, ROCMLAB_LIVE_RATE_LIMIT=3, ROCMLAB_LIVE_PORT=1022)
    (live,) = [s for s in c.JupyterHub.services if s["name"] == "rocmlab-live"]
    assert live["url"] == "http://127.0.0.1:1022" and live["command"][1:] == ["-m", "rocmlab.live.service"]
    assert live["environment"]["ROCMLAB_LIVE_RATE_LIMIT"] == "3"
    assert live["environment"]["ROCMLAB_LIVE_DB"] == str(tmp_path / "data" / "live" / "queue.sqlite")
    assert (tmp_path / "data" / "live").stat().st_mode & 0o777 == 0o700  # learners never read the queue
    (user,) = [r for r in c.JupyterHub.load_roles if r["name"] == "user"]
    assert set(user["scopes"]) == {"self", "access:services!service=rocmlab-live"}
    assert "access:services!service=rocmlab-live" in c.Spawner.server_token_scopes
    assert c.Spawner.environment["ROCMLAB_LIVE_URL"] == "http://127.0.0.1:1022/services/rocmlab-live/"
    off = hub_config(monkeypatch, tmp_path, ROCMLAB_LIVE=0)
    assert "rocmlab-live" not in [s["name"] for s in off.JupyterHub.services]


@pytest.mark.parametrize(
    "name, value, expected",
    [
        ("ROCMLAB_HUB_MODE", "open", "server or demo"),
        ("ROCMLAB_HUB_LANG", "fr", "en or zh"),
        ("ROCMLAB_HUB_CULL_IDLE_S", "soon", "whole number"),
    ],
)
def test_bad_settings_are_named(monkeypatch, tmp_path, name, value, expected):
    with pytest.raises(Exception, match=expected) as info:
        hub_config(monkeypatch, tmp_path, **{name: value})
    assert name in str(info.value)


# ------------------------------------------------------------------ nbgrader_config.py


def test_nbgrader_sees_each_demo_learner_as_its_own_student(monkeypatch, tmp_path):
    c = load(
        HUB_DIR / "nbgrader_config.py",
        monkeypatch,
        ROCMLAB_ROOT=ROOT,
        ROCMLAB_EXCHANGE=tmp_path,
        ROCMLAB_HUB_ROLE="learner",
        ROCMLAB_STUDENT_ID="learner2",
        ROCMLAB_HUB_MODE="demo",
    )
    assert c.CourseDirectory.student_id == "learner2"
    assert c.CourseDirectory.course_id == "rocmlab" and c.Exchange.root == str(tmp_path)
    assert c.Exchange.path_includes_course is True
    assert "root" not in c.CourseDirectory
    assert c.ExchangeCollect.check_owner is False
    assert c.ClearSolutions.code_stub["python"].endswith("raise NotImplementedError()")  # the course's config


def test_nbgrader_gives_instructors_their_course_root(monkeypatch, tmp_path):
    c = load(
        HUB_DIR / "nbgrader_config.py",
        monkeypatch,
        ROCMLAB_HUB_ROLE="instructor",
        ROCMLAB_COURSE_ROOT=tmp_path / "course",
    )
    assert c.CourseDirectory.root == str(tmp_path / "course")
    assert c.CourseDirectory.db_url == f"sqlite:///{tmp_path / 'course' / 'gradebook.db'}"
    assert "student_id" not in c.CourseDirectory and "check_owner" not in c.ExchangeCollect


def test_learners_get_no_formgrader():
    import json

    learner = json.loads((HUB_DIR / "jupyter" / "learner" / "jupyter_server_config.json").read_text())
    assert learner["ServerApp"]["jpserver_extensions"]["nbgrader.server_extensions.formgrader"] is False
    page = json.loads((HUB_DIR / "jupyter" / "learner" / "labconfig" / "page_config.json").read_text())
    assert page["disabledExtensions"]["@jupyter/nbgrader:formgrader"] is True


# ------------------------------------------------------------------ spawners


def user(name: str, *groups: str):
    return SimpleNamespace(name=name, groups=[SimpleNamespace(name=g) for g in groups])


def demo_spawner(tmp_path, name="learner1", *groups, **traits):
    traits = {
        "course_repo": str(ROOT),
        "labs": ["01-rocm-setup"],
        "exchange_root": str(tmp_path / "x"),
        "cmd": [str(Path(sys.executable).parent / "jupyterhub-singleuser")],
        **traits,
    }
    return rocmlab_spawner.DemoCourseSpawner(user=user(name, *groups), home_dir=str(tmp_path / name), **traits)


def test_a_stopping_demo_server_leaves_the_shared_accounts_other_servers_alone(tmp_path, monkeypatch):
    ended = []
    monkeypatch.setattr(processes, "kill_user", ended.append)
    shared = demo_spawner(tmp_path, run_as="nobody")  # the account every demo learner's server runs as
    asyncio.run(shared.clean_up())
    assert ended == []  # kill_user(nobody) would end every other learner's server
    own = demo_spawner(tmp_path, "learner2")
    monkeypatch.setattr(own, "owner", lambda: (54321, 54321))
    monkeypatch.setattr(type(own), "account_is_the_learners_own", True)
    asyncio.run(own.clean_up())
    assert ended == [54321]  # a learner's own account: everything they left running is ended


def test_the_spawner_limits_are_set_in_the_child(tmp_path):
    spawner = demo_spawner(tmp_path, mem_limit="1G")
    probe = "import resource; print(resource.getrlimit(resource.RLIMIT_AS)[0])"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        preexec_fn=spawner.make_preexec_fn("learner1"),
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == ""  # the server's output goes to its own log in the home, not the hub's
    log = tmp_path / "learner1" / server_child.SERVER_LOG
    assert int(log.read_text()) == 2**30
    assert log.stat().st_mode & 0o777 == 0o600


def _has_nobody() -> bool:
    import pwd

    try:
        return pwd.getpwnam("nobody") is not None
    except KeyError:
        return False


@pytest.mark.skipif(
    os.geteuid() != 0 or not _has_nobody(), reason="switching to another Unix user needs root and a `nobody` account"
)
def test_real_accounts_run_as_the_user_with_the_limits():
    spawner = rocmlab_spawner.CourseSpawner(user=user("nobody"), mem_limit="2G", max_processes=50, own_logs=False)
    out = subprocess.run(
        ["/bin/bash", "-c", "id -un; ulimit -v; ulimit -u"],
        preexec_fn=spawner.make_preexec_fn("nobody"),
        cwd="/",
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["nobody", str(2 * 2**20), "50"]


def test_the_process_limit_reaches_the_child_only():
    before = resource.getrlimit(resource.RLIMIT_NPROC)
    probe = "import resource; print(resource.getrlimit(resource.RLIMIT_NPROC)[0])"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        preexec_fn=lambda: server_child.limit_resources(0, 300),
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(out.stdout) == 300
    assert resource.getrlimit(resource.RLIMIT_NPROC) == before


def test_learners_get_the_labs_and_their_own_student_id(tmp_path):
    spawner = demo_spawner(tmp_path)
    assert spawner.deliver_course() == ["01-rocm-setup"]
    notebook = tmp_path / "learner1" / "01-rocm-setup" / "01-rocm-setup.ipynb"
    assert notebook.read_bytes() == (ROOT / "labs" / "en" / "01-rocm-setup" / "01-rocm-setup.ipynb").read_bytes()
    notebook.write_text("my work")
    assert spawner.deliver_course() == [] and notebook.read_text() == "my work"
    env = spawner.course_env()
    assert env["ROCMLAB_STUDENT_ID"] == "learner1" and env["ROCMLAB_HUB_ROLE"] == "learner"
    assert env["JUPYTER_CONFIG_PATH"].split(os.pathsep) == [str(HUB_DIR / "jupyter" / "learner"), str(HUB_DIR)]
    assert "ROCMLAB_COURSE_ROOT" not in env


def test_the_spawner_delivers_from_its_labs_folder(tmp_path):
    rendered = tmp_path / "rendered"
    (rendered / "01-rocm-setup").mkdir(parents=True)
    (rendered / "01-rocm-setup" / "01-rocm-setup.ipynb").write_text("gpu notebook")
    spawner = demo_spawner(tmp_path, labs_dir=str(rendered))
    assert spawner.deliver_course() == ["01-rocm-setup"]
    assert (tmp_path / "learner1" / "01-rocm-setup" / "01-rocm-setup.ipynb").read_text() == "gpu notebook"


def test_instructors_get_the_sources_for_the_formgrader(tmp_path):
    spawner = demo_spawner(tmp_path, "ann", "instructors", lang="zh")
    spawner.deliver_course()
    source = tmp_path / "ann" / "course" / "source" / "01-rocm-setup"
    assert (source / "01-rocm-setup.ipynb").is_file() and (source / "data").is_dir()
    assert "BEGIN SOLUTION" in (source / "01-rocm-setup.ipynb").read_text()
    env = spawner.course_env()
    assert env["ROCMLAB_HUB_ROLE"] == "instructor" and "ROCMLAB_STUDENT_ID" not in env
    assert env["ROCMLAB_COURSE_ROOT"] == str(tmp_path / "ann" / "course")


def test_the_nbgrader_config_uses_the_per_learner_exchange(monkeypatch):
    from nbgrader.exchange.abc import Exchange
    from traitlets.utils.importstring import import_item

    c = load(HUB_DIR / "nbgrader_config.py", monkeypatch, ROCMLAB_HUB_ROLE="instructor", ROCMLAB_HUB_MODE="server")
    assert c.ExchangeFactory.collect == "rocmlab.hub.exchange.LearnerFolderCollect"
    assert c.LearnerFolderCollect.owner_is_account is True
    for step in ("fetch_assignment", "submit", "list", "fetch_feedback", "release_assignment", "release_feedback"):
        loaded = import_item(c.ExchangeFactory[step])  # as nbgrader loads it
        assert issubclass(loaded, Exchange) and issubclass(loaded, rocmlab_exchange.ClosedRoot), step


needs_root_and_nobody = pytest.mark.skipif(
    os.geteuid() != 0 or not _has_nobody(), reason="changing owners needs root and a `nobody` account"
)


@needs_root_and_nobody
def test_collect_refuses_a_learners_folder_another_account_owns(tmp_path, monkeypatch, caplog, alembic_head_in_process):
    import pwd

    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    me = pwd.getpwuid(os.geteuid()).pw_name
    inbound = tmp_path / "exchange" / "c" / "inbound"
    for student, owner in ((me, me), ("nobody", me)):  # nobody's folder, but made by me
        folder = inbound / student / f"{student}+lab+2026-01-01 00:00:00.000000 UTC+r"
        folder.mkdir(parents=True)
        (folder / "lab.ipynb").write_text(f"of {student}")
        entry = pwd.getpwnam(owner)
        for path in (folder.parent, folder, *folder.iterdir()):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    nobody_file = inbound / me / f"{me}+lab+2026-01-02 00:00:00.000000 UTC+r" / "x.txt"
    nobody_file.parent.mkdir()
    nobody_file.write_text("hard link to someone else's file")
    os.chown(nobody_file, pwd.getpwnam("nobody").pw_uid, -1)
    (tmp_path / "course").mkdir()
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))  # alembic
    config = Config()
    config.CourseDirectory.root = str(tmp_path / "course")
    config.CourseDirectory.course_id = "c"
    config.CourseDirectory.assignment_id = "lab"
    config.Exchange.root = str(tmp_path / "exchange")
    config.LearnerFolderCollect.owner_is_account = True
    rocmlab_exchange.LearnerFolderCollect(coursedir=CourseDirectory(config=config), config=config).start()
    submitted = tmp_path / "course" / "submitted"
    assert [p.name for p in submitted.iterdir()] == [me]
    assert (submitted / me / "lab" / "lab.ipynb").read_text() == f"of {me}"  # not the one holding nobody's file
    assert "owned by uid" in caplog.text and "belongs to uid" in caplog.text


@needs_root_and_nobody
def test_a_real_home_is_the_users_and_closed_to_others(tmp_path):
    import pwd

    nobody = pwd.getpwnam("nobody")
    owner = (nobody.pw_uid, nobody.pw_gid)
    missing = tmp_path / "homes" / "new"
    rocmlab_spawner.prepare_home(missing, owner, private=True)
    assert (missing.stat().st_uid, missing.stat().st_mode & 0o777) == (nobody.pw_uid, 0o700)
    opened = tmp_path / "open"
    opened.mkdir(mode=0o755)
    os.chown(opened, *owner)
    rocmlab_spawner.prepare_home(opened, owner, private=False)
    assert opened.stat().st_mode & 0o777 == 0o755
    rocmlab_spawner.prepare_home(opened, owner, private=True)
    assert opened.stat().st_mode & 0o777 == 0o700
    shared = tmp_path / "shared"  # not the user's own folder: never changed
    shared.mkdir(mode=0o755)
    rocmlab_spawner.prepare_home(shared, owner, private=True)
    assert shared.stat().st_mode & 0o777 == 0o755


def test_the_spawner_closes_real_homes_unless_told_not_to():
    assert rocmlab_spawner.CourseSpawner().private_homes is True
    assert rocmlab_spawner.CourseSpawner(private_homes=False).private_homes is False


# ------------------------------------------------------------------ rocmlab hub


def parse(*argv):
    parser = argparse.ArgumentParser()
    hub.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_arguments():
    args = parse("--demo", "--port", "0", "--labs", "01", "02", "--lang", "zh", "--profile", "gpu")
    assert args.demo and args.port == 0 and args.labs == ["01", "02"] and args.lang == "zh"
    assert args.profile == "gpu"
    assert parse().port is None and not parse().demo and parse().labs == [] and parse().profile == "smoke"


def test_the_gpu_profile_is_rendered_into_the_data_folder(make_course, tmp_path):
    from conftest import GOOD_TOML

    gpu_toml = GOOD_TOML + "\n[profiles.gpu]\nparams = {{ SCALE = 9 }}\ntimeout_s = 60\n"
    root = make_course({"01-demo": (gpu_toml.format(id="01-demo"), None), "02-smoke-only": (None, None)})
    messages = []
    folder, labs = hub.delivered_labs(root, tmp_path / "data", "en", ["01", "02"], "gpu", progress=messages.append)
    assert folder == tmp_path / "data" / "labs-gpu" / "en" and labs == ["01-demo"]
    assert "SCALE = 9" in (folder / "01-demo" / "01-demo.ipynb").read_text()
    assert any("02-smoke-only" in m and "[profiles.gpu]" in m for m in messages)
    with pytest.raises(InputError, match="--profile"):
        hub.delivered_labs(root, tmp_path / "data", "en", ["01"], "multi-gpu")
    smoke = hub.delivered_labs(root, tmp_path / "data", "en", ["01-demo"], "smoke")
    assert smoke == (root / "labs" / "en", ["01-demo"])  # the build as it is: nothing rendered


def test_demo_hub_with_the_gpu_profile_delivers_its_rendered_notebooks(monkeypatch, tmp_path):
    monkeypatch.setattr(hub_launch, "check_shared_install", lambda root: None)  # as root: test_hub_demo.py
    environments = []
    monkeypatch.setattr(hub_launch, "find_proxy", lambda root: Path("/bin/true"))
    monkeypatch.setattr(hub_launch, "launch", lambda root, env, log, launcher=(): environments.append(env) or sleeper())
    monkeypatch.setattr(hub_launch, "wait_ready", lambda *a: (_ for _ in ()).throw(hub.HubError("stop here")))
    with (
        pytest.raises(hub.HubError, match="stop here"),
        hub.DemoHub(tmp_path, course=Course(ROOT), labs=["01"], profile="gpu"),
    ):
        pass
    rendered = tmp_path / "labs-gpu" / "en"
    assert environments[0]["ROCMLAB_HUB_LABS_DIR"] == str(rendered)
    assert environments[0]["ROCMLAB_HUB_LABS"] == "01-rocm-setup"
    assert 'PROFILE = \\"gpu\\"' in (rendered / "01-rocm-setup" / "01-rocm-setup.ipynb").read_text()
    with pytest.raises(InputError, match="profile"):
        hub.DemoHub(tmp_path, course=Course(ROOT), profile="fast")


def run_command(*argv, root=ROOT) -> int:
    return hub.main(**vars(parse(*argv)), course=Course(root))


def test_server_mode_needs_root(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(hub_launch, "find_proxy", lambda root: Path("/bin/true"))
    with pytest.raises(InputError, match="--demo"):
        run_command("--labs", "01", "--data-dir", str(tmp_path))


def test_a_short_demo_password_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("ROCMLAB_HUB_PASSWORD", "short")
    with pytest.raises(InputError, match="8 characters"):
        run_command("--demo", "--labs", "01", "--data-dir", str(tmp_path))


def test_a_missing_proxy_says_make_hub_setup(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(hub.HubError, match="make hub-setup"):
        hub.find_proxy(tmp_path)


def test_labs_must_be_built():
    with pytest.raises(InputError, match="rocmlab build"):
        hub.resolve_labs(FIXTURE_COURSE, "en", ["01"])
    with pytest.raises(LabError):
        hub.resolve_labs(ROOT, "en", ["99-nothing"])
    assert hub.resolve_labs(ROOT, "en", ["01"]) == ["01-rocm-setup"]


def test_demo_environment_is_loopback_on_free_ports(tmp_path):
    env = hub.hub_environment(ROOT, tmp_path, demo=True, port=8123, ip="0.0.0.0", proxy=Path("/bin/true"))
    assert env["ROCMLAB_HUB_IP"] == "127.0.0.1" and env["ROCMLAB_HUB_MODE"] == "demo"
    assert len({env["ROCMLAB_HUB_PORT"], env["ROCMLAB_HUB_API_PORT"], env["ROCMLAB_HUB_INTERNAL_PORT"]}) == 3
    assert env["ROCMLAB_HUB_ID"] and env["ROCMLAB_HUB_PROXY"] == "/bin/true"
    assert env["ROCMLAB_HUB_LABS_DIR"] == str(ROOT / "labs" / "en")
    rendered = tmp_path / "labs-gpu" / "en"
    assert hub.hub_environment(ROOT, tmp_path, demo=True, port=1, proxy=Path("/bin/true"), labs_dir=rendered)[
        "ROCMLAB_HUB_LABS_DIR"
    ] == str(rendered)


def sleeper(*_args, **_kwargs):
    return subprocess.Popen(["sleep", "60"], start_new_session=True)


def test_demo_prints_the_banner_and_cleans_up_a_failed_start(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(hub_launch, "check_shared_install", lambda root: None)  # as root: test_hub_demo.py
    started = []
    monkeypatch.setattr(hub_launch, "find_proxy", lambda root: Path("/bin/true"))
    monkeypatch.setattr(hub_launch, "launch", lambda *a: started.append(sleeper()) or started[-1])

    def never_ready(process, url, timeout_s, log_path):
        raise hub.HubError("not ready")

    monkeypatch.setattr(hub_launch, "wait_ready", never_ready)
    with pytest.raises(hub.HubError, match="not ready"):
        run_command("--demo", "--port", "0", "--labs", "01", "--data-dir", str(tmp_path))
    assert "NOT SECURE" in capsys.readouterr().err
    assert started[0].poll() == -signal.SIGTERM


def test_demo_hub_stops_what_it_started_when_the_start_fails(monkeypatch, tmp_path):
    monkeypatch.setattr(hub_launch, "check_shared_install", lambda root: None)  # as root: test_hub_demo.py
    started = []
    monkeypatch.setattr(hub_launch, "find_proxy", lambda root: Path("/bin/true"))
    monkeypatch.setattr(hub_launch, "launch", lambda *a: started.append(sleeper()) or started[-1])
    monkeypatch.setattr(hub_launch, "wait_ready", lambda *a: (_ for _ in ()).throw(hub.HubError("no answer")))
    demo = hub.DemoHub(tmp_path, course=Course(ROOT), labs=["01"])
    assert demo.url == f"http://127.0.0.1:{demo.port}" and demo.password
    with pytest.raises(hub.HubError, match="no answer"), demo:
        pass
    assert started[0].poll() is not None


def test_server_mode_needs_a_course_every_user_can_read(tmp_path):
    private = tmp_path / "private"
    (private / "bin").mkdir(parents=True)
    python, config = private / "bin" / "python", tmp_path / "config.py"
    python.write_text("")
    config.write_text("")
    python.chmod(0o755)
    config.chmod(0o644)
    tmp_path.chmod(0o755)
    private.chmod(0o700)

    def inside(problems):  # pytest's base is 0700
        return [p for p in problems if p.startswith(f"{tmp_path}/")]

    assert inside(hub.unshared_paths([python, config])) == [f"{private} (mode 700)"]
    private.chmod(0o755)
    config.chmod(0o600)
    python.chmod(0o744)
    assert inside(hub.unshared_paths([python, config])) == [f"{config} (mode 600)", f"{python} (mode 744)"]


def test_a_shared_cache_others_may_write_stops_the_hub(tmp_path):
    """A learner who writes ROCMLAB_CACHE or HF_HOME could plant a model, or its remote code, that
    every classmate's server loads."""
    cache = tmp_path / "hf"
    (cache / "hub" / "models--x").mkdir(parents=True)
    for path in (cache, cache / "hub", cache / "hub" / "models--x"):
        path.chmod(0o755)
    hub_launch.check_shared_caches({"HF_HOME": str(cache)})
    (cache / "hub").chmod(0o1777)
    with pytest.raises(hub.HubError, match="others may write"):
        hub_launch.check_shared_caches({"HF_HOME": str(cache), "ROCMLAB_CACHE": ""})


def test_nbgraders_own_autograde_is_refused_on_the_hub_before_any_cell_runs(monkeypatch, tmp_path):
    """Issue 48: the formgrader's Autograde ran learners' code as the instructor. The hub's nbgrader
    config makes RefuseAutograde its only step, which nbconvert runs (enabled) and which raises
    saying how to grade; the real-account click is in test_hub_accounts.py."""
    import nbformat
    from nbconvert.exporters import NotebookExporter

    from rocmlab.hub.formgrader import AutogradeRefused

    c = load(HUB_DIR / "nbgrader_config.py", monkeypatch, ROCMLAB_HUB_ROLE="instructor", ROCMLAB_HUB_MODE="server")
    assert (
        c.Autograde.autograde_preprocessors
        == c.Autograde.sanitize_preprocessors
        == ["rocmlab.hub.formgrader.RefuseAutograde"]
    )
    ran = tmp_path / "ran"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"open({str(ran)!r}, 'w')")])
    exporter = NotebookExporter()
    for step in c.Autograde.autograde_preprocessors:
        exporter.register_preprocessor(step)  # as nbgrader's Autograde does (enabled=False)
    with pytest.raises(AutogradeRefused, match=r"ann's code as you.*rocmlab --root .* grade 01-lab"):
        exporter.from_notebook_node(nb, resources={"nbgrader": {"student": "ann", "assignment": "01-lab"}})
    assert not ran.exists()
