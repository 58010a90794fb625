"""nbgrader's own autograde, refused on the workshop hub.

The formgrader's *Autograde* button (and ``nbgrader autograde`` in an instructor's terminal) runs
each learner's notebook in a kernel of the instructor's, unsandboxed: one click let a submission
read the hidden checks, classmates' submissions and the gradebook, and write into the released lab
(issue 48). On the hub, nbgrader's config (env/jupyterhub/nbgrader_config.py) makes
``RefuseAutograde`` nbgrader's only autograde step: it stops before any cell runs and says how
to grade instead, with ``rocmlab grade`` (sandboxed, the trusted harness). ``rocmlab grade``
builds its own nbgrader config and autogrades notebooks it has already executed in its sandbox,
so it is not affected.
"""

from __future__ import annotations

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
