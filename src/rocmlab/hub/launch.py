"""The jupyterhub process of a rocmlab hub: what it needs installed, its environment, start and stop.

jupyterhub runs ``env/jupyterhub/jupyterhub_config.py`` in a session of its own, the config
driven by ``ROCMLAB_HUB_*`` variables (see the config file). Every process of a hub carries a
marker in its environment (``ROCMLAB_HUB_ID``), so stopping it also finds servers and kernels
the hub lost track of.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from .. import processes
from ..errors import CommandFailed
from .loopback import free_privileged_port

CONFIG = Path("env") / "jupyterhub" / "jupyterhub_config.py"
LOCAL_PROXY = Path(".venv") / "hub-node" / "node_modules" / ".bin" / "configurable-http-proxy"
HUB_MARKER = "ROCMLAB_HUB_ID"


class HubError(CommandFailed):
    """The hub cannot be set up or started; the message says what to do."""


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


def check_proxy_version(proxy: Path, needed: int = 5) -> None:
    """A workshop server's proxy API is a Unix socket (rocmlab.hub.loopback), which
    configurable-http-proxy serves from version 5 (``--api-socket``); HubError for an older one.
    The version is its package.json's, beside the resolved executable (unknown: not checked)."""
    try:
        package = json.loads((Path(proxy).resolve().parent.parent / "package.json").read_text())
        major = int(str(package["version"]).split(".")[0])
    except (OSError, ValueError, KeyError):
        return
    if package.get("name") == "configurable-http-proxy" and major < needed:
        raise HubError(
            f"configurable-http-proxy {package['version']} at {proxy}: a workshop server needs {needed} or later "
            "(its API on a Unix socket no learner can reach): run `make hub-setup`"
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


def writable_by_others(folder: Path, limit: int = 100_000) -> list[str]:
    """Entries of ``folder`` (itself included, links not followed) that users other than the owner
    and the group may write: in a cache every server reads (ROCMLAB_CACHE, HF_HOME), a learner could
    put a model, or its remote code, that classmates then load. At most ``limit`` entries are looked at."""
    found, seen = [], 0
    if not folder.is_dir() or folder.is_symlink():
        return found
    for parent, _folders, files in os.walk(folder):
        for path in [Path(parent), *(Path(parent) / name for name in files)]:
            seen += 1
            mode = path.lstat().st_mode
            if mode & 0o002 and not path.is_symlink():
                found.append(str(path))
        if seen > limit:
            break
    return sorted(set(found))


def check_shared_caches(environ=None) -> None:
    """The caches every server reads are not writable by learners (see ``writable_by_others``)."""
    environ = os.environ if environ is None else environ
    for name in ("ROCMLAB_CACHE", "HF_HOME"):
        if environ.get(name):
            open_paths = writable_by_others(Path(environ[name]))
            if open_paths:
                raise HubError(
                    f"{name}={environ[name]} is read by every server, but others may write "
                    f"{', '.join(open_paths[:5])}{' ...' if len(open_paths) > 5 else ''}: a learner could put a "
                    f"model or code there that classmates load. `chmod -R o-w {environ[name]}`"
                )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# The ports browsers refuse to load a page from (Chromium: ERR_UNSAFE_PORT): the Fetch standard's
# "bad port" list, https://fetch.spec.whatwg.org/#port-blocking, as web-platform-tests checks it
# (fetch/api/request/request-bad-port.any.js). `rocmlab hub --port 0` once picked 995 (pop3s).
BROWSER_BLOCKED_PORTS = frozenset(
    {1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102, 103, 104}
    | {109, 110, 111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427, 465, 512, 513, 514}
    | {515, 526, 530, 531, 532, 540, 548, 554, 556, 563, 587, 601, 636, 989, 990, 993, 995, 1719, 1720}
    | {1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667, 6668, 6669, 6679, 6697, 10080}
)


def public_port(demo: bool, port: int | None, used=()) -> int:
    """The proxy's public port: ``port`` when given (HubError for one browsers refuse), else a free
    one as for a service (``service_port``) that browsers load pages from."""
    if port:
        if port in BROWSER_BLOCKED_PORTS:
            raise HubError(
                f"port {port}: browsers refuse to load pages from it (a bad port of the Fetch standard, "
                "https://fetch.spec.whatwg.org/#port-blocking): choose another, e.g. 443"
            )
        return port
    for _ in range(100):
        chosen = service_port(demo, [*used, *BROWSER_BLOCKED_PORTS])
        if chosen not in BROWSER_BLOCKED_PORTS:  # free_port() does not take ``used``
            return chosen
    raise HubError("no free port that browsers load pages from: give one with --port")


def service_port(demo: bool, used=()) -> int:
    """A free loopback port for a root-side service: below 1024 on a workshop server, where no
    learner may bind it while the service is down (rocmlab.hub.loopback)."""
    return free_port() if demo else free_privileged_port(used)


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
    ssl_cert: str = "",
    ssl_key: str = "",
    insecure_http: bool = False,
    live_port: int | None = None,
    profile: str = "smoke",
) -> dict:
    """The variables jupyterhub_config.py reads, on top of this process's environment."""
    env = dict(os.environ)
    internal_port = internal_port or service_port(demo)
    env.update(
        {
            "ROCMLAB_HUB_MODE": "demo" if demo else "server",
            "ROCMLAB_HUB_IP": "127.0.0.1" if demo else ip,
            "ROCMLAB_HUB_PORT": str(port),
            "ROCMLAB_HUB_API_PORT": str(api_port or (free_port() if demo else 8001)),  # server: a Unix socket
            "ROCMLAB_HUB_INTERNAL_PORT": str(internal_port),
            "ROCMLAB_HUB_DATA": str(data),
            "ROCMLAB_ROOT": str(root),
            "ROCMLAB_HUB_LANG": lang,
            "ROCMLAB_HUB_LABS_DIR": str(labs_dir or root / "labs" / lang),
            "ROCMLAB_HUB_LABS": ",".join(labs),
            "ROCMLAB_HUB_LABS_PROFILE": profile,  # the delivered notebooks': the hub's workers grade with it
            "ROCMLAB_HUB_PASSWORD": password,
            "ROCMLAB_HUB_ADMIN_TOKEN": admin_token,
            "ROCMLAB_HUB_INSTRUCTORS": ",".join(instructors),
            HUB_MARKER: marker or secrets.token_hex(8),
            "ROCMLAB_HUB_PROXY": str(proxy or find_proxy(root)),
            "ROCMLAB_HUB_SSL_CERT": ssl_cert,
            "ROCMLAB_HUB_SSL_KEY": ssl_key,
            "ROCMLAB_HUB_INSECURE_HTTP": "1" if insecure_http else "",
            "ROCMLAB_LIVE_PORT": str(live_port or service_port(demo, [internal_port])),
        }
    )
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")])
    return env


