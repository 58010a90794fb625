"""``LocalHub``: a hub of this machine started from Python, the one start path of ``rocmlab hub``
and of the end-to-end tests; ``DemoHub`` is ``LocalHub(demo=True)``.

The server mode uses real Unix accounts (PAM, one process per user, needs root); the demo mode
uses a shared password on loopback and is not secure. Learners get the smoke build
``labs/<lang>/`` (parameters for a CPU), or with ``profile="gpu"`` the notebooks rendered at start
with the gpu profile's parameters into ``<workdir>/labs-gpu/<lang>/``.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from ..course.course import Course
from ..errors import InputError
from . import launch as hub_process
from . import tls
from .labs import check_profile, delivered_labs, resolve_labs


class LocalHub:
    """A hub of this machine started from Python, with users created through the REST API (the
    token of the hub's ``rocmlab-admin`` service). ``rocmlab hub`` runs on it, and so do the tests.

    ``demo=True`` is ``rocmlab hub --demo`` (see DemoHub): loopback, a shared ``password`` (random
    when not given), every server run as this process's user. ``demo=False`` is the workshop
    server mode: PAM accounts, every server run as its Unix user; it needs root, and the
    ``learners`` and ``instructors`` named here must be Unix users, members of ``learner_group``
    and ``instructor_group`` (Unix groups: they decide who may log in and who is an instructor;
    a learner not named here logs in all the same). ``ip`` is the public address (server mode;
    empty: every interface), ``port`` the public port (default: a free one). ``labs`` are the lab
    ids (or numbers) delivered to every home (default: every built lab); ``profile="gpu"``
    delivers them rendered with the gpu profile's parameters (into ``workdir/labs-gpu/``) on
    start. ``launcher`` is a command that execs the one after it, run before jupyterhub (e.g.
    ``unshare`` into a mount namespace); ``check_install=False`` skips the check that every user
    can read the course's interpreter (for a launcher that makes it readable).

    ``with LocalHub(...) as hub:`` starts it; leaving the block (or a failed start) stops every
    single-user server, the hub and the proxy, and ends whatever of theirs is left.

    ``course`` is the course it serves, found by the caller (``rocmlab hub``'s command line).
    """

    def __init__(
        self,
        workdir: Path,
        *,
        demo: bool,
        learners=(),
        instructors=(),
        lang: str = "en",
        labs=(),
        ip: str = "127.0.0.1",
        port: int | None = None,
        password: str | None = None,
        timeout_s: float = 90,
        course: Course,
        profile: str = "smoke",
        learner_group: str = "rocmlab",
        instructor_group: str = "instructors",
        launcher=(),
        check_install: bool = True,
        progress=None,
        ssl_cert: str | None = None,
        ssl_key: str | None = None,
        insecure_http: bool = False,
    ):
        self.course, self.root = course, course.root
        self.workdir = Path(workdir).resolve()
        self.demo = demo
        self.learners, self.instructors = tuple(learners), tuple(instructors)
        self.learner_group, self.instructor_group = learner_group, instructor_group
        self.lang, self.timeout_s = lang, timeout_s
        check_profile(profile)
        self.profile = profile
        self.labs = resolve_labs(self.root, lang, labs)
        self.labs_dir = course.labs_dir(lang)
        self.ip = "127.0.0.1" if demo else ip
        self.internal_port = hub_process.service_port(demo)  # privileged on a server (rocmlab.hub.loopback)
        self.live_port = hub_process.service_port(demo, [self.internal_port])  # the live service
        # the public port too: no learner may bind it while the proxy restarts
        self.port = hub_process.public_port(demo, port, [self.internal_port, self.live_port])
        self.tls_cert, self.tls_key = tls.choose(  # a self-signed pair is made at start (as root)
            self.ip, self.workdir / "hub", ssl_cert, ssl_key, insecure_http or demo, create=False
        )
        self.self_signed = bool(self.tls_cert) and not ssl_cert
        self.insecure_http = insecure_http
        answers_on = self.ip if self.ip not in ("", "0.0.0.0", "::") else "127.0.0.1"
        self.url = f"{'https' if self.tls_cert else 'http'}://{answers_on}:{self.port}"
        self.password = (password or secrets.token_urlsafe(12)) if demo else ""
        if demo and len(self.password) < 8:
            raise InputError("the demo hub's shared password needs 8 characters or more")
        self.marker = secrets.token_hex(8)
        self.log_path = self.workdir / "hub.log"
        self.launcher, self.check_install = tuple(launcher), check_install
        self.progress = progress or (lambda _message: None)
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

    @property
    def public_url(self) -> str:
        """Where users reach the hub."""
        import socket

        scheme = "https" if self.tls_cert else "http"
        return self.url if self.ip not in ("", "0.0.0.0", "::") else f"{scheme}://{socket.getfqdn()}:{self.port}"

    @property
    def tls_fingerprint(self) -> str:
        """SHA-256 fingerprint of the certificate served ("" for plain HTTP)."""
        return tls.fingerprint(self.tls_cert) if self.tls_cert else ""

    def check_accounts(self) -> None:
        """Server mode: root, every named user a Unix account in the group of its role, and an
        install every user can read."""
        import grp
        import pwd

        if os.geteuid() != 0:
            raise InputError(
                "the workshop hub logs in real accounts (PAM) and runs each server as its user: run it as root "
                "(`sudo rocmlab hub`), or try `rocmlab hub --demo` on this machine"
            )
        for names, group in ((self.learners, self.learner_group), (self.instructors, self.instructor_group)):
            if not names:
                continue
            try:
                entry = grp.getgrnam(group)
            except KeyError:
                raise InputError(f"Unix group {group!r} does not exist") from None
            for name in names:
                try:
                    account = pwd.getpwnam(name)
                except KeyError:
                    raise InputError(f"{name!r} is not a Unix user of this machine") from None
                if name not in entry.gr_mem and account.pw_gid != entry.gr_gid:
                    raise InputError(f"Unix user {name!r} is not in the group {group!r}")
        if self.check_install:
            hub_process.check_shared_install(self.root)
        hub_process.check_shared_caches()

    def prepare_tls(self) -> None:
        """Make the self-signed pair the hub serves, unless it exists (it is kept across starts)."""
        if self.self_signed:
            tls.self_signed(Path(self.tls_cert).parent, self.ip)

    def close_course(self) -> None:
        """Server mode: what learners need of the checkout stays readable, the rest (solutions/,
        .git, results/...) is opened to the instructor group only (rocmlab.hub.install)."""
        import grp

        from .install import close_course

        try:
            grp.getgrnam(self.instructor_group)
        except KeyError:
            raise InputError(f"Unix group {self.instructor_group!r} (instructors) does not exist") from None
        closed = close_course(self.root, self.instructor_group)
        if closed:
            self.progress(
                f"closed to learners (group {self.instructor_group} only): {', '.join(p.name for p in closed)}"
            )

    def environment(self) -> dict:
        env = hub_process.hub_environment(
            self.root,
            self.workdir,
            demo=self.demo,
            port=self.port,
            ip=self.ip,
            lang=self.lang,
            labs=self.labs,
            api_port=hub_process.free_port(),
            internal_port=self.internal_port,
            password=self.password,
            admin_token=self._token,
            marker=self.marker,
            labs_dir=self.labs_dir,
            instructors=self.instructors if self.demo else (),
            ssl_cert=self.tls_cert,
            ssl_key=self.tls_key,
            insecure_http=self.insecure_http,
            live_port=self.live_port,
            profile=self.profile,
        )
        env.update(
            {"ROCMLAB_HUB_LEARNER_GROUP": self.learner_group, "ROCMLAB_HUB_INSTRUCTOR_GROUP": self.instructor_group}
        )
        return env

    def start(self) -> None:
        if not self.demo:
            hub_process.check_proxy_version(hub_process.find_proxy(self.root))
            self.check_accounts()
            self.close_course()
        elif os.geteuid() == 0 and self.check_install:  # the demo's servers then run as an ordinary account
            hub_process.check_shared_install(self.root)
        self.prepare_tls()
        self.labs_dir, self.labs = delivered_labs(
            self.root, self.workdir, self.lang, self.labs, self.profile, progress=self.progress
        )
        self._process = hub_process.launch(self.root, self.environment(), self.log_path, self.launcher)
        hub_process.wait_ready(self._process, self.url, self.timeout_s, self.log_path)
        users = [*self.instructors, *self.learners]
        existing = {user["name"] for user in self.api("GET", "/users")}
        if set(users) - existing:
            self.api("POST", "/users", {"usernames": sorted(set(users) - existing)})
        if self.instructors and self.demo:  # server mode: the Unix group says who is an instructor
            self.api("POST", f"/groups/{self.instructor_group}/users", {"users": list(self.instructors)})

    def wait(self) -> int:
        """Until jupyterhub exits; its exit status. Server mode keeps the course closed meanwhile."""
        if self.demo:
            return self._process.wait()
        from .install import keep_closed

        return keep_closed(self._process, self.root, self.instructor_group)

    def api(self, method: str, path: str, body=None):
        """The hub's REST API (``/hub/api`` + path) with the admin service's token; parsed JSON or None."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # the hub itself, on loopback: no certificate to trust
            f"http://127.0.0.1:{self.internal_port}/hub/api{path}",
            data=data,
            method=method,
            headers={"Authorization": f"token {self._token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            raise hub_process.HubError(
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
                raise hub_process.HubError(
                    f"the server of {name} stopped while starting; hub log ({self.log_path}):\n"
                    f"{hub_process.log_tail(self.log_path)}"
                )
            time.sleep(0.5)
        raise hub_process.HubError(
            f"the server of {name} was not ready within {self.timeout_s:g} s; hub log "
            f"({self.log_path}):\n{hub_process.log_tail(self.log_path)}"
        )

    def stop_server(self, name: str) -> None:
        try:
            self.api("DELETE", f"/users/{name}/server")
        except hub_process.HubError:
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
    def live_url(self) -> str:
        """The live service through the proxy (its pages and API, rocmlab.live.service)."""
        return f"{self.url}/services/rocmlab-live/"

    @property
    def live_queue(self) -> Path:
        return self.workdir / "live" / "queue.sqlite"

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
        hub_process.stop(self._process, self.marker)
        self._process = None


class DemoHub(LocalHub):
    """The ``--demo`` hub on a free loopback port (``LocalHub(demo=True)``).

    ``password`` is the shared password of every user (JupyterHub's SharedPasswordAuthenticator);
    every server runs as this process's user, with a home under ``workdir/homes/``.
    """

    def __init__(self, workdir: Path, **options):
        super().__init__(workdir, demo=True, **options)
