"""The live workshop service: a JupyterHub managed service (tornado, logged in through the hub
with HubOAuth) that owns the live queue (rocmlab.live.queue).

Routes, under the service prefix (``/services/rocmlab-live/``):

- ``POST api/submit`` ``{"lab": ID}``: the learner logged in (browser, or their server's
  ``$JUPYTERHUB_API_TOKEN`` from ``rocmlab submit``) asks for their newest nbgrader submission of
  the lab to be graded. The service, not the learner, collects it from that learner's own inbound
  folder (rocmlab.live.collect), queues it under the rate limit and answers the attempt with
  ``remaining``, the submissions left in the window. 429 past the limit, 404 with nothing submitted.
- ``GET api/attempts[?lab=ID]``, ``GET api/attempts/<id>``: the learner's own attempts (never
  another's: the learner is the one the hub logged in, whatever the request names).
- ``GET``: the learner's page, their attempts and results.
- ``api/worker/...``: the grading workers' queue over HTTP (``rocmlab live worker --service URL``,
  on Kubernetes), with the service's worker token (``ROCMLAB_LIVE_WORKER_TOKEN``), never a learner's
  (rocmlab.live.worker_api).

Extending it (the instructor's page, hints, levels): a module in ``PLUGINS`` that can be imported
exposes ``routes(prefix: str) -> list`` of tornado rules; its handlers subclass ``LiveHandler``
(rocmlab.live.handlers: ``self.live``, the LiveSettings, ``self.queue``, ``self.learner``,
``self.is_instructor``, ``self.write_json``) and are added before the service's own catch-all
page. ``make_app`` takes ``extra_routes`` the same way (tests).

Run by the hub (env/jupyterhub/jupyterhub_config.py) as ``python -m rocmlab.live.service``,
configured by environment variables (``LiveSettings.from_environment``).
"""

from __future__ import annotations

import asyncio
import html
import importlib
import logging
import os
import time
from pathlib import Path
from urllib.parse import urlencode, urlparse

from jupyterhub.services.auth import HubOAuthCallbackHandler
from tornado import ioloop, web

from ..hub.secret_file import persistent_secret
from . import worker_api
from .attempts import Attempt
from .collect import SPOOL_QUOTA_BYTES, NotebookRefused, NothingToCollect, copy_found, find_newest, prune_spool
from .handlers import ApiHandler, LiveHandler, LiveSettings
from .queue import LiveQueue, RateLimited
from .recollect import file_sha256, recollect

SERVICE_NAME = "rocmlab-live"
COOKIE_SECRET_FILE = "cookie_secret"
PLUGINS = ("rocmlab.live.page",)  # part of the course, added when present
log = logging.getLogger("rocmlab.live")


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
        run = ioloop.IOLoop.current().run_in_executor
        try:  # examined only: nothing is copied before the learner has a rate token for it
            found = await run(
                None,
                lambda: find_newest(
                    live.exchange, live.course_id, learner, lab, owner_is_account=live.owner_is_account
                ),
            )
        except NothingToCollect as exc:
            return 404, {"error": str(exc)}
        queued = next(
            (a for a in queue.attempts(learner=learner, lab=lab) if a.submitted_at == found.submitted_at), None
        )
        if queued is None and remaining(handler, lab) <= 0:
            return rate_limited(handler, lab)
        waiting = [a.source for a in queue.attempts(learner=learner) if a.state in ("queued", "grading")]
        if await run(None, lambda: prune_spool(live.spool, learner, waiting)) >= SPOOL_QUOTA_BYTES:
            return 507, {
                "error": f"your copies waiting to be graded hold {SPOOL_QUOTA_BYTES // 2**20} MiB: wait for them"
            }
        try:
            collected = await run(None, lambda: copy_found(live.exchange, live.course_id, found, live.spool))
        except NotebookRefused as exc:
            return 422, {"error": str(exc)}
        except NothingToCollect as exc:
            return 404, {"error": str(exc)}
        try:
            attempt = queue.submit(
                learner,
                lab,
                collected.submitted_at,
                str(collected.notebook),
                limit=(live.rate_limit, live.rate_window_s),
                content_hash=file_sha256(collected.notebook),
            )
        except RateLimited as exc:
            handler.set_header("Retry-After", str(max(1, int(exc.retry_at - time.time()))))
            return 429, {"error": str(exc), "remaining": 0, "retry_at": exc.retry_at, "limit": live.rate_limit}
    return (200 if attempt.duplicate else 201), {
        "attempt": public_attempt(attempt),
        "duplicate": attempt.duplicate,
        # the same bytes as the last attempt, submitted anew (not this submission sent again)
        "same_notebook": attempt.duplicate and attempt.submitted_at != collected.submitted_at,
        "remaining": remaining(handler, lab),
        "limit": live.rate_limit,
        "window_s": live.rate_window_s,
    }


