"""The pages of the live workshop service (``service``, which mounts ``routes(prefix)`` as
a plugin): the instructor's live page, hints, the learner's levels and certificate.

| route | who | what |
| --- | --- | --- |
| ``instructor`` | instructors | the live page (HTML; ``instructor/live.js`` polls the next route) |
| ``instructor/api/state`` | instructors | learners, exercises and hints as JSON |
| ``instructor/api/hints`` | instructors | POST a hint: stored, sent to the stuck learners |
| ``instructor/api/regrade`` | instructors | POST ``{"lab"}``: every learner's last attempt at it graded again |
| ``me`` | anyone logged in | their labs, exercises passed, hints, certificate (HTML) |
| ``me/api/state`` | anyone logged in | the same as JSON |
| ``me/certificate`` | anyone logged in | their certificate, ``?format=pdf`` for the PDF; 404 until earned |
| ``certificate/verify`` | anyone, no login | ``?id=`` (and the fields printed on a copy): the issued certificate, or why not |

Instructors are the members of the hub group ``ROCMLAB_HUB_INSTRUCTOR_GROUP`` (``instructors``),
the group the hub's ``rocmlab-instructor`` role is given to; anyone else gets 403 on their
routes (``InstructorOnly.prepare``). Every learner route serves the user the hub's OAuth names:
no route takes a learner's name from the request. ``verify`` is public (an employer has no hub
login): given a certificate id (96 random-looking bits, the HMAC of the certificate) it shows
what was issued under it, and names each field of a copy that differs.
The language is the hub's (``ROCMLAB_HUB_LANG``), or ``?lang=en|zh``. Scripts come only from the
service itself (no CDN): the page works offline.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pwd
import time
from dataclasses import asdict, dataclass, field
from importlib.resources import files
from pathlib import Path

from tornado import web
from tornado.ioloop import IOLoop

from ..errors import InputError, RocmlabError
from ..hub import completion
from ..hub.exchange_layout import group_members
from ..hub.settings import LIVE_WORKERS, HubGroups, LiveWorkers
from ..pages import render_page
from . import certificate as cert
from .handlers import LiveHandler
from .hints import HintStore, send_hint
from .regrade import RegradeStore
from .supervise import RefusalStore, this_service_started, worker_states
from .view import exercise_rows, learner_rows, progress, stuck_learners

LANGS = ("en", "zh")
POLL_S = 5
PDF_SLOTS = 2  # PDFs drawn at once, whoever asks (issue 48: 24 requests slowed a classmate's submit 400x)
log = logging.getLogger("rocmlab.live")

TEXT = {
    "en": {
        "live_title": "Live workshop",
        "learners": "Learners",
        "exercises": "Exercises",
        "learner": "learner",
        "lab": "current lab",
        "lab_id": "lab",
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
        "submissions": "My submissions and their results",
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
        "room": "Room",
        "queued": "waiting",
        "grading": "being graded",
        "oldest_wait": "longest wait",
        "workers": "workers",
        "no_worker": "No grading worker is running: submissions wait until one starts.",
        "hub_runs_no_workers": "This hub runs no grading workers (ROCMLAB_LIVE_WORKERS=0): submissions wait "
        "until you start `rocmlab live worker` on the hub's machine (docs/hub.md, The live workshop).",
        "heartbeat": "last heartbeat",
        "worker_state": "state",
        "worker_alive": "alive",
        "worker_silent": "no heartbeat: its process still runs, or cannot be seen from here",
        "worker_ended": "ended",
        "worker_refused": "A grading worker the hub runs does not start",
        "not_submitted": "not submitted",
        "not_attempted": "not attempted",
        "regrades": "Regrades",
        "regrade": "Regrade everyone's last attempt",
        "regrade_confirm": "Grade every learner's last attempt at {lab} again? It costs them no submission.",
        "before": "before",
        "after": "after",
        "skipped": "skipped",
        "regrade_state": "new grading",
        "verify_title": "Certificate check",
        "verify_valid": "This certificate was issued by the course's grading service.",
        "verify_unknown": "No certificate was issued under this id.",
        "verify_edited": "This copy does not match the certificate issued under its id: edited field(s):",
        "name": "Name",
        "account": "Account",
        "course": "Course",
        "issued_on": "Issued on",
        "result": "Result",
        "issuer": "Issuer",
        "id": "Certificate id",
    },
    "zh": {
        "live_title": "实时课堂",
        "learners": "学员",
        "exercises": "练习",
        "learner": "学员",
        "lab": "当前实验",
        "lab_id": "实验",
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
        "submissions": "我的提交与评分结果",
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
        "room": "教室",
        "queued": "等待中",
        "grading": "评分中",
        "oldest_wait": "最长等待",
        "workers": "评分进程",
        "no_worker": "没有评分进程在运行：提交会一直等待，直到有进程启动。",
        "hub_runs_no_workers": "本 hub 不运行评分进程（ROCMLAB_LIVE_WORKERS=0）：提交会一直等待，"
        "直到你在 hub 所在机器上启动 `rocmlab live worker`（docs/hub.md，“The live workshop”一节）。",
        "heartbeat": "最近心跳",
        "worker_state": "状态",
        "worker_alive": "运行中",
        "worker_silent": "没有心跳：其进程仍在运行，或在本机看不到",
        "worker_ended": "已结束",
        "worker_refused": "hub 运行的一个评分进程无法启动",
        "not_submitted": "未提交",
        "not_attempted": "未作答",
        "regrades": "重新评分",
        "regrade": "重新评分所有人的最近一次提交",
        "regrade_confirm": "重新评分每位学员在 {lab} 的最近一次提交？这不占用他们的提交次数。",
        "before": "之前",
        "after": "之后",
        "skipped": "跳过",
        "regrade_state": "重新评分",
        "verify_title": "证书验证",
        "verify_valid": "此证书由本课程的评分服务颁发。",
        "verify_unknown": "没有以此编号颁发的证书。",
        "verify_edited": "此副本与以其编号颁发的证书不符，被改动的字段：",
        "name": "姓名",
        "account": "账号",
        "course": "课程",
        "issued_on": "颁发日期",
        "result": "成绩",
        "issuer": "颁发者",
        "id": "证书编号",
    },
}


@dataclass
class LiveContext:
    """What the pages need beside the service's queue: the hints' store (in the queue's file), the
    completion rule (None: no certificate), the signing key, where learners' homes are."""

    hints: HintStore
    rule: completion.CompletionRule | None
    key: bytes
    home_of: object  # learner -> (home, (uid, gid))
    lang: str = "en"
    clock: object = field(default=time.time)
    store: cert.CertificateStore | None = None  # None: beside the queue (``PageHandler.certificates``)
    roster: object = tuple  # () -> the learners of the workshop, submitted or not
    name_of: object = lambda learner: ""
    regrades: RegradeStore | None = None  # None: beside the queue (``PageHandler.regrades``)
    hub_workers: int | None = None  # the grading workers the hub runs (0: none, a warning); None: not said
    started_at: float = field(default_factory=this_service_started)  # workers last seen before: an earlier run
    host: str = field(default_factory=lambda: os.uname().nodename)
    refusals: RefusalStore | None = None  # None: beside the queue (``PageHandler.refusals``)


def context_from_environment(queue_path: Path, environ=None) -> LiveContext:
    """The context of the service the hub started. The completion rule: ``ROCMLAB_HUB_COMPLETION``,
    else ``<ROCMLAB_ROOT>/env/jupyterhub/completion.toml`` when it exists; the key beside the queue."""
    env = os.environ if environ is None else environ
    data = Path(env.get("ROCMLAB_HUB_DATA") or queue_path.parent.parent)
    demo = env.get("ROCMLAB_HUB_MODE") == "demo"
    instructors = {name.strip() for name in env.get("ROCMLAB_HUB_INSTRUCTORS", "").split(",") if name.strip()}
    key = cert.signing_key(queue_path.parent)
    return LiveContext(
        hints=HintStore(queue_path),
        regrades=RegradeStore(queue_path),
        rule=earnable_rule(completion_rule(env), env),
        key=key,
        store=cert.CertificateStore(queue_path.parent / cert.STORE_FILE, key),
        home_of=(lambda learner: demo_home(data, learner)) if demo else account_home,
        lang=env.get("ROCMLAB_HUB_LANG", "en"),
        name_of=(lambda learner: "") if demo else account_name,
        roster=(lambda: demo_roster(data, instructors))
        if demo
        else (lambda: account_roster(HubGroups.from_environment(env))),
        hub_workers=LiveWorkers.from_environment(env).count if env.get(LIVE_WORKERS, "").strip() else None,
    )


def completion_rule(env) -> completion.CompletionRule | None:
    """The course's completion rule (None: no certificate); InputError naming the file and field."""
    root = Path(env.get("ROCMLAB_ROOT") or ".")
    rule_path = Path(env.get("ROCMLAB_HUB_COMPLETION") or root / "env" / "jupyterhub" / "completion.toml")
    if env.get("ROCMLAB_HUB_COMPLETION") and not rule_path.is_file():
        raise InputError(f"ROCMLAB_HUB_COMPLETION={rule_path}: no such file")
    return completion.load_rule(rule_path) if rule_path.is_file() else None


def delivered_labs(env) -> tuple[str, ...]:
    return tuple(name.strip() for name in env.get("ROCMLAB_HUB_LABS", "").split(",") if name.strip())


def earnable_rule(rule: completion.CompletionRule | None, env) -> completion.CompletionRule | None:
    """The rule, unless it needs a lab this hub does not deliver: then nobody could earn it, and it
    is not offered (said in the service's log; ``rocmlab hub`` says it at start)."""
    if rule is None:
        return None
    lacking = completion.unearnable(rule, delivered_labs(env))
    if lacking:
        log.warning("no certificate offered: its rule needs %s, which this hub does not deliver", ", ".join(lacking))
        return None
    return rule


def account_roster(groups: HubGroups) -> list[str]:
    """Server mode: the members of the learner group (those who may log in as learners)."""
    return sorted(group_members(groups.learner))


def account_name(learner: str) -> str:
    """Server mode: the full name of the learner's account (the first field of its GECOS), if set."""
    try:
        return pwd.getpwnam(learner).pw_gecos.split(",")[0].strip()
    except KeyError:
        return ""


def demo_roster(data: Path, instructors=()) -> list[str]:
    """Demo mode: every user the hub made a home for, but the instructors."""
    try:
        return sorted(p.name for p in (data / "homes").iterdir() if p.is_dir() and p.name not in instructors)
    except OSError:
        return []


def account_home(learner: str) -> tuple[Path, tuple[int, int]]:
    entry = pwd.getpwnam(learner)
    if entry.pw_uid == 0:
        raise KeyError(f"{learner} is root: no hint file is written as root")
    return Path(entry.pw_dir), (entry.pw_uid, entry.pw_gid)


def demo_home(data: Path, learner: str) -> tuple[Path, tuple[int, int]]:
    """The demo hub's homes are ``<data>/homes/<name>``, owned by whoever the servers run as."""
    if "/" in learner or learner in ("", ".", ".."):
        raise KeyError(f"no home for {learner!r}")
    home = data / "homes" / learner
    stat = os.stat(home, follow_symlinks=False)
    return home, (stat.st_uid, stat.st_gid)


# ------------------------------------------------------------------ data of the pages


def room_state(context: LiveContext, queue, refusals: RefusalStore) -> dict:
    """The queue's room, its workers with their states (rocmlab.live.supervise) and those of an
    earlier run left out, and the hub's workers that refused to start, with why."""
    room = queue.room()
    now = queue.clock()  # the clock the queue's ``seen_s`` is measured on
    room["workers"] = worker_states(room["workers"], now=now, since=context.started_at, host=context.host)
    room["refused"] = refusals.current(host=context.host)
    return room


def instructor_state(context: LiveContext, queue, regrades: RegradeStore, refusals: RefusalStore) -> dict:
    attempts = queue.attempts()
    return {
        "now": context.clock(),
        "room": room_state(context, queue, refusals),
        "hub_workers": context.hub_workers,
        "learners": [asdict(row) for row in learner_rows(attempts, context.clock(), context.roster())],
        "exercises": [
            asdict(row) | {"pass_rate": row.pass_rate, "stuck": stuck_learners(attempts, row.lab, row.grade_id)}
            for row in exercise_rows(attempts)
        ],
        "hints": [
            asdict(hint) | {"sent_to": context.hints.deliveries(hint.id)} for hint in reversed(context.hints.hints())
        ],
        "labs": sorted({attempt.lab for attempt in attempts}),
        "regrades": [asdict(regrade) | {"progress": regrade.progress} for regrade in regrades.regrades(queue)],
    }


def learner_state(context: LiveContext, queue, learner: str, store: cert.CertificateStore) -> dict:
    attempts = queue.attempts(learner=learner)
    rule = context.rule
    issued = cert.issued(store, rule, attempts, learner, context.name_of(learner)) if rule else None
    return {
        "learner": learner,
        "labs": [asdict(lab) for lab in progress(attempts, learner)],
        "hints": [asdict(hint) for hint in context.hints.hints_for(learner)],
        "certificate": {
            "offered": rule is not None,
            "earned": issued is not None,
            "requirements": [asdict(need) for need in rule.labs] if rule else [],
            "missing": [] if issued or not rule else [need.lab for need in cert.missing(rule, attempts, learner)],
        },
    }


# ------------------------------------------------------------------ handlers

PAGE_POLICY = "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'self'"


class PageHandler(LiveHandler):
    """A page of this module: logged in through the hub (``handlers.LiveHandler``)."""

    @property
    def page_context(self) -> LiveContext:
        if "live_page" not in self.settings:
            self.settings["live_page"] = context_from_environment(self.live.queue_path)
        return self.settings["live_page"]

    @property
    def regrades(self) -> RegradeStore:
        context = self.page_context
        if context.regrades is None:
            context.regrades = RegradeStore(self.live.queue_path)
        return context.regrades

    @property
    def refusals(self) -> RefusalStore:
        context = self.page_context
        if context.refusals is None:
            context.refusals = RefusalStore(self.live.queue_path)
        return context.refusals

    @property
    def certificates(self) -> cert.CertificateStore:
        context = self.page_context
        if context.store is None:
            context.store = cert.CertificateStore(self.live.queue_path.parent / cert.STORE_FILE, context.key)
        return context.store

    @property
    def lang(self) -> str:
        asked = self.get_argument("lang", "")
        return asked if asked in LANGS else self.page_context.lang if self.page_context.lang in LANGS else "en"

    def page(self, template: str, **values) -> None:
        self.set_header("Content-Security-Policy", PAGE_POLICY)  # inline styles; scripts only from here
        self.set_header("Cache-Control", "no-store")
        self.finish(render_page(template, lang=self.lang, t=TEXT[self.lang], **values))


class InstructorOnly(PageHandler):
    def prepare(self) -> None:
        if not self.current_user:
            if self.request.method == "GET" and "/api/" not in self.request.path:
                return  # @web.authenticated sends the browser to the hub's login
            raise web.HTTPError(403, "log in through the hub")
        if not self.is_instructor:
            raise web.HTTPError(403, self.not_instructor_reason())


class InstructorPage(InstructorOnly):
    @web.authenticated
    def get(self):
        token = self.xsrf_token
        self.page(
            "live.html.j2",
            state=instructor_state(self.page_context, self.queue, self.regrades, self.refusals),
            poll_ms=POLL_S * 1000,
            xsrf=token.decode() if isinstance(token, bytes) else token,
        )


class InstructorScript(InstructorOnly):
    @web.authenticated
    def get(self):
        self.set_header("Content-Type", "text/javascript; charset=utf-8")
        self.finish(files("rocmlab").joinpath("templates", "live.js").read_text(encoding="utf-8"))


class InstructorState(InstructorOnly):
    def get(self):
        self.write_json(instructor_state(self.page_context, self.queue, self.regrades, self.refusals))


class HintPost(InstructorOnly):
    async def post(self):
        try:
            form = json.loads(self.request.body or b"{}")
            lab, grade_id = str(form.get("lab", "")), str(form.get("grade_id", ""))
            text = {"en": str(form.get("text_en", "")), "zh": str(form.get("text_zh", ""))}
        except (ValueError, AttributeError):
            self.write_json({"error": "expected a JSON object with lab, grade_id, text_en, text_zh"}, 400)
            return
        try:
            hint = self.page_context.hints.add(lab, grade_id, text, author=self.learner)
        except InputError as exc:
            self.write_json({"error": str(exc)}, 400)
            return
        stuck = stuck_learners(self.queue.attempts(lab=lab), lab, grade_id)
        context = self.page_context
        sent = await IOLoop.current().run_in_executor(None, send_hint, context.hints, hint, stuck, context.home_of)
        self.write_json({"hint": asdict(hint), "sent_to": sent})


class RegradePost(InstructorOnly):
    """Every learner's last attempt at the lab graded again; not counted against their limit."""

    def post(self):
        try:
            lab = json.loads(self.request.body or b"{}").get("lab", "")
        except (ValueError, AttributeError):
            self.write_json({"error": 'expected a JSON object {"lab": "<lab id>"}'}, 400)
            return
        if self.live.labs and lab not in self.live.labs:
            self.write_json({"error": f"regrade field lab: {lab!r} is not a lab of this workshop"}, 400)
            return
        try:
            regrade = self.regrades.start(self.queue, str(lab), author=self.learner)
        except InputError as exc:
            self.write_json({"error": str(exc)}, 400)
            return
        log.info("%s regrades %s: %s", self.learner, regrade.lab, regrade.progress)
        self.write_json({"regrade": asdict(regrade) | {"progress": regrade.progress}})


class LearnerLevels(PageHandler):
    @web.authenticated
    def get(self):
        self.page(
            "learner.html.j2", state=learner_state(self.page_context, self.queue, self.learner, self.certificates)
        )


class LearnerState(PageHandler):
    def get(self):
        if not self.current_user:
            raise web.HTTPError(403, "log in through the hub")
        self.write_json(learner_state(self.page_context, self.queue, self.learner, self.certificates))


class CertificatePage(PageHandler):
    @web.authenticated
    async def get(self):
        rule = self.page_context.rule
        if rule is None:
            raise web.HTTPError(404, "this course gives no certificate")
        context = self.page_context
        attempts = self.queue.attempts(learner=self.learner)
        issued = cert.issued(self.certificates, rule, attempts, self.learner, context.name_of(self.learner))
        if issued is None:
            raise web.HTTPError(404, f"{self.learner} has not earned the certificate yet")
        base = self.request.full_url().split("me/certificate")[0]
        verify_url = f"{base}certificate/verify?id={issued.id}"
        if self.get_argument("format", "html") != "pdf":
            self.set_header("Content-Security-Policy", PAGE_POLICY)
            self.finish(cert.certificate_page(issued, self.lang, verify_url))
            return
        try:
            pdf = await self.cached_pdf(issued, verify_url)
        except RocmlabError as exc:
            raise web.HTTPError(503, str(exc)) from None
        self.set_header("Content-Type", "application/pdf")
        self.set_header("Content-Disposition", f'inline; filename="certificate-{issued.learner}-{self.lang}.pdf"')
        self.finish(pdf)

    async def cached_pdf(self, issued: cert.Certificate, verify_url: str) -> bytes:
        """The PDF, drawn once per certificate and language (it never changes), at most ``PDF_SLOTS``
        at a time, one learner's requests one after another."""
        folder = self.live.queue_path.parent / "certificate-pdfs"
        path = folder / f"{issued.id}-{self.lang}.pdf"
        locks = self.settings.setdefault("certificate_locks", {})
        slots = self.settings.setdefault("certificate_slots", asyncio.Semaphore(PDF_SLOTS))
        async with locks.setdefault(issued.learner, asyncio.Lock()):
            if path.is_file():
                return path.read_bytes()
            async with slots:
                pdf = await IOLoop.current().run_in_executor(None, cert.certificate_pdf, issued, self.lang, verify_url)
            folder.mkdir(mode=0o700, exist_ok=True)
            partial = path.with_name(f".{path.name}.{os.getpid()}")
            partial.write_bytes(pdf)
            os.replace(partial, path)
            return pdf


class CertificateVerify(PageHandler):
    """Public: no hub login (an employer checks a certificate)."""

    def get(self):
        given = self.get_argument("id", "").strip()
        claimed = {name: self.get_argument(name) for name in (*cert.CLAIMS, "course") if self.get_argument(name, "")}
        found, edited = cert.verify(self.certificates, given, claimed)
        valid = found is not None and not edited
        self.set_status(200 if valid else 404)
        if self.get_argument("format", "html") == "json":
            self.write_json(
                {
                    "id": given,
                    "valid": valid,
                    "edited": edited,
                    "certificate": None
                    if found is None
                    else {
                        **{k: getattr(found, k) for k in ("learner", "course", "issuer", "issued_on", "result")},
                        "name": found.name_in(self.lang),
                    },
                },
                200 if valid else 404,
            )
            return
        self.page("verify.html.j2", cert=found, given=given, edited=edited, valid=valid)


HANDLERS = {
    "instructor": InstructorPage,
    "instructor/live.js": InstructorScript,
    "instructor/api/state": InstructorState,
    "instructor/api/hints": HintPost,
    "instructor/api/regrade": RegradePost,
    "me": LearnerLevels,
    "me/api/state": LearnerState,
    "me/certificate": CertificatePage,
    "certificate/verify": CertificateVerify,
}


def routes(prefix: str) -> list[tuple]:
    """The tornado rules of these pages under the service's ``prefix`` (ending in /). A wrong
    completion rule stops the service here, at its start, naming the file and the field."""
    completion_rule(os.environ)
    return [(prefix + path, handler) for path, handler in HANDLERS.items()]
