"""Single sign-on through a real hub (issue 52): `rocmlab hub --demo`'s LocalHub with
ROCMLAB_HUB_AUTH=oidc against the OpenID Provider of ``oidc_provider`` (Authlib, on loopback:
discovery, JWKS, PKCE required), and chromium filling in the provider's login form.

One provider and one hub for the module (about 15 s of CPU); each case is one browser sign-in.
No single-user server is started (so, as root, no check that `nobody` can run the course): each
sign-in goes to /hub/home.
"""

from __future__ import annotations

import secrets

import pytest

pytestmark = [pytest.mark.slow]

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
pytest.importorskip("oauthenticator", reason="oauthenticator is not installed (hub extra)")
pytest.importorskip("authlib", reason="authlib is not installed (dev extra)")

from labsource import REPO  # noqa: E402
from oidc_provider import Provider  # noqa: E402
from test_hub_browser import NAV_TIMEOUT_MS, chromium_path, launch_args  # noqa: E402

from rocmlab.course.course import Course  # noqa: E402
from rocmlab.hub.settings import LEARNERS_HUB_GROUP  # noqa: E402

CLIENT_ID = "rocmlab-hub"
LEARNERS, INSTRUCTORS = "course-gpu-2026", "course-gpu-2026-staff"  # the provider's group names
USERS = {  # login -> (password, claims): what a Keycloak realm with a groups mapper gives
    "ada": ("ada-pass-1", {"preferred_username": "ada", "groups": [LEARNERS], "email": "ada@uni.example.edu"}),
    "li": ("li-pass-1", {"preferred_username": "li", "groups": [INSTRUCTORS, "faculty"]}),
    "eve": ("eve-pass-1", {"preferred_username": "eve", "groups": ["another-course"]}),
    "bo": ("bo-pass-1", {"preferred_username": "bo", "groups": [LEARNERS]}),
    "cy": ("cy-pass-1", {"preferred_username": "cy", "groups": [LEARNERS]}),
    "dee": ("dee-pass-1", {"preferred_username": "dee", "groups": []}),  # on the roster only
    "fay": ("fay-pass-1", {"preferred_username": "fay", "groups": LEARNERS}),  # one group, as a string
}


@pytest.fixture(scope="module")
def sso_hub(tmp_path_factory):
    from rocmlab.hub import DemoHub
    from rocmlab.hub.launch import free_port
    from rocmlab.hub.roster import import_roster

    work = tmp_path_factory.mktemp("sso")
    roster_csv = work / "roster.csv"
    roster_csv.write_text("login,name_zh,name_en,email,group\ndee,丁一,Dee Ding,,learner\n", encoding="utf-8")
    import_roster(roster_csv, work / "hub")
    port = free_port()
    secret = secrets.token_urlsafe(24)
    with Provider(CLIENT_ID, secret, f"http://127.0.0.1:{port}/hub/oauth_callback", USERS) as provider:
        env = {
            "ROCMLAB_HUB_AUTH": "oidc",
            "ROCMLAB_OIDC_ISSUER": provider.issuer,
            "ROCMLAB_OIDC_CLIENT_ID": CLIENT_ID,
            "ROCMLAB_OIDC_CLIENT_SECRET": secret,
            "ROCMLAB_OIDC_CALLBACK_URL": f"http://127.0.0.1:{port}/hub/oauth_callback",
            "ROCMLAB_OIDC_LEARNER_GROUP": LEARNERS,
            "ROCMLAB_OIDC_INSTRUCTOR_GROUP": INSTRUCTORS,
            "ROCMLAB_LIVE": "0",
            "ROCMLAB_HUB_CULL_IDLE_S": "0",
        }
        with pytest.MonkeyPatch.context() as patch:
            for name, value in env.items():
                patch.setenv(name, value)
            with DemoHub(
                work / "hub", course=Course(REPO), labs=("01",), port=port, timeout_s=120, check_install=False
            ) as hub:
                yield hub, provider


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=launch_args())
        try:
            yield chromium
        finally:
            chromium.close()


