"""Untrusted code (grading, a learner's self-check) run under limits: the plan and its slots
(``limits``), what runs inside before learner code (``entry``), the paths a kernel sees
(``paths``), the backends (``bubblewrap``, ``landlock``), the forked kernels (``forkserver``)
and the grader accounts (``grader_users``). This file imports nothing, so
``python -m rocmlab.sandbox.entry`` loads only what it needs inside the sandbox."""
