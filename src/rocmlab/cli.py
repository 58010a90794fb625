"""The ``rocmlab`` command: one table of commands, errors mapped to exit statuses here only.

Every command is a module (or an object) with

- ``add_arguments(parser)``: its options, on the subparser named after it;
- ``main(*, course, **options) -> int``: the work, called with the parsed options as keywords,
  returning the exit status of a result (``errors.ExitCode``);
- optionally ``needs_course(options) -> bool``: False where the command also works outside a course.

The course is found here once, from the global ``--root`` (``course.course.Course``), and passed down
as ``course``: the course, or None outside one for a command that does not need it. A command that
needs it stops outside one with the error naming what was looked for (``root.find_root``).

Errors are raised, never printed by the command: ``main`` below prints ``rocmlab CMD: error: ...``
on stderr and exits with the error's ``exit_code`` (2 for bad input, 1 for a failure).
Only the chosen command's module is imported (some pull in heavy packages).
"""

from __future__ import annotations

import argparse
import sys
from importlib import import_module

from . import __version__, processes
from .errors import ExitCode, RocmlabError
from .startup import UNUSED_IN_CLI, block_unused_imports

# name: (where its add_arguments and main live, "module" or "module:object"; one line of help)
COMMANDS = {
    "list": ("rocmlab.course.listing", "the labs in this checkout (outside one: the lab notebooks in this folder)"),
    "new": ("rocmlab.course.scaffold", "a new lab folder under solutions/ that builds, verifies and runs as it is"),
    "build": (
        "rocmlab.build.command",
        "student notebooks from solutions/ into labs/<lang>/ (nbgrader generate_assignment)",
    ),
    "run": ("rocmlab.execution.command", "execute labs with papermill; one result record per lab and environment"),
    "report": ("rocmlab.report.command", "the freshness matrix from result records"),
    "doctor": ("rocmlab.doctor", "probe this machine and judge it against the release matrix, with fixes"),
    "assets": ("rocmlab.assets.commands", "the offline course model and data; pre-fetch real models"),
    "releases": ("rocmlab.freshness.releases", "the release matrix; upstream releases newer than it"),
    "env": ("rocmlab.freshness.environments", "the release matrix's environments: create, list, Dockerfiles"),
    "grade": ("rocmlab.grading.command", "autograde a class of submissions with nbgrader, in parallel and sandboxed"),
    "live": ("rocmlab.live.command", "the live workshop: grading workers, learners' seeds for the final grade"),
    "submit": ("rocmlab.hub.submit", "submit a lab from the workshop hub's JupyterLab and see its grade now"),
    "check": ("rocmlab.grading.self_check", "a learner's offline self-check of a notebook's visible tests"),
    "site": ("rocmlab.site", "the course website (static, bilingual, offline) with launch links to the hub"),
    "roster": (
        "rocmlab.hub.roster",
        "the class roster (CSV): who signs in to the hub, instructors, gradebook students and certificate names",
    ),
    "hub": (
        "rocmlab.hub",
        "the workshop JupyterHub of this machine (--demo: loopback, shared password, not secure)",
    ),
}


def command(name: str):
    """The module or object that implements command ``name``."""
    module_name, _, attribute = COMMANDS[name][0].partition(":")
    module = import_module(module_name)
    return getattr(module, attribute) if attribute else module


def make_parser(argv: list[str] | None = None, *, every_command: bool = False) -> argparse.ArgumentParser:
    """The parser, with the options of the command named in ``argv`` (of all with ``every_command``)."""
    parser = argparse.ArgumentParser(
        prog="rocmlab", description="Versioned, autograded, CI-executed labs for AMD GPUs."
    )
    parser.add_argument("--version", action="version", version=f"rocmlab {__version__}")
    parser.add_argument(
        "--root", help="course repository (default: $ROCMLAB_ROOT, else the nearest folder up holding solutions/)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    wanted = requested_command(sys.argv[1:] if argv is None else argv)
    for name, (_, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if every_command or name == wanted:
            command(name).add_arguments(p)
    return parser


def requested_command(argv: list[str]) -> str | None:
    """The first word of ``argv`` that is not an option or the value of --root."""
    words = iter(argv)
    for word in words:
        if word == "--root":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def main(argv: list[str] | None = None) -> int:
    block_unused_imports(UNUSED_IN_CLI)
    try:
        options = vars(make_parser(argv).parse_args(argv))
    except SystemExit as exc:  # argparse: 2 after a usage error (message printed), 0 after --help
        return int(exc.code or 0)
    name, named_root = options.pop("command"), options.pop("root")
    processes.exit_on_sigterm()  # SIGTERM unwinds like Ctrl-C: every kernel and rank is ended first
    try:
        implementation = command(name)
        course = find_course(implementation, named_root, options)
        return int(implementation.main(course=course, **options))
    except RocmlabError as exc:
        print(f"rocmlab {name}: error: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("rocmlab: interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)


def find_course(implementation, named_root: str | None, options: dict):
    """The course of this run, found once: an error outside one where the command needs it, else None."""
    from .course.course import Course

    needs = getattr(implementation, "needs_course", lambda _options: True)(options)
    return Course.find(named_root) if needs else Course.here(named_root)


if __name__ == "__main__":
    sys.exit(main())
