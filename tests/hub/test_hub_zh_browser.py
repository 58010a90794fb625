"""JupyterLab in Chinese for zh learners (issue 27): the demo hub with ``lang="zh"`` gives a learner
the zh notebooks and JupyterLab's menus from the zh-CN language pack; chromium checks the menu bar
and saves a screenshot with the File menu open (``<tmp_path>/output/``).
"""

from __future__ import annotations

import json

import pytest
from labsource import REPO
from test_hub_browser import NAV_TIMEOUT_MS, chromium_path, dismiss_toasts, launch_args

from rocmlab.course.course import Course
from rocmlab.hub.language import SETTINGS, SETTINGS_FILE, missing_pack

pytestmark = [pytest.mark.slow, pytest.mark.machine_wide]
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")

LEARNER = "learner1"
LAB = "01-rocm-setup"
# JupyterLab's main menus as the zh-CN language pack names them
MENUS_ZH = ["文件", "编辑", "查看", "运行", "内核", "帮助"]


def test_zh_learner_gets_jupyterlab_in_chinese(tmp_path, demo_hub_options):
    from rocmlab.hub import DemoHub

    if missing_pack("zh"):
        pytest.skip(f"{missing_pack('zh')} is not installed (hub extra)")
    shots = tmp_path / "output"
    shots.mkdir()
    screenshot = shots / "zh-session.png"
    options = {"learners": (LEARNER,), "instructors": (), "labs": (LAB,), "lang": "zh", "timeout_s": 120}
    options["course"] = Course(REPO)
    with DemoHub(tmp_path / "hub", **options, **demo_hub_options) as hub:
        hub.start_server(LEARNER)
        setting = hub.home(LEARNER) / SETTINGS / SETTINGS_FILE
        assert json.loads(setting.read_text()) == {"locale": "zh_CN"}
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=launch_args())
            page = browser.new_page(viewport={"width": 1400, "height": 900}, locale="en-US")
            page.set_default_timeout(NAV_TIMEOUT_MS)
            try:
                notebook = f"{LAB}/{LAB}.ipynb"
                page.goto(f"{hub.url}/hub/login?next=/user/{LEARNER}/lab/tree/{notebook}")
                page.fill("#username_input", LEARNER)
                page.fill("#password_input", hub.password)
                page.click("#login_submit")
                page.wait_for_url(f"**/user/{LEARNER}/lab/tree/{notebook}*")
                menubar = page.locator("#jp-menu-panel .lm-MenuBar-itemLabel")
                sync_api.expect(menubar.first).to_have_text(MENUS_ZH[0], timeout=NAV_TIMEOUT_MS)
                labels = [label.strip() for label in menubar.all_text_contents()]
                assert all(name in labels for name in MENUS_ZH), labels
                heading = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-RenderedMarkdown h1").first
                sync_api.expect(heading).to_contain_text("实验 01")
                dismiss_toasts(page)
                for button in page.locator(".jp-toast-button", has_text="否").all():
                    button.click()  # JupyterLab's news question, in Chinese
                page.locator(".lm-MenuBar-item", has_text=MENUS_ZH[0]).first.click()
                sync_api.expect(page.locator(".lm-Menu-itemLabel", has_text="新建").first).to_be_visible()
            finally:
                page.screenshot(path=str(screenshot))
                print(f"screenshot: {screenshot}")
                browser.close()
    assert screenshot.stat().st_size > 0
