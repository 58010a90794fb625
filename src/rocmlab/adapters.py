"""Commands whose modules are not yet on the command convention (``rocmlab.cli``), adapted to it.

Each adapter is an object with ``add_arguments(parser)`` and ``main(**options)``, as the
convention asks. When a module gets its own ``add_arguments`` and keyword ``main`` (and raises
``rocmlab.errors`` exceptions instead of printing ``error:`` and returning 1), its adapter is
deleted here and ``cli.COMMANDS`` names the module itself (docs/architecture.md, "Commands").

- ``releases``, ``environments``: ``add_arguments(parser)`` and ``run(args: Namespace)``;
- ``report``: ``rocmlab.report.command.run(args)``; its options lived in cli.py and are here now.
"""

from __future__ import annotations

import argparse
from importlib import import_module


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


class ReportCommand(NamespaceCommand):
    """``rocmlab report``: ``rocmlab.report.command.run(args)``; its options were in cli.py."""

    def __init__(self):
        super().__init__("rocmlab.report.command")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.description = (
            "The verdict per lab and matrix entry (verified, outdated, failing, flaky, stale, skipped, never "
            "run) from the ledger `ci/history/` and new result records (docs/freshness.md). --diff: what changed "
            "since each pair's previous run; --format html: the dashboard; --stamp: append to the ledger, "
            "refresh the README table and the badges."
        )
        parser.add_argument(
            "--results", nargs="*", metavar="DIR", help="folders of new result records (default results/)"
        )
        parser.add_argument("--format", default="md", choices=["md", "html", "json"], help="html: the dashboard")
        parser.add_argument("--output", metavar="FILE", help="write to this file instead of stdout")
        parser.add_argument("--diff", action="store_true", help="show what changed since the previous run of each pair")
        parser.add_argument(
            "--stamp",
            action="store_true",
            help="append new runs to ci/history, refresh ci/results/freshness.json, ci/badges and the README table",
        )
        parser.add_argument(
            "--upstream",
            metavar="JSON",
            help="findings of `rocmlab releases check --json`: entries with newer releases",
        )
        parser.add_argument(
            "--skip", action="append", metavar="ENTRY=REASON", help="record every lab on ENTRY as skipped (repeatable)"
        )
        parser.add_argument("--github-summary", action="store_true", help="append a summary to $GITHUB_STEP_SUMMARY")
        parser.add_argument(
            "--max-gpu-age",
            type=float,
            metavar="DAYS",
            help="dead-man check: exit 1 when no ROCm entry passed anything in DAYS days",
        )


report = ReportCommand()
