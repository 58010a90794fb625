"""An OpenID Provider on loopback for the sign-on tests, built on Authlib's authorization server
(https://docs.authlib.org/en/latest/specs/oidc.html) and Flask: the parts a real provider
(Keycloak, Casdoor) shows a hub, following the specifications, not shaped to the code under test:

- discovery at ``/.well-known/openid-configuration`` (OpenID Connect Discovery 1.0, section 4);
- its signing key at ``jwks_uri`` (RFC 7517), RS256 ID tokens with a ``kid``;
- the authorization code flow with PKCE required (RFC 7636, S256 only) and client
  authentication by secret (``client_secret_basic`` or ``client_secret_post``);
- a login form (user name and password) the browser fills in;
- userinfo (Core 1.0, 5.3) with the user's claims, ``groups`` among them (as Keycloak's
  "Group Membership" mapper or Casdoor's ``groups`` claim give them).

``sabotage`` makes the next ID tokens wrong the way an attacker or a broken clock would:
``"forged"`` (signed by a key the JWKS does not hold, under the real key's ``kid``) or
``"expired"``; ``rotate_key`` replaces the signing key as a provider's key rotation does.
"""

from __future__ import annotations

import html
import secrets
import threading
import time
from dataclasses import dataclass, field

from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.oauth2 import OAuth2Error
from authlib.oauth2.rfc6749 import grants
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oidc.core import AuthorizationCodeMixin, UserInfo
from authlib.oidc.core.grants import OpenIDCode
from flask import Flask, jsonify, request
from joserfc.jwk import KeySet, RSAKey
from werkzeug.serving import make_server

KID = "rocmlab-test-key"


@dataclass
class User:
    login: str
    password: str
    claims: dict

    def get_user_id(self):
        return self.login


@dataclass
class Client:
    client_id: str
    client_secret: str
    redirect_uri: str

    def get_client_id(self):
        return self.client_id

    def get_default_redirect_uri(self):
        return self.redirect_uri

    def get_allowed_scope(self, scope):
        return " ".join(s for s in scope.split() if s in ("openid", "profile", "email", "groups"))

    def check_redirect_uri(self, redirect_uri):
        return redirect_uri == self.redirect_uri

    def check_client_secret(self, client_secret):
        return secrets.compare_digest(client_secret, self.client_secret)

    def check_endpoint_auth_method(self, method, endpoint):
        return method in ("client_secret_basic", "client_secret_post")

    def check_response_type(self, response_type):
        return response_type == "code"

    def check_grant_type(self, grant_type):
        return grant_type == "authorization_code"


@dataclass
class Code(AuthorizationCodeMixin):
    code: str
    client_id: str
    redirect_uri: str
    scope: str
    user: User
    nonce: str | None
    code_challenge: str | None
    code_challenge_method: str | None
    auth_time: int = field(default_factory=lambda: int(time.time()))

    def get_redirect_uri(self):
        return self.redirect_uri

    def get_scope(self):
        return self.scope

    def get_nonce(self):
        return self.nonce

    def get_auth_time(self):
        return self.auth_time

    def is_expired(self):
        return time.time() - self.auth_time > 300


