"""The live service's pages for instructors and learners: who may see what (issue 34).

The service is the real one (``rocmlab.live.service.make_app``, which mounts ``rocmlab.live.page.routes``); the
hub's answer to "who is this token" is stood in for, as in tests/live/test_live_service.py. The
browser test with a real hub is tests/live/test_live_browser.py.
"""

from __future__ import annotations

import json
import os
from urllib.parse import urlencode

import pytest
from jupyterhub.services.auth import HubOAuth
from live_fakes import check, graded_in
from tornado.testing import AsyncHTTPTestCase

from rocmlab.hub import completion
from rocmlab.hub.settings import LIVE_INSTRUCT_SCOPE
from rocmlab.live import certificate as cert
from rocmlab.live.hints import HintStore
from rocmlab.live.page import LiveContext
from rocmlab.live.queue import LiveQueue
from rocmlab.live.service import LiveSettings, make_app

LAB = "02-hip-kernels"
PREFIX = "/services/rocmlab-live/"
SCOPE = "access:services!service=rocmlab-live"
RULE = """
[certificate]
course = { en = "GPU programming", zh = "GPU 编程" }
[[certificate.labs]]
lab = "02-hip-kernels"
pass_fraction = 1.0
"""
USERS = {name: {"kind": "user", "name": name, "groups": [], "scopes": [SCOPE]} for name in ("ada", "cy", "dee")}
USERS["teacher"] = {
    "kind": "user",
    "name": "teacher",
    "groups": ["instructors"],
    "scopes": [SCOPE, LIVE_INSTRUCT_SCOPE],
}


def token_user(self, handler, *, sync=True):
    name = handler.request.headers.get("Authorization", "").removeprefix("token ")
    if name in USERS:
        handler._token_authenticated = True
        return dict(USERS[name])
    return None