def launch(root: Path, env: dict, log_path: Path, launcher=()) -> subprocess.Popen:
    """jupyterhub in its own session and process group, its output in ``log_path``; ``launcher``: a
    command that execs the one after it (e.g. ``unshare ...``), put before jupyterhub's."""
    jupyterhub = Path(sys.executable).parent / "jupyterhub"
    command = [*launcher, str(jupyterhub) if jupyterhub.exists() else "jupyterhub", "-f", str(root / CONFIG)]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.fchmod(fd, 0o600)  # private: it names every learner and their servers' events (an older hub's was 644)
    with os.fdopen(fd, "ab") as log:
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
        try:  # a liveness probe only (no credentials): the hub's certificate may be self-signed
            context = ssl._create_unverified_context() if url.startswith("https:") else None
            with urllib.request.urlopen(f"{url}/hub/api/", timeout=5, context=context) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise HubError(
        f"jupyterhub did not answer at {url} within {timeout_s:g} s; its log ({log_path}):\n{log_tail(log_path)}"
    )


def stop(process: subprocess.Popen | None, marker: str, timeout_s: float = 20) -> None:
    """SIGTERM the hub (it stops its servers and proxy), then end whatever is left of its processes:
    its tree as it was, and every process carrying its marker."""
    tree = processes.Tree(process.pid) if process is not None else None
    if tree is not None:
        tree.track()
        processes.stop(process, timeout_s)
    processes.end([*(tree.alive() if tree else []), *processes.marked(HUB_MARKER, marker)])
