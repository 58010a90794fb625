"""The sign-in configuration (issue 52): one block of variables per provider, a half-configured
one refused with the missing variable's name, the roster-and-groups rule, and the ID token check
(signature, issuer, audience, expiry) against a JWKS."""

from __future__ import annotations

import time

import pytest
from traitlets.config import Config

from rocmlab.hub import auth, roster

jwt = pytest.importorskip("jwt")
pytest.importorskip("oauthenticator", reason="oauthenticator is not installed (hub extra)")

ISSUER, CLIENT = "https://sso.uni.example.edu/realms/course", "rocmlab-hub"
OIDC = {
    "ROCMLAB_HUB_AUTH": "oidc",
    "ROCMLAB_OIDC_ISSUER": ISSUER,
    "ROCMLAB_OIDC_CLIENT_ID": CLIENT,
    "ROCMLAB_OIDC_CLIENT_SECRET": "s3cret",
    "ROCMLAB_OIDC_CALLBACK_URL": "https://hub.uni.example.edu/hub/oauth_callback",
    "ROCMLAB_OIDC_LEARNER_GROUP": "gpu-course",
}
LDAP = {
    "ROCMLAB_HUB_AUTH": "ldap",
    "ROCMLAB_LDAP_URL": "ldap://ldap.uni.example.edu",
    "ROCMLAB_LDAP_BIND_DN_TEMPLATE": "uid={username},ou=people,dc=uni,dc=example,dc=edu",
    "ROCMLAB_LDAP_LEARNER_GROUP": "cn=gpu-course,ou=groups,dc=uni,dc=example,dc=edu",
}


def configure(env, tmp_path, server_mode=False):
    c = Config()
    return c, auth.configure(c, env, "instructors", tmp_path, server_mode)


@pytest.mark.parametrize("block", [OIDC, LDAP], ids=["oidc", "ldap"])
def test_a_half_configured_provider_is_refused_naming_the_missing_variable(tmp_path, block):
    required = [name for name, (needed, _) in (auth.OIDC_VARIABLES | auth.LDAP_VARIABLES).items() if needed]
    for name in (n for n in required if n in block):
        env = {key: value for key, value in block.items() if key != name}
        with pytest.raises(auth.AuthConfigError, match=f"half-configured: set {name}:"):
            configure(env, tmp_path)


@pytest.mark.parametrize("block", [OIDC, LDAP], ids=["oidc", "ldap"])
def test_a_provider_that_lets_nobody_in_is_refused(tmp_path, block):
    env = {key: value for key, value in block.items() if not key.endswith("_GROUP")}
    with pytest.raises(auth.AuthConfigError, match="nobody could sign in"):
        configure(env, tmp_path)


def test_an_unknown_mode_is_refused():
    with pytest.raises(auth.AuthConfigError, match="ROCMLAB_HUB_AUTH='saml'"):
        auth.auth_mode({"ROCMLAB_HUB_AUTH": "saml"})


def test_an_unreachable_issuer_stops_the_hub_naming_the_discovery_url(tmp_path):
    env = OIDC | {"ROCMLAB_OIDC_ISSUER": "http://127.0.0.1:9/realms/none"}  # port 9: discard, closed
    with pytest.raises(auth.AuthConfigError, match=r"127.0.0.1:9/realms/none/.well-known/openid-configuration"):
        configure(env, tmp_path)


def test_ldap_block_becomes_ldapauthenticator_settings(tmp_path):
    pytest.importorskip("ldapauthenticator", reason="ldapauthenticator is not installed (hub extra)")
    c, mode = configure(LDAP | {"ROCMLAB_LDAP_INSTRUCTOR_GROUP": "cn=staff,dc=x"}, tmp_path, server_mode=True)
    a = c.RosterLDAPAuthenticator
    assert mode == "ldap" and c.JupyterHub.authenticator_class.__name__ == "RosterLDAPAuthenticator"
    assert (a.server_address, a.server_port, a.tls_strategy) == ("ldap.uni.example.edu", 389, "before_bind")
    assert a.allowed_groups == ["cn=staff,dc=x", LDAP["ROCMLAB_LDAP_LEARNER_GROUP"]]
    assert a.unix_accounts is True and a.manage_groups is True
    ldaps, _ = configure(LDAP | {"ROCMLAB_LDAP_URL": "ldaps://ldap.uni.example.edu"}, tmp_path)
    assert (ldaps.RosterLDAPAuthenticator.server_port, ldaps.RosterLDAPAuthenticator.tls_strategy) == (
        636,
        "on_connect",
    )
    with pytest.raises(auth.AuthConfigError, match="ROCMLAB_LDAP_URL='http://x'"):
        configure(LDAP | {"ROCMLAB_LDAP_URL": "http://x"}, tmp_path)


def test_local_mode_configures_nothing(tmp_path):
    c, mode = configure({}, tmp_path)
    assert mode == "local" and "authenticator_class" not in c.JupyterHub


# ------------------------------------------------------------------ the rule


def people(tmp_path, rows):
    path = tmp_path / "roster.csv"
    path.write_text("login,name_zh,name_en,email,group\n" + rows, encoding="utf-8")
    return roster.read_roster(path)


