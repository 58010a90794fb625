"""The formgrader's links behind the hub's prefix (issue 49's walk: the lab-name link of *Manage
Assignments* was ``/tree/course/source/<lab>``, without ``/user/<name>/``; jupyter/nbgrader#1794).

nbgrader's formgrader, opened in a tab of its own as docs/hub.md says, links a lab's folder and a
submission's notebook through ``linkTo`` (its static/js/utils.js), which uses the site's root
outside a frame. ``rocmlab.hub.formgrader`` (a server extension of the instructors' servers) gives
those links the server's base_url. The slow test renders the page in chromium from a real Jupyter
server at ``/user/teacher/`` with the instructors' config, reads the href and follows it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import jinja2
import pytest
from labsource import REPO

from rocmlab.hub import formgrader

LAB = "01-rocm-setup"
BASE_URL = "/user/teacher/"
TOKEN = "formgrader-links-test-token"


def nbgrader_templates() -> jinja2.Environment:
    from nbgrader.server_extensions.formgrader import handlers

    return jinja2.Environment(loader=jinja2.FileSystemLoader([handlers.template_path]))


def test_every_formgrader_page_gets_the_prefixed_links_after_nbgraders_own():
    env = nbgrader_templates()
    env.loader = formgrader.PrefixedLinksLoader(env.loader)
    page = env.get_template("manage_assignments.tpl").render(base_url="/user/teacher", url_prefix="course")
    utils, ours, own = (
        page.index("/formgrader/static/js/utils.js"),
        page.index("linkTo = (function (framed)"),
        page.index("manage_assignments.js"),
    )
    assert utils < ours < own  # after nbgrader's linkTo is defined, before the page's script uses it
    assert 'var base_url = "/user/teacher";' in page[:ours]


def test_a_base_template_without_the_head_block_is_refused_not_served_half_patched():
    with pytest.raises(ValueError, match="block head"):
        formgrader.with_prefixed_links("<head></head>")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def instructor_server(tmp_path):
    """A Jupyter server as the hub starts an instructor's (its config path, the course root), at a
    base_url of /user/teacher/, with lab 01 in ``~/course/source``."""
    home = tmp_path / "home"
    source = home / "course" / "source" / LAB
    source.mkdir(parents=True)
    shutil.copy(REPO / "labs" / "en" / LAB / f"{LAB}.ipynb", source / f"{LAB}.ipynb")
    (tmp_path / "exchange").mkdir()
    port = free_port()
    env = {
        **os.environ,
        "HOME": str(home),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),  # alembic
        "JUPYTER_CONFIG_PATH": os.pathsep.join(
            [str(REPO / "env" / "jupyterhub" / "jupyter" / "instructor"), str(REPO / "env" / "jupyterhub")]
        ),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "ROCMLAB_ROOT": str(REPO),
        "ROCMLAB_HUB_ROLE": "instructor",
        "ROCMLAB_COURSE_ROOT": str(home / "course"),
        "ROCMLAB_EXCHANGE": str(tmp_path / "exchange"),
    }
    command = [sys.executable, "-m", "jupyter_server", "--no-browser", f"--port={port}", "--ip=127.0.0.1"]
    command += [f"--ServerApp.base_url={BASE_URL}", f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={home}"]
    command += ["--allow-root"] if os.geteuid() == 0 else []
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(command, env=env, cwd=home, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}{BASE_URL}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}api/status?token={TOKEN}", timeout=5).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "server.log").read_text()
                time.sleep(0.5)
        yield url, tmp_path / "server.log"
    finally:
        os.killpg(server.pid, 15)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
            server.wait(timeout=30)
        log.close()


@pytest.mark.slow
def test_the_lab_name_link_of_the_formgrader_leads_into_the_instructors_server(instructor_server):
    """About 10 s: a Jupyter server and chromium."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    from test_hub_browser import NAV_TIMEOUT_MS, chromium_path, launch_args

    url, server_log = instructor_server
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=launch_args())
        try:
            page = browser.new_page()
            page.set_default_timeout(NAV_TIMEOUT_MS)
            page.goto(f"{url}formgrader/manage_assignments?token={TOKEN}")
            name_link = page.locator("#main-table a", has_text=LAB).first
            sync_api.expect(name_link).to_have_attribute("href", f"{BASE_URL}tree/course/source/{LAB}")
            opened = page.request.get(f"http://{url.split('/')[2]}{name_link.get_attribute('href')}")
            assert opened.status == 200, opened.status  # the folder, in the instructor's own server
        finally:
            browser.close()
    assert "the formgrader's links stay without" not in Path(server_log).read_text()
