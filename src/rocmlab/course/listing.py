"""``rocmlab list``: the labs of a course checkout, or, outside one (a learner's folder), the lab
notebooks there and below."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import ExitCode
from .course import Course
from .learner_labs import find_notebooks, no_notebooks_error, select_notebooks


def needs_course(options: dict) -> bool:
    """Never: outside a course it lists the learner's notebooks."""
    return False


def add_arguments(parser) -> None:
    parser.description = (
        "The labs in this checkout: id, version, minutes, profiles and titles. Outside a course checkout (a "
        "learner's folder): the lab notebooks there and below, with id, version, language and title."
    )
    parser.add_argument("labs", nargs="*", metavar="LAB", help="lab ids or their numbers (default: all)")
    parser.add_argument("--json", dest="as_json", action="store_true", help="print JSON")


def main(*, course: Course | None = None, labs=(), as_json: bool = False) -> int:
    if course is None or not course.has_sources:
        return list_notebooks(course.root if course else Path.cwd(), list(labs), as_json)
    chosen = course.select(labs)
    if as_json:
        summary = [
            {
                "id": lab.id,
                "version": lab.version,
                "title": lab.title,
                "minutes": lab.minutes,
                "profiles": list(lab.profiles),
            }
            for lab in chosen
        ]
        print(json.dumps(summary, ensure_ascii=False, indent=2))
        return ExitCode.OK
    for lab in chosen:
        print(
            f"{lab.id:<28} {lab.version:<8} {lab.minutes:>4} min  {','.join(lab.profiles):<20} "
            f"{lab.title['zh']} / {lab.title['en']}"
        )
    return ExitCode.OK


def list_notebooks(folder: Path, wanted: list[str], as_json: bool) -> int:
    """``rocmlab list`` without solutions/: the lab notebooks in ``folder`` and below."""
    notebooks = find_notebooks(folder)
    if not notebooks:
        raise no_notebooks_error(folder)
    chosen = select_notebooks(notebooks, wanted)
    if as_json:
        rows = [
            {"id": nb.id, "version": nb.version, "lang": nb.lang, "title": nb.title, "path": str(nb.path)}
            for nb in chosen
        ]
        print(json.dumps(rows, ensure_ascii=False, indent=2))
        return ExitCode.OK
    for nb in chosen:
        print(f"{nb.id:<28} {nb.version:<8} {nb.lang:<3} {nb.title}  ({nb.path})")
    print("Self-check a notebook with: rocmlab check NOTEBOOK.ipynb")
    return ExitCode.OK
