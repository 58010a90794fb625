"""Browser test of the freshness dashboard: `rocmlab report --format html` opened in Debian's chromium.

Playwright drives /usr/bin/chromium headless, launched as the hub's browser test does (no sandbox
as root, no background networking). The page must load from a file with every network request
refused (it is self-contained), decode its plots, colour the matrix by verdict, show a hostile lab
title as text without running it, and link each lab's section. The screenshot goes to
``<tmp_path>/output/freshness-dashboard.png``; docs/images/freshness-dashboard.png is one such.
Skipped only where playwright or chromium is missing.
"""

from __future__ import annotations

import pytest
from freshness_helpers import dashboard_course, render_dashboard
from test_hub_browser import check_offline_page

pytestmark = pytest.mark.slow

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (.venv/bin/pip install playwright)"
)

VERDICT_COLOURS = {"verified": "rgb(220, 252, 231)", "never run": "rgb(255, 255, 255)", "failing": "rgb(254, 226, 226)"}


def test_dashboard_renders_in_a_real_browser(make_course, tmp_path):
    root = dashboard_course(make_course)
    page_file = tmp_path / "site" / "index.html"
    render_dashboard(root, page_file)
    screenshot = tmp_path / "output" / "freshness-dashboard.png"
    check_offline_page(page_file, screenshot, {"width": 1400, "height": 1000}, check_the_page)


def check_the_page(page) -> None:
    headers = page.locator("#matrix thead th[data-column]")
    assert headers.all_inner_texts()[0].startswith("rocm-10.0")
    assert [h.get_attribute("data-column") for h in headers.all()] == [
        "rocm-10.0",
        "rocm-7.14",
        "cpu-current",
        "cpu-previous",
    ]
    demo = page.locator('#matrix tr[data-lab="01-demo"] td.verdict')
    verdicts = [cell.get_attribute("data-verdict") for cell in demo.all()]
    assert verdicts == ["never run", "verified", "verified", "verified"]
    for cell in demo.all():
        colour = cell.evaluate("c => getComputedStyle(c).backgroundColor")
        assert colour == VERDICT_COLOURS[cell.get_attribute("data-verdict")]
    assert page.locator('#matrix tr[data-lab="01-demo"] td').last.inner_text() == "stale"
    failing = page.locator('#matrix tr[data-lab="02-other"] td.verdict[data-verdict="failing"]')
    assert failing.evaluate("c => getComputedStyle(c).backgroundColor") == VERDICT_COLOURS["failing"]
    assert "HIP error: invalid device function" in failing.get_attribute("title")
    sync_api.expect(page.locator("#lab-02-other")).to_contain_text("changed since the last pass: numpy 2.4.6 → 2.5.0")
    images = page.locator("img")
    assert images.count() == 2  # two run histories
    for image in images.all():
        assert image.evaluate("i => i.complete && i.naturalWidth > 200 && i.naturalHeight > 100"), image.get_attribute(
            "alt"
        )
    title = page.locator('#matrix tr[data-lab="02-other"] td').first
    sync_api.expect(title).to_contain_text("<script>alert(1)</script> & co")
    page.locator('#matrix a[href="#lab-02-other"]').click()
    page.wait_for_url("**#lab-02-other")
    sync_api.expect(page.locator("#lab-02-other h2")).to_be_in_viewport()
    page.evaluate("window.scrollTo(0, 0)")
