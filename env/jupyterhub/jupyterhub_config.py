# JupyterHub config of the rocmlab workshop hub, for both modes of `rocmlab hub`:
#
#   server (default): real Unix accounts through PAM, each server run as its user (needs root);
#                     members of the Unix group ROCMLAB_HUB_LEARNER_GROUP and of the instructor
#                     group may log in; instructors are hub admins and get nbgrader's formgrader.
#   demo:             NOT SECURE. A shared password (SharedPasswordAuthenticator), every server run as the
#                     hub's own user, loopback only. For trying the course and for tests.
#
# Everything comes from environment variables (set by `rocmlab hub`, or by hand):
#   ROCMLAB_HUB_MODE         server | demo
#   ROCMLAB_HUB_IP           public address (server: all interfaces; demo: always 127.0.0.1)
#   ROCMLAB_HUB_PORT         public port of the proxy (443; demo 8000; server mode: below 1024); ROCMLAB_HUB_INTERNAL_PORT the hub
#                            itself (server: 881, demo: 8081); ROCMLAB_HUB_API_PORT the proxy's API
#                            (demo only, 8001; a server's is a Unix socket in DATA/hub/)
#   ROCMLAB_HUB_DATA         state: hub/ (database, secrets), exchange/, homes/ (demo)
#   ROCMLAB_ROOT             the rocmlab checkout (labs/, solutions/, autograder/); default: the
#                            checkout jupyterhub is started in (rocmlab.course.course.Course.find)
#   ROCMLAB_HUB_LANG         en | zh: language of the notebooks delivered to homes
#   ROCMLAB_HUB_LABS_DIR     folder of the student notebooks delivered, one sub-folder per lab
#                            (default ROCMLAB_ROOT/labs/<lang>, the smoke build; `rocmlab hub
#                            --profile gpu` renders the gpu profile's into DATA/labs-gpu/<lang>)
#   ROCMLAB_HUB_LABS         comma-separated lab ids delivered on spawn (default: every lab there)
#   ROCMLAB_HUB_LABS_PROFILE the profile of the delivered notebooks (smoke; gpu: `rocmlab hub --profile
#                            gpu`): the hub's grading workers grade with its parameters and limits
#   ROCMLAB_HUB_INSTRUCTOR_GROUP, ROCMLAB_HUB_LEARNER_GROUP   (instructors, rocmlab)
#   ROCMLAB_HUB_INSTRUCTORS  demo: comma-separated hub users put in the instructor group
#   ROCMLAB_HUB_PASSWORD     demo: the shared password (8 characters or more)
#   ROCMLAB_HUB_DEMO_USER    demo run as root: the account every server runs as (default
#                            $SUDO_USER, else nobody; never root). The hub's state stays root's.
#   ROCMLAB_HUB_ADMIN_TOKEN  optional: API token of the `rocmlab-admin` service
#   ROCMLAB_LIVE_WORKERS     grading workers the hub runs and restarts (default: one per 4 cores,
#                            at least one; 0: none, started by hand: rocmlab.hub.settings.LiveWorkers)
#   ROCMLAB_HUB_MEM_LIMIT    address space per process, e.g. 8G; 0: none (default 8G, none where
#                            /dev/kfd exists: the ROCm runtime reserves far more virtual memory
#                            than it uses, and an RLIMIT_AS would break it)
#   ROCMLAB_HUB_MAX_PROCESSES  processes per Unix user (server mode, default 512; 0: none)
#   ROCMLAB_HUB_GPU_POLICY   shared (default: every server sees every GPU) | slices (each learner
#                            ROCMLAB_HUB_GPU_SLICES slices of one GPU, theirs alone; labs that do
#                            not fit them are not delivered) | spread (each server
#                            sees one GPU, the least used; ROCMLAB_HUB_GPUS GPUs, default: counted
#                            from the ROCm driver's topology)
#   ROCMLAB_HUB_PROFILE      the lab profile whose `requires` the slices admit labs by (gpu)
#   ROCMLAB_HUB_MACHINE      slices policy: a recorded machine folder standing for this node (tests)
#   ROCMLAB_HUB_DEV_ROOT     slices policy: a folder standing for / holding dev/dri/renderD* (tests)
#   ROCMLAB_HUB_KFD_GROUP    slices policy: the group /dev/kfd is closed to (rocmlab-gpu; no account
#                            may be in it), which only a slice holder's server gets
#   ROCMLAB_HUB_CULL_IDLE_S  stop servers idle this long (3600; 0: never)
#   ROCMLAB_HUB_KERNEL_IDLE_S  shut down kernels idle this long (1800; 0: never)
#   ROCMLAB_HUB_SSL_CERT, ROCMLAB_HUB_SSL_KEY  PEM files the proxy serves HTTPS with; without
#                            them a hub beyond loopback refuses to start unless
#   ROCMLAB_HUB_INSECURE_HTTP=1  (plain HTTP: passwords in clear on the network)
#   ROCMLAB_HUB_PROXY        path of configurable-http-proxy
#   ROCMLAB_HUB_ID           a marker put in every process's environment (for clean-up)
#   ROCMLAB_HUB_POLL_S       seconds between checks that a server still runs (10); one that exited
#                            on its own is cleaned up then (its learner's processes ended)
#   ROCMLAB_HUB_DELIVERY_TIMEOUT_S  seconds one lab's delivery into a home may take (30)
#   ROCMLAB_LIVE                    0: no live grading service (default 1: rocmlab.live.service)
#   ROCMLAB_LIVE_RATE_LIMIT, ROCMLAB_LIVE_RATE_WINDOW_S  submissions per learner and lab in a window
#                            (5 per 3600 s); ROCMLAB_LIVE_WORKER_TOKEN opens the workers' HTTP API
#                            (Kubernetes); ROCMLAB_LIVE_PORT the service's port
#                            (server: 1011, demo: 10101; a server's must be below 1024)
#   ROCMLAB_HUB_COMPLETION   the completion certificate's rule (default env/jupyterhub/completion.toml)
#   ROCMLAB_HUB_AUTH         local (default) | oidc | ldap, with the ROCMLAB_OIDC_* or ROCMLAB_LDAP_*
#                            block of rocmlab.hub.auth; DATA/roster.json (`rocmlab roster import`)
#                            adds people and instructors to every mode
import os
import sys
from pathlib import Path

