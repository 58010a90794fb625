"""``rocmlab hub [--demo]``: the workshop JupyterHub of this machine, and ``LocalHub`` (either mode)
and ``DemoHub`` (``LocalHub(demo=True)``) to start one from Python, e.g. in tests.

Both run ``jupyterhub -f env/jupyterhub/jupyterhub_config.py`` in its own process group, the
config driven by ``ROCMLAB_HUB_*`` variables (see the config file). The server mode uses real
Unix accounts (PAM, one process per user, needs root); ``--demo`` uses a shared password on
loopback and is not secure. Every process of a hub carries a marker in its environment
(``ROCMLAB_HUB_ID``), so stopping it also finds servers and kernels the hub lost track of.

Learners get the smoke build ``labs/<lang>/`` (parameters for a CPU), or with ``--profile gpu`` the
notebooks rendered at start with the gpu profile's parameters into ``<data>/labs-gpu/<lang>/``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from .catalog import LabError, discover, find_root, select

CONFIG = Path("env") / "jupyterhub" / "jupyterhub_config.py"
LOCAL_PROXY = Path(".venv") / "hub-node" / "node_modules" / ".bin" / "configurable-http-proxy"
DEFAULT_SERVER_DATA = Path("/srv/rocmlab-hub")
PROFILES = ("smoke", "gpu")  # smoke: the labs/ build as it is; gpu: rendered by the hub at start
COURSE_ID = "rocmlab"
BANNER = """
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
!!  DEMO HUB: NOT SECURE. Anyone who can reach {url} and knows the shared
!!  password is any user; every server runs as {user}, with no isolation.
!!  Loopback only. For a workshop, run `sudo rocmlab hub` (real accounts).
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
"""


class HubError(LabError):
    """The hub cannot be set up or started; the message says what to do."""


# ------------------------------------------------------------------ set-up


def find_proxy(root: Path) -> Path:
    """configurable-http-proxy from ``make hub-setup`` (.venv/hub-node) or from PATH."""
    local = root / LOCAL_PROXY
    if local.is_file() and os.access(local, os.X_OK):
        return local
    on_path = shutil.which("configurable-http-proxy")
    if on_path:
        return Path(on_path)
    raise HubError(
        f"configurable-http-proxy not found (looked in {local} and on PATH): run `make hub-setup` "
        "(it installs it with npm into .venv/hub-node)"
    )


def unshared_paths(paths) -> list[str]:
    """Paths another user could not use: a folder on the way without o+x, a file without o+r
    (o+x too for the interpreter, which comes first)."""
    problems = []
    for index, path in enumerate(paths):
        path = Path(path).resolve()
        need = 0o005 if index == 0 else 0o004
        if path.exists() and path.stat().st_mode & need != need:
            problems.append(f"{path} (mode {path.stat().st_mode & 0o777:o})")
        for folder in path.parents:
            if folder.exists() and not folder.stat().st_mode & 0o001:
                problems.append(f"{folder} (mode {folder.stat().st_mode & 0o777:o})")
    return sorted(set(problems))


def check_shared_install(root: Path) -> None:
    """Real accounts run the course's interpreter and read its configs as themselves."""
    problems = unshared_paths(
        [sys.executable, root / CONFIG.parent / "nbgrader_config.py", root / "autograder" / "nbgrader_config.py"]
    )
    if problems:
        raise HubError(
            "learners' servers run as their own Unix users, who cannot use: "
            + ", ".join(problems)
            + ". Install the course where every user can read it (e.g. /opt/rocmlab, its .venv "
            "made from a system Python), or open these modes"
        )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def resolve_labs(root: Path, lang: str, labs) -> list[str]:
    """Lab ids (numbers allowed) whose student notebooks are built under labs/<lang>/."""
    if lang not in ("en", "zh"):
        raise HubError(f"--lang: expected en or zh, got {lang!r}")
    ids = (
        [lab.id for lab in select(discover(root), list(labs))]
        if labs
        else [lab.id for lab in discover(root) if (root / "labs" / lang / lab.id).is_dir()]
    )
    for lab_id in ids:
        notebook = root / "labs" / lang / lab_id / f"{lab_id}.ipynb"
        if not notebook.is_file():
            raise HubError(f"{notebook}: not built; run `rocmlab build` first")
    return ids


