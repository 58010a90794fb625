"""Who signs in to the workshop hub: local accounts (PAM, or the demo's shared password), an OpenID
Connect provider (oauthenticator's GenericOAuthenticator) or an LDAP directory (ldapauthenticator),
chosen by ``ROCMLAB_HUB_AUTH`` and configured by one block of environment variables each
(``OIDC_VARIABLES``, ``LDAP_VARIABLES``; docs/hub.md shows them). ``configure`` is called by
env/jupyterhub/jupyterhub_config.py; a half-configured provider stops the hub at start with the
missing variable's name.

The same rule decides for OIDC and LDAP (``RosterAccess``), at every sign-in:

- an instructor is in the provider's instructor group, or listed as instructor in the roster
  (``rocmlab.hub.roster``); the hub then puts them in the hub group of the ``rocmlab-instructor``
  role (never a hub admin);
- a learner is in the provider's learner group, or listed as learner in the roster;
- anybody else is refused, and so is somebody removed from the roster who is in no allowed group.

On the workshop server (``ROCMLAB_HUB_MODE=server``) each learner's server runs as their Unix
account: the hub creates no accounts, so a sign-in whose name has no Unix account is refused with
a message saying so (create them from the roster, or join the machine to the directory with SSSD).

The OIDC ID token is checked here (``verify_id_token``): its signature against the provider's JWKS,
issuer, audience and expiry; oauthenticator itself does not check the signature.
"""

from __future__ import annotations

import json
import pwd
import urllib.error
import urllib.request
from urllib.parse import urlparse

from . import roster
from .settings import LEARNERS_HUB_GROUP

AUTH_MODES = ("local", "oidc", "ldap")
DISCOVERY_TIMEOUT_S = 10
# name -> (required, what it is); docs/hub.md has the same block.
OIDC_VARIABLES = {
    "ROCMLAB_OIDC_ISSUER": (True, "issuer URL; ISSUER/.well-known/openid-configuration is read at start"),
    "ROCMLAB_OIDC_CLIENT_ID": (True, "the hub's client id at the provider"),
    "ROCMLAB_OIDC_CLIENT_SECRET": (True, "its client secret"),
    "ROCMLAB_OIDC_CALLBACK_URL": (True, "https://HUB/hub/oauth_callback, as registered at the provider"),
    "ROCMLAB_OIDC_USERNAME_CLAIM": (False, "claim that is the hub user name (preferred_username)"),
    "ROCMLAB_OIDC_GROUPS_CLAIM": (False, "claim listing the user's groups (groups)"),
    "ROCMLAB_OIDC_INSTRUCTOR_GROUP": (False, "value of the groups claim that makes an instructor"),
    "ROCMLAB_OIDC_LEARNER_GROUP": (False, "value of the groups claim that lets a learner in"),
    "ROCMLAB_OIDC_SCOPES": (False, "scopes asked for (openid profile email)"),
}
LDAP_VARIABLES = {
    "ROCMLAB_LDAP_URL": (True, "ldap://host[:389] (StartTLS) or ldaps://host[:636]"),
    "ROCMLAB_LDAP_BIND_DN_TEMPLATE": (True, "DN a user binds as, e.g. uid={username},ou=people,dc=example,dc=edu"),
    "ROCMLAB_LDAP_INSTRUCTOR_GROUP": (False, "DN of the instructors' group"),
    "ROCMLAB_LDAP_LEARNER_GROUP": (False, "DN of the learners' group"),
    "ROCMLAB_LDAP_TLS": (False, "starttls (default for ldap://) | ldaps | insecure (loopback tests only)"),
}


class AuthConfigError(ValueError):
    """A sign-in configuration that is missing or wrong; the message names the variable."""


def auth_mode(env) -> str:
    mode = env.get("ROCMLAB_HUB_AUTH") or "local"
    if mode not in AUTH_MODES:
        raise AuthConfigError(f"ROCMLAB_HUB_AUTH={mode!r}: expected one of {', '.join(AUTH_MODES)}")
    return mode


def require(env, variables: dict, who: str) -> dict:
    """The block's values; AuthConfigError naming every required variable that is not set."""
    missing = [name for name, (needed, _) in variables.items() if needed and not env.get(name)]
    if missing:
        listing = "; ".join(f"{name}: {variables[name][1]}" for name in missing)
        raise AuthConfigError(f"ROCMLAB_HUB_AUTH={who} is half-configured: set {listing}")
    return {name: env.get(name, "") for name in variables}