from rocmlab.course.course import Course
from rocmlab.hub import auth, roster
from rocmlab.hub.exchange_layout import ExchangeOwners, group_members, prepare_exchange
from rocmlab.hub.labs import COURSE_ID
from rocmlab.hub.loopback import DEFAULT_PORTS, open_ports, unix_socket_url
from rocmlab.hub.settings import LEARNERS_HUB_GROUP, LIVE_INSTRUCT_SCOPE, LIVE_WORKERS, HubGroups, LiveWorkers

c = get_config()  # noqa: F821  (injected by traitlets)
env = os.environ.get


def _seconds(name: str, default: int) -> int:
    """A whole number from the environment (seconds, or a count)."""
    value = env(name, str(default))
    if not value.isdigit():
        raise ValueError(f"{name}={value!r}: expected a whole number")
    return int(value)


def _names(value: str) -> list:
    return [name.strip() for name in value.split(",") if name.strip()]


mode = env("ROCMLAB_HUB_MODE", "server")
if mode not in ("server", "demo"):
    raise ValueError(f"ROCMLAB_HUB_MODE={mode!r}: expected server or demo")
demo = mode == "demo"
course = Course.find()  # $ROCMLAB_ROOT, else the checkout this is run in: found once, for the whole config
course_repo = course.root
data = Path(env("ROCMLAB_HUB_DATA") or "/srv/rocmlab-hub").resolve()
lang = env("ROCMLAB_HUB_LANG", "en")
if lang not in ("en", "zh"):
    raise ValueError(f"ROCMLAB_HUB_LANG={lang!r}: expected en or zh")
built = Path(env("ROCMLAB_HUB_LABS_DIR") or course.labs_dir(lang)).resolve()
labs = _names(env("ROCMLAB_HUB_LABS", "")) or sorted(p.name for p in built.glob("*") if p.is_dir())
groups = HubGroups.from_environment()  # the same object `rocmlab hub` reads them with
instructor_group = groups.instructor
venv_bin = Path(sys.executable).parent
learner_group = groups.learner

