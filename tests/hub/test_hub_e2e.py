"""The workshop flow on a demo hub, through the hub's and the Jupyter servers' own APIs.

An instructor and two learners are created through the hub's REST API. The instructor generates
and releases lab 01 with nbgrader's formgrader API; each learner fetches it through the
Assignments API, fills in the solution cells (one learner gets one answer wrong) through the
contents API, runs the notebook in a kernel over the kernel's websocket, saves and submits it.
The instructor collects, grades with ``rocmlab grade``, releases the feedback, and each
learner fetches it. Then everything is stopped and no process of the hub may remain.
"""

import asyncio
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from datetime import UTC, datetime
from pathlib import Path

import nbformat
import pytest

from rocmlab.cli import main
from rocmlab.course.catalog import discover, select
from rocmlab.course.course import Course
from rocmlab.course.notebooks import solution_notebook
from rocmlab.hub import COURSE_ID, DemoHub, HubError, find_proxy

pytestmark = [pytest.mark.slow, pytest.mark.machine_wide]

ROOT = Path(__file__).resolve().parents[2]
LAB = "01-rocm-setup"
RIGHT, WRONG = "learner1", "learner2"


def _proxy_or_skip():
    try:
        find_proxy(ROOT)
    except HubError as exc:
        pytest.skip(str(exc))


def call(base: str, token: str, method: str, path: str, body=None, form: dict | None = None):
    """A Jupyter server API call as the token's user; parsed JSON (or None)."""
    headers = {"Authorization": f"token {token}"}
    data = None
    if form is not None:
        data, headers["Content-Type"] = urllib.parse.urlencode(form).encode(), "application/x-www-form-urlencoded"
    elif body is not None:
        data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
    request = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=120) as response:
        text = response.read().decode()
    return json.loads(text) if text.strip() else None


def message(session: str, code: str) -> dict:
    return {
        "header": {
            "msg_id": uuid.uuid4().hex,
            "msg_type": "execute_request",
            "username": "learner",
            "session": session,
            "date": datetime.now(UTC).isoformat(),
            "version": "5.3",
        },
        "parent_header": {},
        "metadata": {},
        "channel": "shell",
        "buffers": [],
        "content": {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": False,
        },
    }