def check_profile(profile: str) -> None:
    if profile not in PROFILES:
        raise HubError(f"--profile: expected {' or '.join(PROFILES)}, got {profile!r}")


def delivered_labs(root: Path, data: Path, lang: str, lab_ids, profile: str, progress=print) -> tuple[Path, list[str]]:
    """The folder the hub delivers notebooks from, and the labs in it: ``labs/<lang>/`` as built for
    smoke; for another profile the notebooks with its parameters, built into
    ``<data>/labs-<profile>/<lang>/`` (a lab without the profile is left out, ``progress`` says why)."""
    from .build import build

    check_profile(profile)
    if profile == "smoke":
        return root / "labs" / lang, list(lab_ids)
    out = data / f"labs-{profile}"
    labs = select(discover(root), list(lab_ids)) if lab_ids else []
    built = build(root, labs, [lang], out, progress=progress, profile=profile)
    return out / lang, [folder.name for folder in built]


def hub_environment(
    root: Path,
    data: Path,
    *,
    demo: bool,
    port: int,
    ip: str = "",
    lang: str = "en",
    labs=(),
    api_port: int | None = None,
    internal_port: int | None = None,
    password: str = "",
    admin_token: str = "",
    instructors=(),
    marker: str = "",
    proxy: Path | None = None,
    labs_dir: Path | None = None,
) -> dict:
    """The variables jupyterhub_config.py reads, on top of this process's environment."""
    env = dict(os.environ)
    env.update(
        {
            "ROCMLAB_HUB_MODE": "demo" if demo else "server",
            "ROCMLAB_HUB_IP": "127.0.0.1" if demo else ip,
            "ROCMLAB_HUB_PORT": str(port),
            "ROCMLAB_HUB_API_PORT": str(api_port or (free_port() if demo else 8001)),
            "ROCMLAB_HUB_INTERNAL_PORT": str(internal_port or (free_port() if demo else 8081)),
            "ROCMLAB_HUB_DATA": str(data),
            "ROCMLAB_ROOT": str(root),
            "ROCMLAB_HUB_LANG": lang,
            "ROCMLAB_HUB_LABS_DIR": str(labs_dir or root / "labs" / lang),
            "ROCMLAB_HUB_LABS": ",".join(labs),
            "ROCMLAB_HUB_PASSWORD": password,
            "ROCMLAB_HUB_ADMIN_TOKEN": admin_token,
            "ROCMLAB_HUB_INSTRUCTORS": ",".join(instructors),
            "ROCMLAB_HUB_ID": marker or secrets.token_hex(8),
            "ROCMLAB_HUB_PROXY": str(proxy or find_proxy(root)),
        }
    )
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")])
    return env


# ------------------------------------------------------------------ the hub process


