"""The pages of the live workshop service: the instructor's live page, hints, the learner's levels
and certificate. Tornado handlers behind the hub's OAuth (``HubOAuthenticated``); the service
(``live_service``) mounts ``routes(context)`` under its prefix.

| route | who | what |
| --- | --- | --- |
| ``instructor`` | instructors | the live page (HTML; polls the next route every few seconds) |
| ``instructor/api/state`` | instructors | learners, exercises and hints as JSON |
| ``instructor/api/hints`` | instructors | POST a hint: stored, sent to the stuck learners |
| ``me`` | anyone logged in | their labs, exercises passed, hints, certificate (HTML) |
| ``me/api/state`` | anyone logged in | the same as JSON |
| ``me/certificate`` | anyone logged in | their certificate, ``?format=pdf`` for the PDF; 404 until earned |
| ``certificate/verify`` | anyone logged in | ``?learner=&id=``: does this certificate id hold? |

Instructors are the members of the hub group ``ROCMLAB_HUB_INSTRUCTOR_GROUP`` (``instructors``),
the group the hub's ``rocmlab-instructor`` role is given to; anyone else gets 403 on their pages.
Every learner-facing route serves the user the hub's OAuth names: no route takes a learner's
name from the request except ``verify``, which only says yes or no.
The language is the hub's (``ROCMLAB_HUB_LANG``), or ``?lang=en|zh``.
"""

from __future__ import annotations

import json
import os
import pwd
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tornado import web
from tornado.ioloop import IOLoop

from ..errors import InputError, RocmlabError
from ..pages import render_page
from . import certificate as cert
from .live_hints import HintStore, send_hint
from .live_view import exercise_rows, learner_rows, progress, stuck_learners

LANGS = ("en", "zh")
POLL_S = 5

TEXT = {
    "en": {
        "live_title": "Live workshop",
        "learners": "Learners",
        "exercises": "Exercises",
        "learner": "learner",
        "lab": "current lab",
        "state": "last submit",
        "score": "score",
        "failed": "failing",
        "idle": "since last activity",
        "exercise": "exercise",
        "pass_rate": "pass rate",
        "passed_of": "passed / graded",
        "failures": "most common failures",
        "hint": "hint",
        "send_hint": "Send hint",
        "hint_en": "hint (English)",
        "hint_zh": "hint (中文)",
        "hints": "Hints sent",
        "sent_to": "sent to",
        "nobody_stuck": "nobody is stuck on this exercise now",
        "updated": "updated",
        "me_title": "My progress",
        "labs": "Labs",
        "best": "best score",
        "attempts": "attempts",
        "passed": "exercises passed",
        "still_failing": "still failing",
        "your_hints": "Hints from your instructor",
        "no_hints": "No hints for you.",
        "certificate": "Certificate",
        "earned": "You have earned the certificate:",
        "needs": "The certificate needs these labs, each with at least this share of its points:",
        "no_certificate": "This course gives no certificate.",
        "nothing_yet": "Nothing submitted yet.",
        "pdf": "PDF",
    },
    "zh": {
        "live_title": "实时课堂",
        "learners": "学员",
        "exercises": "练习",
        "learner": "学员",
        "lab": "当前实验",
        "state": "最近提交",
        "score": "得分",
        "failed": "未通过",
        "idle": "距上次活动",
        "exercise": "练习",
        "pass_rate": "通过率",
        "passed_of": "通过 / 已评",
        "failures": "最常见的错误",
        "hint": "提示",
        "send_hint": "发送提示",
        "hint_en": "提示（English）",
        "hint_zh": "提示（中文）",
        "hints": "已发送的提示",
        "sent_to": "发给",
        "nobody_stuck": "现在没有人卡在这个练习上",
        "updated": "更新于",
        "me_title": "我的进度",
        "labs": "实验",
        "best": "最高分",
        "attempts": "提交次数",
        "passed": "已通过的练习",
        "still_failing": "仍未通过",
        "your_hints": "老师给你的提示",
        "no_hints": "暂无提示。",
        "certificate": "结业证书",
        "earned": "你已获得结业证书：",
        "needs": "获得证书需要通过以下实验，每个实验至少取得这一比例的分数：",
        "no_certificate": "本课程不颁发证书。",
        "nothing_yet": "还没有提交。",
        "pdf": "PDF",
    },
}


