"""The live workshop end to end on a demo hub, in chromium, logged in through the hub's own login
page: a burst of five learners submit lab 01 as delivered (and released into the exchange), one
exercise answered wrongly, each by typing plain ``rocmlab submit`` (found on the login shell's
PATH) in a terminal of their own JupyterLab server: learner1 in the browser, the four others in
terminals opened through their servers' terminal API, at once. While the burst waits for its
grades the live service is killed (SIGKILL) and JupyterHub starts it again: every submit
completes without a learner doing anything, each attempt graded once and counted once against
its learner's rate limit, by the hub's own live worker (``ROCMLAB_LIVE_WORKERS``). The live page
learner1 opened in Chinese before the restart still takes the "Grade" button (no 403), reloads
itself until the result is there and shows the rule not met in Chinese. The instructor sends a
hint on the failed exercise: learner1's JupyterLab shows it as a notification when it loads
(rocmlab.live.notify). Another learner's token reads none of it. Screenshots in
``<tmp_path>/output/``."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from labsource import REPO
from test_hub_browser import NAV_TIMEOUT_MS, chromium_path, dismiss_toasts, launch_args, sync_api

from rocmlab.course.course import Course

pytestmark = [pytest.mark.slow, pytest.mark.machine_wide]

LEARNER, OTHER, TEACHER = "learner1", "learner2", "teacher1"
BURST = ("learner3", "learner4", "learner5", "learner6")  # beside LEARNER, each from a terminal of their own
LAB = "01-rocm-setup"
RULE = "a non-empty version.hip gives the str 'rocm', whatever the capability"  # solutions/01-rocm-setup/checks.py
RULE_ZH = "version.hip 为非空字符串时返回 str 'rocm'"  # the same rule's zh
HINT_EN = "torch.version.hip is a str on ROCm builds of PyTorch"
RESTART_TIMEOUT_S = 120  # JupyterHub polls its managed services every 30 s (Spawner.poll_interval)
GRADE_TIMEOUT_S = 300


def log_in_to_lab(page, hub) -> None:
    page.goto(f"{hub.url}/hub/login?next=/user/{LEARNER}/lab")
    page.fill("#username_input", LEARNER)
    page.fill("#password_input", hub.password)
    page.click("#login_submit")
    page.wait_for_url(f"**/user/{LEARNER}/lab*")


def answer_the_first_exercise_wrongly(home: Path) -> None:
    """The learner's edit, made on disk: one exercise answered (wrongly), the others left as
    handed out, so that the result has a rule not met and exercises not attempted."""
    path = home / LAB / f"{LAB}.ipynb"
    owner = path.stat()
    notebook = json.loads(path.read_text(encoding="utf-8"))
    for cell in notebook["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "01-backend-sol-1":
            cell["source"] = "def backend_of(torch_module):\n    return 'cpu'\n"
    path.write_text(json.dumps(notebook), encoding="utf-8")
    os.chown(path, owner.st_uid, owner.st_gid)


SUBMIT_LINE = f"rocmlab submit {LAB}/{LAB}.ipynb > submit.log 2>&1; echo done >> submit.log"


def type_submit_in_a_terminal(page) -> None:
    page.locator(".jp-LauncherCard[data-category='Other']", has_text="Terminal").first.click()
    terminal = page.locator(".jp-Terminal").first
    terminal.wait_for(state="visible")
    page.wait_for_timeout(2_000)  # the shell's prompt
    terminal.click()
    # plain `rocmlab`, as the guide says: the terminal's login shell must find it (rocmlab.hub.terminal)
    page.keyboard.type(SUBMIT_LINE + "\n")


def submitted_in_a_terminal_of_their_server(hub, name: str, done: threading.Event) -> None:
    """What JupyterLab's terminal does, without a browser: the learner's server opens a terminal
    (jupyter_server's ``api/terminals``), and the line is typed into its websocket (terminado's
    ``["stdin", ...]`` messages). The terminal stays open until ``done``."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    token = hub.user_token(name)
    headers = {"Authorization": f"token {token}", "Content-Type": "application/json"}
    server = f"{hub.url}/user/{name}/"
    request = urllib.request.Request(server + "api/terminals", data=b"{}", method="POST", headers=headers)
    with urllib.request.urlopen(request, timeout=60) as response:
        terminal = json.loads(response.read().decode())["name"]

    async def type_and_hold() -> None:
        url = server.replace("http", "ws", 1) + f"terminals/websocket/{terminal}"
        socket = await websocket_connect(HTTPRequest(url, headers=headers, connect_timeout=60))
        try:
            await socket.read_message()  # the terminal's setup message: the shell is there
            socket.write_message(json.dumps(["stdin", SUBMIT_LINE + "\r"]))
            while not done.is_set():
                await asyncio.sleep(0.5)
        finally:
            socket.close()

    asyncio.run(asyncio.wait_for(type_and_hold(), GRADE_TIMEOUT_S + RESTART_TIMEOUT_S))


