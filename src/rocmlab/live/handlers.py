"""The live service's settings and the base of its handlers: what every page and API of the
service (rocmlab.live.service) and of its plugins (rocmlab.live.page) build on.

``LiveSettings.from_environment`` reads the ``ROCMLAB_LIVE_*`` variables the hub config sets.
``LiveHandler`` is a request logged in through the hub (HubOAuth): ``self.live`` (the settings),
``self.queue``, ``self.learner`` (the one the hub logged in, never a name in the request),
``self.is_instructor`` and ``self.write_json``. ``ApiHandler`` answers JSON and refuses a request
the hub did not log in with 403 instead of a redirect.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from jupyterhub.services.auth import HubOAuthenticated
from tornado import web

from ..hub.settings import LIVE_INSTRUCT_SCOPE, HubGroups
from .queue import LiveQueue


@dataclass
class LiveSettings:
    """What the service needs; ``from_environment`` reads it from the ``ROCMLAB_LIVE_*`` variables
    the hub config sets (each named below)."""

    queue_path: Path  # ROCMLAB_LIVE_DB
    exchange: Path  # ROCMLAB_LIVE_EXCHANGE: the exchange root (holds <course>/inbound/<learner>/)
    spool: Path  # ROCMLAB_LIVE_SPOOL: the collected copies, the service's own
    course_id: str = "rocmlab"  # ROCMLAB_COURSE_ID
    labs: tuple[str, ...] = ()  # ROCMLAB_HUB_LABS: the labs that may be submitted (empty: any)
    rate_limit: int = 5  # ROCMLAB_LIVE_RATE_LIMIT: submissions per learner and lab in the window
    rate_window_s: float = 3600.0  # ROCMLAB_LIVE_RATE_WINDOW_S
    instructor_group: str = "instructors"  # ROCMLAB_HUB_INSTRUCTOR_GROUP
    owner_is_account: bool = False  # ROCMLAB_HUB_MODE=server: inbound/<learner> must be that account's
    worker_token: str = ""  # ROCMLAB_LIVE_WORKER_TOKEN: the workers' HTTP API (empty: closed)
    lease_s: float = 300.0  # ROCMLAB_LIVE_LEASE_S: the longest a lease is granted over HTTP
    extra: dict = field(default_factory=dict)  # plugins' own settings

    @classmethod
    def from_environment(cls, environ=None) -> LiveSettings:
        env = os.environ if environ is None else environ
        missing = [name for name in ("ROCMLAB_LIVE_DB", "ROCMLAB_LIVE_EXCHANGE") if not env.get(name)]
        if missing:
            raise ValueError(
                f"the live service needs {', '.join(missing)} (set by env/jupyterhub/jupyterhub_config.py)"
            )
        queue_path = Path(env["ROCMLAB_LIVE_DB"])
        return cls(
            queue_path=queue_path,
            exchange=Path(env["ROCMLAB_LIVE_EXCHANGE"]),
            spool=Path(env.get("ROCMLAB_LIVE_SPOOL") or queue_path.parent / "spool"),
            course_id=env.get("ROCMLAB_COURSE_ID", "rocmlab"),
            labs=tuple(n.strip() for n in env.get("ROCMLAB_HUB_LABS", "").split(",") if n.strip()),
            rate_limit=_positive(env, "ROCMLAB_LIVE_RATE_LIMIT", 5),
            rate_window_s=float(_positive(env, "ROCMLAB_LIVE_RATE_WINDOW_S", 3600)),
            instructor_group=HubGroups.from_environment(env).instructor,
            owner_is_account=env.get("ROCMLAB_HUB_MODE") == "server",
            worker_token=env.get("ROCMLAB_LIVE_WORKER_TOKEN", ""),
            lease_s=float(_positive(env, "ROCMLAB_LIVE_LEASE_S", 300)),
        )


def _positive(env, name: str, default: int) -> int:
    value = env.get(name, str(default))
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{name}={value!r}: expected a whole number, 1 or more")
    return int(value)


class LiveHandler(HubOAuthenticated, web.RequestHandler):
    """Base of every page and API of the service (the plugins' too)."""

    @property
    def live(self) -> LiveSettings:
        return self.settings["live"]

    @property
    def queue(self) -> LiveQueue:
        return self.settings["queue"]

    @property
    def learner(self) -> str:
        return self.current_user["name"]

    @property
    def is_instructor(self) -> bool:
        """In the instructor group, and the request's token holds the instructors' scope of this
        service (settings.LIVE_INSTRUCT_SCOPE: a browser session's, never a server's API token)."""
        user = self.current_user or {}
        return self.live.instructor_group in user.get("groups", []) and LIVE_INSTRUCT_SCOPE in user.get("scopes", [])

    def not_instructor_reason(self) -> str:
        if self.live.instructor_group not in (self.current_user or {}).get("groups", []):
            return f"{self.learner} is not in the group {self.live.instructor_group}"
        return "the instructor's pages open in a browser logged in to the hub, not with an API token"

    def write_json(self, data, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(data, ensure_ascii=False))

    def check_xsrf_cookie(self) -> None:
        # A call with a token is identified first, so that the hub's check exempts it. A browser's
        # (a cookie) must not be: identifying a cookie runs this check again, inside the hub
        # client's own thread, and waiting there for the user deadlocks the service.
        if "Authorization" in self.request.headers:
            self.current_user  # noqa: B018
        super().check_xsrf_cookie()

    def set_default_headers(self) -> None:
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Content-Security-Policy", "default-src 'self'; frame-ancestors 'self'")


class ApiHandler(LiveHandler):
    """JSON in and out; a request the hub did not log in is answered 403, never redirected."""

    def prepare(self) -> None:
        if not self.current_user:
            raise web.HTTPError(403, "log in through the hub (a browser session or your server's API token)")

    def write_error(self, status_code: int, **kwargs) -> None:
        reason = self._reason
        if "exc_info" in kwargs and isinstance(kwargs["exc_info"][1], web.HTTPError):
            reason = kwargs["exc_info"][1].log_message or reason
        self.write_json({"error": reason}, status_code)

    def body_json(self) -> dict:
        try:
            data = json.loads(self.request.body or b"{}")
        except ValueError:
            raise web.HTTPError(400, "the body is not JSON") from None
        if not isinstance(data, dict):
            raise web.HTTPError(400, "the body must be a JSON object")
        return data
