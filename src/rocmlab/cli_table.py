"""The README's table of commands, generated from the parsers so that it cannot fall behind.

    python -m rocmlab.cli_table README.md          # rewrite the table between the markers
    python -m rocmlab.cli_table --check README.md  # exit 1 when the table is not in step

One row per command, and per sub-command where a command has them (``env create``): the usage
argparse prints, and the command's description.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .markdown_table import cell, splice

START, END = "<!-- cli:start -->", "<!-- cli:end -->"


def _wide(prog: str) -> argparse.HelpFormatter:
    return argparse.HelpFormatter(prog, width=10_000)  # one line per usage


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[argparse.ArgumentParser, str]]:
    """The sub-parsers of ``parser`` with their one-line help, in the order they were added."""
    found = []
    for action in parser._actions:  # argparse offers no public listing of sub-parsers
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            found += [(sub, helps.get(name, "")) for name, sub in action.choices.items()]
    return found


def usage(parser: argparse.ArgumentParser) -> str:
    parser.formatter_class = _wide
    return parser.format_usage().removeprefix("usage: ").replace(" [-h]", "").strip()


def rows(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    """(usage, what it does) for every command and sub-command."""
    found = []
    for command, help_text in _subcommands(parser):
        nested = _subcommands(command)
        if not nested:
            found.append((usage(command), command.description or help_text))
        for sub, sub_help in nested:
            found.append((usage(sub), sub.description or sub_help))
    return found


def table(parser: argparse.ArgumentParser) -> str:
    lines = ["| command | what it does |", "| --- | --- |"]
    for text, help_text in rows(parser):
        lines.append(f"| `{cell(text)}` | {cell(help_text)} |")
    return "\n".join(lines) + "\n"


def stamped(readme_text: str, parser: argparse.ArgumentParser) -> str:
    """``readme_text`` with the table between the markers replaced by the parsers' own."""
    if START not in readme_text or END not in readme_text:
        raise ValueError(f"the README has no {START} ... {END} markers for the table")
    return splice(readme_text, START, END, table(parser))


def main(argv: list[str] | None = None) -> int:
    from .cli import make_parser

    options = argparse.ArgumentParser(prog="python -m rocmlab.cli_table", description=__doc__.splitlines()[0])
    options.add_argument("readme", type=Path)
    options.add_argument("--check", action="store_true", help="only report whether the table is in step")
    args = options.parse_args(argv)
    text = args.readme.read_text(encoding="utf-8")
    new = stamped(text, make_parser([], every_command=True))
    if args.check:
        if new != text:
            print(f"{args.readme}: the CLI table is not in step: run python -m rocmlab.cli_table {args.readme}")
            return 1
        return 0
    if new != text:
        args.readme.write_text(new, encoding="utf-8")
        print(f"rewrote the CLI table in {args.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
