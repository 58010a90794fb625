"""nbgrader's own autograde, refused on the workshop hub.

The formgrader's *Autograde* button (and ``nbgrader autograde`` in an instructor's terminal) runs
each learner's notebook in a kernel of the instructor's, unsandboxed: one click let a submission
read the hidden checks, classmates' submissions and the gradebook, and write into the released lab
(issue 48). On the hub, nbgrader's config (env/jupyterhub/nbgrader_config.py) makes
``RefuseAutograde`` nbgrader's only autograde step: it stops before any cell runs and says how
to grade instead, with ``rocmlab grade`` (sandboxed, the trusted harness). ``rocmlab grade``
builds its own nbgrader config and autogrades notebooks it has already executed in its sandbox,
so it is not affected.

It is also a Jupyter server extension of the instructors' servers (env/jupyterhub/jupyter/instructor):
the formgrader's links to a lab's folder and to notebooks get the server's base_url, which
nbgrader leaves out when the formgrader is not in a frame (``PREFIXED_LINKS``).
"""

from __future__ import annotations

from jinja2 import BaseLoader
from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

HOW_TO_GRADE = (
    "nbgrader's autograde would run {student}'s code as you, outside any sandbox: on this hub it is "
    "turned off. Grade in a terminal instead: rocmlab --root {root} grade {lab} --submissions ~/course "
    "--out ~/course/grades/{lab} --feedback-to ~/course (docs/hub.md, 'Handing out, collecting and grading')"
)


class AutogradeRefused(RuntimeError):
    """nbgrader's autograde was asked for on the hub."""


class RefuseAutograde(Preprocessor):
    """nbgrader's autograde step on the hub: refuses, before any cell of the notebook runs."""

    enabled = Bool(True, help="always on: nbconvert skips a preprocessor that is not enabled")

    def preprocess(self, nb, resources):
        import os

        nbgrader = resources.get("nbgrader", {})
        raise AutogradeRefused(
            HOW_TO_GRADE.format(
                student=nbgrader.get("student", "the learner"),
                lab=nbgrader.get("assignment", "LAB"),
                root=os.environ.get("ROCMLAB_ROOT", "/opt/rocmlab"),
            )
        )


# ------------------------------------------------------------------ the formgrader's links behind the hub

# nbgrader's ``linkTo`` (formgrader/static/js/utils.js, 0.9) links a lab's folder, a notebook or a file
# as "/tree/<path>" (or "/notebooks/", "/edit/") from the site's root when the formgrader is not in a
# frame, which is how the hub's instructors open it (docs/hub.md: JupyterHub forbids framing a server's
# page). Behind JupyterHub a server is at its base_url, /user/<name>/, so those links led nowhere
# (jupyter/nbgrader#1794, open). The page's own ``base_url`` (set by base.tpl) prefixes them here.
PREFIXED_LINKS = """<script>
linkTo = (function (framed) {
  var routes = {notebook: "/notebooks/", file: "/edit/", directory: "/tree/"};
  return function (type, path) {
    if (window !== window.top) return framed(type, path);
    return function (_, el) {
      return $(el).attr("href", base_url + routes[type] + encodeURI(path)).attr("target", "_blank")[0];
    };
  };
})(linkTo);
</script>
"""
HEAD_BLOCK = "{%- block head -%}"  # in nbgrader's base.tpl, after utils.js and ``var base_url``
BASE_TEMPLATE = "base.tpl"


def with_prefixed_links(source: str) -> str:
    """nbgrader's base.tpl with ``PREFIXED_LINKS`` before its head block; ValueError if it has none."""
    if HEAD_BLOCK not in source:
        raise ValueError(f"nbgrader's {BASE_TEMPLATE} has no {HEAD_BLOCK!r} to put the hub's links before")
    return source.replace(HEAD_BLOCK, PREFIXED_LINKS + HEAD_BLOCK, 1)


class PrefixedLinksLoader(BaseLoader):
    """The formgrader's template loader, with base.tpl given ``PREFIXED_LINKS`` (every page extends it)."""

    def __init__(self, inner: BaseLoader):
        self.inner = inner

    def get_source(self, environment, template):
        source, filename, uptodate = self.inner.get_source(environment, template)
        return (with_prefixed_links(source) if template == BASE_TEMPLATE else source), filename, uptodate

    def list_templates(self):
        return self.inner.list_templates()


def _jupyter_server_extension_points():
    return [{"module": "rocmlab.hub.formgrader"}]


def _load_jupyter_server_extension(serverapp) -> None:
    """An instructor's server: the formgrader's links made to work behind the hub's prefix. Loaded
    after nbgrader's formgrader (jupyter_server loads extensions in the order of their names)."""
    env = serverapp.web_app.settings.get("nbgrader_jinja2_env")
    if env is None:
        serverapp.log.warning("rocmlab: nbgrader's formgrader is not loaded here; its links are left as they are")
        return
    try:
        with_prefixed_links(env.loader.get_source(env, BASE_TEMPLATE)[0])
    except (ValueError, OSError) as exc:
        serverapp.log.error("rocmlab: the formgrader's links stay without the hub's prefix: %s", exc)
        return
    env.loader = PrefixedLinksLoader(env.loader)
    if env.cache is not None:
        env.cache.clear()