if not demo:  # set-ups that would weaken the servers' isolation are refused (rocmlab.hub.setup_checks)
    import pwd as _pwd

    from rocmlab.hub import setup_checks

    _homes = {
        f"the home of {name}": _pwd.getpwnam(name).pw_dir
        for group in (learner_group, instructor_group)
        for name in group_members(group)
    }
    _problems = setup_checks.problems(
        {
            "the course checkout (ROCMLAB_ROOT)": str(course_repo),
            "the built labs (ROCMLAB_HUB_LABS_DIR)": str(built),
            "the hub's data (ROCMLAB_HUB_DATA)": str(data),
            "the interpreter": sys.executable,
            "the course model cache (ROCMLAB_CACHE)": env("ROCMLAB_CACHE", ""),
            "the Hugging Face cache (HF_HOME)": env("HF_HOME", ""),
            **_homes,
        },
        {"ROCMLAB_HUB_LEARNER_GROUP": learner_group, "ROCMLAB_HUB_INSTRUCTOR_GROUP": instructor_group},
    )
    if _problems:
        raise ValueError("this set-up would weaken the isolation of learners' servers:\n- " + "\n- ".join(_problems))

# ------------------------------------------------------------------ state and the exchange
state = data / "hub"
state.mkdir(parents=True, exist_ok=True)
os.chmod(state, 0o700)
os.chmod(data, 0o755)
# The exchange: nothing in it is writable by more than one learner (rocmlab.hub.exchange_layout).
# The hub makes the course's folders and each learner's own inbound/ and feedback/ folder now (and
# for a learner added later, when their server starts), and refuses to start if a user made one.

if demo:  # one account runs every server: it owns every learner's folder
    import pwd as _pwd

    try:
        _account = (
            _pwd.getpwnam(env("ROCMLAB_HUB_DEMO_USER") or env("SUDO_USER") or "nobody") if os.geteuid() == 0 else None
        )
    except KeyError:
        raise ValueError(f"ROCMLAB_HUB_DEMO_USER={env('ROCMLAB_HUB_DEMO_USER')!r} is not a Unix user") from None
    exchange_owners = ExchangeOwners(os.geteuid(), _account.pw_gid if _account else os.getegid())
    exchange_learners = {}
else:
    import grp as _grp

    try:
        exchange_owners = ExchangeOwners(os.geteuid(), _grp.getgrnam(instructor_group).gr_gid)
    except KeyError:  # refused above (setup_checks); were that check off, nobody but the hub may release
        exchange_owners = ExchangeOwners(os.geteuid(), os.getegid())
    exchange_learners = group_members(learner_group)
exchange = prepare_exchange(data, COURSE_ID, exchange_owners, exchange_learners)
c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(state / "jupyterhub_cookie_secret")

# ------------------------------------------------------------------ network
ip = "127.0.0.1" if demo else env("ROCMLAB_HUB_IP", "")
ssl_cert, ssl_key = env("ROCMLAB_HUB_SSL_CERT", ""), env("ROCMLAB_HUB_SSL_KEY", "")
if bool(ssl_cert) != bool(ssl_key):
    raise ValueError("ROCMLAB_HUB_SSL_CERT and ROCMLAB_HUB_SSL_KEY go together")
if not ssl_cert and ip not in ("127.0.0.1", "::1", "localhost") and env("ROCMLAB_HUB_INSECURE_HTTP") != "1":
    raise ValueError(
        f"ROCMLAB_HUB_IP={ip!r} reaches beyond this machine: serve TLS (ROCMLAB_HUB_SSL_CERT and "
        "ROCMLAB_HUB_SSL_KEY; `rocmlab hub` makes a self-signed pair) or set ROCMLAB_HUB_INSECURE_HTTP=1"
    )
if ssl_cert:  # the proxy terminates TLS with these
    c.JupyterHub.ssl_cert, c.JupyterHub.ssl_key = ssl_cert, ssl_key
