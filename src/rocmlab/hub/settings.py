"""The hub's settings that ``rocmlab hub`` (the CLI), the JupyterHub config
(env/jupyterhub/jupyterhub_config.py) and the live service all read, from one place: each comes
from its environment variable, else its default here. Before this, ``rocmlab hub`` used its own
defaults and ignored ``ROCMLAB_HUB_LEARNER_GROUP``/``ROCMLAB_HUB_INSTRUCTOR_GROUP`` (issue 49).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

LEARNER_GROUP = ("ROCMLAB_HUB_LEARNER_GROUP", "rocmlab")
INSTRUCTOR_GROUP = ("ROCMLAB_HUB_INSTRUCTOR_GROUP", "instructors")
# The hub group of every learner (server mode): the instructors' role starts and stops only its
# members' servers. Filled from the Unix learner group at each start, or at sign-in by OIDC/LDAP.
LEARNERS_HUB_GROUP = "rocmlab-learners"
# The live service's instructor routes ask for this scope in the request's token, beside the group:
# the hub grants it to the instructors' role and to the service's OAuth client only, so an
# instructor's browser session carries it and no server's API token does (issue 48: learner code
# an instructor runs in their JupyterLab reads that token, and reaches the service's port directly).
LIVE_INSTRUCT_SCOPE = "custom:rocmlab-live:instruct"


@dataclass(frozen=True)
class HubGroups:
    """The Unix (and hub) groups of the two roles."""

    learner: str
    instructor: str

    @classmethod
    def from_environment(cls, environ=None) -> HubGroups:
        env = os.environ if environ is None else environ
        return cls(learner=_text(env, *LEARNER_GROUP), instructor=_text(env, *INSTRUCTOR_GROUP))

    def environment(self) -> dict:
        """The variables that give these groups to a process started with them (the hub's config)."""
        return {LEARNER_GROUP[0]: self.learner, INSTRUCTOR_GROUP[0]: self.instructor}


def _text(env, name: str, default: str) -> str:
    value = env.get(name, "").strip()
    return value or default