def rate_limited(handler: LiveHandler, lab: str) -> tuple[int, dict]:
    """429: the learner has no submission of ``lab`` left in the window (and nothing was copied)."""
    live, now = handler.live, time.time()
    times = sorted(
        a.queued_at
        for a in handler.queue.attempts(learner=handler.learner, lab=lab)
        if a.queued_at > now - live.rate_window_s and a.counted and a.regrade_of is None
    )
    retry_at = times[len(times) - live.rate_limit] + live.rate_window_s if len(times) >= live.rate_limit else now
    handler.set_header("Retry-After", str(max(1, int(retry_at - now))))
    error = (
        f"{handler.learner} submitted {lab} {len(times)} times in the last {live.rate_window_s / 60:g} minutes "
        f"(at most {live.rate_limit}): next submission possible in {max(0, retry_at - now):.0f} s"
    )
    return 429, {"error": error, "remaining": 0, "retry_at": retry_at, "limit": live.rate_limit}


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
            f"<li>{html.escape(c.message.get(lang) or c.message.get(attempt.lang) or c.message.get('en') or c.check)}</li>"
            for c in attempt.failed_checks
        )
        rows.append(
            f'<tr class="attempt {attempt.state}" data-id="{attempt.id}"><td>{html.escape(attempt.lab)}</td>'
            f"<td>{html.escape(attempt.submitted_at)}</td><td>{STATE_TEXT[lang][attempt.state]}</td>"
            f'<td class="score">{score}</td><td><ul class="failed">{failed}</ul>{untouched(attempt, lang)}'
            f"{html.escape(attempt.error)}"
            f"{NOT_COUNTED[lang] if attempt.state == 'failed' and not attempt.counted else ''}"
            f"{REGRADED[lang] if attempt.regrade_of else ''}</td></tr>"
        )
    cells = "".join(f"<th>{h}</th>" for h in head)
    return f'<table class="attempts"><thead><tr>{cells}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


UNTOUCHED = {"en": "not attempted yet: {ids}", "zh": "尚未作答：{ids}"}


def untouched(attempt: Attempt, lang: str) -> str:
    ids = attempt.not_attempted
    text = UNTOUCHED[lang].format(ids=", ".join(ids))
    return f'<p class="not-attempted">{html.escape(text)}</p>' if ids else ""


NOT_COUNTED = {
    "en": '<p class="not-counted">not counted against your submissions</p>',
    "zh": '<p class="not-counted">不计入你的提交次数</p>',
}
REGRADED = {
    "en": '<p class="regraded">graded again after your instructor fixed a check; not counted against your submissions</p>',
    "zh": '<p class="regraded">老师修正评分检查后重新评分；不计入你的提交次数</p>',
}
REFRESH_S = 3  # the page reloads itself this often while an attempt waits or is graded

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
        if status >= 400:
            self.render_page(lang, answer.get("error", ""), status)
            return
        # to the page itself: it shows the attempt queued and reloads until it is graded
        self.redirect(f"{self.request.path}?{urlencode({'lang': lang})}", status=303)

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
        waiting = any(a.state in ("queued", "grading") for a in attempts)
        refresh = f'<meta http-equiv="refresh" content="{REFRESH_S}">' if waiting and not message else ""
        self.set_status(status)
        self.set_header("Cache-Control", "no-store")
        self.finish(
            f'<!doctype html><html lang="{lang}"><head><meta charset="utf-8">{refresh}<title>{text["title"]}</title>'
            "</head>"
            f"<body><h1>{text['title']}: {html.escape(self.learner)}</h1>{error}<p>{text['hint']}</p>{forms}"
            f"{attempts_table(attempts, lang)}</body></html>"
        )


# ------------------------------------------------------------------ the app


def service_prefix() -> str:
    return os.environ.get("JUPYTERHUB_SERVICE_PREFIX", f"/services/{SERVICE_NAME}/")


def base_routes(prefix: str) -> list:
    return [
        (prefix + "oauth_callback", HubOAuthCallbackHandler),
        (prefix + "api/submit", SubmitHandler),
        (prefix + "api/attempts", AttemptsHandler),
        (prefix + r"api/attempts/(\d+)", AttemptHandler),
        *worker_api.routes(prefix),
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
        # kept across restarts: a page opened before one still posts (issue 49: it answered 403)
        cookie_secret=persistent_secret(Path(settings.queue_path).parent / COOKIE_SECRET_FILE),
        xsrf_cookies=True,
        **tornado_settings,
    )


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="[%(levelname)s %(asctime)s rocmlab-live] %(message)s")
    settings = LiveSettings.from_environment()
    settings.spool.mkdir(parents=True, exist_ok=True, mode=0o700)
    app = make_app(settings)
    recollect(settings, app.settings["queue"])  # submits whose request was lost while the service was away
    url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101"))
    app.listen(url.port or 80, url.hostname or "127.0.0.1", xheaders=True)
    log.info("listening on %s, queue %s", url.geturl(), settings.queue_path)
    ioloop.IOLoop.current().start()


if __name__ == "__main__":
    main()