scheme = "https" if ssl_cert else "http"
public_port = int(env("ROCMLAB_HUB_PORT", "8000" if demo else "443"))
c.JupyterHub.bind_url = f"{scheme}://{ip}:{public_port}"
c.JupyterHub.hub_ip = "127.0.0.1"
# Server mode: no learner can take over a root-side service's address while it is down
# (rocmlab.hub.loopback): the proxy's API on a Unix socket in the state folder (root's, 700), the
# proxy's public port, the hub and the live service on ports below
# net.ipv4.ip_unprivileged_port_start, which only root binds.
internal_port = int(
    env("ROCMLAB_HUB_INTERNAL_PORT", "8081" if demo else str(DEFAULT_PORTS["ROCMLAB_HUB_INTERNAL_PORT"]))
)
live_port = int(env("ROCMLAB_LIVE_PORT", "10101" if demo else str(DEFAULT_PORTS["ROCMLAB_LIVE_PORT"])))
if not demo:
    _open = open_ports(
        {"ROCMLAB_HUB_PORT": public_port, "ROCMLAB_HUB_INTERNAL_PORT": internal_port}
        | ({"ROCMLAB_LIVE_PORT": live_port} if env("ROCMLAB_LIVE", "1") != "0" else {})
    )
    if _open:
        raise ValueError("; ".join(_open))
c.JupyterHub.hub_port = internal_port
c.ConfigurableHTTPProxy.api_url = (
    f"http://127.0.0.1:{int(env('ROCMLAB_HUB_API_PORT', '8001'))}"
    if demo
    else unix_socket_url(state / "proxy-api.sock")
)
c.ConfigurableHTTPProxy.command = [env("ROCMLAB_HUB_PROXY", "configurable-http-proxy")]
c.ConfigurableHTTPProxy.pid_file = str(state / "proxy.pid")

# ------------------------------------------------------------------ who may log in
# ROCMLAB_HUB_AUTH=oidc | ldap: single sign-on and the roster, one block of variables each
# (rocmlab.hub.auth, docs/hub.md); local (default): the cases below, with the roster's people.
sign_in = auth.configure(c, os.environ, instructor_group, data, server_mode=not demo)
people = roster.load(data)
roster_instructors = roster.logins(people, "instructor")
if sign_in == "local" and demo:
    c.JupyterHub.authenticator_class = "shared-password"
    c.SharedPasswordAuthenticator.user_password = env("ROCMLAB_HUB_PASSWORD") or None
    c.Authenticator.allow_all = True
    demo_instructors = set(_names(env("ROCMLAB_HUB_INSTRUCTORS", ""))) | roster_instructors
    c.JupyterHub.load_groups = {instructor_group: {"users": sorted(demo_instructors)}}
elif sign_in == "local":
    c.JupyterHub.authenticator_class = "pam"
    c.PAMAuthenticator.allowed_groups = {learner_group, instructor_group}
    c.PAMAuthenticator.allowed_users = roster.logins(people)
    # Instructors are not hub admins (an admin can open any learner's server and act as them):
    # the role `rocmlab-instructor` below gives them what running a class needs.
    c.PAMAuthenticator.admin_groups = set()
    c.PAMAuthenticator.manage_groups = False

# ------------------------------------------------------------------ single-user servers
c.JupyterHub.spawner_class = "rocmlab.hub.spawner." + ("DemoCourseSpawner" if demo else "CourseSpawner")
c.Spawner.cmd = [str(venv_bin / "jupyterhub-singleuser")]  # the course's environment, and its python3 kernel
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 90
c.Spawner.environment = {"ROCMLAB_HUB_MODE": mode}
# Shared, read-only model caches set where the hub starts, so that no learner builds the course
# model or downloads a real one: ROCMLAB_CACHE (`rocmlab assets build-model`) and HF_HOME
# (`rocmlab assets fetch NAME`), plus a mirror or offline switch for the Hugging Face hub.
c.Spawner.env_keep = ["JUPYTERHUB_SINGLEUSER_APP", "LANG", "ROCMLAB_CACHE", "HF_HOME", "HF_ENDPOINT", "HF_HUB_OFFLINE"]
kernel_idle = _seconds("ROCMLAB_HUB_KERNEL_IDLE_S", 1800)
server_args = (
    [f"--MappingKernelManager.cull_idle_timeout={kernel_idle}", "--MappingKernelManager.cull_interval=60"]
    if kernel_idle
    else []
)
c.Spawner.args = server_args
if demo and os.geteuid() == 0:  # never a learner as root: the demo's servers run as an ordinary account
    import pwd

    run_as = env("ROCMLAB_HUB_DEMO_USER") or env("SUDO_USER") or "nobody"
    try:
        if pwd.getpwnam(run_as).pw_uid == 0:
            raise ValueError(f"ROCMLAB_HUB_DEMO_USER={run_as!r}: the demo's servers must not run as root")
    except KeyError:
        raise ValueError(f"ROCMLAB_HUB_DEMO_USER={run_as!r} is not a Unix user") from None
    c.DemoCourseSpawner.run_as = run_as