def require_someone(people: dict, instructor_group: str, learner_group: str, who: str) -> None:
    if not (people or instructor_group or learner_group):
        raise AuthConfigError(
            f"ROCMLAB_HUB_AUTH={who}: nobody could sign in: set ROCMLAB_{who.upper()}_LEARNER_GROUP or "
            f"ROCMLAB_{who.upper()}_INSTRUCTOR_GROUP, or import a roster (rocmlab roster import)"
        )


# ------------------------------------------------------------------ the rule, for both providers


def role_of(login: str, provider_groups, people: dict, instructor_group: str, learner_group: str) -> str | None:
    """instructor, learner or None (refused) for ``login`` in ``provider_groups`` and the roster."""
    groups = set(provider_groups or ())
    person = people.get(login)
    if (instructor_group and instructor_group in groups) or (person and person.group == "instructor"):
        return "instructor"
    if (learner_group and learner_group in groups) or (person and person.group == "learner"):
        return "learner"
    return None


def role_and_hub_groups(authenticator, login: str, provider_groups) -> tuple[str | None, list]:
    people = roster.load(authenticator.roster_data or None)
    role = role_of(
        login, provider_groups, people, authenticator.provider_instructor_group, authenticator.provider_learner_group
    )
    hub_groups = {"instructor": [authenticator.hub_instructor_group], "learner": [LEARNERS_HUB_GROUP]}
    return role, hub_groups.get(role, [])


def has_unix_account(login: str) -> bool:
    try:
        pwd.getpwnam(login)
    except KeyError:
        return False
    return True


def rule_allows(authenticator, username: str, auth_model) -> bool:
    role = (auth_model or {}).get("rocmlab_role")
    if role is None:
        authenticator.log.warning("sign-in of %s refused: in no allowed group and not on the roster", username)
        return False
    if authenticator.unix_accounts and not has_unix_account(username):
        authenticator.log.warning("sign-in of %s refused: no Unix account of that name on this server", username)
        return False
    return True


# ------------------------------------------------------------------ OIDC


def discover(issuer: str) -> dict:
    """The provider's metadata (OpenID Connect Discovery 1.0, section 4)."""
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    try:
        with urllib.request.urlopen(url, timeout=DISCOVERY_TIMEOUT_S) as response:
            metadata = json.load(response)
    except (OSError, ValueError) as exc:
        raise AuthConfigError(f"ROCMLAB_OIDC_ISSUER={issuer!r}: cannot read {url} ({exc})") from None
    if metadata.get("issuer") != issuer.rstrip("/"):
        raise AuthConfigError(
            f"ROCMLAB_OIDC_ISSUER={issuer!r}: the provider names itself {metadata.get('issuer')!r} at {url}"
        )
    for key in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
        if not metadata.get(key):
            raise AuthConfigError(f"{url}: no {key}")
    return metadata


def claimed_groups(claims: dict, claim: str) -> list:
    """The groups claim as a list (a provider may send one group as a string)."""
    groups = claims.get(claim) or []
    return [groups] if isinstance(groups, str) else list(groups) if isinstance(groups, list) else []


def holds_key(jwks: dict, id_token: str) -> bool:
    """Whether ``jwks`` has the key ``id_token`` names (else the provider may have rotated its keys)."""
    import jwt

    try:
        kid = jwt.get_unverified_header(id_token).get("kid")
    except jwt.InvalidTokenError:
        return True  # verify_id_token refuses it, naming why
    return not kid or any(key.get("kid") == kid for key in jwks.get("keys", []))


def verify_id_token(id_token: str, jwks: dict, issuer: str, client_id: str) -> dict:
    """The claims of ``id_token`` if signed by a key of ``jwks`` for ``client_id`` by ``issuer`` and
    not expired (OpenID Connect Core 1.0, 3.1.3.7); jwt.InvalidTokenError otherwise."""
    import jwt

    header = jwt.get_unverified_header(id_token)
    keys = [
        key for key in jwt.PyJWKSet.from_dict(jwks).keys if key.key_id == header.get("kid") or not header.get("kid")
    ]
    if not keys:
        raise jwt.InvalidTokenError(f"no key {header.get('kid')!r} in the provider's JWKS")
    return jwt.decode(
        id_token,
        keys[0].key,
        algorithms=["RS256", "ES256", "PS256", "EdDSA"],
        audience=client_id,
        issuer=issuer,
        options={"require": ["exp", "iat", "iss", "aud", "sub"]},
    )


