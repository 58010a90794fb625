"""``rocmlab hub [--demo]``: the workshop JupyterHub of this machine, on ``LocalHub``."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from .. import processes
from ..course.course import Course
from ..errors import ExitCode
from .completion import rule_warning
from .labs import LANGUAGES, PROFILES
from .language import missing_pack
from .launch import log_tail
from .local import LocalHub
from .settings import HubGroups, LiveWorkers

DEFAULT_SERVER_DATA = Path("/srv/rocmlab-hub")
BANNER = """
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
!!  DEMO HUB: NOT SECURE. Anyone who can reach {url} and knows the shared
!!  password is any user; every server runs as {user}, with no isolation.
!!  Loopback only. For a workshop, run `sudo rocmlab hub` (real accounts).
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
"""
CACHE_WARNING = (
    "warning: ROCMLAB_CACHE is not set, so every learner's first lab builds the course model in "
    "their own cache (about five minutes of CPU each): build it once with "
    "`ROCMLAB_CACHE=/srv/rocmlab-cache rocmlab assets build-model`, then lab 03's adapter with "
    "`python -m rocmlab.lab.qc_adapter`, and start the hub with that "
    "ROCMLAB_CACHE (and HF_HOME for the gpu profile's models)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "The workshop JupyterHub of this machine: real Unix accounts (PAM, run as root); "
        "--demo: loopback, one shared password, not secure."
    )
    parser.add_argument(
        "--demo", action="store_true", help="NOT SECURE: shared password, every server as this user, loopback only"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        metavar="N",
        help="public port (default 443, below 1024 so that no learner can bind it; --demo: 8000; 0: a free one)",
    )
    parser.add_argument(
        "--ip", default="", metavar="ADDRESS", help="public address (default: all; --demo: always 127.0.0.1)"
    )
    parser.add_argument(
        "--lang",
        default="en",
        choices=LANGUAGES,
        help="language of the delivered notebooks and of JupyterLab's menus (zh: the zh-CN language pack)",
    )
    parser.add_argument(
        "--labs", nargs="*", default=[], metavar="LAB", help="labs put in every home (default: every built lab)"
    )
    parser.add_argument(
        "--profile",
        default="smoke",
        choices=PROFILES,
        help="parameters of the delivered notebooks: smoke (labs/ as built, for CPUs) or gpu "
        "(rendered at start into DATA_DIR/labs-gpu/; labs without a gpu profile are left out)",
    )
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        help=f"hub state, exchange, demo homes (default {DEFAULT_SERVER_DATA}; --demo: a folder in your user data dir)",
    )
    parser.add_argument(
        "--instructors",
        nargs="*",
        default=["instructor"],
        metavar="USER",
        help="--demo: hub users in the instructor group",
    )
    parser.add_argument(
        "--timeout", type=float, default=120, metavar="SECONDS", help="seconds to wait for the hub to start"
    )
    parser.add_argument("--ssl-cert", metavar="PEM", help="certificate the hub serves HTTPS with (with --ssl-key)")
    parser.add_argument("--ssl-key", metavar="PEM", help="its private key")
    parser.add_argument(
        "--insecure-http",
        action="store_true",
        help="serve plain HTTP beyond loopback (default there: HTTPS, with a self-signed certificate "
        "made in DATA_DIR/hub/tls/ when --ssl-cert is not given; its fingerprint is printed)",
    )


def data_folder(data_dir: str | None, demo: bool) -> Path:
    if data_dir:
        return Path(data_dir).resolve()
    if demo:
        from platformdirs import user_data_dir

        return Path(user_data_dir("rocmlab")) / "hub-demo"
    return DEFAULT_SERVER_DATA


def main(
    *,
    demo: bool = False,
    port: int | None = None,
    ip: str = "",
    lang: str = "en",
    labs=(),
    profile: str = "smoke",
    data_dir: str | None = None,
    instructors=("instructor",),
    timeout: float = 120,
    course: Course,
    ssl_cert: str | None = None,
    ssl_key: str | None = None,
    insecure_http: bool = False,
) -> int:
    """Start the hub and serve until Ctrl-C or SIGTERM (exit 0), or until jupyterhub exits (exit 1)."""
    groups = HubGroups.from_environment()
    workers = LiveWorkers.from_environment()  # a bad ROCMLAB_LIVE_WORKERS stops here, named
    hub = LocalHub(
        data_folder(data_dir, demo),
        demo=demo,
        instructors=instructors if demo else (),
        lang=lang,
        labs=labs,
        ip=ip,
        port=(8000 if demo else 443) if port is None else (port or None),
        password=os.environ.get("ROCMLAB_HUB_PASSWORD") or None,
        timeout_s=timeout,
        course=course,
        profile=profile,
        progress=lambda message: print(message, file=sys.stderr),
        ssl_cert=ssl_cert,
        ssl_key=ssl_key,
        insecure_http=insecure_http,
        learner_group=groups.learner,
        instructor_group=groups.instructor,
    )
    if demo:
        print(BANNER.format(url=hub.url, user=_whoami()), file=sys.stderr)
    elif not os.environ.get("ROCMLAB_CACHE"):
        print(CACHE_WARNING, file=sys.stderr)
    if os.environ.get("ROCMLAB_LIVE", "1") != "0":
        print(workers.warning() or workers.describe(), file=sys.stderr)
    certificate = rule_warning(hub.root, hub.labs)
    if certificate:
        print(certificate, file=sys.stderr)
    if missing_pack(lang):
        print(
            f"JupyterLab's menus stay in English: {missing_pack(lang)} is not installed (pip install -e '.[hub]')",
            file=sys.stderr,
        )
    previous = processes.exit_on_sigterm()
    try:
        with hub:
            _say_ready(hub)
            status = hub.wait()
            print(
                f"jupyterhub exited with status {status}; log: {hub.log_path}\n{log_tail(hub.log_path)}",
                file=sys.stderr,
            )
            return ExitCode.FAILED
    except KeyboardInterrupt:
        return ExitCode.OK
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _say_ready(hub: LocalHub) -> None:
    mode = "demo" if hub.demo else "server"
    print(
        f"rocmlab hub ({mode}) at {hub.public_url}  labs: {', '.join(hub.labs) or '-'} "
        f"({hub.profile} profile)  log: {hub.log_path}"
    )
    if hub.tls_fingerprint:
        print(f"TLS certificate {hub.tls_cert}, SHA-256 fingerprint {hub.tls_fingerprint}")
        print("learners compare it with what their browser shows before they accept the certificate")
    elif not hub.demo and hub.insecure_http:
        print("warning: plain HTTP (--insecure-http): passwords cross the network in clear", file=sys.stderr)
    if hub.demo:
        print(
            f"log in with any user name and the password {hub.password}; "
            f"instructors ({', '.join(hub.instructors) or '-'}) get the formgrader"
        )
    print("Ctrl-C stops the hub and every server", flush=True)


def _whoami() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name
