#!/usr/bin/env bash
# Weekly release check (.github/workflows/release-check.yml), run from the repository root.
#
# `rocmlab releases check --apply` compares upstream with env/matrix.toml and writes what it
# finds into the matrix. Its exit status decides:
#   0  up to date       close the tracking issue, if one is open;
#   10 updates          regenerate env/docker/, force-push the fixed branch $BRANCH with the
#                       matrix edit, open or update its pull request, start its CI and the
#                       freshness runs of the entries that changed, open or update the tracking
#                       issue with a link to the PR;
#   11 partial          a source could not be read: say so on the issue; never close it.
# Yanked pins (in every case) go to ci/route_failures.py --pins: one issue per pin, like failing labs.
#
# CI on the bot's pull request: a pull request opened with the workflow's own GITHUB_TOKEN starts
# no workflow (GitHub's rule against loops). With PR_CHECKS=native the token is a GitHub App's
# (release-check.yml mints it) and pull_request workflows start by themselves; otherwise
# (PR_CHECKS=dispatch, the default) pr.yml is dispatched on the branch, and its checks appear on
# the branch's head commit, which is the pull request's.
# Freshness runs: the changed entries (`changed_entries` of the JSON): CPU entries on GitHub's
# runners, ROCm entries on the GPU runners, unless ROCMLAB_GPU_RUNNERS=none (a repository variable:
# no GPU runner, the ROCm entries are left for a maintainer and the PR says so).
# Needs GH_TOKEN for the gh CLI. ROCMLAB_FIXTURES=DIR answers from recorded responses and
# ROCMLAB_TODAY=YYYY-MM-DD sets the day of the check (tests: tests/ci/test_release_check_workflow.py).
set -uo pipefail
branch="${BRANCH:-release-check/matrix}"
base="${BASE:-main}"
title="Upstream releases newer than the release matrix"
rocmlab="${ROCMLAB:-rocmlab}"
python="${PYTHON:-python3}"
check=(releases check --apply --json --body-out release-check.md)
if [[ -n "${ROCMLAB_FIXTURES:-}" ]]; then
  check+=(--fixtures "$ROCMLAB_FIXTURES")
fi
if [[ -n "${ROCMLAB_TODAY:-}" ]]; then
  check+=(--today "$ROCMLAB_TODAY")
fi

"$rocmlab" "${check[@]}" > release-check.json
status=$?
case "$status" in
  0 | 10 | 11)
    "$python" ci/route_failures.py --pins release-check.json \
      || echo "::warning::yanked pins could not be routed to issues (see above); they are listed in release-check.md"
    ;;
esac
issue=$(gh issue list --state open --search "in:title \"$title\"" --json number --jq '.[0].number // empty')

case "$status" in
  0)
    echo "the matrix is up to date"
    if [[ -n "$issue" ]]; then
      gh issue close "$issue" --comment "The release matrix has caught up with upstream (check of $(date -u +%F))."
    fi
    exit 0
    ;;
  11)
    echo "::warning::partial release check: some upstream sources could not be read (release-check.md)"
    if [[ -n "$issue" ]]; then
      gh issue comment "$issue" --body-file release-check.md
    fi
    exit 0
    ;;
  10) ;;
  *)
    echo "release check failed (exit $status)" >&2
    exit "$status"
    ;;
esac

# what changed (entries to run again) and whether the matrix file changed at all (a yanked pin alone does not)
read -r edits entries < <("$python" - <<'PY'
import json
found = json.load(open("release-check.json"))
edits = "yes" if found["new_entries"] or found["updates"] else "no"
print(edits, ",".join(found["changed_entries"]) or "-")
PY
)
[[ "$entries" == "-" ]] && entries=""
if [[ "$edits" != "yes" ]]; then
  echo "no matrix edit (yanked pins only: routed to issues)"
  exit 0
fi
skipped=""
if [[ "${ROCMLAB_GPU_RUNNERS:-}" == "none" ]]; then
  skipped=$(tr ',' '\n' <<< "$entries" | grep '^rocm-' | paste -sd, -)
  entries=$(tr ',' '\n' <<< "$entries" | grep -v '^rocm-' | paste -sd, -)
fi
"$rocmlab" env dockerfiles || exit 1

git switch -C "$branch" || exit 1
git add env/matrix.toml env/docker || exit 1
git -c user.name="github-actions[bot]" -c user.email="41898282+github-actions[bot]@users.noreply.github.com" \
  commit --quiet -m "Release matrix: upstream releases newer than env/matrix.toml" -m "$(head -c 60000 release-check.md)" || exit 1
git push --force origin "$branch" || exit 1

pr=$(gh pr list --head "$branch" --state open --json number --jq '.[0].number // empty')
if [[ -n "$pr" ]]; then
  gh pr edit "$pr" --body-file release-check.md || exit 1
else
  gh pr create --head "$branch" --base "$base" --title "$title" --body-file release-check.md || exit 1
  pr=$(gh pr list --head "$branch" --state open --json number --jq '.[0].number // empty')
fi
if [[ "${PR_CHECKS:-dispatch}" != "native" ]]; then
  gh workflow run pr.yml --ref "$branch" || exit 1
  echo "pull request checks (pr.yml) started on $branch"
fi
if [[ -n "$entries" ]]; then
  gh workflow run freshness.yml --ref "$branch" -f entries="$entries" || exit 1
  echo "freshness run started on $branch for: $entries"
fi
if [[ -n "$skipped" && -n "$pr" ]]; then
  gh pr comment "$pr" --body "No GPU runner (ROCMLAB_GPU_RUNNERS=none): the labs were not run on $skipped. Run them on a ROCm machine before merging (docs/release-matrix.md)." || exit 1
fi

{
  echo "Pull request: #${pr:-?} (branch \`$branch\`); freshness run of ${entries:-no entry} started on it."
  echo
  cat release-check.md
} > release-check-issue.md
if [[ -n "$issue" ]]; then
  gh issue edit "$issue" --body-file release-check-issue.md
  echo "updated issue #$issue"
else
  gh issue create --title "$title" --body-file release-check-issue.md --label release-matrix \
    || gh issue create --title "$title" --body-file release-check-issue.md
fi