default_memory = "0" if Path("/dev/kfd").exists() else "8G"
memory = env("ROCMLAB_HUB_MEM_LIMIT", default_memory)
c.Spawner.mem_limit = None if memory in ("0", "", "none") else memory
c.DemoCourseSpawner.home_dir_template = str(data / "homes" / "{username}")
c.CourseSpawner.course_repo = str(course_repo)  # DemoCourseSpawner inherits all of these
c.CourseSpawner.lang = lang
c.CourseSpawner.labs_dir = str(built)
c.CourseSpawner.labs = labs
c.CourseSpawner.instructor_group = instructor_group
c.CourseSpawner.course_id = COURSE_ID
c.CourseSpawner.exchange_root = str(exchange)
c.CourseSpawner.exchange_uid, c.CourseSpawner.exchange_gid = exchange_owners.uid, exchange_owners.gid
c.DemoCourseSpawner.private_tmp = False  # one account runs every demo server: nothing to keep apart
# A server that exits on its own (killed, crashed, File > Shut Down) is noticed within this many
# seconds, and its learner's processes are ended then (CourseSpawner.poll).
c.Spawner.poll_interval = _seconds("ROCMLAB_HUB_POLL_S", 10)
# One lab's delivery into a home (run as the user, in a thread): a FIFO or a hung file system there
# costs that user's start this long, never the hub's event loop.
c.CourseSpawner.delivery_timeout_s = _seconds("ROCMLAB_HUB_DELIVERY_TIMEOUT_S", 30)
c.CourseSpawner.hub_marker = env("ROCMLAB_HUB_ID", "")
# GPUs: shared (every server sees all) or spread (each server one, ROCR_VISIBLE_DEVICES; a fair
# share, not an isolation: the device files stay open to the render group).
gpu_policy = env("ROCMLAB_HUB_GPU_POLICY", "shared")
if gpu_policy not in ("shared", "spread", "slices"):
    raise ValueError(f"ROCMLAB_HUB_GPU_POLICY={gpu_policy!r}: expected shared, spread or slices")
c.CourseSpawner.gpu_policy = gpu_policy
if gpu_policy == "spread":
    from rocmlab.hub.spawner import kfd_gpu_count

    c.CourseSpawner.gpu_count = _seconds("ROCMLAB_HUB_GPUS", 0) or kfd_gpu_count()
if gpu_policy == "slices":  # a slice per learner, theirs alone (rocmlab.hub.devices)
    from rocmlab.hub.devices import book_of_this_node
    from rocmlab.hub.slices import SliceHolder

    c.CourseSpawner.gpu_slices = _seconds("ROCMLAB_HUB_GPU_SLICES", 1)
    c.CourseSpawner.slice_dev_root = env("ROCMLAB_HUB_DEV_ROOT", "")
    kfd_gid = None
    if c.CourseSpawner.slice_dev_root or not env("ROCMLAB_HUB_MACHINE", ""):  # this node's (or a test's) devices
        # /dev/kfd closed to a group no account is in; a slice holder's server alone gets it
        import grp as _grp

        from rocmlab.hub.devices import KFD_GROUP, kfd_group_problem

        kfd_group = env(*KFD_GROUP)
        _problem = kfd_group_problem(kfd_group)
        if _problem:
            raise ValueError(_problem)
        c.CourseSpawner.kfd_gid = kfd_gid = _grp.getgrnam(kfd_group).gr_gid
    SliceHolder.book, labs = book_of_this_node(
        env("ROCMLAB_HUB_MACHINE", ""),
        course_repo,
        labs,
        env("ROCMLAB_HUB_PROFILE", "gpu"),
        c.CourseSpawner.gpu_slices,
        c.CourseSpawner.slice_dev_root,
        kfd_gid,
    )
    c.CourseSpawner.labs = labs