@dataclass
class LiveContext:
    """What the pages need from the service: the queue (``attempts()``), the hints' store, the
    completion rule (None: no certificate), the signing key, and where learners' homes are."""

    queue: object
    hints: HintStore
    rule: cert.CompletionRule | None
    key: bytes
    home_of: object  # learner -> (home, (uid, gid))
    instructor_group: str = "instructors"
    lang: str = "en"
    clock: object = field(default=time.time)


def context_from_environment(queue, state_dir: Path, course_root: Path) -> LiveContext:
    """The context of the service started by the hub: the queue's database holds the hints, the
    completion rule is ``ROCMLAB_HUB_COMPLETION`` or ``env/jupyterhub/completion.toml`` when present."""
    rule_path = Path(os.environ.get("ROCMLAB_HUB_COMPLETION") or course_root / "env" / "jupyterhub" / "completion.toml")
    data = Path(os.environ.get("ROCMLAB_HUB_DATA") or "/srv/rocmlab-hub")
    demo = os.environ.get("ROCMLAB_HUB_MODE") == "demo"
    return LiveContext(
        queue=queue,
        hints=HintStore(queue_path(queue)),
        rule=cert.load_rule(rule_path) if rule_path.is_file() else None,
        key=cert.signing_key(state_dir),
        home_of=(lambda learner: demo_home(data, learner)) if demo else account_home,
        instructor_group=os.environ.get("ROCMLAB_HUB_INSTRUCTOR_GROUP", "instructors"),
        lang=os.environ.get("ROCMLAB_HUB_LANG", "en"),
    )


def queue_path(queue) -> Path:
    return Path(queue.path)


def account_home(learner: str) -> tuple[Path, tuple[int, int]]:
    entry = pwd.getpwnam(learner)
    return Path(entry.pw_dir), (entry.pw_uid, entry.pw_gid)


def demo_home(data: Path, learner: str) -> tuple[Path, tuple[int, int]]:
    """The demo hub's homes are ``<data>/homes/<name>``, owned by whoever the servers run as."""
    if "/" in learner or learner in ("", ".", ".."):
        raise KeyError(f"no home for {learner!r}")
    home = data / "homes" / learner
    stat = os.stat(home, follow_symlinks=False)
    return home, (stat.st_uid, stat.st_gid)


# ------------------------------------------------------------------ data of the pages


def instructor_state(context: LiveContext) -> dict:
    attempts = context.queue.attempts()
    exercises = exercise_rows(attempts)
    hints = context.hints.hints()
    return {
        "now": context.clock(),
        "learners": [asdict(row) for row in learner_rows(attempts, context.clock())],
        "exercises": [
            asdict(row) | {"pass_rate": row.pass_rate, "stuck": stuck_learners(attempts, row.lab, row.grade_id)}
            for row in exercises
        ],
        "hints": [asdict(hint) | {"sent_to": context.hints.deliveries(hint.id)} for hint in reversed(hints)],
    }


def learner_state(context: LiveContext, learner: str) -> dict:
    attempts = context.queue.attempts(learner=learner)
    earned = cert.earned(context.rule, attempts, learner) if context.rule else None
    return {
        "learner": learner,
        "labs": [asdict(lab) for lab in progress(attempts, learner)],
        "hints": [asdict(hint) for hint in context.hints.hints_for(learner)],
        "certificate": {
            "offered": context.rule is not None,
            "earned": earned is not None,
            "requirements": [asdict(need) for need in context.rule.labs] if context.rule else [],
            "missing": [need.lab for need in cert.missing(context.rule, attempts, learner)] if context.rule else [],
        },
    }


# ------------------------------------------------------------------ handlers


class LiveHandler(web.RequestHandler):
    """Logged in through the hub (the service mixes in ``HubOAuthenticated``, see ``routes``)."""

    def initialize(self, context: LiveContext):
        self.context = context

    @property
    def learner(self) -> str:
        return self.current_user["name"]

    @property
    def lang(self) -> str:
        asked = self.get_argument("lang", "")
        return asked if asked in LANGS else self.context.lang if self.context.lang in LANGS else "en"

    def is_instructor(self) -> bool:
        user = self.current_user or {}
        return self.context.instructor_group in (user.get("groups") or [])

    def require_instructor(self) -> None:
        if not self.is_instructor():
            raise web.HTTPError(403, f"{self.learner} is not in the group {self.context.instructor_group}")

    def write_json(self, data, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(data, ensure_ascii=False))

    def page(self, template: str, **values) -> None:
        self.set_header(
            "Content-Security-Policy",
            "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'unsafe-inline'",
        )
        self.finish(render_page(template, lang=self.lang, t=TEXT[self.lang], **values))


