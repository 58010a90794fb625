"""The Kubernetes sign-on overlay (env/jupyterhub/helm/sso-oidc.yaml, issue 52), merged over
values.yaml as helm merges (maps deep, lists replaced, null deletes): the chart's schema accepts
it, oauthenticator accepts its settings, and groups, roles and the instructor's pod agree."""

from __future__ import annotations

import copy

import pytest
import yaml
from test_hub_helm import HELM, VALUES, chart_schema_errors
from traitlets.config import Config

OVERLAY = yaml.safe_load((HELM / "sso-oidc.yaml").read_text(encoding="utf-8"))


def helm_merge(base, overlay):
    merged = copy.deepcopy(base)
    for key, value in overlay.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = helm_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


MERGED = helm_merge(VALUES, OVERLAY)


def test_the_merged_values_match_the_charts_schema():
    assert chart_schema_errors(MERGED) == []


def test_oauthenticator_accepts_the_settings():
    generic = pytest.importorskip("oauthenticator.generic")
    config = Config(MERGED["hub"]["config"])
    authenticator = generic.GenericOAuthenticator(config=config)
    assert authenticator.enable_pkce and authenticator.manage_groups
    assert MERGED["hub"]["config"]["JupyterHub"]["authenticator_class"] == "generic-oauth"


def test_the_instructor_group_is_one_name_everywhere_and_never_admin():
    group = MERGED["custom"]["rocmlab"]["instructorGroup"]
    oauth = MERGED["hub"]["config"]["GenericOAuthenticator"]
    assert group in oauth["allowed_groups"] and "admin_groups" not in oauth
    assert MERGED["hub"]["loadRoles"]["rocmlab-instructor"]["groups"] == [group]
    assert "load_groups" not in MERGED["hub"]["config"]["JupyterHub"]  # JupyterHub refuses it with manage_groups


def test_no_preset_password_is_left_and_the_secret_comes_from_a_secret():
    assert "authenticator_class" not in MERGED["hub"]["extraConfig"]["rocmlab-accounts.py"]
    assert MERGED["hub"]["extraVolumes"] == [] and MERGED["hub"]["extraVolumeMounts"] == []
    assert "client_secret" not in MERGED["hub"]["config"]["GenericOAuthenticator"]
    assert MERGED["hub"]["extraEnv"]["OAUTH_CLIENT_SECRET"]["valueFrom"]["secretKeyRef"]["name"] == "rocmlab-oidc"