def sign_in(browser, hub, login: str) -> tuple[str, str]:
    """Sign ``login`` in through the provider's form, in a fresh browser context (no cookies of
    the others); (final URL, page text)."""
    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_default_timeout(NAV_TIMEOUT_MS)
        page.goto(f"{hub.url}/hub/oauth_login?next=/hub/home")
        page.fill("#username", login)
        page.fill("#password", USERS[login][0])
        page.click("#sign-in")
        page.wait_for_url(lambda url: "/hub/" in url and "oauth_login" not in url)
        page.wait_for_load_state()
        return page.url, page.inner_text("body")
    finally:
        context.close()


def hub_user(hub, login: str) -> dict | None:
    return next((user for user in hub.api("GET", "/users") if user["name"] == login), None)


def test_a_learner_signs_in_as_a_learner(sso_hub, browser):
    hub, provider = sso_hub
    url, _ = sign_in(browser, hub, "ada")
    assert url.endswith("/hub/home")
    user = hub_user(hub, "ada")
    assert user["groups"] == [LEARNERS_HUB_GROUP] and not user["admin"]
    assert provider.pkce_seen and set(provider.pkce_seen) == {"S256"}  # the hub used PKCE


def test_an_instructor_signs_in_with_the_instructor_role(sso_hub, browser):
    hub, _ = sso_hub
    url, _ = sign_in(browser, hub, "li")
    assert url.endswith("/hub/home")
    user = hub_user(hub, "li")
    assert user["groups"] == ["instructors"] and not user["admin"]  # the rocmlab-instructor role, never admin


def test_someone_on_the_roster_only_signs_in(sso_hub, browser):
    hub, _ = sso_hub
    url, _ = sign_in(browser, hub, "dee")
    assert url.endswith("/hub/home") and hub_user(hub, "dee")["groups"] == [LEARNERS_HUB_GROUP]


def test_someone_outside_the_allowed_groups_is_refused(sso_hub, browser):
    hub, _ = sso_hub
    url, text = sign_in(browser, hub, "eve")
    assert "/hub/oauth_callback" in url and "403" in text
    assert hub_user(hub, "eve") is None


@pytest.mark.parametrize(("sabotage", "login"), [("forged", "bo"), ("expired", "cy")])
def test_a_forged_or_expired_id_token_is_refused(sso_hub, browser, sabotage, login):
    hub, provider = sso_hub
    provider.sabotage = sabotage
    try:
        url, text = sign_in(browser, hub, login)
    finally:
        provider.sabotage = ""
    assert "/hub/oauth_callback" in url and "403" in text and "ID token refused" in text
    assert hub_user(hub, login) is None


def test_the_hub_refuses_to_start_with_a_half_configured_provider(tmp_path, monkeypatch):
    from rocmlab.hub import DemoHub, HubError

    monkeypatch.setenv("ROCMLAB_HUB_AUTH", "oidc")
    monkeypatch.setenv("ROCMLAB_OIDC_ISSUER", "http://127.0.0.1:9")
    monkeypatch.setenv("ROCMLAB_OIDC_CLIENT_ID", CLIENT_ID)
    for name in ("ROCMLAB_OIDC_CLIENT_SECRET", "ROCMLAB_OIDC_CALLBACK_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(HubError) as refused:
        with DemoHub(tmp_path / "hub", course=Course(REPO), labs=("01",), timeout_s=60, check_install=False):
            pass
    assert "half-configured: set ROCMLAB_OIDC_CLIENT_SECRET" in str(refused.value)
    assert "ROCMLAB_OIDC_CALLBACK_URL" in str(refused.value)


def test_after_the_provider_rotates_its_key_sign_in_still_works(sso_hub, browser):
    hub, provider = sso_hub
    assert sign_in(browser, hub, "ada")[0].endswith("/hub/home")  # the hub has the JWKS now
    provider.rotate_key()
    assert sign_in(browser, hub, "fay")[0].endswith("/hub/home")  # a token under the new kid
    assert hub_user(hub, "fay")["groups"] == [LEARNERS_HUB_GROUP]