class InstructorPage(LiveHandler):
    @web.authenticated
    def get(self):
        self.require_instructor()
        self.page(
            "live.html.j2",
            state=instructor_state(self.context),
            poll_ms=POLL_S * 1000,
            xsrf=self.xsrf_token.decode() if isinstance(self.xsrf_token, bytes) else self.xsrf_token,
        )


class InstructorState(LiveHandler):
    @web.authenticated
    def get(self):
        self.require_instructor()
        self.write_json(instructor_state(self.context))


class HintPost(LiveHandler):
    @web.authenticated
    async def post(self):
        self.require_instructor()
        try:
            form = json.loads(self.request.body or b"{}")
            lab, grade_id = str(form.get("lab", "")), str(form.get("grade_id", ""))
            text = {"en": str(form.get("text_en", "")), "zh": str(form.get("text_zh", ""))}
            hint = self.context.hints.add(lab, grade_id, text, author=self.learner)
        except (ValueError, AttributeError) as exc:
            raise web.HTTPError(400, f"expected a JSON object with lab, grade_id, text_en, text_zh ({exc})") from None
        except InputError as exc:
            self.write_json({"error": str(exc)}, 400)
            return
        stuck = stuck_learners(self.context.queue.attempts(lab=lab), lab, grade_id)
        sent = await IOLoop.current().run_in_executor(
            None, send_hint, self.context.hints, hint, stuck, self.context.home_of
        )
        self.write_json({"hint": asdict(hint), "sent_to": sent})


class LearnerPage(LiveHandler):
    @web.authenticated
    def get(self):
        self.page("learner.html.j2", state=learner_state(self.context, self.learner))


class LearnerState(LiveHandler):
    @web.authenticated
    def get(self):
        self.write_json(learner_state(self.context, self.learner))


class CertificatePage(LiveHandler):
    @web.authenticated
    async def get(self):
        if self.context.rule is None:
            raise web.HTTPError(404, "this course gives no certificate")
        attempts = self.context.queue.attempts(learner=self.learner)
        earned = cert.earned(self.context.rule, attempts, self.learner)
        if earned is None:
            raise web.HTTPError(404, f"{self.learner} has not earned the certificate yet")
        cert.sign(earned, self.context.key)
        verify_url = self.request.full_url().split("me/certificate")[0] + (
            f"certificate/verify?learner={earned.learner}&id={earned.id}"
        )
        html = cert.certificate_page(earned, self.lang, verify_url)
        if self.get_argument("format", "html") != "pdf":
            self.finish(html)
            return
        try:
            pdf = await IOLoop.current().run_in_executor(None, cert.html_to_pdf, html)
        except RocmlabError as exc:
            raise web.HTTPError(503, str(exc)) from None
        self.set_header("Content-Type", "application/pdf")
        self.set_header("Content-Disposition", f'inline; filename="certificate-{earned.learner}-{self.lang}.pdf"')
        self.finish(pdf)


class CertificateVerify(LiveHandler):
    @web.authenticated
    def get(self):
        learner, given = self.get_argument("learner", ""), self.get_argument("id", "")
        if self.context.rule is None:
            raise web.HTTPError(404, "this course gives no certificate")
        attempts = self.context.queue.attempts(learner=learner)
        self.write_json(
            {
                "learner": learner,
                "id": given,
                "valid": cert.verify(self.context.rule, attempts, learner, given, self.context.key),
            }
        )


HANDLERS = {
    "instructor": InstructorPage,
    "instructor/api/state": InstructorState,
    "instructor/api/hints": HintPost,
    "me": LearnerPage,
    "me/api/state": LearnerState,
    "me/certificate": CertificatePage,
    "certificate/verify": CertificateVerify,
}


def routes(prefix: str, context: LiveContext, authenticated=None) -> list[tuple]:
    """Tornado routes under ``prefix`` (ending in /). ``authenticated``: the mixin that logs users in
    (``jupyterhub.services.auth.HubOAuthenticated``; tests pass a stand-in)."""
    if authenticated is None:
        from jupyterhub.services.auth import HubOAuthenticated as authenticated
    table = []
    for path, handler in HANDLERS.items():
        mixed = type(handler.__name__, (authenticated, handler), {})
        table.append((prefix + path, mixed, {"context": context}))
    return table
