"""The live workshop service: a JupyterHub managed service (tornado, logged in through the hub
with HubOAuth) that owns the live queue (rocmlab.grading.live_queue).

Routes, under the service prefix (``/services/rocmlab-live/``):

- ``POST api/submit`` ``{"lab": ID}``: the learner logged in (browser, or their server's
  ``$JUPYTERHUB_API_TOKEN`` from ``rocmlab submit``) asks for their newest nbgrader submission of
  the lab to be graded. The service, not the learner, collects it from that learner's own inbound
  folder (rocmlab.hub.live_collect), queues it under the rate limit and answers the attempt with
  ``remaining``, the submissions left in the window. 429 past the limit, 404 with nothing submitted.
- ``GET api/attempts[?lab=ID]``, ``GET api/attempts/<id>``: the learner's own attempts (never
  another's: the learner is the one the hub logged in, whatever the request names).
- ``GET``: the learner's page, their attempts and results.
- ``api/worker/...``: the grading workers' queue over HTTP (``rocmlab live worker --service URL``,
  on Kubernetes), with the service's worker token (``ROCMLAB_LIVE_WORKER_TOKEN``), never a learner's.

Extending it (the instructor's page, hints, levels): a module in ``PLUGINS`` that can be imported
exposes ``routes(prefix: str) -> list`` of tornado rules; its handlers subclass ``LiveHandler``
(``self.live``: the LiveSettings, ``self.queue``, ``self.learner``, ``self.is_instructor``,
``self.write_json``) and are added before the service's own catch-all page. ``make_app`` takes
``extra_routes`` the same way (tests).

Run by the hub (env/jupyterhub/jupyterhub_config.py) as ``python -m rocmlab.hub.live_service``,
configured by environment variables (``LiveSettings.from_environment``).
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import html
import importlib
import io
import json
import logging
import os
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated
from tornado import ioloop, web

from ..grading.live_queue import (
    Attempt,
    CheckOutcome,
    GradeResult,
    LeaseLost,
    LiveQueue,
    RateLimited,
)
from .live_collect import NothingToCollect, collect

SERVICE_NAME = "rocmlab-live"
PLUGINS = ("rocmlab.hub.live_page",)  # part of the course, added when present
log = logging.getLogger("rocmlab.live")


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
            instructor_group=env.get("ROCMLAB_HUB_INSTRUCTOR_GROUP", "instructors"),
            owner_is_account=env.get("ROCMLAB_HUB_MODE") == "server",
            worker_token=env.get("ROCMLAB_LIVE_WORKER_TOKEN", ""),
            lease_s=float(_positive(env, "ROCMLAB_LIVE_LEASE_S", 300)),
        )


def _positive(env, name: str, default: int) -> int:
    value = env.get(name, str(default))
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{name}={value!r}: expected a whole number, 1 or more")
    return int(value)


# ------------------------------------------------------------------ handlers


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
        return self.live.instructor_group in (self.current_user or {}).get("groups", [])

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


def public_attempt(attempt: Attempt) -> dict:
    return attempt.to_json(private=False)


async def submit_lab(handler: LiveHandler, lab) -> tuple[int, dict]:
    """Collect the logged-in learner's newest submission of ``lab`` and queue it under the rate
    limit; (HTTP status, answer). One learner's submits are handled one at a time."""
    live, queue = handler.live, handler.queue
    if not isinstance(lab, str) or not lab:
        return 400, {"error": 'expected {"lab": "<lab id>"}'}
    if live.labs and lab not in live.labs:
        return 404, {"error": f"{lab} is not a lab of this workshop ({', '.join(live.labs)})"}
    learner = handler.learner
    async with handler.settings["learner_locks"].setdefault(learner, asyncio.Lock()):
        try:
            collected = await ioloop.IOLoop.current().run_in_executor(
                None,
                lambda: collect(
                    live.exchange, live.course_id, learner, lab, live.spool, owner_is_account=live.owner_is_account
                ),
            )
        except NothingToCollect as exc:
            return 404, {"error": str(exc)}
        try:
            attempt = queue.submit(
                learner,
                lab,
                collected.submitted_at,
                str(collected.notebook),
                limit=(live.rate_limit, live.rate_window_s),
            )
        except RateLimited as exc:
            handler.set_header("Retry-After", str(max(1, int(exc.retry_at - time.time()))))
            return 429, {"error": str(exc), "remaining": 0, "retry_at": exc.retry_at, "limit": live.rate_limit}
    return (200 if attempt.duplicate else 201), {
        "attempt": public_attempt(attempt),
        "duplicate": attempt.duplicate,
        "remaining": remaining(handler, lab),
        "limit": live.rate_limit,
        "window_s": live.rate_window_s,
    }


