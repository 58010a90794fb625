"""The live service's pages behind a stand-in for the hub's OAuth: who may see what (issue 34).

The stand-in logs in whoever the header ``X-Test-User`` names, in the groups of
``X-Test-Groups``, as ``HubOAuthenticated`` does from the hub's answer; the handlers are the real
ones. The browser test with a real hub is tests/test_live_browser.py.
"""

from __future__ import annotations

import json
import os
from urllib.parse import urlencode

import pytest
from live_fakes import check, graded_in
from tornado.testing import AsyncHTTPTestCase
from tornado.web import Application

from rocmlab.grading.live_queue import LiveQueue
from rocmlab.hub import certificate as cert
from rocmlab.hub.live_hints import HintStore
from rocmlab.hub.live_page import LiveContext, routes

LAB = "02-hip-kernels"
PREFIX = "/services/rocmlab-live/"
RULE = """
[certificate]
course = { en = "GPU programming", zh = "GPU 编程" }
[[certificate.labs]]
lab = "02-hip-kernels"
pass_fraction = 1.0
"""


class StandInHubAuth:
    def get_current_user(self):
        name = self.request.headers.get("X-Test-User")
        return {"name": name, "groups": self.request.headers.get("X-Test-Groups", "").split(",")} if name else None

    def get_login_url(self):
        return "/hub/login"


@pytest.fixture
def setup(tmp_path, request):
    queue = LiveQueue(tmp_path / "live.sqlite", clock=lambda: 100.0)
    graded_in(queue, "ada", LAB, [check("grid", True), check("reduce", True)], at=100)
    graded_in(queue, "cy", LAB, [check("grid", False, "grid too small", "网格太小"), check("reduce", True)], at=100)
    graded_in(queue, "dee", LAB, [check("grid", False, "grid too small", "网格太小"), check("reduce", True)], at=100)
    for learner in ("ada", "cy", "dee"):
        (tmp_path / "homes" / learner / LAB).mkdir(parents=True)
    (tmp_path / "completion.toml").write_text(RULE, encoding="utf-8")
    context = LiveContext(
        queue=queue,
        hints=HintStore(tmp_path / "live.sqlite"),
        rule=cert.load_rule(tmp_path / "completion.toml"),
        key=cert.signing_key(tmp_path),
        home_of=lambda name: (tmp_path / "homes" / name, (os.getuid(), os.getgid())),
        clock=lambda: 160.0,
    )
    request.instance.context, request.instance.homes = context, tmp_path / "homes"


@pytest.mark.usefixtures("setup")
class TestLivePages(AsyncHTTPTestCase):
    def get_app(self):
        return Application(routes(PREFIX, self.context, authenticated=StandInHubAuth))

    def call(self, path, user=None, groups="", method="GET", body=None):
        headers = {"X-Test-User": user, "X-Test-Groups": groups} if user else {}
        return self.fetch(PREFIX + path, method=method, body=body, headers=headers, follow_redirects=False)

    def test_a_learner_gets_403_on_every_instructor_route(self):
        for path in ("instructor", "instructor/api/state"):
            assert self.call(path, "cy", "learners").code == 403
        body = json.dumps({"lab": LAB, "grade_id": "grid", "text_en": "x"})
        assert self.call("instructor/api/hints", "cy", "learners", "POST", body).code == 403
        assert self.context.hints.hints() == []

    def test_nobody_logged_in_is_sent_to_the_hubs_login(self):
        answer = self.call("instructor")
        assert answer.code == 302 and answer.headers["Location"].startswith("/hub/login")

    def test_the_instructor_sees_the_learners_and_the_exercises(self):
        page = self.call("instructor?lang=zh", "teacher", "instructors")
        assert page.code == 200 and "实时课堂" in page.body.decode()
        state = json.loads(self.call("instructor/api/state", "teacher", "instructors").body)
        assert [row["learner"] for row in state["learners"]] == ["ada", "cy", "dee"]
        assert {row["learner"]: row["idle_s"] for row in state["learners"]} == {"ada": 60.0, "cy": 60.0, "dee": 60.0}
        grid = next(row for row in state["exercises"] if row["grade_id"] == "grid")
        assert (grid["pass_rate"], grid["failures"], grid["stuck"]) == (
            0.333,
            [["grid too small / 网格太小", 2]],
            ["cy", "dee"],
        )

    def test_a_hint_reaches_only_the_stuck_learners(self):
        body = json.dumps({"lab": LAB, "grade_id": "grid", "text_en": "ceil(n / block) blocks", "text_zh": "向上取整"})
        answer = self.call("instructor/api/hints", "teacher", "instructors", "POST", body)
        assert answer.code == 200 and json.loads(answer.body)["sent_to"] == {"cy": "", "dee": ""}
        assert (self.homes / "cy" / LAB / f"HINT-{LAB}.md").is_file()
        assert not (self.homes / "ada" / LAB / f"HINT-{LAB}.md").exists()
        assert [h["text"]["zh"] for h in json.loads(self.call("me/api/state", "cy").body)["hints"]] == ["向上取整"]
        assert json.loads(self.call("me/api/state", "ada").body)["hints"] == []
        assert "ceil(n / block) blocks" in self.call("me?lang=en", "dee").body.decode()

    def test_a_bad_hint_is_refused_with_the_field(self):
        body = json.dumps({"lab": LAB, "grade_id": "grid", "text_en": " "})
        answer = self.call("instructor/api/hints", "teacher", "instructors", "POST", body)
        assert answer.code == 400 and "text_en, text_zh" in json.loads(answer.body)["error"]
        assert self.call("instructor/api/hints", "teacher", "instructors", "POST", "[1]").code == 400

    def test_the_certificate_is_the_logged_in_learners_and_only_once_earned(self):
        assert self.call("me/certificate", "cy").code == 404
        page = self.call("me/certificate?" + urlencode({"lang": "en", "learner": "cy"}), "ada")
        assert page.code == 200 and "ada" in page.body.decode() and "cy" not in page.body.decode().split("<body>")[1]
        cert_id = page.body.decode().split('id="certificate-id">')[1].split("<")[0]

        def verdict(learner, given):
            return json.loads(self.call(f"certificate/verify?learner={learner}&id={given}", "cy").body)

        assert verdict("ada", cert_id)["valid"] is True
        assert verdict("cy", cert_id)["valid"] is False
        assert verdict("ada", "0" * 24)["valid"] is False
        me = json.loads(self.call("me/api/state", "ada").body)
        assert me["certificate"] == {
            "offered": True,
            "earned": True,
            "requirements": [{"lab": LAB, "pass_fraction": 1.0}],
            "missing": [],
        }
        assert json.loads(self.call("me/api/state", "cy").body)["certificate"]["missing"] == [LAB]