class Provider:
    """``with Provider(client_id, secret, redirect_uri, users) as op:`` serves on ``op.issuer``."""

    def __init__(self, client_id: str, client_secret: str, redirect_uri: str, users: dict):
        self.client = Client(client_id, client_secret, redirect_uri)
        self.users = {login: User(login, password, claims) for login, (password, claims) in users.items()}
        self.key = self._new_key(KID)
        self.rogue_key = self._new_key(KID)
        self.codes: dict[str, Code] = {}
        self.tokens: dict[str, User] = {}
        self.sabotage = ""
        self.pkce_seen: list[str] = []  # code_challenge_method of each authorization request
        self._server = make_server("127.0.0.1", 0, self._app(), threaded=True)
        self.issuer = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @staticmethod
    def _new_key(kid: str):
        return RSAKey.generate_key(2048, parameters={"kid": kid, "use": "sig", "alg": "RS256"})

    def rotate_key(self) -> None:
        """A new signing key under a new kid, the old one gone from the JWKS (a provider's rotation)."""
        self.key = self._new_key(f"{KID}-{secrets.token_hex(4)}")

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    # ------------------------------------------------------------------ the Flask app

    def _app(self) -> Flask:
        app = Flask("rocmlab-test-oidc-provider")
        app.config["OAUTH2_TOKEN_EXPIRES_IN"] = {"authorization_code": 600}
        provider = self
        server = AuthorizationServer(app, query_client=self._query_client, save_token=self._save_token)

        class CodeGrant(grants.AuthorizationCodeGrant):
            TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]

            def save_authorization_code(self, code, req):
                provider.pkce_seen.append(req.payload.data.get("code_challenge_method", ""))
                provider.codes[code] = Code(
                    code,
                    req.client.client_id,
                    req.payload.redirect_uri,
                    req.payload.scope,
                    req.user,
                    req.payload.data.get("nonce"),
                    req.payload.data.get("code_challenge"),
                    req.payload.data.get("code_challenge_method"),
                )

            def query_authorization_code(self, code, client):
                found = provider.codes.get(code)
                return found if found and found.client_id == client.client_id and not found.is_expired() else None

            def delete_authorization_code(self, authorization_code):
                provider.codes.pop(authorization_code.code, None)

            def authenticate_user(self, authorization_code):
                return authorization_code.user

        class IDToken(OpenIDCode):
            def exists_nonce(self, nonce, req):
                return any(code.nonce == nonce for code in provider.codes.values())

            def resolve_client_private_key(self, client):
                return provider.rogue_key if provider.sabotage == "forged" else provider.key

            def get_client_algorithm(self, client):
                return "RS256"

            def get_encode_header(self, client):
                return {"alg": "RS256", "kid": provider.key.kid}

            def get_client_claims(self, client):
                now = int(time.time())
                exp = now - 120 if provider.sabotage == "expired" else now + 300
                return {"iss": provider.issuer, "aud": [client.client_id], "iat": now - 60, "exp": exp}

            def generate_user_info(self, user, scope):
                return UserInfo(sub=user.login, **user.claims)

        class S256Only(CodeChallenge):
            SUPPORTED_CODE_CHALLENGE_METHOD = ["S256"]

        server.register_grant(CodeGrant, [S256Only(required=True), IDToken(require_nonce=False)])

        @app.get("/.well-known/openid-configuration")
        def discovery():
            return jsonify(
                issuer=self.issuer,
                authorization_endpoint=f"{self.issuer}/authorize",
                token_endpoint=f"{self.issuer}/token",
                userinfo_endpoint=f"{self.issuer}/userinfo",
                jwks_uri=f"{self.issuer}/jwks",
                response_types_supported=["code"],
                subject_types_supported=["public"],
                id_token_signing_alg_values_supported=["RS256"],
                code_challenge_methods_supported=["S256"],
                token_endpoint_auth_methods_supported=["client_secret_basic", "client_secret_post"],
                scopes_supported=["openid", "profile", "email", "groups"],
            )

        @app.get("/jwks")
        def jwks():
            return jsonify(KeySet([self.key]).as_dict(private=False))

        @app.route("/authorize", methods=["GET", "POST"])
        def authorize():
            if request.method == "GET":
                try:  # refuses a bad request (no PKCE, an unknown client or redirect) before the form
                    server.get_consent_grant(end_user=None)
                except OAuth2Error as error:
                    return jsonify(error=error.error, description=error.description), 400
                return LOGIN_FORM.format(action=html.escape(request.full_path))
            user = self.users.get(request.form.get("username", ""))
            if user is None or not secrets.compare_digest(user.password, request.form.get("password", "")):
                return LOGIN_FORM.format(action=html.escape(request.full_path)) + "<p id=error>wrong password</p>", 401
            return server.create_authorization_response(grant_user=user)

        @app.post("/token")
        def token():
            return server.create_token_response()

        @app.get("/userinfo")
        def userinfo():
            scheme, _, value = request.headers.get("Authorization", "").partition(" ")
            user = self.tokens.get(value) if scheme.lower() == "bearer" else None
            if user is None:
                return jsonify(error="invalid_token"), 401
            return jsonify(sub=user.login, **user.claims)

        return app

    def _query_client(self, client_id):
        return self.client if client_id == self.client.client_id else None

    def _save_token(self, token, req):
        self.tokens[token["access_token"]] = req.user


LOGIN_FORM = """<!doctype html><title>Test provider: sign in</title>
<form method="post" action="{action}">
<label>User <input name="username" id="username"></label>
<label>Password <input name="password" id="password" type="password"></label>
<button type="submit" id="sign-in">Sign in</button>
</form>"""