class LivePagesTest(AsyncHTTPTestCase):
    @pytest.fixture(autouse=True)
    def _setup(self, tmp_path, monkeypatch):
        monkeypatch.setattr(HubOAuth, "get_user", token_user)
        monkeypatch.setenv("JUPYTERHUB_OAUTH_ACCESS_SCOPES", json.dumps([SCOPE]))
        queue_path = tmp_path / "live" / "queue.sqlite"
        queue = LiveQueue(queue_path, clock=lambda: 100.0)
        wrong_grid = check("grid", False, "grid too small", "网格太小")
        graded_in(queue, "ada", LAB, [check("grid", True), check("reduce", True)], at=100)
        graded_in(queue, "cy", LAB, [wrong_grid, check("reduce", True)], at=100)
        graded_in(queue, "dee", LAB, [wrong_grid, check("reduce", True)], at=100)
        self.homes = tmp_path / "homes"
        for learner in ("ada", "cy", "dee"):
            (self.homes / learner / LAB).mkdir(parents=True)
        (tmp_path / "completion.toml").write_text(RULE, encoding="utf-8")
        self.settings = LiveSettings(queue_path=queue_path, exchange=tmp_path / "exchange", spool=tmp_path / "spool")
        self.context = LiveContext(
            hints=HintStore(queue_path),
            rule=completion.load_rule(tmp_path / "completion.toml"),
            key=cert.signing_key(tmp_path),
            home_of=lambda name: (self.homes / name, (os.getuid(), os.getgid())),
            clock=lambda: 160.0,
            roster=lambda: ["ada", "cy", "dee", "eve"],  # eve never submitted
        )

    def get_app(self):
        return make_app(self.settings, prefix=PREFIX, live_page=self.context)

    def call(self, path, user=None, method="GET", body=None):
        headers = {"Authorization": f"token {user}"} if user else {}
        return self.fetch(PREFIX + path, method=method, body=body, headers=headers, follow_redirects=False)

    def test_a_learner_gets_403_on_every_instructor_route(self):
        for path in ("instructor", "instructor/api/state", "instructor/live.js"):
            assert self.call(path, "cy").code == 403, path
        body = json.dumps({"lab": LAB, "grade_id": "grid", "text_en": "x"})
        assert self.call("instructor/api/hints", "cy", "POST", body).code == 403
        assert self.context.hints.hints() == []
        assert self.call("instructor/api/regrade", "cy", "POST", json.dumps({"lab": LAB})).code == 403
        assert len(LiveQueue(self.settings.queue_path).attempts()) == 3  # nothing requeued

    def test_nobody_logged_in_is_sent_to_the_hub_or_refused(self):
        assert self.call("instructor").code == 302
        assert self.call("instructor/api/state").code == 403
        assert self.call("me/api/state").code == 403

    def test_the_instructor_sees_the_learners_and_the_exercises(self):
        page = self.call("instructor?lang=zh", "teacher")
        assert page.code == 200 and "实时课堂" in page.body.decode()
        assert "script-src" not in page.headers["Content-Security-Policy"]  # scripts from the service only
        assert self.call("instructor/live.js", "teacher").body.startswith(b'"use strict";')
        state = json.loads(self.call("instructor/api/state", "teacher").body)
        assert [row["learner"] for row in state["learners"]] == ["ada", "cy", "dee", "eve"]
        assert {row["learner"]: row["idle_s"] for row in state["learners"]} == {
            "ada": 60.0,
            "cy": 60.0,
            "dee": 60.0,
            "eve": None,
        }
        assert state["learners"][3]["state"] == "not submitted"
        room = state["room"]
        assert (room["queued"], room["grading"], room["alive_workers"]) == (0, 0, 0)
        assert room["workers"] == []  # the fixture's worker was last seen at its clock's 100 s: long gone
        grid = next(row for row in state["exercises"] if row["grade_id"] == "grid")
        assert (grid["pass_rate"], grid["failures"]) == (0.333, [["grid too small / 网格太小", 2]])
        assert grid["stuck"] == ["cy", "dee"]

    def test_a_hint_reaches_only_the_stuck_learners(self):
        body = json.dumps({"lab": LAB, "grade_id": "grid", "text_en": "ceil(n / block) blocks", "text_zh": "向上取整"})
        answer = self.call("instructor/api/hints", "teacher", "POST", body)
        assert answer.code == 200 and json.loads(answer.body)["sent_to"] == {"cy": "", "dee": ""}
        assert (self.homes / "cy" / LAB / f"HINT-{LAB}.md").is_file()
        assert not (self.homes / "ada" / LAB / f"HINT-{LAB}.md").exists()
        assert [h["text"]["zh"] for h in json.loads(self.call("me/api/state", "cy").body)["hints"]] == ["向上取整"]
        assert json.loads(self.call("me/api/state", "ada").body)["hints"] == []
        assert "ceil(n / block) blocks" in self.call("me?lang=en", "dee").body.decode()

    def test_the_instructor_regrades_a_lab_and_sees_its_progress(self):
        answer = self.call("instructor/api/regrade", "teacher", "POST", json.dumps({"lab": LAB}))
        assert answer.code == 200, answer.body
        regrade = json.loads(answer.body)["regrade"]
        # the fixture's copies (/srv/copies/...) are not on this machine: each learner is skipped, with why
        assert [item["learner"] for item in regrade["items"]] == ["ada", "cy", "dee"]
        assert regrade["progress"]["skipped"] == 3 and "spool" in regrade["items"][0]["skipped"]
        state = json.loads(self.call("instructor/api/state", "teacher").body)
        assert state["labs"] == [LAB] and [r["id"] for r in state["regrades"]] == [regrade["id"]]
        assert state["regrades"][0]["items"][1]["old_score"] == 1.0
        refused = self.call("instructor/api/regrade", "teacher", "POST", json.dumps({"lab": "03-none"}))
        assert refused.code == 400 and "nobody has submitted 03-none" in json.loads(refused.body)["error"]
        assert self.call("instructor/api/regrade", "teacher", "POST", "[1]").code == 400

    def test_a_bad_hint_is_refused_with_the_field(self):
        body = json.dumps({"lab": LAB, "grade_id": "grid", "text_en": " "})
        answer = self.call("instructor/api/hints", "teacher", "POST", body)
        assert answer.code == 400 and "text_en, text_zh" in json.loads(answer.body)["error"]
        assert self.call("instructor/api/hints", "teacher", "POST", "[1]").code == 400

    def test_the_certificate_is_the_logged_in_learners_and_only_once_earned(self):
        assert self.call("me/certificate", "cy").code == 404
        page = self.call("me/certificate?" + urlencode({"lang": "en", "learner": "cy"}), "ada")
        body = page.body.decode().split("<body>")[1]
        assert page.code == 200 and 'id="learner">ada<' in body and "cy" not in body
        cert_id = body.split('id="certificate-id">')[1].split("<")[0]

        def verdict(**query):  # nobody logged in: an employer
            return json.loads(self.call("certificate/verify?" + urlencode({**query, "format": "json"})).body)

        assert verdict(id=cert_id)["valid"] is True and verdict(id=cert_id)["certificate"]["learner"] == "ada"
        assert verdict(id=cert_id, learner="cy") == {**verdict(id=cert_id), "valid": False, "edited": ["learner"]}
        assert verdict(id="0" * 24)["valid"] is False and verdict(id="0" * 24)["certificate"] is None
        public = self.call(f"certificate/verify?id={cert_id}&lang=zh")
        assert public.code == 200 and 'id="learner">ada<' in public.body.decode() and "此证书由" in public.body.decode()
        assert self.call(f"certificate/verify?id={cert_id}&result=2+/+2").code == 200
        assert self.call(f"certificate/verify?id={cert_id}&result=3+/+2").code == 404
        assert json.loads(self.call("me/api/state", "ada").body)["certificate"] == {
            "offered": True,
            "earned": True,
            "requirements": [{"lab": LAB, "pass_fraction": 1.0}],
            "missing": [],
        }
        assert json.loads(self.call("me/api/state", "cy").body)["certificate"]["missing"] == [LAB]


