"""Browser test of the instructor's class page (class.html) in Debian's chromium, driven by Playwright
as the hub's and the dashboard's browser tests are (test_hub_browser.py).

The page is opened from a file with every network request refused (it is self-contained). It must
decode its score plot, show per exercise the mean, the pass rate and the counted broken rules,
the flagged learners with their reasons, the lab versions and the run times, and show hostile
learner text as text without running it. The screenshot goes to ``<tmp_path>/output/class-page.png``;
docs/images/class-page.png is one such. Skipped only where playwright or chromium is missing.
"""

from __future__ import annotations

import pytest
from class_outputs import HOSTILE, LAB, write_outputs
from test_hub_browser import check_offline_page

from rocmlab.grading.analytics import write_class_page

pytestmark = pytest.mark.slow

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (.venv/bin/pip install playwright)"
)


def test_class_page_renders_in_a_real_browser(tmp_path):
    page_file = write_class_page(write_outputs(tmp_path / "grades"))
    screenshot = tmp_path / "output" / "class-page.png"
    check_offline_page(page_file, screenshot, {"width": 1280, "height": 900}, check_the_page)


def check_the_page(page) -> None:
    expect = sync_api.expect
    facts = {
        fact: page.locator(f'#facts [data-fact="{fact}"]').inner_text() for fact in ("learners", "graded", "flagged")
    }
    assert facts == {"learners": "6", "graded": "5", "flagged": "3"}
    plot = page.locator("#score-plot")
    assert plot.evaluate("i => i.complete && i.naturalWidth > 300 && i.naturalHeight > 100")

    total = page.locator('#exercise-table tr[data-grade-id="sum"]')
    assert total.locator('[data-field="mean"]').inner_text() == "0.8"
    assert total.locator('[data-field="pass-rate"]').inner_text().startswith("40%")
    first_failure = total.locator(".failures li").first
    assert first_failure.get_attribute("data-count") == "2"
    expect(first_failure).to_contain_text("scaled_sum multiplies by scale / scaled_sum 乘以 scale")
    expect(total).to_contain_text("<script>alert(1)</script>")  # shown as text
    colour = total.locator('[data-field="pass-rate"]').evaluate("c => getComputedStyle(c).backgroundColor")
    assert colour == "rgb(254, 226, 226)"  # under half passed

    flagged = page.locator("#flagged-table tbody tr")
    assert [row.get_attribute("data-student") for row in flagged.all()] == ["cy", "dee", "eve"]
    dee = page.locator('#flagged-table tr[data-student="dee"]')
    assert dee.locator(".flag").all_inner_texts() == ["tampered", "timeout"]
    expect(dee).to_contain_text(f"a cell ran past its limit: {HOSTILE}")

    versions = {
        row.get_attribute("data-version"): row.locator("td").last.inner_text()
        for row in page.locator("#version-table tbody tr").all()
    }
    assert versions == {"1.2.0": "4", "1.1.0": "1", "?": "1"}

    learners = page.locator("#learner-table tbody tr")
    assert learners.first.get_attribute("data-student") == "dee"  # slowest first
    assert learners.first.locator('[data-field="duration"]').inner_text() == "31.0 s"
    cy = page.locator('#learner-table tr[data-student="cy"]')
    assert cy.locator('[data-field="version"]').inner_text() == "1.1.0"
    page.locator('#learner-table tr[data-student="ada"] a').click()
    page.wait_for_url(f"**/feedback/ada/{LAB}.html")
    expect(page.locator("p")).to_have_text("feedback of ada")
    page.go_back()
