"""Decide whether the freshness report may stamp: every matrix job succeeded or was honestly skipped.

    python ci/gate.py --needs "$NEEDS" [--github-output]     # NEEDS='${{ toJSON(needs) }}'

"Honestly skipped" means GitHub skipped a job whose inputs were there: the job matrix was
generated (the `matrix` job succeeded) and the job did not run, e.g. no entry of its kind.
The entries of a skipped job are written to $GITHUB_OUTPUT as ``skipped=<names>`` so that the
report records them as skipped, with the reason. A failed, cancelled or missing job stops the
report: exit 1, and nothing is stamped. Needs only the standard library.
"""

import argparse
import json
import os
import sys
from dataclasses import dataclass, field

MATRIX_JOB = "matrix"
RUN_JOBS = {"gpu": "rocm", "cpu": "cpu"}  # job → the matrix output that lists its entries
MONTHLY_JOBS = ("gpu-multi",)  # skipped on every weekly run by design: only a failure stops the report


@dataclass
class Decision:
    stamp: bool = True
    reasons: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def entries(needs: dict, output: str) -> list[str]:
    text = (needs.get(MATRIX_JOB, {}).get("outputs") or {}).get(output) or '{"include": []}'
    return [item["name"] for item in json.loads(text).get("include", [])]


def decide(needs: dict) -> Decision:
    decision = Decision()
    matrix = needs.get(MATRIX_JOB, {}).get("result")
    if matrix != "success":
        decision.stamp = False
        decision.reasons.append(f"the {MATRIX_JOB} job's result is {matrix or 'missing'}: no job matrix, no runs")
        return decision
    for job, output in RUN_JOBS.items():
        result = needs.get(job, {}).get("result")
        if result == "success":
            decision.reasons.append(f"{job}: success")
        elif result == "skipped":
            names = entries(needs, output)
            decision.skipped += names
            decision.reasons.append(f"{job}: skipped" + (f" ({', '.join(names)} recorded as skipped)" if names else ""))
        else:
            decision.stamp = False
            decision.reasons.append(
                f"{job}: {result or 'missing'}: a job that did not finish (no runner, a broken image, a timeout) "
                "proves nothing about the labs"
            )
    for job in MONTHLY_JOBS:
        result = needs.get(job, {}).get("result", "skipped")
        if result not in ("success", "skipped"):
            decision.stamp = False
            decision.reasons.append(f"{job}: {result}: the monthly multi-GPU job did not finish")
    return decision


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--needs", required=True, help="the JSON of the workflow's needs context")
    parser.add_argument("--github-output", action="store_true", help="append stamp= and skipped= to $GITHUB_OUTPUT")
    args = parser.parse_args(argv)
    try:
        needs = json.loads(args.needs)
    except json.JSONDecodeError as exc:
        print(f"--needs: not JSON ({exc})", file=sys.stderr)
        return 2
    decision = decide(needs)
    for reason in decision.reasons:
        print(reason)
    if args.github_output:
        with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as out:
            out.write(f"stamp={'true' if decision.stamp else 'false'}\nskipped={' '.join(decision.skipped)}\n")
    if not decision.stamp:
        print("::error title=Freshness report not stamped::" + "; ".join(decision.reasons))
        return 1
    print("the report may stamp")
    return 0


if __name__ == "__main__":
    sys.exit(main())
