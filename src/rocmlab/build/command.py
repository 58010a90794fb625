"""``rocmlab build``: the command around ``build`` (student notebooks, ``--check``, ``--profile``)
and ``verify`` (``--verify``), which runs what ``build`` renders; kept apart so that neither
module imports the other's caller. Everything generated from ``solutions/`` is written here: the
student notebooks and the README's lab table (rocmlab.course.lab_table), so that adding a lab is
its folder and ``rocmlab build``."""

from __future__ import annotations

import sys
from pathlib import Path

from ..course.catalog import LANGUAGES, PROFILE_NAMES, select
from ..course.course import Course
from ..course.lab_table import ReadmeTable, readme_table
from ..errors import ExitCode, InputError
from .assignments import build, drift, languages, profile_out
from .verify import verify_command


def add_arguments(parser) -> None:
    parser.description = (
        "Student notebooks from `solutions/` into `labs/<lang>/<id>/` (nbgrader generate_assignment), all or "
        "nothing, and the README's lab table from each `lab.toml`. --check: exit 1 listing the files that "
        "differ from a fresh build, the README's table included (CI's drift guard). "
        "--verify: grade solution and student versions as `rocmlab grade` grades a class (same sandbox and "
        "mounts; it prints which sandbox) in the smoke profile; every graded test and hidden check must pass "
        "on the first and fail on the second. --profile gpu --out DIR: notebooks with that profile's "
        "parameters, for learners on GPUs (never into labs/)."
    )
    parser.add_argument("labs", nargs="*", metavar="LAB", help="lab ids or their numbers (default: all)")
    parser.add_argument("--lang", default="all", choices=[*LANGUAGES, "all"], help="default all")
    parser.add_argument("--out", metavar="DIR", help="output folder (default labs/)")
    parser.add_argument(
        "--profile",
        choices=PROFILE_NAMES,
        help="set this profile's parameters in the parameters cell (needs --out; labs without it are skipped)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 listing files when labs/ or the README's lab table differs from a fresh build",
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="grade solution and student versions as `rocmlab grade` does (smoke profile): every graded test "
        "must pass on the first and fail on the second",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="--verify: job slots grading each lab's class (labs one after another)",
    )
    parser.add_argument(
        "--results", metavar="DIR", help="where --verify keeps each lab's graded class (default results/verify)"
    )


def main(
    *,
    labs=(),
    lang: str = "all",
    out: str | None = None,
    profile: str | None = None,
    check: bool = False,
    verify: bool = False,
    jobs: int = 1,
    results: str | None = None,
    course: Course,
) -> int:
    """Build (or with ``check`` compare) the student notebooks of ``labs``; ``verify`` them after."""
    root = course.root
    every = course.labs()
    chosen = select(every, list(labs))
    langs = languages(lang)
    if jobs < 1:
        raise InputError(f"--jobs: expected a positive number, got {jobs}")

    def say(message: str) -> None:
        print(message, file=sys.stderr)

    if profile:
        target = profile_out(root, out, check=check, verify=verify)
        built = build(root, chosen, langs, target, profile=profile, progress=say)
        print(f"built {len(built)} notebook folder(s) with the {profile} profile's parameters under {target}")
        return ExitCode.OK
    target = Path(out) if out else root / "labs"
    readme = readme_table(root, every)  # read first: a README it cannot stamp fails before any build
    if check:
        stale = _report_drift(drift(root, chosen, langs, target, orphans=not labs), target, len(chosen), langs)
        return max(stale, _report_readme(readme))
    built = build(root, chosen, langs, target, progress=say)
    print(f"built {len(built)} notebook folder(s) under {target}")
    if readme is not None and readme.write():
        print(f"wrote the lab table of {readme.path} ({len(every)} lab(s))")
    if verify:
        return verify_command(root, chosen, Path(results or root / "results" / "verify"), jobs)
    return ExitCode.OK


def _report_drift(differences: list[str], out: Path, count: int, langs: list[str]) -> int:
    for line in differences:
        print(line)
    if differences:
        print(f"{len(differences)} file(s) under {out} differ from the sources: run `rocmlab build`", file=sys.stderr)
        return ExitCode.FAILED
    print(f"{out} matches solutions/ ({count} lab(s), {', '.join(langs)})")
    return ExitCode.OK


def _report_readme(readme: ReadmeTable | None) -> int:
    if readme is None or readme.in_step:
        return ExitCode.OK
    print(f"changed  {readme.path.name} (its lab table)")
    print(
        f"{readme.path}: the lab table is not in step with solutions/*/lab.toml: run `rocmlab build`", file=sys.stderr
    )
    return ExitCode.FAILED
