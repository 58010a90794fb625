"""Browser test of the course website (issue 27): chromium opens a zh lab page from disk, offline.

Every request the page makes is recorded; anything but a file of the site is refused, so a page
that needs a CDN shows up as a failed request. The screenshot goes to ``<tmp_path>/output/``.
Skipped only where playwright or chromium is missing (``make system-deps``).
"""

from __future__ import annotations

import pytest
from test_hub_browser import chromium_path, launch_args
from test_site import REPO

from rocmlab.site.build import build_site
from rocmlab.site.launch import read_config

pytestmark = pytest.mark.slow
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")

LAB = "03-lora-finetune-zh"


def test_zh_lab_page_renders_offline(tmp_path):
    site = tmp_path / "site"
    build_site(REPO, site, read_config(REPO), [LAB, "01"], progress=lambda *_: None)
    shots = tmp_path / "output"
    shots.mkdir()
    screenshot = shots / f"site-zh-{LAB}.png"
    requested, refused = [], []

    def only_the_site(route):
        url = route.request.url
        requested.append(url)
        if url.startswith(site.as_uri()):
            route.continue_()
        else:
            refused.append(url)
            route.abort()

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=launch_args())
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900}, locale="zh-CN")
            page.route("**/*", only_the_site)
            page.goto((site / "zh" / f"{LAB}.html").as_uri())
            try:
                sync_api.expect(page.locator(".lab-head h1")).to_have_text("中文垂直领域 LoRA 微调")
                sync_api.expect(page.locator("a.launch")).to_have_text("在工作坊 Hub 上打开")
                sync_api.expect(page.locator(".lab-head .badge[class*='verdict-']")).to_be_visible()
                assert page.locator(".notebook .code_cell").count() > 5
                # the stylesheet was applied: the launch button is filled with the accent colour
                color = page.locator("a.launch").evaluate("e => getComputedStyle(e).backgroundColor")
                assert color == "rgb(179, 38, 30)", color
                page.locator("a.lang-switch").click()
                sync_api.expect(page.locator(".lab-head h1")).to_have_text("Chinese-domain LoRA fine-tuning")
                page.go_back()
                sync_api.expect(page.locator(".lab-head h1")).to_have_text("中文垂直领域 LoRA 微调")
            finally:
                page.screenshot(path=str(screenshot))
                print(f"screenshot: {screenshot}")
        finally:
            browser.close()
    assert not refused, f"the page asked for files outside the site: {refused}"
    assert any(url.endswith("static/site.css") for url in requested)
    assert screenshot.stat().st_size > 0
