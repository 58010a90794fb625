"""Print the GitHub Actions job matrix generated from env/matrix.toml (never written twice).

    python ci/matrix_json.py --kind rocm                      # current ROCm entries
    python ci/matrix_json.py --kind cpu --github-output cpu   # appends cpu=<json> to $GITHUB_OUTPUT

Needs only `packaging`; rocmlab itself is imported from src/ when it is not installed.
"""

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from rocmlab import releases  # noqa: E402 (after the sys.path setup)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=("rocm", "cpu"), default="rocm")
    parser.add_argument(
        "--status",
        action="append",
        choices=releases.STATUSES,
        help="statuses to include (repeatable; default: current)",
    )
    parser.add_argument("--matrix", type=Path, default=ROOT / releases.MATRIX_RELATIVE)
    parser.add_argument("--github-output", metavar="NAME", help="also append NAME=<json> to $GITHUB_OUTPUT")
    args = parser.parse_args(argv)
    try:
        entries = releases.load_matrix(args.matrix)
    except releases.MatrixError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    matrix = releases.job_matrix(entries, kind=args.kind, statuses=tuple(args.status or ("current",)))
    text = json.dumps(matrix, separators=(",", ":"))
    print(text)
    if args.github_output:
        with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as out:
            out.write(f"{args.github_output}={text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
