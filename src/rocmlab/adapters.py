"""Commands whose modules are not yet on the command convention (``rocmlab.cli``), adapted to it.

Each adapter is an object with ``add_arguments(parser)`` and ``main(**options)``, as the
convention asks. When a module gets its own ``add_arguments`` and keyword ``main`` (and raises
``rocmlab.errors`` exceptions instead of printing ``error:`` and returning 1), its adapter is
deleted here and ``cli.COMMANDS`` names the module itself (docs/architecture.md, "Commands").

- ``releases``, ``environments``: ``add_arguments(parser)`` and ``run(args: Namespace)``;
- ``report``: the command lived in cli.py; ``rocmlab.report`` has the functions it calls.
"""

from __future__ import annotations

import argparse
import sys
from importlib import import_module
from pathlib import Path

from .errors import ExitCode, InputError


class NamespaceCommand:
    """A module with ``add_arguments(parser)`` and ``run(args: argparse.Namespace) -> int``."""

    def __init__(self, module_name: str):
        self.module_name = module_name

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        import_module(self.module_name).add_arguments(parser)

    def main(self, **options) -> int:
        return import_module(self.module_name).run(argparse.Namespace(**options))


releases = NamespaceCommand("rocmlab.releases")
environments = NamespaceCommand("rocmlab.environments")


class ReportCommand:
    """``rocmlab report``, on the functions of ``rocmlab.report``."""

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.description = (
            "The freshness matrix: lab x environment, last verified, stale labs, deprecation warnings. "
            "--stamp keeps the latest records in ci/results/ and refreshes the README's table."
        )
        parser.add_argument("--results", nargs="*", metavar="DIR", help="results folders (default results/)")
        parser.add_argument("--format", default="md", choices=["md", "html", "json"])
        parser.add_argument("--output", metavar="FILE", help="write to this file instead of stdout")
        parser.add_argument(
            "--stamp",
            action="store_true",
            help="keep the latest records in ci/results/ and refresh the README's freshness table",
        )

    @staticmethod
    def main(*, results=None, format="md", output=None, stamp=False, root=None) -> int:
        from .catalog import discover
        from .report import RENDERERS, freshness, load_records
        from .report import stamp as stamp_files
        from .root import find_root

        root = find_root(root)
        folders = [Path(d) for d in results] if results else [root / "results"]
        for folder in folders if results else []:
            if not folder.is_dir():
                raise InputError(f"--results {folder}: no such folder")
        records, problems = load_records(folders)
        report = freshness(discover(root), records)
        report.problems = problems
        if stamp:
            try:
                changed = stamp_files(report, records, root)
            except ValueError as exc:
                raise InputError(str(exc)) from None
            for path in changed:
                print(f"stamped {path.relative_to(root)}", file=sys.stderr)
            print(f"{len(changed)} file(s) changed", file=sys.stderr)
        text = RENDERERS[format](report)
        if output:
            Path(output).write_text(text, encoding="utf-8")
            print(f"wrote {output}", file=sys.stderr)
        else:
            sys.stdout.write(text)
        return ExitCode.OK


report = ReportCommand()