async def execute_in_kernel(base: str, token: str, nb, cwd: str, timeout_s: float = 120) -> list[str]:
    """Run every code cell in a new kernel of the user's server; outputs go into ``nb``.
    Returns the names of the errors raised."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    kernel = call(base, token, "POST", "api/kernels", {"name": "python3", "path": cwd})
    errors = []
    try:
        url = base.replace("http://", "ws://", 1) + f"api/kernels/{kernel['id']}/channels"
        connection = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {token}"}))
        session = uuid.uuid4().hex
        for cell in (c for c in nb.cells if c.cell_type == "code"):
            request = message(session, cell.source)
            await connection.write_message(json.dumps(request))
            cell.outputs, replied, idle = [], False, False
            while not (replied and idle):
                reply = json.loads(await asyncio.wait_for(connection.read_message(), timeout_s))
                if reply.get("parent_header", {}).get("msg_id") != request["header"]["msg_id"]:
                    continue
                kind = reply["msg_type"]
                if kind in ("stream", "execute_result", "display_data", "error"):
                    cell.outputs.append(nbformat.v4.output_from_msg(reply))
                    if kind == "error":
                        errors.append(reply["content"]["ename"])
                elif kind == "execute_reply":
                    cell.execution_count, replied = reply["content"].get("execution_count"), True
                elif kind == "status" and reply["content"]["execution_state"] == "idle":
                    idle = True
        connection.close()
    finally:
        call(base, token, "DELETE", f"api/kernels/{kernel['id']}")
    return errors


def answer(nb, solutions: dict, wrong: bool) -> None:
    """Fill every solution cell from the instructor's notebook; ``wrong`` miscounts the copy's bytes."""
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.metadata.get("nbgrader", {}).get("solution") and grade_id in solutions:
            cell.source = solutions[grade_id]
            if wrong and grade_id == "01-arith-sol-1":
                cell.source = cell.source.replace(
                    "return 2 * n_elements * element_size", "return n_elements * element_size"
                )
                assert cell.source != solutions[grade_id]


def login_status(hub: DemoHub, name: str, password: str) -> int:
    """HTTP status of the hub's login form (302 when the password is taken)."""
    import http.cookiejar

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args):
            return None

    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), NoRedirect)
    opener.open(f"{hub.url}/hub/login", timeout=30).read()
    xsrf = next(cookie.value for cookie in jar if cookie.name == "_xsrf")
    form = urllib.parse.urlencode({"username": name, "password": password, "_xsrf": xsrf}).encode()
    try:
        with opener.open(f"{hub.url}/hub/login?next=", data=form, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def fetch_answer_submit(hub: DemoHub, name: str, solutions: dict) -> list[str]:
    base, token = hub.start_server(name), hub.user_token(name)
    listed = call(base, token, "GET", f"assignments?course_id={COURSE_ID}")
    assert listed["success"], listed
    assert [(a["assignment_id"], a["status"]) for a in listed["value"]] == [(LAB, "released")]
    fetched = call(base, token, "POST", "assignments/fetch", form={"course_id": COURSE_ID, "assignment_id": LAB})
    assert [(a["assignment_id"], a["status"]) for a in fetched["value"]] == [(LAB, "fetched")], fetched
    path = f"{COURSE_ID}/{LAB}/{LAB}.ipynb"
    model = call(base, token, "GET", f"api/contents/{path}?content=1")
    nb = nbformat.from_dict(model["content"])
    answer(nb, solutions, wrong=name == WRONG)
    errors = asyncio.run(execute_in_kernel(base, token, nb, f"{COURSE_ID}/{LAB}"))
    call(base, token, "PUT", f"api/contents/{path}", {"type": "notebook", "format": "json", "content": nb})
    submitted = call(base, token, "POST", "assignments/submit", form={"course_id": COURSE_ID, "assignment_id": LAB})
    assert submitted["success"], submitted
    return errors


def test_release_fetch_submit_grade_feedback_on_a_demo_hub(tmp_path, demo_hub_options):
    _proxy_or_skip()
    import psutil

    lab = select(discover(ROOT), [LAB])[0]
    solutions = {
        c.metadata["nbgrader"]["grade_id"]: c.source
        for c in solution_notebook(lab, "en").cells
        if c.metadata.get("nbgrader", {}).get("solution")
    }
    started = time.monotonic()
    hub = DemoHub(
        tmp_path / "hub",
        course=Course(ROOT),
        learners=(RIGHT, WRONG),
        instructors=("teacher",),
        labs=(LAB,),
        timeout_s=120,
        **demo_hub_options,
    )
    processes = []
    with hub:
        users = {u["name"]: u for u in hub.api("GET", "/users")}
        assert set(users) == {"teacher", RIGHT, WRONG}
        assert "instructors" in users["teacher"]["groups"] and not users[RIGHT]["groups"]
        assert login_status(hub, RIGHT, hub.password) == 302
        assert login_status(hub, RIGHT, hub.password + "x") == 403
        teacher, teacher_token = hub.start_server("teacher"), hub.user_token("teacher")
        course = hub.home("teacher") / "course"
        assert (course / "source" / LAB / f"{LAB}.ipynb").is_file()
        for step in ("assign", "release"):
            result = call(teacher, teacher_token, "POST", f"formgrader/api/assignment/{LAB}/{step}")
            assert result["success"], (step, result)
        assert (hub.exchange / COURSE_ID / "outbound" / LAB / f"{LAB}.ipynb").is_file()

        errors = {name: fetch_answer_submit(hub, name, solutions) for name in (RIGHT, WRONG)}
        assert errors[RIGHT] == [] and errors[WRONG] == ["AssertionError"], errors
        assert (hub.home(RIGHT) / LAB / f"{LAB}.ipynb").is_file()  # delivered on spawn too
        processes = psutil.Process(hub._process.pid).children(recursive=True)
        assert len(processes) >= 5  # proxy, culler, three servers
        if os.geteuid() == 0:  # never a learner as root; the hub's state stays out of their reach
            import pwd

            servers = [p for p in processes if "jupyterhub-singleuser" in " ".join(p.cmdline())]
            assert servers and {p.uids().real for p in servers} == {pwd.getpwnam("nobody").pw_uid}
            state = (hub.workdir / "hub").stat()
            assert state.st_uid == 0 and state.st_mode & 0o077 == 0

        collected = call(teacher, teacher_token, "POST", f"formgrader/api/assignment/{LAB}/collect")
        assert collected["success"], collected
        assert sorted(p.name for p in (course / "submitted").iterdir()) == [RIGHT, WRONG]
        out = tmp_path / "grades"
        assert (
            main(
                [
                    "--root",
                    str(ROOT),
                    "grade",
                    LAB,
                    "--submissions",
                    str(course),
                    "--jobs",
                    "2",
                    "--out",
                    str(out),
                    "--feedback-to",
                    str(course),
                ]
            )
            == 0
        )
        summary = {s["student"]: s for s in json.loads((out / "summary.json").read_text())["students"]}
        right, wrong = summary[RIGHT], summary[WRONG]
        assert right["score"] == right["max_score"] > 0 and not right["flags"], right
        assert wrong["score"] == wrong["max_score"] - 0.5, wrong  # one rule of 01-arith-1, on its own
        assert [t["grade_id"] for t in wrong["tests"] if not t["passed"]] == ["01-arith-1"]
        assert [r["name"] for t in wrong["tests"] for r in t["rules"] if not r["passed"]] == ["arith_copy_bytes"]

        assert sorted(p.name for p in (course / "feedback").iterdir()) == [RIGHT, WRONG]
        released = call(teacher, teacher_token, "POST", f"formgrader/api/assignment/{LAB}/release_feedback")
        assert released["success"], released
        for name, score in ((RIGHT, right), (WRONG, wrong)):
            base, token = hub.start_server(name), hub.user_token(name)
            listed = call(
                base, token, "POST", "assignments/fetch_feedback", form={"course_id": COURSE_ID, "assignment_id": LAB}
            )
            assert listed["success"], listed
            feedback = list((hub.home(name) / COURSE_ID / LAB / "feedback").glob(f"*/{LAB}.html"))
            assert len(feedback) == 1, feedback
            assert f"{score['score']:g} / {score['max_score']:g}" in feedback[0].read_text()
    wall = time.monotonic() - started
    print(f"hub end-to-end: {wall:.1f} s")
    _, alive = psutil.wait_procs(processes, timeout=10)
    assert not alive, [p.cmdline() for p in alive if p.is_running()]
    assert not [p.cmdline() for p in psutil.process_iter() if _of(p, hub.marker)]


def _of(proc, marker: str) -> bool:
    try:
        return proc.environ().get("ROCMLAB_HUB_ID") == marker
    except Exception:  # noqa: BLE001 (gone or not readable)
        return False
