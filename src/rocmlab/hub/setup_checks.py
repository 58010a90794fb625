"""Set-ups of a workshop server that would weaken its isolation, refused when the hub starts.

- A path every server needs (the course checkout, its interpreter, the built labs, the hub's data
  with the exchange, a shared model cache, a learner's or instructor's home) under a folder that
  each server gets empty and of its own (``/tmp``, ``/var/tmp``, ``/dev/shm``, ``/run/lock``):
  that folder would have to stay shared, and with it every learner's ``/tmp`` (issue 48: the only
  sign used to be a warning in root's log).
- A learner or instructor group that does not exist: nobody could log in as what the config
  says, or nobody could grade, and the exchange would be made for the wrong owners.

``problems`` names each path or group and the fix; jupyterhub_config.py raises them in server mode.
"""

from __future__ import annotations

import grp
import os

from ..sandbox import paths as sandbox_paths


def temp_problems(named: dict[str, str]) -> list[str]:
    """For each ``what -> path`` under a private temp folder: what, where, and the fix."""
    found = []
    for what, path in named.items():
        if not path:
            continue
        resolved = os.path.realpath(path)
        for folder in sandbox_paths.PRIVATE_TEMP:
            if sandbox_paths.is_under(resolved, os.path.realpath(folder)):
                found.append(
                    f"{what} {path} is under {folder}, which every server gets empty and of its own: "
                    f"it would stay shared between learners. Move it out of {folder} (e.g. under /srv or /opt)"
                )
                break
    return found


def group_problems(groups: dict[str, str]) -> list[str]:
    """For each ``variable -> group name`` that is not a Unix group: the variable and the fix."""
    found = []
    for variable, name in groups.items():
        try:
            grp.getgrnam(name)
        except KeyError:
            found.append(f"{variable}={name!r}: no such Unix group (`groupadd {name}`, or name an existing one)")
    return found


def problems(named_paths: dict[str, str], groups: dict[str, str]) -> list[str]:
    return temp_problems(named_paths) + group_problems(groups)
