"""Who the live service takes for an instructor (issue 48): a member of the instructor group whose
token holds the live service's instructor scope, which the hub config grants to the instructors'
role and to the service's OAuth client only, never to a server's API token
(rocmlab.live.handlers.LiveHandler.is_instructor, env/jupyterhub/jupyterhub_config.py)."""

from __future__ import annotations

from types import SimpleNamespace

from test_hub import hub_config

from rocmlab.hub.settings import LIVE_INSTRUCT_SCOPE
from rocmlab.live.handlers import LiveHandler

ACCESS = "access:services!service=rocmlab-live"


def request_of(groups, scopes):
    return SimpleNamespace(
        current_user={"name": "tia", "groups": groups, "scopes": scopes},
        live=SimpleNamespace(instructor_group="instructors"),
        learner="tia",
    )


def test_an_instructor_is_the_group_and_the_scope_of_a_browser_session():
    session = request_of(["instructors"], [ACCESS, LIVE_INSTRUCT_SCOPE])
    server_token = request_of(["instructors"], [ACCESS, "users:activity!user", "access:servers!server"])
    learner = request_of([], [ACCESS, LIVE_INSTRUCT_SCOPE])  # a scope no learner's role gives: still no
    assert LiveHandler.is_instructor.fget(session)
    assert not LiveHandler.is_instructor.fget(server_token)
    assert not LiveHandler.is_instructor.fget(learner)
    assert "not with an API token" in LiveHandler.not_instructor_reason(server_token)
    assert LiveHandler.not_instructor_reason(learner) == "tia is not in the group instructors"


def test_the_hub_grants_the_scope_to_instructors_sessions_only(monkeypatch, tmp_path):
    c = hub_config(monkeypatch, tmp_path, ROCMLAB_HUB_INTERNAL_PORT=881, ROCMLAB_LIVE_PORT=1011)
    assert LIVE_INSTRUCT_SCOPE in c.JupyterHub.custom_scopes
    roles = {role["name"]: role for role in c.JupyterHub.load_roles}
    assert LIVE_INSTRUCT_SCOPE in roles["rocmlab-instructor"]["scopes"]
    assert LIVE_INSTRUCT_SCOPE not in roles["user"]["scopes"]
    assert LIVE_INSTRUCT_SCOPE not in c.Spawner.server_token_scopes
    (live,) = [service for service in c.JupyterHub.services if service["name"] == "rocmlab-live"]
    assert live["oauth_client_allowed_scopes"] == [LIVE_INSTRUCT_SCOPE]
