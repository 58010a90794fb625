"""The live workshop end to end on a demo hub, in chromium: a learner opens a terminal in JupyterLab,
types plain ``rocmlab submit`` (found on the login shell's PATH) on lab 01 as delivered (and released into the exchange) (nothing answered), the hub's own live worker (``ROCMLAB_LIVE_WORKERS``) grades it, and the
learner sees the score and the rules not met on the live service's page (logged in through the
hub, no second login). Another learner's token reads none of it. Screenshot in
``<tmp_path>/output/``."""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from test_hub_browser import NAV_TIMEOUT_MS, chromium_path, dismiss_toasts, launch_args, sync_api

pytestmark = [pytest.mark.slow, pytest.mark.machine_wide]

LEARNER, OTHER = "learner1", "learner2"
LAB = "01-rocm-setup"
RULE = "a non-empty version.hip gives the str 'rocm', whatever the capability"  # solutions/01-rocm-setup/checks.py
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


def submit_in_a_terminal(page, home: Path) -> None:
    page.locator(".jp-LauncherCard[data-category='Other']", has_text="Terminal").first.click()
    terminal = page.locator(".jp-Terminal").first
    terminal.wait_for(state="visible")
    page.wait_for_timeout(2_000)  # the shell's prompt
    terminal.click()
    # plain `rocmlab`, as the guide says: the terminal's login shell must find it (rocmlab.hub.terminal)
    page.keyboard.type(f"rocmlab submit {LAB}/{LAB}.ipynb > submit.log 2>&1; echo done >> submit.log\n")
    deadline = time.monotonic() + GRADE_TIMEOUT_S + 60
    log = home / "submit.log"
    while time.monotonic() < deadline and not (log.is_file() and "done" in log.read_text()):
        time.sleep(1)


def api(url: str, token: str):
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read().decode())
    except urllib.error.HTTPError as exc:
        return exc.code, None


def test_a_learner_submits_from_jupyterlab_and_sees_the_score_and_the_rules_not_met(
    tmp_path, demo_hub_options, monkeypatch
):
    from rocmlab.hub import DemoHub

    monkeypatch.setenv("ROCMLAB_LIVE_WORKERS", "1")  # the grading worker is the hub's (jupyterhub_config.py)
    shots = tmp_path / "output"
    shots.mkdir()
    screenshot = shots / "live-learner-page.png"
    with DemoHub(tmp_path / "hub", learners=(LEARNER, OTHER), labs=(LAB,), timeout_s=120, **demo_hub_options) as hub:
        released = hub.exchange / "rocmlab" / "outbound" / LAB  # what the instructor's release puts there
        shutil.copytree(hub.root / "labs" / "en" / LAB, released)
        hub.start_server(LEARNER)
        try:
            with sync_api.sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=launch_args())
                try:
                    page = browser.new_page(viewport={"width": 1400, "height": 900})
                    page.set_default_timeout(NAV_TIMEOUT_MS)
                    log_in_to_lab(page, hub)
                    dismiss_toasts(page)
                    answer_the_first_exercise_wrongly(hub.home(LEARNER))
                    submit_in_a_terminal(page, hub.home(LEARNER))
                    printed = (hub.home(LEARNER) / "submit.log").read_text()
                    assert "submitted 01-rocm-setup (attempt 1); 4 of 5 submissions left" in printed, printed
                    assert "score: 0 / " in printed and RULE in printed, printed
                    assert "not attempted yet (left as handed out): 01-rocminfo-1, " in printed, printed
                    page.goto(hub.live_url)  # the hub's OAuth, with the session of the login above
                    row = page.locator("tr.attempt.graded")
                    sync_api.expect(row).to_have_count(1)
                    assert row.locator(".score").text_content().startswith("0 / ")
                    assert RULE in row.locator("ul.failed").text_content()
                finally:
                    page.screenshot(path=str(screenshot), full_page=True)
                    print(f"screenshot: {screenshot}")
                    browser.close()
        finally:
            log = hub.log_path.read_text(errors="replace")
            print(log[-3000:])
        assert "live worker: 1 lab(s) can be graded here (01-rocm-setup)" in log  # its preflight
        assert log.count("graded attempt 1 learner1 01-rocm-setup") == 1
        other = hub.user_token(OTHER)
        assert api(hub.live_url + "api/attempts/1", other)[0] == 404  # learner1's attempt: not there for learner2
        status, mine = api(hub.live_url + "api/attempts", other)
        assert status == 200 and mine["attempts"] == []
    assert screenshot.stat().st_size > 0
