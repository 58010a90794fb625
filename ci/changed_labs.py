"""Print the ids of the labs a change touches (solutions/<id>/...), space separated.

python ci/changed_labs.py origin/main                # diff of HEAD against its merge base
python ci/changed_labs.py origin/main --github-output labs
"""

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

LAB_PATH = re.compile(r"^solutions/([0-9]{2}-[a-z0-9-]+)/")


def changed_files(base: str, cwd: Path | None = None) -> list[str]:
    out = subprocess.run(
        ["git", "diff", "--name-only", f"{base}...HEAD"],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return [line for line in out.stdout.splitlines() if line]


def labs_in(paths: list[str], root: Path) -> list[str]:
    """Lab ids under solutions/ that still exist (a deleted lab has nothing to run)."""
    ids = {m[1] for m in map(LAB_PATH.match, paths) if m}
    return sorted(i for i in ids if (root / "solutions" / i / "lab.toml").is_file())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="git ref to compare with, e.g. origin/main")
    parser.add_argument("--github-output", metavar="NAME")
    args = parser.parse_args(argv)
    root = Path.cwd()
    labs = " ".join(labs_in(changed_files(args.base), root))
    print(labs)
    if args.github_output:
        with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as out:
            out.write(f"{args.github_output}={labs}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
