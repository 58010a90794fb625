"""Browser test of the hub (issue 12): a learner logs in, runs lab 01 in JupyterLab, sees its test output.

Playwright (sync API) drives Debian's chromium (``/usr/bin/chromium``, headless, no background
networking) against ``rocmlab.hub.DemoHub`` on loopback. The learner answers the first exercise
wrongly on purpose, runs every cell from the Run menu, and must see the visible test's failure
message under the test cell. A screenshot goes to ``<tmp_path>/output/`` (also on failure).

Skipped only where playwright or chromium is missing; set up with
``apt-get install chromium`` and ``pip install playwright`` (never ``playwright install``: the
browser is the system's).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from labsource import REPO

from rocmlab.course.course import Course

pytestmark = [pytest.mark.slow, pytest.mark.machine_wide]

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (.venv/bin/pip install playwright)"
)

LEARNER = "learner1"
LAB = "01-rocm-setup"
NOTEBOOK = f"{LAB}/{LAB}.ipynb"
# The learner's (wrong) answer to the first exercise: the visible test right below must fail on it.
WRONG_ANSWER = (
    "def backend_of(torch_module):\n"
    '    return "cpu"   # a first, wrong answer\n'
    "\n\n"
    'print("this kernel\'s torch:", backend_of(torch))\n'
)
TEST_FAILURE = "expected 'rocm', got 'cpu'"
CHROMIUM_ARGS = [
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-first-run",
    "--no-default-browser-check",
    "--metrics-recording-only",
    "--disable-dev-shm-usage",
]
NAV_TIMEOUT_MS = 90_000
RUN_TIMEOUT_MS = 180_000


def chromium_path() -> str:
    found = os.environ.get("ROCMLAB_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(found).is_file():
        pytest.skip(f"chromium not found ({found}): apt-get install -y chromium")
    return found


def launch_args() -> list[str]:
    # Chromium refuses to start its sandbox as root (CI containers run as root).
    return CHROMIUM_ARGS + (["--no-sandbox"] if os.geteuid() == 0 else [])


def check_offline_page(page_file: Path, screenshot: Path, viewport: dict, check) -> None:
    """Open a self-contained page in chromium with every network request refused, run ``check(page)``,
    save a full-page screenshot (also on failure); no request may have left and no dialog opened."""
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    refused, dialogs = [], []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=launch_args())
        try:
            page = browser.new_page(viewport=viewport)
            page.route("http*://**", lambda route: (refused.append(route.request.url), route.abort()))
            page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
            try:
                page.goto(page_file.as_uri(), wait_until="load")
                check(page)
            finally:
                page.screenshot(path=str(screenshot), full_page=True)
                print(f"screenshot: {screenshot}")
        finally:
            browser.close()
    assert refused == [] and dialogs == []
    assert screenshot.stat().st_size > 0


def log_in(page, hub) -> None:
    """The hub's own login form, then straight on to the lab notebook (the `next` URL)."""
    page.goto(f"{hub.url}/hub/login?next=/user/{LEARNER}/lab/tree/{NOTEBOOK}")
    page.fill("#username_input", LEARNER)
    page.fill("#password_input", hub.password)
    page.click("#login_submit")
    page.wait_for_url(f"**/user/{LEARNER}/lab/tree/{NOTEBOOK}*")


def kernel_idle(page):
    """The status bar's kernel status, idle. It reads idle only once a kernel is connected; the
    toolbar's execution indicator starts out idle before any kernel exists, and Run All then clears
    every cell instead of running it (CI red on 3b3fb1f: every prompt "[ ]:")."""
    return page.get_by_role("contentinfo").get_by_role("button", name=re.compile(r"\| Idle$"))


def answer_and_run_all(page, notebook) -> None:
    sync_api.expect(kernel_idle(page)).to_be_visible(timeout=NAV_TIMEOUT_MS)
    solution = notebook.locator(".jp-CodeCell").filter(has_text="def backend_of")
    solution.locator(".cm-content").click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(WRONG_ANSWER)  # no key events: the editor does not auto-indent it
    page.locator(".lm-MenuBar-item", has_text="Run").first.click()
    page.locator(".lm-Menu-item:has(.lm-Menu-itemLabel:text-is('Run All Cells'))").click()


PROMPTS_JS = """(notebook, marker) => {
    const prompts = [];
    for (const cell of notebook.querySelectorAll('.jp-CodeCell')) {
        prompts.push(cell.querySelector('.jp-InputPrompt').textContent.trim());
        if (cell.textContent.includes(marker)) return prompts;
    }
    return null;
}"""


def prompts_down_to(notebook, marker: str) -> list[str]:
    """Execution prompts ("[3]:") of the code cells from the top down to the first one holding
    ``marker`` (read from the DOM, so cells scrolled out of view count too)."""
    prompts = notebook.evaluate(PROMPTS_JS, marker)
    assert prompts is not None, f"no code cell holds {marker!r}"
    return prompts


def dismiss_toasts(page) -> None:
    """JupyterLab's "news?" question would cover the output in the screenshot."""
    for button in page.locator(".jp-toast-button", has_text="No").all():
        if button.is_visible():
            button.click()
            try:
                button.wait_for(state="detached", timeout=5_000)
            except sync_api.TimeoutError:
                pass  # cosmetic only


def check_the_run(page, notebook) -> None:
    test_cell = notebook.locator(".jp-CodeCell").filter(has_text="def _fake_torch")
    output = test_cell.locator(".jp-OutputArea-output")
    sync_api.expect(output).to_contain_text(TEST_FAILURE, timeout=RUN_TIMEOUT_MS)
    sync_api.expect(output).to_contain_text("AssertionError")
    sync_api.expect(kernel_idle(page)).to_be_visible(timeout=RUN_TIMEOUT_MS)
    setup = notebook.locator(".jp-CodeCell").filter(has_text="lab.describe_environment")
    assert "profile smoke" in setup.locator(".jp-OutputArea").text_content()
    solution = notebook.locator(".jp-CodeCell").filter(has_text="def backend_of")
    assert "this kernel's torch: cpu" in solution.locator(".jp-OutputArea").text_content()
    prompts = prompts_down_to(notebook, "def _fake_torch")
    assert prompts == [f"[{n}]:" for n in range(1, len(prompts) + 1)], prompts
    assert len(prompts) >= 4, prompts  # parameters, set-up, stack check, answer, test
    output.last.scroll_into_view_if_needed()  # the screenshot shows the failed assertion


def test_learner_runs_lab01_in_the_browser(tmp_path, demo_hub_options):
    from rocmlab.hub import DemoHub

    executable = chromium_path()
    shots = tmp_path / "output"
    shots.mkdir()
    screenshot = shots / f"{LEARNER}-{LAB}.png"
    with DemoHub(
        tmp_path / "hub",
        course=Course(REPO),
        learners=(LEARNER,),
        instructors=(),
        labs=(LAB,),
        timeout_s=120,
        **demo_hub_options,
    ) as hub:
        hub.start_server(LEARNER)
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=executable, headless=True, args=launch_args())
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.set_default_timeout(NAV_TIMEOUT_MS)
                try:
                    log_in(page, hub)
                    notebook = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook")
                    answer_and_run_all(page, notebook)
                    check_the_run(page, notebook)
                    dismiss_toasts(page)
                finally:
                    page.screenshot(path=str(screenshot))
                    print(f"screenshot: {screenshot}")
            finally:
                browser.close()
    assert screenshot.stat().st_size > 0