def oidc_authenticator_class():
    from oauthenticator.generic import GenericOAuthenticator
    from tornado import web
    from traitlets import Bool, Dict, Unicode

    class RosterOIDCAuthenticator(GenericOAuthenticator):
        """GenericOAuthenticator that verifies the ID token and applies ``RosterAccess``'s rule."""

        roster_data = Unicode("", config=True, help="the hub's data folder (its roster.json)")
        hub_instructor_group = Unicode("instructors", config=True)
        provider_instructor_group = Unicode("", config=True)
        provider_learner_group = Unicode("", config=True)
        groups_claim = Unicode("groups", config=True)
        issuer = Unicode("", config=True)
        jwks_url = Unicode("", config=True)
        unix_accounts = Bool(False, config=True, help="refuse names without a Unix account (server mode)")
        _jwks = Dict()

        async def token_to_user(self, token_info):
            import jwt

            id_token = token_info.get("id_token")
            if not id_token:
                raise web.HTTPError(403, "the provider returned no ID token")
            jwks = await self._keys()
            if not holds_key(jwks, id_token):  # fetched again once, after a key rotation
                jwks = await self._keys(fresh=True)
            try:
                claims = verify_id_token(id_token, jwks, self.issuer, self.client_id)
            except jwt.InvalidTokenError as exc:
                self.log.warning("ID token refused: %s", exc)
                raise web.HTTPError(403, f"ID token refused: {exc}") from None
            if self.userdata_url:  # userinfo may hold claims (groups) the ID token lacks
                userinfo = await super().token_to_user(token_info)
                if userinfo.get("sub") != claims["sub"]:  # Core 1.0, 5.3.2
                    raise web.HTTPError(403, "userinfo is of another subject than the ID token")
                claims = {**userinfo, **claims}
            return claims

        async def _keys(self, fresh: bool = False) -> dict:
            if fresh or not self._jwks:
                self._jwks = await self.httpfetch(self.jwks_url, "Fetching the provider's JWKS...", method="GET")
            return self._jwks

        async def update_auth_model(self, auth_model):
            claims = auth_model["auth_state"][self.user_auth_state_key]
            groups = claimed_groups(claims, self.groups_claim)
            role, hub_groups = role_and_hub_groups(self, auth_model["name"], groups)
            auth_model["rocmlab_role"], auth_model["groups"] = role, hub_groups
            auth_model["admin"] = False
            return auth_model

        async def get_user_groups(self, auth_state):  # update_auth_model set them; keep them
            claims = auth_state[self.user_auth_state_key]
            name = self.normalize_username(self.user_info_to_username(claims))
            return set(role_and_hub_groups(self, name, claimed_groups(claims, self.groups_claim))[1])

        async def check_allowed(self, username, auth_model):
            return rule_allows(self, username, auth_model)

    return RosterOIDCAuthenticator


def configure_oidc(c, env, hub_instructor_group: str, data, server_mode: bool) -> None:
    values = require(env, OIDC_VARIABLES, "oidc")
    people = roster.load(data)
    require_someone(people, values["ROCMLAB_OIDC_INSTRUCTOR_GROUP"], values["ROCMLAB_OIDC_LEARNER_GROUP"], "oidc")
    issuer = values["ROCMLAB_OIDC_ISSUER"].rstrip("/")
    metadata = discover(issuer)
    c.JupyterHub.authenticator_class = oidc_authenticator_class()
    a = c.RosterOIDCAuthenticator
    a.client_id, a.client_secret = values["ROCMLAB_OIDC_CLIENT_ID"], values["ROCMLAB_OIDC_CLIENT_SECRET"]
    a.oauth_callback_url = values["ROCMLAB_OIDC_CALLBACK_URL"]
    a.authorize_url, a.token_url = metadata["authorization_endpoint"], metadata["token_endpoint"]
    a.userdata_url = metadata.get("userinfo_endpoint", "")
    a.issuer, a.jwks_url = issuer, metadata["jwks_uri"]
    a.scope = (values["ROCMLAB_OIDC_SCOPES"] or "openid profile email").split()
    a.username_claim = values["ROCMLAB_OIDC_USERNAME_CLAIM"] or "preferred_username"
    a.groups_claim = values["ROCMLAB_OIDC_GROUPS_CLAIM"] or "groups"
    a.enable_pkce = True
    a.manage_groups = True
    _roster_rule(a, hub_instructor_group, values, "OIDC", data, server_mode)


