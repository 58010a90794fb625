"""The README's table of labs, generated from each lab's ``lab.toml`` so that adding a lab
touches only its own folder.

    python -m rocmlab.course.lab_table README.md          # rewrite the table between the markers
    python -m rocmlab.course.lab_table --check README.md  # exit 1 when the table is not in step

One row per lab under ``solutions/``: its id, its Chinese title and its ``summary`` (what the
learner builds).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import LabError
from ..markdown_table import cell, splice
from ..root import find_root
from .catalog import Lab, discover

START, END = "<!-- labs:start -->", "<!-- labs:end -->"


def table(labs: list[Lab]) -> str:
    lines = ["| id | 实验 | what the learner builds |", "| --- | --- | --- |"]
    for lab in labs:
        if not lab.summary:
            raise LabError(f"{lab.folder / 'lab.toml'}: missing field summary (what the learner builds, one line)")
        lines.append(f"| {lab.id} | {cell(lab.title['zh'])} | {cell(lab.summary)} |")
    return "\n".join(lines) + "\n"


def stamped(readme_text: str, labs: list[Lab], readme: Path) -> str:
    """``readme_text`` with the table between the markers replaced by one made from ``labs``."""
    if START not in readme_text or END not in readme_text:
        raise LabError(f"{readme}: add the markers {START} and {END} where the lab table goes")
    return splice(readme_text, START, END, table(labs))


def main(argv: list[str] | None = None) -> int:
    options = argparse.ArgumentParser(prog="python -m rocmlab.course.lab_table", description=__doc__.splitlines()[0])
    options.add_argument("readme", type=Path)
    options.add_argument("--check", action="store_true", help="only report whether the table is in step")
    options.add_argument("--root", help="the course repository (default: found from the working directory)")
    args = options.parse_args(argv)
    try:
        text = args.readme.read_text(encoding="utf-8")
        new = stamped(text, discover(find_root(args.root)), args.readme)
    except (OSError, LabError) as exc:
        print(f"python -m rocmlab.course.lab_table: error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if new != text:
            print(f"{args.readme}: the lab table is not in step: run python -m rocmlab.course.lab_table {args.readme}")
            return 1
        return 0
    if new != text:
        args.readme.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