def remaining(handler: LiveHandler, lab: str) -> int:
    """Submissions of ``lab`` the logged-in learner has left in the rate window."""
    used = handler.queue.submissions_since(handler.learner, lab, time.time() - handler.live.rate_window_s)
    return max(0, handler.live.rate_limit - used)


class SubmitHandler(ApiHandler):
    async def post(self) -> None:
        status, answer = await submit_lab(self, self.body_json().get("lab"))
        self.write_json(answer, status)


class AttemptsHandler(ApiHandler):
    def get(self) -> None:
        lab = self.get_argument("lab", None)
        attempts = self.queue.attempts(learner=self.learner, lab=lab)
        self.write_json({"learner": self.learner, "attempts": [public_attempt(a) for a in attempts]})


class AttemptHandler(ApiHandler):
    def get(self, attempt_id: str) -> None:
        attempt = self.queue.get(int(attempt_id))
        if attempt is None or attempt.learner != self.learner:  # another's: as if it did not exist
            raise web.HTTPError(404, f"no attempt {attempt_id} of yours")
        self.write_json(public_attempt(attempt))


STATE_TEXT = {
    "en": {"queued": "queued", "grading": "grading", "graded": "graded", "failed": "could not be graded"},
    "zh": {"queued": "排队中", "grading": "评分中", "graded": "已评分", "failed": "无法评分"},
}


def attempts_table(attempts: list[Attempt], lang: str) -> str:
    """The learner's attempts as an HTML table, newest first, each failed rule in their language."""
    head = (
        ("Lab", "Submitted", "State", "Score", "Rules not met")
        if lang == "en"
        else ("实验", "提交时间", "状态", "得分", "未通过的规则")
    )
    rows = []
    for attempt in reversed(attempts):
        score = "" if attempt.score is None else f"{attempt.score:g} / {attempt.max_score:g}"
        failed = "".join(
            f"<li>{html.escape(c.message.get(attempt.lang) or c.message.get('en') or c.check)}</li>"
            for c in attempt.failed_checks
        )
        rows.append(
            f'<tr class="attempt {attempt.state}" data-id="{attempt.id}"><td>{html.escape(attempt.lab)}</td>'
            f"<td>{html.escape(attempt.submitted_at)}</td><td>{STATE_TEXT[lang][attempt.state]}</td>"
            f'<td class="score">{score}</td><td><ul class="failed">{failed}</ul>{html.escape(attempt.error)}</td></tr>'
        )
    cells = "".join(f"<th>{h}</th>" for h in head)
    return f'<table class="attempts"><thead><tr>{cells}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


PAGE_TEXT = {
    "en": {
        "title": "Your submissions",
        "grade": "Grade my latest submission",
        "hint": "Submit with the Assignment List first, then have it graded here.",
        "left": "{n} of {limit} submissions left in the hour",
    },
    "zh": {
        "title": "你的提交",
        "grade": "评分我最新的提交",
        "hint": "先在 Assignment List 中提交，再在这里评分。",
        "left": "本小时还可提交 {n} / {limit} 次",
    },
}


class LearnerPage(LiveHandler):
    """The learner's attempts and results (``?lang=zh`` in Chinese), and per lab a button that has
    their latest nbgrader submission graded (the Assignment List's way in)."""

    def page_lang(self) -> str:
        return "zh" if self.get_argument("lang", "en") == "zh" else "en"

    @web.authenticated
    def get(self) -> None:
        self.render_page(self.page_lang(), "")

    @web.authenticated
    async def post(self) -> None:
        lang = self.page_lang()
        status, answer = await submit_lab(self, self.get_body_argument("lab", ""))
        self.render_page(lang, answer.get("error", ""), status if status >= 400 else 200)

    def render_page(self, lang: str, message: str, status: int = 200) -> None:
        text = PAGE_TEXT[lang]
        attempts = self.queue.attempts(learner=self.learner)
        labs = self.live.labs or tuple(sorted({a.lab for a in attempts}))
        forms = "".join(
            f'<form method="post" class="submit"><input type="hidden" name="_xsrf" value="{self.xsrf_token.decode()}">'
            f'<input type="hidden" name="lab" value="{html.escape(lab)}"><button type="submit">{text["grade"]}: '
            f'{html.escape(lab)}</button> <span class="left">'
            f"{text['left'].format(n=remaining(self, lab), limit=self.live.rate_limit)}</span></form>"
            for lab in labs
        )
        error = f'<p class="error">{html.escape(message)}</p>' if message else ""
        self.set_status(status)
        self.set_header("Cache-Control", "no-store")
        self.finish(
            f'<!doctype html><html lang="{lang}"><head><meta charset="utf-8"><title>{text["title"]}</title></head>'
            f"<body><h1>{text['title']}: {html.escape(self.learner)}</h1>{error}<p>{text['hint']}</p>{forms}"
            f"{attempts_table(attempts, lang)}</body></html>"
        )