@pytest.mark.parametrize(
    ("login", "groups", "expected"),
    [
        ("ada", ["gpu-course"], "learner"),
        ("li", ["gpu-course", "gpu-staff"], "instructor"),
        ("eve", ["other-course"], None),
        ("eve", [], None),
        ("dee", [], "learner"),  # on the roster as a learner
        ("prof", ["gpu-course"], "instructor"),  # the roster makes them an instructor
    ],
)
def test_groups_and_roster_decide_the_role(tmp_path, login, groups, expected):
    listed = people(tmp_path, "dee,,Dee,,learner\nprof,,Prof,,instructor\n")
    assert auth.role_of(login, groups, listed, "gpu-staff", "gpu-course") == expected


def test_someone_removed_from_the_roster_is_refused_at_the_next_sign_in(tmp_path):
    listed = people(tmp_path, "dee,,Dee,,learner\n")
    assert auth.role_of("dee", [], listed, "", "") == "learner"
    assert auth.role_of("dee", [], {}, "", "") is None


# ------------------------------------------------------------------ the ID token


@pytest.fixture(scope="module")
def keys():
    from cryptography.hazmat.primitives.asymmetric import rsa

    provider, attacker = (rsa.generate_private_key(public_exponent=65537, key_size=2048) for _ in range(2))
    public = jwt.algorithms.RSAAlgorithm.to_jwk(provider.public_key(), as_dict=True) | {"kid": "k1", "use": "sig"}
    return provider, attacker, {"keys": [public]}


def token(key, **changes):
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": CLIENT, "sub": "ada", "iat": now, "exp": now + 300} | changes
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})


def test_a_good_id_token_gives_its_claims(keys):
    provider, _, jwks = keys
    assert auth.verify_id_token(token(provider, groups=["g"]), jwks, ISSUER, CLIENT)["groups"] == ["g"]


@pytest.mark.parametrize(
    ("case", "error"),
    [
        ("forged", jwt.InvalidSignatureError),
        ("expired", jwt.ExpiredSignatureError),
        ("other-audience", jwt.InvalidAudienceError),
        ("other-issuer", jwt.InvalidIssuerError),
        ("unsigned", jwt.InvalidTokenError),
    ],
)
def test_a_bad_id_token_is_refused(keys, case, error):
    provider, attacker, jwks = keys
    bad = {
        "forged": lambda: token(attacker),
        "expired": lambda: token(provider, exp=int(time.time()) - 60),
        "other-audience": lambda: token(provider, aud="another-app"),
        "other-issuer": lambda: token(provider, iss="https://evil.example"),
        "unsigned": lambda: jwt.encode({"iss": ISSUER, "aud": CLIENT, "sub": "ada"}, None, algorithm="none"),
    }[case]()
    with pytest.raises(error):
        auth.verify_id_token(bad, jwks, ISSUER, CLIENT)


def test_on_the_workshop_server_a_name_without_a_unix_account_is_refused():
    import logging

    class Authenticator:
        log = logging.getLogger("test")
        unix_accounts = True

    learner = {"rocmlab_role": "learner"}
    assert auth.rule_allows(Authenticator(), "root", learner)  # an account that exists everywhere
    assert not auth.rule_allows(Authenticator(), "no-such-account-rocmlab", learner)
    Authenticator.unix_accounts = False  # the demo hub: one account runs every server
    assert auth.rule_allows(Authenticator(), "no-such-account-rocmlab", learner)
    assert not auth.rule_allows(Authenticator(), "root", {"rocmlab_role": None})


# ------------------------------------------------------------------ jupyterhub_config.py reads them


def test_the_roster_feeds_the_local_modes(monkeypatch, tmp_path):
    from test_hub import hub_config

    class_csv = tmp_path / "class.csv"
    class_csv.write_text("login,name_zh,name_en,email,group\nada,,Ada,,learner\nli,,Li,,instructor\n", "utf-8")
    roster.import_roster(class_csv, tmp_path / "data")
    server = hub_config(monkeypatch, tmp_path, ROCMLAB_HUB_MODE="server")
    assert server.PAMAuthenticator.allowed_users == {"ada", "li"}
    assert "li" in server.JupyterHub.load_groups["instructors"]["users"]
    demo = hub_config(monkeypatch, tmp_path, ROCMLAB_HUB_MODE="demo", ROCMLAB_HUB_INSTRUCTORS="ann")
    assert demo.JupyterHub.load_groups == {"instructors": {"users": ["ann", "li"]}}


def test_a_half_configured_provider_stops_the_hub_config(monkeypatch, tmp_path):
    from test_hub import hub_config

    with pytest.raises(auth.AuthConfigError, match="set ROCMLAB_LDAP_BIND_DN_TEMPLATE"):
        hub_config(monkeypatch, tmp_path, ROCMLAB_HUB_MODE="demo", ROCMLAB_HUB_AUTH="ldap", ROCMLAB_LDAP_URL="ldap://x")


@pytest.mark.parametrize(
    ("claims", "groups"),
    [({"groups": ["a", "b"]}, ["a", "b"]), ({"groups": "a"}, ["a"]), ({}, []), ({"groups": {"a": 1}}, [])],
)
def test_the_groups_claim_is_read_as_a_list(claims, groups):
    assert auth.claimed_groups(claims, "groups") == groups


def test_a_token_under_an_unknown_kid_asks_for_the_keys_again(keys):
    provider, _, jwks = keys
    assert auth.holds_key(jwks, token(provider))
    rotated = jwt.encode({"sub": "ada"}, provider, algorithm="RS256", headers={"kid": "k2"})
    assert not auth.holds_key(jwks, rotated)