def test_a_wrong_completion_rule_stops_the_service_at_start(tmp_path, monkeypatch):
    from rocmlab.errors import InputError
    from rocmlab.live.page import routes

    bad = tmp_path / "completion.toml"
    bad.write_text('[certificate]\ncourse = { en = "a", zh = "b" }\n[[certificate.labs]]\nlab = "01"\n', "utf-8")
    monkeypatch.setenv("ROCMLAB_HUB_COMPLETION", str(bad))
    with pytest.raises(InputError, match=r"completion.toml: field certificate.labs\[0\].pass_fraction"):
        routes(PREFIX)
    monkeypatch.setenv("ROCMLAB_HUB_COMPLETION", str(tmp_path / "missing.toml"))
    with pytest.raises(InputError, match="missing.toml: no such file"):
        routes(PREFIX)
    monkeypatch.delenv("ROCMLAB_HUB_COMPLETION")
    monkeypatch.setenv("ROCMLAB_ROOT", str(tmp_path / "a-course-without-a-rule"))
    assert len(routes(PREFIX)) == 9


def test_homes_for_hints_are_never_roots_nor_outside_the_demo_homes(tmp_path):
    from rocmlab.live.page import account_home, demo_home

    with pytest.raises(KeyError, match="no hint file is written as root"):
        account_home("root")
    (tmp_path / "homes" / "cy").mkdir(parents=True)
    assert demo_home(tmp_path, "cy") == (tmp_path / "homes" / "cy", (os.getuid(), os.getgid()))
    for name in ("..", "../cy", ""):
        with pytest.raises(KeyError):
            demo_home(tmp_path, name)
