"""The site's launch link end to end (issue 27): a learner follows it to the demo hub, logs in, and
nbgitpuller puts the lab in their home and JupyterLab opens it.

The student-notebook repository is made here the way the Pages workflow makes its branch: labs/
alone, committed to a git repository (``file://``), so nothing leaves the machine. The link is
taken from the built page, not rebuilt by the test.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess

import pytest
from test_hub_browser import NAV_TIMEOUT_MS, chromium_path, launch_args
from test_site import REPO, Links

from rocmlab.course.course import Course
from rocmlab.site.build import build_site
from rocmlab.site.launch import read_config

pytestmark = [pytest.mark.slow, pytest.mark.machine_wide]
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
pytest.importorskip("nbgitpuller", reason="nbgitpuller is not installed (hub extra)")

LEARNER = "learner1"
LAB = "01-rocm-setup"
BRANCH = "student-labs"
NOBODY = pwd.getpwnam("nobody")


def git(*args, cwd) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def student_repo(tmp_path):
    repo = tmp_path / "student-labs"
    shutil.copytree(REPO / "labs", repo, ignore=shutil.ignore_patterns(".build-*", ".ipynb_checkpoints"))
    git("init", "-q", "-b", BRANCH, cwd=repo)
    git("add", ".", cwd=repo)
    git("-c", "user.name=ci", "-c", "user.email=ci@example.invalid", "commit", "-qm", "labs", cwd=repo)
    if os.geteuid() == 0:  # the demo's servers run as nobody, and git refuses a repository of another user
        for path in [repo, *repo.rglob("*")]:
            os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid, follow_symlinks=False)
    return repo


def launch_link(site, lang: str) -> str:
    parser = Links()
    parser.feed((site / lang / f"{LAB}.html").read_text(encoding="utf-8"))
    (link,) = [url for url in parser.links if "/git-pull?" in url]
    return link


def test_launch_link_delivers_the_lab_and_opens_it(tmp_path, demo_hub_options):
    from rocmlab.hub import DemoHub

    repo = student_repo(tmp_path)
    shots = tmp_path / "output"
    shots.mkdir()
    options = {"course": Course(REPO), "learners": (LEARNER,), "instructors": (), "labs": (LAB,), "timeout_s": 120}
    with DemoHub(tmp_path / "hub", **options, **demo_hub_options) as hub:
        site = tmp_path / "site"
        config = read_config(REPO, hub_url=hub.url, labs_repo=repo.as_uri(), labs_branch=BRANCH)
        build_site(REPO, site, config, [LAB], progress=lambda *_: None)
        link = launch_link(site, "zh")
        assert link.startswith(f"{hub.url}/hub/user-redirect/git-pull?")
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=launch_args())
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(NAV_TIMEOUT_MS)
            try:
                page.goto(link)  # not logged in: the hub's login page first
                page.fill("#username_input", LEARNER)
                page.fill("#password_input", hub.password)
                page.click("#login_submit")
                notebook_path = config.notebook_path("zh", LAB)
                page.wait_for_url(f"**/user/{LEARNER}/lab/tree/{notebook_path}*", timeout=NAV_TIMEOUT_MS)
                heading = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-RenderedMarkdown h1").first
                sync_api.expect(heading).to_contain_text("实验 01", timeout=NAV_TIMEOUT_MS)
            finally:
                page.screenshot(path=str(shots / "launch-link.png"))
                browser.close()
        pulled = hub.home(LEARNER) / notebook_path
        assert pulled.read_bytes() == (REPO / "labs" / "zh" / LAB / f"{LAB}.ipynb").read_bytes()
        assert not (hub.home(LEARNER) / config.target_dir / ".." / "solutions").exists()
        assert not list((hub.home(LEARNER) / config.target_dir).rglob("lab.py"))
