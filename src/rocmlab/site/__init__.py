"""``rocmlab site``: the course website from the built student notebooks (see ``build.py``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..course.course import Course
from ..errors import ExitCode

DEFAULT_OUT = "_site"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "The course website, static and offline: one page per lab and language from the student notebooks "
        "(no solutions, no hidden tests) with version, minutes, profiles, freshness and a launch link to the hub "
        "of env/site.toml; the quickstart and the instructor guide."
    )
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"output folder, replaced whole (default {DEFAULT_OUT}/)")
    parser.add_argument("--hub-url", help="the hub of the launch links (default: hub_url in env/site.toml)")
    parser.add_argument(
        "--labs-repo", help="the student-notebook repository nbgitpuller pulls (default: env/site.toml)"
    )
    parser.add_argument("--labs-branch", help="its branch (default: env/site.toml)")
    parser.add_argument("labs", nargs="*", metavar="LAB", help="labs to include (default: all)")


def main(*, labs=(), out=DEFAULT_OUT, hub_url=None, labs_repo=None, labs_branch=None, course: Course) -> int:
    from .build import build_site
    from .launch import read_config

    launch = read_config(course.root, hub_url=hub_url, labs_repo=labs_repo, labs_branch=labs_branch)
    out_path = Path(out)
    build_site(course.root, out_path if out_path.is_absolute() else Path.cwd() / out_path, launch, labs)
    return ExitCode.OK
