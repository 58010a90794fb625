"""``rocmlab new LAB``: a lab folder under ``solutions/`` that builds, verifies and runs as it is.

It holds one graded exercise (its contract in both languages, a solution cell, a visible test
and two hidden checks), so the author starts from a lab that every command accepts and rewrites
it; ``rocmlab build`` then makes its notebooks and the README's row. Nothing outside the folder
is written.
"""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path

from ..errors import LabError
from ..schemas import schema
from .catalog import parse_lab
from .course import Course

TEMPLATES = ("lab.toml", "lab.py", "checks.py", "CHANGELOG.md", "CHANGELOG.zh.md")


def add_arguments(parser) -> None:
    parser.add_argument("lab_id", metavar="LAB", help='the new lab\'s id and folder name, e.g. "11-hello-rocm"')
    parser.add_argument("--title-en", required=True, help="its English title")
    parser.add_argument("--title-zh", required=True, help="its Chinese title")
    parser.add_argument(
        "--summary", default="", help="what the learner builds: the lab's row in the README's lab table"
    )
    parser.add_argument("--minutes", type=int, default=60, help="workshop time (default 60)")


def scaffold(solutions: Path, lab_id: str, *, title_en: str, title_zh: str, summary: str, minutes: int) -> Path:
    """Write ``solutions/<lab_id>/`` from the templates and return it, checked as every lab is."""
    if not re.match(schema("lab")["properties"]["id"]["pattern"], lab_id):
        raise LabError(f"{lab_id!r} is not a lab id: two digits, a dash, then lowercase words joined by dashes")
    if minutes < 1:
        raise LabError(f"--minutes must be a positive number of minutes, got {minutes}")
    number = lab_id[:2]
    taken = [p.name for p in solutions.glob(f"{number}-*")]
    if taken:
        raise LabError(f"{solutions / taken[0]} already uses the number {number}; pick another")
    folder = solutions / lab_id
    values = dict(
        id=lab_id,
        number=number,
        title_en=title_en.strip(),
        title_zh=title_zh.strip(),
        summary=summary.strip() or f"{title_en.strip()} (write what the learner builds here)",
        minutes=minutes,
    )
    rendered = {name: _render(name, values) for name in TEMPLATES}
    folder.mkdir(parents=True)
    for name, text in rendered.items():
        (folder / name).write_text(text, encoding="utf-8")
    parse_lab(folder)  # the same checks as every lab's: schema, id, profiles
    return folder


def _render(name: str, values: dict) -> str:
    import jinja2

    source = files("rocmlab").joinpath("templates", "new_lab", f"{name}.j2").read_text(encoding="utf-8")
    environment = jinja2.Environment(keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    environment.filters["toml"] = _toml_value
    return environment.from_string(source).render(**values)


def _toml_value(value) -> str:
    """``value`` as TOML writes it (tomlkit): a Chinese title stays readable, not ``\\u`` escapes."""
    import tomlkit

    return tomlkit.item(value).as_string()


def main(*, lab_id: str, title_en: str, title_zh: str, summary: str, minutes: int, course: Course) -> int:
    folder = scaffold(course.solutions, lab_id, title_en=title_en, title_zh=title_zh, summary=summary, minutes=minutes)
    print(f"wrote {folder.relative_to(course.root)}/: {', '.join(TEMPLATES)}")
    print("next: rewrite the exercise, then")
    print("  rocmlab build                 # its student notebooks in labs/, its row in the README's lab table")
    print(f"  rocmlab build --verify {lab_id}   # every check passes on the solution, fails on the student version")
    print(f"  rocmlab run {lab_id}              # the smoke profile, as CI runs it")
    return 0
