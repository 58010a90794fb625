#!/usr/bin/env bash
# The freshness workflow's report job, run only after ci/gate.py allowed it: record this run's
# results in ci/history (stamp), then write the JSON report, the dashboard and the diff under
# OUT, add a summary to $GITHUB_STEP_SUMMARY, and route failures to issues (ci/route_failures.py).
#
# Usage: ci/freshness_report.sh [RESULTS] [OUT]     (from the repository root; defaults results, freshness)
# Environment: SKIPPED_ENTRIES  matrix entries whose job was honestly skipped (space separated)
#              SKIP_REASON      why (default: the job was skipped in this workflow run)
#              ROUTE_ISSUES     1 to open / update / close issues with gh (needs GH_TOKEN)
#              ROCMLAB          the rocmlab command (default: rocmlab)
set -euo pipefail
results="${1:-results}"
out="${2:-freshness}"
rocmlab="${ROCMLAB:-rocmlab}"
mkdir -p "$out" "$results"

skip=()
for entry in ${SKIPPED_ENTRIES:-}; do
  skip+=(--skip "${entry}=${SKIP_REASON:-its job was skipped in this workflow run}")
done

# Upstream releases newer than the matrix make verified cells "outdated". The exit codes of
# `rocmlab releases check` are the table `rocmlab releases exit-codes` prints.
eval "$($rocmlab releases exit-codes)"
upstream=()
status=0
$rocmlab releases check --json > "$out/upstream.json" || status=$?
case "$status" in
  "$EXIT_UP_TO_DATE" | "$EXIT_UPDATES" | "$EXIT_NEEDS_PERSON") upstream=(--upstream "$out/upstream.json") ;;
  "$EXIT_OFFLINE") echo "::warning::release check could not read every source: no outdated verdicts in this report" ;;
  *) echo "release check failed (exit $status)" >&2; exit "$status" ;;
esac

$rocmlab report --results "$results" "${upstream[@]}" "${skip[@]}" --stamp --github-summary > "$out/freshness.md"
$rocmlab report --results "$results" "${upstream[@]}" --format json --output "$out/freshness.json"
$rocmlab report --results "$results" "${upstream[@]}" --format html --output "$out/dashboard.html"
$rocmlab report --results "$results" --diff --output "$out/diff.md"

if [[ "${ROUTE_ISSUES:-0}" == 1 ]]; then
  python "$(dirname "$0")/route_failures.py" "$out/freshness.json"
fi