def start_the_burst(hub, done: threading.Event) -> list[threading.Thread]:
    threads = [
        threading.Thread(target=submitted_in_a_terminal_of_their_server, args=(hub, name, done), daemon=True)
        for name in BURST
    ]
    for thread in threads:
        thread.start()
    return threads


def submit_log(hub, name: str) -> str:
    log = hub.home(name) / "submit.log"
    return log.read_text() if log.is_file() else ""


def wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s:g} s: {what}"
        time.sleep(0.5)


def live_service_pids(hub) -> list[int]:
    """The live service's processes among this hub's own descendants (other hubs may run here)."""
    import psutil

    found = []
    for child in psutil.Process(hub._process.pid).children(recursive=True):
        try:
            if "rocmlab.live.service" in child.cmdline():
                found.append(child.pid)
        except psutil.NoSuchProcess:
            continue
    return found


def kill_the_live_service_mid_burst(hub) -> list[int]:
    """SIGKILL the service once two of the burst's attempts are queued: the others' submits are
    then waiting on it, for their grade or still to be queued."""
    import signal

    from rocmlab.live.queue import LiveQueue

    def queued() -> list:
        return LiveQueue(hub.live_queue).attempts() if hub.live_queue.exists() else []

    wait_for(lambda: len(queued()) >= 2, 180, "two attempts queued")
    killed = live_service_pids(hub)
    ungraded = [a.learner for a in queued() if a.state != "graded"]
    waiting = [name for name in (LEARNER, *BURST) if "done" not in submit_log(hub, name)]
    assert ungraded and len(waiting) >= len(BURST), f"not mid-burst: {ungraded} to grade, {waiting} waiting"
    assert killed, "the live service is not among the hub's processes"
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    return killed


def send_a_hint_as_the_instructor(hub) -> dict:
    """The instructor's page's POST, with the instructor's token (test_live_browser.py clicks it)."""
    token = hub.user_token(TEACHER)
    status, state = api(hub.live_url + "instructor/api/state", token)
    assert status == 200, status
    stuck = [row for row in state["exercises"] if LEARNER in row["stuck"]]
    assert stuck, state["exercises"]
    body = json.dumps({"lab": LAB, "grade_id": stuck[0]["grade_id"], "text_en": HINT_EN}).encode()
    request = urllib.request.Request(
        hub.live_url + "instructor/api/hints",
        data=body,
        method="POST",
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read().decode())


def api(url: str, token: str):
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read().decode())
    except urllib.error.HTTPError as exc:
        return exc.code, None


