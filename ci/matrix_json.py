"""Print the GitHub Actions job matrix generated from env/matrix.toml (never written twice).

    python ci/matrix_json.py --kind rocm                      # current ROCm entries
    python ci/matrix_json.py --kind cpu --github-output cpu   # appends cpu=<json> to $GITHUB_OUTPUT
    python ci/matrix_json.py --kind canary --target gpu       # the weekly canary's GPU jobs
    python ci/matrix_json.py --kind rocm --only rocm-7.14     # named entries, previous ones too (the release-check PR's run)
    python ci/matrix_json.py --pin cpu-current:torch          # prints torch==2.14.1 (pr.yml's install)

Runner labels come from repository variables (ROCMLAB_RUNNER_GFX942, ROCMLAB_RUNNER_GFX942_MULTI,
…) passed as JSON in $ROCMLAB_VARS (`toJSON(vars)`); without them the documented defaults apply.
Needs packaging and jsonschema; rocmlab itself is imported from src/ when it is not installed.
"""

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from rocmlab.freshness import matrix  # noqa: E402 (after the sys.path setup)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=("rocm", "cpu", "canary"), default="rocm")
    parser.add_argument("--target", choices=("cpu", "gpu"), help="canary jobs of one target only")
    parser.add_argument(
        "--status", action="append", choices=matrix.STATUSES, help="statuses to include (repeatable; default: current)"
    )
    parser.add_argument(
        "--only", help="comma-separated entry names, current or previous (empty: every entry of --status)"
    )
    parser.add_argument("--multi", action="store_true", help="runner labels of the multi-GPU runners")
    parser.add_argument("--pin", metavar="ENTRY:PACKAGE", help="print one pin of a CPU entry, e.g. cpu-current:torch")
    parser.add_argument("--matrix", type=Path, default=ROOT / matrix.MATRIX_RELATIVE)
    parser.add_argument("--github-output", metavar="NAME", help="also append NAME=<json> to $GITHUB_OUTPUT")
    args = parser.parse_args(argv)
    try:
        loaded = matrix.read_matrix(args.matrix)
        if args.pin:
            return _print_pin(loaded, args.pin, args.github_output)
        variables = json.loads(os.environ.get("ROCMLAB_VARS") or "{}")
        entries = list(loaded.entries + loaded.canaries)
        if args.target:
            entries = [e for e in entries if e.kind != "canary" or e.target == args.target]
        if args.only:
            wanted = {name.strip() for name in args.only.split(",") if name.strip()}
            unknown = wanted - {e.name for e in entries}
            if unknown:
                raise matrix.MatrixError(f"--only: no entry named {sorted(unknown)[0]!r}")
            entries = [e for e in entries if e.name in wanted]
        # entries named in --only run whatever their status short of eol: the release check re-runs a
        # patched previous entry (docs/release-matrix.md, "What runs again")
        statuses = tuple(args.status or (("current", "previous") if args.only else ("current",)))
        jobs = matrix.job_matrix(entries, kind=args.kind, statuses=statuses, variables=variables, multi=args.multi)
    except (matrix.MatrixError, json.JSONDecodeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    _emit(json.dumps(jobs, separators=(",", ":")), args.github_output)
    return 0


def _print_pin(loaded, spec: str, output: str | None) -> int:
    name, _, package = spec.partition(":")
    version = loaded.get(name).pin(package or "torch")
    if version is None:
        raise matrix.MatrixError(f"--pin {spec}: {name} pins no {package}")
    _emit(f"{package}=={version}", output)
    return 0


def _emit(text: str, output: str | None) -> None:
    print(text)
    if output:
        with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as out:
            out.write(f"{output}={text}\n")


if __name__ == "__main__":
    sys.exit(main())
