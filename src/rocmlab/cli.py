"""The ``rocmlab`` command: parse, call one module, print. Exit 2 on bad input."""

from __future__ import annotations

import argparse
import json
import sys
from importlib import import_module
from pathlib import Path

from . import __version__
from .catalog import LabError, discover, find_root, select
from .execute import UNUSED_IN_CLI, block_unused_imports

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_SKIPPED = 0, 1, 2, 3

# Commands owned by their own modules: each defines add_arguments(parser) and run(args) -> int.
MODULE_COMMANDS = {
    "doctor": ("rocmlab.doctor", "probe this machine and judge it against the release matrix"),
    "assets": ("rocmlab.assets.commands", "build the offline course model, fetch real models"),
    "releases": ("rocmlab.releases", "check upstream for releases newer than env/matrix.toml"),
    "env": ("rocmlab.environments", "create the release matrix's CPU environments"),
    "grade": ("rocmlab.grade", "autograde a class of submissions with nbgrader"),
    "check": ("rocmlab.check", "run your notebook's visible tests offline (for learners)"),
    "hub": ("rocmlab.hub", "start the workshop JupyterHub (--demo: loopback, shared password, not secure)"),
}


def _labs(args):
    root = Path(args.root).resolve() if args.root else find_root()
    return root, select(discover(root), args.labs)


def cmd_list(args) -> int:
    _, labs = _labs(args)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "id": lab.id,
                        "version": lab.version,
                        "title": lab.title,
                        "minutes": lab.minutes,
                        "profiles": list(lab.profiles),
                    }
                    for lab in labs
                ],
                ensure_ascii=False,
                indent=2,
            )
        )
        return EXIT_OK
    for lab in labs:
        print(
            f"{lab.id:<28} {lab.version:<8} {lab.minutes:>4} min  {','.join(lab.profiles):<20} "
            f"{lab.title['zh']} / {lab.title['en']}"
        )
    return EXIT_OK


def cmd_build(args) -> int:
    from .build import build, drift, languages

    root, labs = _labs(args)
    langs = languages(args.lang)
    if args.profile:
        return _build_profile(root, labs, langs, args)
    out = Path(args.out) if args.out else root / "labs"
    if args.check:
        differences = drift(root, labs, langs, out, orphans=not args.labs)
        for line in differences:
            print(line)
        if differences:
            print(
                f"{len(differences)} file(s) under {out} differ from the sources: run `rocmlab build`", file=sys.stderr
            )
            return EXIT_FAILED
        print(f"{out} matches solutions/ ({len(labs)} lab(s), {', '.join(langs)})")
        return EXIT_OK
    built = build(root, labs, langs, out, progress=lambda msg: print(msg, file=sys.stderr))
    print(f"built {len(built)} notebook folder(s) under {out}")
    if args.verify:
        return _verify(root, labs, args)
    return EXIT_OK


def _build_profile(root: Path, labs, langs, args) -> int:
    from .build import build, profile_out

    out = profile_out(root, args.out, check=args.check, verify=args.verify)
    built = build(root, labs, langs, out, profile=args.profile, progress=lambda msg: print(msg, file=sys.stderr))
    print(f"built {len(built)} notebook folder(s) with the {args.profile} profile's parameters under {out}")
    return EXIT_OK


def _verify(root: Path, labs, args) -> int:
    from .run import local_target
    from .verify import verify_labs

    out = Path(args.results or root / "results" / "verify")
    results = verify_labs(
        root, labs, local_target(), out, jobs=args.jobs, progress=lambda msg: print(msg, file=sys.stderr)
    )
    for result in results:
        for test in result.tests:
            print(f"{result.lab:<28} {test.grade_id:<32} solution: {test.on_solution:<8} student: {test.on_student}")
        for problem in result.problems:
            print(f"{result.lab}: ERROR: {problem}")
    bad = [r.lab for r in results if not r.ok]
    if bad:
        print(f"verify failed for {', '.join(bad)} (executed notebooks under {out})", file=sys.stderr)
        return EXIT_FAILED
    print(f"verified {len(results)} lab(s): every graded test passes on the solution and fails on the student version")
    return EXIT_OK