def launch(root: Path, env: dict, log_path: Path, launcher=()) -> subprocess.Popen:
    """jupyterhub in its own session and process group, its output in ``log_path``; ``launcher``: a
    command that execs the one after it (e.g. ``unshare ...``), put before jupyterhub's."""
    jupyterhub = Path(sys.executable).parent / "jupyterhub"
    command = [*launcher, str(jupyterhub) if jupyterhub.exists() else "jupyterhub", "-f", str(root / CONFIG)]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            command,
            cwd=env["ROCMLAB_HUB_DATA"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def log_tail(log_path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_ready(process: subprocess.Popen, url: str, timeout_s: float, log_path: Path) -> None:
    """Until the hub answers through the proxy; raises HubError if it exits or times out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise HubError(
                f"jupyterhub exited with status {process.returncode} while starting; "
                f"its log ({log_path}):\n{log_tail(log_path)}"
            )
        try:
            with urllib.request.urlopen(f"{url}/hub/api/", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise HubError(
        f"jupyterhub did not answer at {url} within {timeout_s:g} s; its log ({log_path}):\n{log_tail(log_path)}"
    )


def marked_processes(marker: str) -> list:
    """Processes whose environment carries ROCMLAB_HUB_ID=<marker> (this user's, or all as root)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.pid != os.getpid() and proc.environ().get("ROCMLAB_HUB_ID") == marker:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def stop(process: subprocess.Popen | None, marker: str, timeout_s: float = 20) -> None:
    """SIGTERM the hub (it stops its servers and proxy), then end whatever is left of its processes."""
    import psutil

    tree = []
    if process is not None and process.poll() is None:
        try:
            tree = psutil.Process(process.pid).children(recursive=True)
        except psutil.Error:
            tree = []  # the hub ended meanwhile: the marker still finds its processes
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
    if process is not None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        process.wait(timeout=timeout_s)
    left = {p.pid: p for p in [*tree, *marked_processes(marker)] if _alive(p)}
    for proc in left.values():
        _signal(proc, signal.SIGTERM)
    _, alive = psutil.wait_procs(list(left.values()), timeout=5)
    for proc in alive:
        _signal(proc, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=5)


def _alive(proc) -> bool:
    try:
        return proc.is_running() and proc.status() != "zombie"
    except Exception:  # noqa: BLE001 (gone while looking)
        return False


def _signal(proc, sig) -> None:
    import psutil

    with contextlib.suppress(psutil.Error):  # gone while looking
        proc.send_signal(sig)


# ------------------------------------------------------------------ LocalHub, DemoHub


class LocalHub:
    """A hub of this machine started from Python, on a free loopback port, with users created
    through the REST API (the token of the hub's ``rocmlab-admin`` service).

    ``demo=True`` is ``rocmlab hub --demo`` (see DemoHub). ``demo=False`` is the workshop server
    mode: PAM accounts, every server run as its Unix user; needs root, and ``learners`` and
    ``instructors`` must be Unix users, members of ``learner_group`` and ``instructor_group``
    (Unix groups: they decide who may log in and who is an instructor). ``launcher`` is a command
    that execs the one after it, run before jupyterhub (e.g. ``unshare`` into a mount namespace);
    ``check_install=False`` skips the check that every user can read the course's interpreter
    (for a launcher that makes it readable). ``profile="gpu"`` delivers the notebooks rendered with
    the gpu profile's parameters (into ``workdir/labs-gpu/``) on start.

    ``with LocalHub(...) as hub:`` starts it; leaving the block (or a failed start) stops every
    single-user server, the hub and the proxy, and ends whatever of theirs is left.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        demo: bool,
        learners=("learner1", "learner2"),
        instructors=("instructor",),
        lang: str = "en",
        labs=("01-rocm-setup",),
        port: int | None = None,
        timeout_s: float = 90,
        root: Path | None = None,
        profile: str = "smoke",
        learner_group: str = "rocmlab",
        instructor_group: str = "instructors",
        launcher=(),
        check_install: bool = True,
    ):
        self.root = Path(root).resolve() if root else find_root()
        self.workdir = Path(workdir).resolve()
        self.demo = demo
        self.learners, self.instructors = tuple(learners), tuple(instructors)
        self.learner_group, self.instructor_group = learner_group, instructor_group
        self.lang, self.timeout_s = lang, timeout_s
        check_profile(profile)
        self.profile = profile
        self.labs = resolve_labs(self.root, lang, labs)
        self.labs_dir = self.root / "labs" / lang
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.password = secrets.token_urlsafe(12) if demo else ""
        self.marker = secrets.token_hex(8)
        self.log_path = self.workdir / "hub.log"
        self.launcher, self.check_install = tuple(launcher), check_install
        self._token = secrets.token_hex(32)
        self._process: subprocess.Popen | None = None

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def check_accounts(self) -> None:
        """Server mode: root, and every user a Unix account in the group of its role."""
        import grp
        import pwd

        if os.geteuid() != 0:
            raise HubError("the server-mode hub runs each server as its Unix user: it needs root")
        for names, group in ((self.learners, self.learner_group), (self.instructors, self.instructor_group)):
            try:
                entry = grp.getgrnam(group)
            except KeyError:
                raise HubError(f"Unix group {group!r} does not exist") from None
            for name in names:
                try:
                    account = pwd.getpwnam(name)
                except KeyError:
                    raise HubError(f"{name!r} is not a Unix user of this machine") from None
                if name not in entry.gr_mem and account.pw_gid != entry.gr_gid:
                    raise HubError(f"Unix user {name!r} is not in the group {group!r}")
        if self.check_install:
            check_shared_install(self.root)

    def environment(self) -> dict:
        env = hub_environment(
            self.root,
            self.workdir,
            demo=self.demo,
            port=self.port,
            ip="127.0.0.1",
            lang=self.lang,
            labs=self.labs,
            api_port=free_port(),
            internal_port=free_port(),
            password=self.password,
            admin_token=self._token,
            marker=self.marker,
            labs_dir=self.labs_dir,
            instructors=self.instructors if self.demo else (),
        )
        env.update(
            {"ROCMLAB_HUB_LEARNER_GROUP": self.learner_group, "ROCMLAB_HUB_INSTRUCTOR_GROUP": self.instructor_group}
        )
        return env

    def start(self) -> None:
        if not self.demo:
            self.check_accounts()
        self.labs_dir, self.labs = delivered_labs(
            self.root, self.workdir, self.lang, self.labs, self.profile, progress=lambda _msg: None
        )
        self._process = launch(self.root, self.environment(), self.log_path, self.launcher)
        wait_ready(self._process, self.url, self.timeout_s, self.log_path)
        users = [*self.instructors, *self.learners]
        existing = {user["name"] for user in self.api("GET", "/users")}
        if set(users) - existing:
            self.api("POST", "/users", {"usernames": sorted(set(users) - existing)})
        if self.instructors and self.demo:  # server mode: the Unix group says who is an instructor
            self.api("POST", f"/groups/{self.instructor_group}/users", {"users": list(self.instructors)})

    def api(self, method: str, path: str, body=None):
        """The hub's REST API (``/hub/api`` + path) with the admin service's token; parsed JSON or None."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}/hub/api{path}",
            data=data,
            method=method,
            headers={"Authorization": f"token {self._token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            raise HubError(
                f"hub API {method} {path}: HTTP {exc.code}: {exc.read().decode(errors='replace')[:500]}"
            ) from None
        return json.loads(text) if text.strip() else None

    def start_server(self, name: str) -> str:
        """Start (or wait for) ``name``'s single-user server; its base URL through the proxy."""
        user = self.api("GET", f"/users/{name}")
        if "" not in user.get("servers", {}):
            self.api("POST", f"/users/{name}/server")
        started = time.monotonic()
        while time.monotonic() < started + self.timeout_s:
            server = self.api("GET", f"/users/{name}").get("servers", {}).get("")
            if server and server.get("ready"):
                return f"{self.url}/user/{name}/"
            if not server and time.monotonic() > started + 5:  # a failed spawn removes its entry
                raise HubError(
                    f"the server of {name} stopped while starting; hub log ({self.log_path}):\n"
                    f"{log_tail(self.log_path)}"
                )
            time.sleep(0.5)
        raise HubError(
            f"the server of {name} was not ready within {self.timeout_s:g} s; hub log "
            f"({self.log_path}):\n{log_tail(self.log_path)}"
        )

    def stop_server(self, name: str) -> None:
        try:
            self.api("DELETE", f"/users/{name}/server")
        except HubError:
            return
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline and self.api("GET", f"/users/{name}").get("servers"):
            time.sleep(0.3)

    def user_token(self, name: str) -> str:
        """A new API token of ``name`` (for that user's Jupyter server API)."""
        return self.api("POST", f"/users/{name}/tokens", {"note": "rocmlab LocalHub", "expires_in": 3600})["token"]

    def home(self, name: str) -> Path:
        if self.demo:
            return self.workdir / "homes" / name
        import pwd

        return Path(pwd.getpwnam(name).pw_dir)

    @property
    def exchange(self) -> Path:
        return self.workdir / "exchange"

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            for name in [*self.instructors, *self.learners]:
                try:
                    self.stop_server(name)
                except Exception:  # noqa: BLE001 (the hub going down is handled by stop() below)
                    break
        stop(self._process, self.marker)
        self._process = None


class DemoHub(LocalHub):
    """The ``--demo`` hub on a free loopback port (``LocalHub(demo=True)``).

    ``password`` is the shared password of every user (JupyterHub's SharedPasswordAuthenticator);
    every server runs as this process's user, with a home under ``workdir/homes/``.
    """

    def __init__(self, workdir: Path, **options):
        super().__init__(workdir, demo=True, **options)


# ------------------------------------------------------------------ the command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--demo", action="store_true", help="NOT SECURE: shared password, every server as this user, loopback only"
    )
    parser.add_argument("--port", type=int, default=8000, help="public port (0: a free one)")
    parser.add_argument("--ip", default="", help="public address (default: all; --demo: always 127.0.0.1)")
    parser.add_argument("--lang", default="en", choices=["en", "zh"], help="language of the delivered notebooks")
    parser.add_argument("--labs", nargs="*", default=[], help="labs put in every home (default: every built lab)")
    parser.add_argument(
        "--profile",
        default="smoke",
        choices=PROFILES,
        help="parameters of the delivered notebooks: smoke (labs/ as built, for CPUs) or gpu "
        "(rendered at start into DATA_DIR/labs-gpu/; labs without a gpu profile are left out)",
    )
    parser.add_argument(
        "--data-dir",
        help=f"hub state, exchange, demo homes (default {DEFAULT_SERVER_DATA}; --demo: a folder in your user data dir)",
    )
    parser.add_argument(
        "--instructors", nargs="*", default=["instructor"], help="--demo: hub users in the instructor group"
    )
    parser.add_argument("--timeout", type=float, default=120, help="seconds to wait for the hub to start")


def _data_dir(args) -> Path:
    if args.data_dir:
        return Path(args.data_dir).resolve()
    if args.demo:
        from platformdirs import user_data_dir

        return Path(user_data_dir("rocmlab")) / "hub-demo"
    return DEFAULT_SERVER_DATA


def run(args) -> int:
    root = Path(args.root).resolve() if getattr(args, "root", None) else find_root()
    if not args.demo and os.geteuid() != 0:
        raise HubError(
            "the workshop hub logs in real accounts (PAM) and runs each server as its user: "
            "run it as root (`sudo rocmlab hub`), or try `rocmlab hub --demo` on this machine"
        )
    if not args.demo:
        check_shared_install(root)
        if not os.environ.get("ROCMLAB_CACHE"):
            print(
                "warning: ROCMLAB_CACHE is not set, so every learner's first lab builds the course model in "
                "their own cache (about two minutes of CPU each): build it once with "
                "`ROCMLAB_CACHE=/srv/rocmlab-cache rocmlab assets build-model` and start the hub with that "
                "ROCMLAB_CACHE (and HF_HOME for the gpu profile's models)",
                file=sys.stderr,
            )
    labs = resolve_labs(root, args.lang, args.labs)
    port = args.port or free_port()
    data = _data_dir(args)
    labs_dir, labs = delivered_labs(
        root, data, args.lang, labs, args.profile, progress=lambda msg: print(msg, file=sys.stderr)
    )
    password = os.environ.get("ROCMLAB_HUB_PASSWORD") or secrets.token_urlsafe(9)
    if args.demo and len(password) < 8:
        raise HubError("ROCMLAB_HUB_PASSWORD: the demo hub's shared password needs 8 characters or more")
    marker = secrets.token_hex(8)
    env = hub_environment(
        root,
        data,
        demo=args.demo,
        port=port,
        ip=args.ip,
        lang=args.lang,
        labs=labs,
        password=password if args.demo else "",
        instructors=args.instructors if args.demo else (),
        marker=marker,
        labs_dir=labs_dir,
    )
    url = f"http://{'127.0.0.1' if args.demo else (args.ip or socket.getfqdn())}:{port}"
    if args.demo:
        print(BANNER.format(url=url, user=_whoami()), file=sys.stderr)
    log_path = data / "hub.log"
    process = None
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        process = launch(root, env, log_path)
        probe = f"http://{args.ip if args.ip and args.ip != '0.0.0.0' and not args.demo else '127.0.0.1'}:{port}"
        wait_ready(process, probe, args.timeout, log_path)
        print(
            f"rocmlab hub ({'demo' if args.demo else 'server'}) at {url}  labs: {', '.join(labs) or '-'} "
            f"({args.profile} profile)  log: {log_path}"
        )
        if args.demo:
            print(
                f"log in with any user name and the password {password}; "
                f"instructors ({', '.join(args.instructors) or '-'}) get the formgrader"
            )
        print("Ctrl-C stops the hub and every server", flush=True)
        status = process.wait()
        print(f"jupyterhub exited with status {status}; log: {log_path}\n{log_tail(log_path)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        stop(process, marker)
        signal.signal(signal.SIGTERM, previous)


def _whoami() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name