def start_servers(hub, names) -> None:
    """Started together, as a room arrives (each start waits for its server)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(names)) as pool:
        list(pool.map(hub.start_server, names))


def test_a_burst_of_learners_submits_from_jupyterlab_through_a_killed_service_graded_and_counted_once(
    tmp_path, demo_hub_options, monkeypatch
):
    from rocmlab.hub import DemoHub

    monkeypatch.setenv("ROCMLAB_LIVE_WORKERS", "1")  # the grading worker is the hub's (jupyterhub_config.py)
    shots = tmp_path / "output"
    shots.mkdir()
    screenshot = shots / "live-learner-page.png"
    burst_done = threading.Event()
    with DemoHub(
        tmp_path / "hub",
        course=Course(REPO),
        learners=(LEARNER, OTHER, *BURST),
        instructors=(TEACHER,),
        labs=(LAB,),
        timeout_s=120,
        **demo_hub_options,
    ) as hub:
        released = hub.exchange / "rocmlab" / "outbound" / LAB  # what the instructor's release puts there
        shutil.copytree(hub.root / "labs" / "en" / LAB, released)
        start_servers(hub, (LEARNER, *BURST))
        for name in (LEARNER, *BURST):
            answer_the_first_exercise_wrongly(hub.home(name))
        burst = []
        try:
            with sync_api.sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=launch_args())
                try:
                    page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
                    page.set_default_timeout(NAV_TIMEOUT_MS)
                    log_in_to_lab(page, hub)
                    dismiss_toasts(page)
                    live = page.context.new_page()  # the learner's live page, opened before the restart
                    live.set_default_timeout(NAV_TIMEOUT_MS)
                    live.goto(hub.live_url + "?lang=zh")  # the hub's OAuth, with the session of the login above
                    type_submit_in_a_terminal(page)
                    burst = start_the_burst(hub, burst_done)
                    killed = kill_the_live_service_mid_burst(hub)
                    wait_for(lambda: set(live_service_pids(hub)) - set(killed), RESTART_TIMEOUT_S, "restarted")
                    for name in (LEARNER, *BURST):
                        wait_for(lambda n=name: "done" in submit_log(hub, n), GRADE_TIMEOUT_S, f"{name}'s submit done")
                        printed = submit_log(hub, name)
                        assert f"submitted {LAB} (attempt " in printed, printed
                        assert "; 4 of 5 submissions left" in printed, printed  # counted once
                        assert "score: 0 / " in printed and RULE in printed, printed
                        assert "not attempted yet (left as handed out): 01-rocminfo-1, " in printed, printed
                        assert "Traceback" not in printed, printed  # "does not answer ...; retrying": the CLI's own
                    retried = [
                        n for n in (LEARNER, *BURST) if "retrying, your submission is kept" in submit_log(hub, n)
                    ]
                    assert len(retried) >= len(BURST), retried  # those waiting when it was killed went on alone
                    live.locator("form.submit button").first.click()  # the page from before the restart
                    row = live.locator("tr.attempt.graded")
                    sync_api.expect(row).to_have_count(1)
                    assert "403" not in live.content()
                    assert row.locator(".score").text_content().startswith("0 / ")
                    assert RULE_ZH in row.locator("ul.failed").text_content()
                    live.screenshot(path=str(shots / "live-learner-page-zh.png"), full_page=True)
                    sent = send_a_hint_as_the_instructor(hub)
                    assert sent["sent_to"] == {name: "" for name in (LEARNER, *BURST)}, sent
                    page.reload()
                    notice = page.locator(".Toastify__toast", has_text=f"Hint from your instructor for {LAB}")
                    sync_api.expect(notice).to_contain_text(HINT_EN)
                    sync_api.expect(notice.get_by_role("button", name="Open the hint")).to_be_visible()
                finally:
                    page.screenshot(path=str(screenshot), full_page=True)
                    print(f"screenshot: {screenshot}")
                    browser.close()
        finally:
            burst_done.set()
            for thread in burst:
                thread.join(timeout=30)
            log = hub.log_path.read_text(errors="replace")
            print(log[-3000:])
        assert "live worker: 1 lab(s) can be graded here (01-rocm-setup)" in log  # its preflight
        assert "Service rocmlab-live exited" in log  # killed, and started again by JupyterHub
        from rocmlab.live.queue import LiveQueue

        queue = LiveQueue(hub.live_queue)
        for name in (LEARNER, *BURST):  # each graded once, counted once
            (attempt,) = queue.attempts(learner=name)
            assert attempt.state == "graded", attempt
            assert log.count(f"graded attempt {attempt.id} {name} {LAB} ") == 1, name
            assert queue.submissions_since(name, LAB, 0) == 1, name
        assert len(queue.attempts()) == 1 + len(BURST)
        mine = [a.id for a in queue.attempts(learner=LEARNER)]
        other = hub.user_token(OTHER)
        assert api(hub.live_url + f"api/attempts/{mine[0]}", other)[0] == 404  # learner1's: not there for learner2
        status, listed = api(hub.live_url + "api/attempts", other)
        assert status == 200 and listed["attempts"] == []
    assert screenshot.stat().st_size > 0