# RLIMIT_NPROC counts every process of a Unix user: only meaningful where each learner has one.
c.CourseSpawner.max_processes = _seconds("ROCMLAB_HUB_MAX_PROCESSES", 512)
# Each learner's server and all it starts share one ceiling: resident memory (unlike RLIMIT_AS, it
# works beside ROCm), CPU in percent of one core, and tasks; in a systemd scope where systemd runs the
# machine (rocmlab.hub.scopes), else in a cgroup the hub writes itself (rocmlab.hub.cgroups).
# ROCMLAB_HUB_SCOPE_MEMORY=0 (or CPU, TASKS) turns one off. Each private tmpfs of a server holds at
# most ROCMLAB_HUB_TMPFS_SIZE (default: a quarter of the memory ceiling; its pages count in it too).
c.CourseSpawner.scope_memory_max = env("ROCMLAB_HUB_SCOPE_MEMORY", "8G")
c.CourseSpawner.scope_cpu_percent = _seconds("ROCMLAB_HUB_SCOPE_CPU_PERCENT", 200)
c.CourseSpawner.scope_tasks_max = _seconds("ROCMLAB_HUB_SCOPE_TASKS", 1024)
if env("ROCMLAB_HUB_TMPFS_SIZE", "0") not in ("", "0"):
    c.CourseSpawner.tmpfs_max = env("ROCMLAB_HUB_TMPFS_SIZE")
c.DemoCourseSpawner.max_processes = 0

