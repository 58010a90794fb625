"""The hub's settings that ``rocmlab hub`` (the CLI), the JupyterHub config
(env/jupyterhub/jupyterhub_config.py) and the live service all read, from one place: each comes
from its environment variable, else its default here. Before this, ``rocmlab hub`` used its own
defaults and ignored ``ROCMLAB_HUB_LEARNER_GROUP``/``ROCMLAB_HUB_INSTRUCTOR_GROUP`` (issue 49).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import CommandFailed

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
LIVE_WORKERS = "ROCMLAB_LIVE_WORKERS"
# The default grading workers: one per this many cores the hub may use, at least one. A grading keeps
# a core busy; the learners' own servers need the rest. docs/hub.md's sizing table (Sizing a live
# day) puts 60 learners submitting lab 07 within 120 s at one core for a p95 within 60 s, so a
# 16-core machine's four workers grade a room of about 200.
CORES_PER_WORKER = 4


class SettingsError(CommandFailed):
    """A hub setting from the environment has a value that cannot be used; the message names it."""


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


@dataclass(frozen=True)
class LiveWorkers:
    """How many grading workers the hub runs (JupyterHub services it starts and restarts): the
    environment's ``ROCMLAB_LIVE_WORKERS``, else one per ``CORES_PER_WORKER`` cores. 0 says: no
    workers here, they are started by hand (``warning`` says what then happens)."""

    count: int
    chosen_by_default: bool

    @classmethod
    def from_environment(cls, environ=None, cores: int | None = None) -> LiveWorkers:
        env = os.environ if environ is None else environ
        value = env.get(LIVE_WORKERS, "").strip()
        if not value:
            return cls(max(1, (cores or usable_cores()) // CORES_PER_WORKER), chosen_by_default=True)
        if not value.isdigit():
            raise SettingsError(
                f"{LIVE_WORKERS}={value!r}: expected a whole number of grading workers, 0 or more "
                f"(0: none run by the hub; unset: one per {CORES_PER_WORKER} cores)"
            )
        return cls(int(value), chosen_by_default=False)

    def warning(self) -> str:
        """What an instructor must know when the hub runs no workers; empty when it runs some."""
        if self.count:
            return ""
        return (
            f"warning: {LIVE_WORKERS}=0: the hub runs no grading workers, so every live submission "
            "waits in the queue until you start `rocmlab live worker` yourself (docs/hub.md, "
            f"The live workshop); unset {LIVE_WORKERS} to let the hub run one per {CORES_PER_WORKER} cores"
        )

    def describe(self) -> str:
        how = f"one per {CORES_PER_WORKER} cores, {LIVE_WORKERS} unset" if self.chosen_by_default else LIVE_WORKERS
        return f"live grading: {self.count} worker(s) run by the hub ({how})"


def usable_cores() -> int:
    """The cores this process may run on (its affinity), which a container's cpuset narrows."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
