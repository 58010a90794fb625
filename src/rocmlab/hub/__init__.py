"""The workshop JupyterHub: ``rocmlab hub``, ``LocalHub`` / ``DemoHub`` to start one from Python,
the spawners and the nbgrader exchange that ``env/jupyterhub/*_config.py`` name by dotted path.

- ``labs``: which labs a hub delivers, from the smoke build or a profile rendered at start;
- ``launch``: the jupyterhub process: proxy, environment, start, readiness, stop;
- ``local``: ``LocalHub`` / ``DemoHub``, the one start path of the command and the tests;
- ``command``: ``rocmlab hub``;
- ``spawner`` (``server_child``: the server's process before it execs), ``exchange``
  (``safe_copy``: learners' folders through descriptors): run inside jupyterhub and the single-user servers.
"""

from .command import add_arguments, main
from .labs import COURSE_ID, PROFILES, check_profile, delivered_labs, resolve_labs
from .launch import HubError, check_shared_install, find_proxy, hub_environment, unshared_paths
from .local import DemoHub, LocalHub

__all__ = [
    "COURSE_ID",
    "PROFILES",
    "DemoHub",
    "HubError",
    "LocalHub",
    "add_arguments",
    "check_profile",
    "check_shared_install",
    "delivered_labs",
    "find_proxy",
    "hub_environment",
    "main",
    "resolve_labs",
    "unshared_paths",
]