def cmd_run(args) -> int:
    from .run import env_target, local_target, run_labs

    root, labs = _labs(args)
    out = Path(args.out) if args.out else root / "results"
    target = env_target(args.env) if args.env else local_target()
    records = run_labs(
        root, labs, args.profile, target, out, jobs=args.jobs, lang=args.lang, student=args.student, repeat=args.repeat
    )
    for record in records:
        print(_run_line(record))
        for run in record.repeats:
            if run["status"] != "passed":
                print(f"    run {run['run']}: {run['status']} after {run['duration_s']:.1f}s: {run['reason'][:300]}")
    print(f"records and executed notebooks: {out / target.name}")
    if any(r.status in ("failed", "timeout", "crashed", "flaky") for r in records):
        return EXIT_FAILED
    return EXIT_SKIPPED if any(r.status == "skipped" for r in records) else EXIT_OK


def _run_line(record) -> str:
    warnings = f"{len(record.warnings)} warning(s)"
    if record.repeats:
        passed = sum(run["status"] == "passed" for run in record.repeats)
        rate = f"{passed}/{len(record.repeats)} passed"
        return f"{record.lab:<28} {record.status:<8} {rate:<14} median {record.duration_s:6.1f}s  {warnings}"
    detail = f" — {record.reason}" if record.reason else ""
    return f"{record.lab:<28} {record.status:<8} {record.duration_s:7.1f}s  {warnings}{detail}"


def cmd_report(args) -> int:
    from .report import RENDERERS, freshness, load_records, stamp

    root = Path(args.root).resolve() if args.root else find_root()
    labs = discover(root)
    dirs = [Path(d) for d in args.results] if args.results else [root / "results"]
    records, problems = load_records(dirs)
    report = freshness(labs, records)
    report.problems = problems
    if args.stamp:
        try:
            changed = stamp(report, records, root)
        except ValueError as exc:
            raise LabError(str(exc)) from None
        for path in changed:
            print(f"stamped {path.relative_to(root)}", file=sys.stderr)
        print(f"{len(changed)} file(s) changed", file=sys.stderr)
    text = RENDERERS[args.format](report)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def _lab_args(parser) -> None:
    parser.add_argument("labs", nargs="*", metavar="LAB", help="lab ids or their numbers (default: all)")


def make_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rocmlab", description="Versioned, autograded, CI-executed labs for AMD GPUs."
    )
    parser.add_argument("--version", action="version", version=f"rocmlab {__version__}")
    parser.add_argument("--root", help="course repository root (default: nearest folder above holding solutions/)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", help="list the labs and their profiles")
    _lab_args(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("build", help="build student notebooks into labs/<lang>/")
    _lab_args(p)
    p.add_argument("--lang", default="all", help="zh, en or all (default all)")
    p.add_argument("--out", help="output folder (default labs/)")
    p.add_argument(
        "--profile",
        choices=["smoke", "gpu", "multi-gpu"],
        help="set this profile's parameters in the parameters cell (needs --out; labs without it are skipped)",
    )
    p.add_argument("--check", action="store_true", help="exit 1 listing files when labs/ differs from a fresh build")
    p.add_argument(
        "--verify",
        action="store_true",
        help="prove each graded test passes on the solution, fails on the student version",
    )
    p.add_argument("--jobs", type=int, default=1, help="labs verified at once")
    p.add_argument("--results", help="where --verify keeps executed notebooks (default results/verify)")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("run", help="execute labs with papermill and write result records")
    _lab_args(p)
    p.add_argument("--profile", default="smoke", choices=["smoke", "gpu", "multi-gpu", "auto"])
    p.add_argument("--lang", default="en", choices=["zh", "en"])
    p.add_argument("--jobs", type=int, default=1, help="labs run at once")
    p.add_argument("--out", help="results folder (default results/)")
    p.add_argument("--student", action="store_true", help="run the generated student notebook instead of the solution")
    p.add_argument("--env", help="run inside a release-matrix environment made by `rocmlab env create`")
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run each lab N times; a lab that fails any run is recorded as flaky, with every failure",
    )
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("report", help="render the freshness matrix from result records")
    p.add_argument("--results", nargs="*", help="results folders (default results/)")
    p.add_argument("--format", default="md", choices=["md", "html", "json"])
    p.add_argument("--output", help="write to this file instead of stdout")
    p.add_argument(
        "--stamp",
        action="store_true",
        help="keep the latest records in ci/results/ and refresh the README's freshness table",
    )
    p.set_defaults(func=cmd_report)

    wanted = requested_command(sys.argv[1:] if argv is None else argv)
    for name, (module_name, help_text) in MODULE_COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        if name == wanted:  # only the chosen command's module is imported (some pull in heavy packages)
            module = import_module(module_name)
            module.add_arguments(p)
            p.set_defaults(func=module.run)
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
    parser = make_parser(argv)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except LabError as exc:
        print(f"rocmlab: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("rocmlab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