# ------------------------------------------------------------------ LDAP


def ldap_authenticator_class():
    from ldapauthenticator import LDAPAuthenticator
    from traitlets import Bool, Unicode

    class RosterLDAPAuthenticator(LDAPAuthenticator):
        """LDAPAuthenticator whose group DNs and roster decide, by ``RosterAccess``'s rule."""

        roster_data = Unicode("", config=True)
        hub_instructor_group = Unicode("instructors", config=True)
        provider_instructor_group = Unicode("", config=True)
        provider_learner_group = Unicode("", config=True)
        unix_accounts = Bool(False, config=True)

        async def authenticate(self, handler, data):
            auth_model = await super().authenticate(handler, data)
            if not auth_model:
                return auth_model
            found = auth_model["auth_state"].get("ldap_groups", [])
            role, hub_groups = role_and_hub_groups(self, self.normalize_username(auth_model["name"]), found)
            return {**auth_model, "rocmlab_role": role, "groups": hub_groups, "admin": False}

        async def check_allowed(self, username, auth_model):
            return rule_allows(self, username, auth_model)

    return RosterLDAPAuthenticator


def configure_ldap(c, env, hub_instructor_group: str, data, server_mode: bool) -> None:
    values = require(env, LDAP_VARIABLES, "ldap")
    require_someone(
        roster.load(data), values["ROCMLAB_LDAP_INSTRUCTOR_GROUP"], values["ROCMLAB_LDAP_LEARNER_GROUP"], "ldap"
    )
    url = urlparse(values["ROCMLAB_LDAP_URL"])
    if url.scheme not in ("ldap", "ldaps") or not url.hostname:
        raise AuthConfigError(f"ROCMLAB_LDAP_URL={values['ROCMLAB_LDAP_URL']!r}: expected ldap://HOST or ldaps://HOST")
    tls = values["ROCMLAB_LDAP_TLS"] or ("ldaps" if url.scheme == "ldaps" else "starttls")
    strategies = {"starttls": "before_bind", "ldaps": "on_connect", "insecure": "insecure"}
    if tls not in strategies:
        raise AuthConfigError(f"ROCMLAB_LDAP_TLS={tls!r}: expected {', '.join(strategies)}")
    c.JupyterHub.authenticator_class = ldap_authenticator_class()
    a = c.RosterLDAPAuthenticator
    a.server_address = url.hostname
    a.server_port = url.port or (636 if tls == "ldaps" else 389)
    a.tls_strategy = strategies[tls]
    a.bind_dn_template = [values["ROCMLAB_LDAP_BIND_DN_TEMPLATE"]]
    groups = [dn for dn in (values["ROCMLAB_LDAP_INSTRUCTOR_GROUP"], values["ROCMLAB_LDAP_LEARNER_GROUP"]) if dn]
    a.allowed_groups = groups  # ldapauthenticator looks the user up in each, into auth_state's ldap_groups
    a.manage_groups = True
    _roster_rule(a, hub_instructor_group, values, "LDAP", data, server_mode)


def _roster_rule(a, hub_instructor_group: str, values: dict, prefix: str, data, server_mode: bool) -> None:
    a.roster_data = str(roster.data_folder(data))
    a.hub_instructor_group = hub_instructor_group
    a.provider_instructor_group = values[f"ROCMLAB_{prefix}_INSTRUCTOR_GROUP"]
    a.provider_learner_group = values[f"ROCMLAB_{prefix}_LEARNER_GROUP"]
    a.unix_accounts = server_mode
    a.admin_users = set()


def configure(c, env, hub_instructor_group: str, data, server_mode: bool) -> str:
    """Configure the provider ``ROCMLAB_HUB_AUTH`` names on ``c``; return the mode (local: the
    caller configures PAM or the demo's shared password)."""
    mode = auth_mode(env)
    if mode == "oidc":
        configure_oidc(c, env, hub_instructor_group, data, server_mode)
    elif mode == "ldap":
        configure_ldap(c, env, hub_instructor_group, data, server_mode)
    return mode