# ------------------------------------------------------------------ services
services, roles = [], []
cull_idle = _seconds("ROCMLAB_HUB_CULL_IDLE_S", 3600)
if cull_idle:
    services.append(
        {"name": "idle-culler", "command": [sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={cull_idle}"]}
    )
    roles.append(
        {
            "name": "idle-culler",
            "services": ["idle-culler"],
            "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
        }
    )
if env("ROCMLAB_HUB_ADMIN_TOKEN"):
    services.append({"name": "rocmlab-admin", "api_token": env("ROCMLAB_HUB_ADMIN_TOKEN")})
    roles.append(
        {
            "name": "rocmlab-admin",
            "services": ["rocmlab-admin"],
            "scopes": ["admin:users", "admin:groups", "admin:servers", "tokens", "list:users", "read:users"],
        }
    )
# Instructors (the hub group named like the Unix group; in server mode PAMAuthenticator puts
# them in it at login, see rocmlab.hub.spawner.CourseSpawner.is_instructor): the admin page's list of
# users, their activity and servers, and starting or stopping a learner's server; not
# `access:servers` (opening a learner's JupyterLab, i.e. acting as them), tokens or user admin.
# They grade learners' work through the exchange (inbound/<learner>/ is open to their Unix group).
roles.append(
    {
        "name": "rocmlab-instructor",
        "groups": [instructor_group],
        "scopes": [
            "self",
            "admin-ui",
            "list:users",
            "read:users",
            "read:users:activity",
            "read:servers",
            "servers",
            "read:groups",
            "list:groups",
            "custom:rocmlab-live:instruct",
        ],
    }
)
# the live service's instructor routes: a browser session of an instructor holds it, no API token
c.JupyterHub.custom_scopes = {
    LIVE_INSTRUCT_SCOPE: {"description": "Use the live workshop's instructor pages (a browser session)"}
}
if not demo:  # a workshop server: instructors start and stop learners' servers, not each other's
    roles[-1]["scopes"] = [f"servers!group={LEARNERS_HUB_GROUP}" if s == "servers" else s for s in roles[-1]["scopes"]]
# The live workshop (rocmlab.live.service, docs/hub.md): learners submit, workers grade from
# its queue (DATA/live/queue.sqlite), learners and instructors see the results. Every user may
# open it (the `user` role, redefined with what it had), and each server's token may call it
# (`rocmlab submit` in a JupyterLab terminal); what a learner sees there is their own only.
live = env("ROCMLAB_LIVE", "1") != "0"
if live:
    workers = LiveWorkers.from_environment()
    print(workers.warning() or workers.describe(), file=sys.stderr)  # into the hub's log
    live_data = data / "live"
    live_data.mkdir(exist_ok=True)
    os.chmod(live_data, 0o700)
    services.append(
        {
            "name": "rocmlab-live",
            "url": f"http://127.0.0.1:{live_port}",
            "command": [sys.executable, "-m", "rocmlab.live.service"],
            "oauth_no_confirm": True,
            "oauth_client_allowed_scopes": [LIVE_INSTRUCT_SCOPE],  # an instructor's session gets it
            "environment": {
                "ROCMLAB_LIVE_DB": str(live_data / "queue.sqlite"),
                "ROCMLAB_LIVE_SPOOL": str(live_data / "spool"),
                "ROCMLAB_LIVE_EXCHANGE": str(exchange),
                "ROCMLAB_COURSE_ID": COURSE_ID,
                "ROCMLAB_HUB_LABS": ",".join(labs),
                "ROCMLAB_HUB_MODE": mode,
                "ROCMLAB_HUB_INSTRUCTOR_GROUP": instructor_group,
                **groups.environment(),  # the roster of the instructor's page: the learner group
                "ROCMLAB_HUB_INSTRUCTORS": env("ROCMLAB_HUB_INSTRUCTORS", ""),  # demo: not on the roster
                "ROCMLAB_LIVE_RATE_LIMIT": env("ROCMLAB_LIVE_RATE_LIMIT", "5"),
                "ROCMLAB_LIVE_RATE_WINDOW_S": env("ROCMLAB_LIVE_RATE_WINDOW_S", "3600"),
                "ROCMLAB_LIVE_WORKER_TOKEN": env("ROCMLAB_LIVE_WORKER_TOKEN", ""),
                LIVE_WORKERS: str(workers.count),  # 0: the instructor's page says none is run here
                "ROCMLAB_ROOT": str(course_repo),
                # the live pages (rocmlab.live.page): homes for hints, language, certificate rule
                "ROCMLAB_HUB_DATA": str(data),
                "ROCMLAB_HUB_LANG": lang,
                "ROCMLAB_HUB_COMPLETION": env("ROCMLAB_HUB_COMPLETION", ""),
            },
        }
    )
    roles.append(
        {
            "name": "rocmlab-live",
            "services": ["rocmlab-live"],
            "scopes": ["read:users:name", "read:users:groups", "read:users:activity", "list:users"],
        }
    )
    roles.append({"name": "user", "scopes": ["self", "access:services!service=rocmlab-live"]})
    c.Spawner.server_token_scopes = [
        "users:activity!user",
        "access:servers!server",
        "access:services!service=rocmlab-live",
    ]
    c.Spawner.environment["ROCMLAB_LIVE_URL"] = f"http://127.0.0.1:{live_port}/services/rocmlab-live/"
    # Grading workers run by the hub (rocmlab.hub.settings.LiveWorkers; 0: you start them,
    # docs/hub.md). JupyterHub restarts a managed service that exits; each gets the course's
    # environment (the model cache a `sudo` would drop) and checks every delivered lab first.
    course_environment = {
        name: os.environ[name] for name in ("ROCMLAB_CACHE", "HF_HOME", "HF_HUB_OFFLINE") if os.environ.get(name)
    }
    for number in range(1, workers.count + 1):
        services.append(
            {
                "name": f"rocmlab-live-worker-{number}",
                "command": [sys.executable, "-m", "rocmlab", "--root", str(course_repo), "live", "worker"]
                + ["--queue", str(live_data / "queue.sqlite"), "--labs", ",".join(labs)]
                + ["--profile", env("ROCMLAB_HUB_LABS_PROFILE", "smoke")],
                "environment": course_environment,
            }
        )
c.JupyterHub.load_roles = roles
if not demo and sign_in == "local":  # the Unix groups (and the roster) decide, at every start
    learners = set(group_members(learner_group)) | roster.logins(people, "learner")
    c.JupyterHub.load_groups = {
        instructor_group: {"users": sorted(set(group_members(instructor_group)) | roster_instructors)},
        LEARNERS_HUB_GROUP: {"users": sorted(learners)},  # whose servers instructors run
    }
c.JupyterHub.services = services