# ------------------------------------------------------------------ the workers' API (Kubernetes)


class WorkerHandler(ApiHandler):
    """Only the workers, with the service's worker token (``Authorization: Bearer <token>``)."""

    def get_current_user(self):
        return None  # never a hub login: a learner's token opens nothing here

    def prepare(self) -> None:
        expected = self.live.worker_token
        given = self.request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
            raise web.HTTPError(403, "the workers' API needs the service's worker token")

    def check_xsrf_cookie(self) -> None:
        return None  # token-authenticated only: no cookie to forge a request with


class WorkerClaimHandler(WorkerHandler):
    def post(self) -> None:
        body = self.body_json()
        worker = str(body.get("worker") or "")
        if not worker:
            raise web.HTTPError(400, 'expected {"worker": ID, "lease_s": seconds}')
        lease_s = min(float(body.get("lease_s") or self.live.lease_s), self.live.lease_s)
        attempt = self.queue.claim(worker, lease_s)
        if attempt is None:
            self.set_status(204)
            self.finish()
            return
        self.write_json({"attempt": attempt.to_json(), "files": folder_archive(Path(attempt.source).parent)})


def folder_archive(folder: Path) -> str:
    """The spooled submission folder as a base64 tar.gz (what the worker grades)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        archive.add(folder, arcname=".")
    return base64.b64encode(buffer.getvalue()).decode()


class WorkerResultHandler(WorkerHandler):
    def post(self, attempt_id: str, action: str) -> None:
        body = self.body_json()
        worker = str(body.get("worker") or "")
        try:
            if action == "renew":
                self.queue.renew(int(attempt_id), worker, min(float(body.get("lease_s") or 0), self.live.lease_s))
                self.write_json({"ok": True})
            elif action == "complete":
                result = GradeResult(
                    score=float(body["score"]),
                    max_score=float(body["max_score"]),
                    checks=[CheckOutcome.from_dict(c) for c in body.get("checks", [])],
                    flags=[str(f) for f in body.get("flags", [])],
                    seed=body.get("seed"),
                    lang=body.get("lang"),
                )
                self.write_json(self.queue.complete(int(attempt_id), worker, result).to_json())
            elif action == "release":
                self.queue.release(int(attempt_id), worker)
                self.write_json({"ok": True})
            else:
                self.write_json(self.queue.fail(int(attempt_id), worker, str(body.get("error", ""))).to_json())
        except LeaseLost as exc:
            self.write_json({"error": str(exc)}, 409)
        except (KeyError, TypeError, ValueError) as exc:
            raise web.HTTPError(400, f"bad result: {type(exc).__name__}: {exc}") from None


# ------------------------------------------------------------------ the app


def service_prefix() -> str:
    return os.environ.get("JUPYTERHUB_SERVICE_PREFIX", f"/services/{SERVICE_NAME}/")


def base_routes(prefix: str) -> list:
    return [
        (prefix + "oauth_callback", HubOAuthCallbackHandler),
        (prefix + "api/submit", SubmitHandler),
        (prefix + "api/attempts", AttemptsHandler),
        (prefix + r"api/attempts/(\d+)", AttemptHandler),
        (prefix + "api/worker/claim", WorkerClaimHandler),
        (prefix + r"api/worker/attempts/(\d+)/(renew|complete|fail|release)", WorkerResultHandler),
    ]


def plugin_routes(prefix: str, plugins=PLUGINS) -> list:
    """The routes of every plugin module in ``plugins`` that exists (see the module's doc)."""
    routes = []
    for name in plugins:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # the plugin is there but something it imports is not
                raise
            continue
        routes.extend(module.routes(prefix))
    return routes


def make_app(settings: LiveSettings, extra_routes=(), prefix: str | None = None, **tornado_settings) -> web.Application:
    """The service's tornado application; ``extra_routes`` (and the plugins') come before the learner page."""
    prefix = prefix or service_prefix()
    routes = [
        *base_routes(prefix),
        *extra_routes,
        *plugin_routes(prefix),
        (prefix + "?", LearnerPage),
    ]
    return web.Application(
        routes,
        live=settings,
        queue=LiveQueue(settings.queue_path),
        learner_locks={},
        cookie_secret=os.urandom(32),
        xsrf_cookies=True,
        **tornado_settings,
    )


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="[%(levelname)s %(asctime)s rocmlab-live] %(message)s")
    settings = LiveSettings.from_environment()
    settings.spool.mkdir(parents=True, exist_ok=True, mode=0o700)
    app = make_app(settings)
    url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101"))
    app.listen(url.port or 80, url.hostname or "127.0.0.1", xheaders=True)
    log.info("listening on %s, queue %s", url.geturl(), settings.queue_path)
    ioloop.IOLoop.current().start()


if __name__ == "__main__":
    main()
