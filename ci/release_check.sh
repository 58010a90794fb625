#!/usr/bin/env bash
# Weekly release check (.github/workflows/release-check.yml), run from the repository root.
#
# `rocmlab releases check --apply` compares upstream with env/matrix.toml and writes what it finds
# into the matrix (and the README/docs sentences that name the newest entries). Its exit status is
# one of the table EXIT_CODES (src/rocmlab/freshness/releases.py; `rocmlab releases exit-codes`
# prints it and this script reads it, docs/release-matrix.md lists it):
#   EXIT_UP_TO_DATE    close the tracking issue: the only state that closes it;
#   EXIT_UPDATES       regenerate env/docker/, push the fixed branch $BRANCH with the matrix edit,
#                      open or update its pull request (base $BASE), start its checks and the freshness
#                      run of exactly the entries that changed, open or update the tracking issue;
#   EXIT_OFFLINE       partial (a source failed, a release could not be read) and
#   EXIT_NEEDS_PERSON  (a release waiting for torch, a major held at a cap, an unmarked major, a release
#                      the bot does not watch, a name it could not read): open or update the tracking
#                      issue with the reasons; never close it.
# Yanked pins (in every case) go to ci/route_failures.py --pins: one issue per pin, like failing labs.
#
# The bot branch is never force-pushed over someone else's commit: when $BRANCH holds a commit not
# made by the bot, nothing is pushed and the issue says so. When the edit is the one already on the
# branch (a week without upstream change), nothing is pushed and nothing is dispatched.
#
# CI on the bot's pull request: a pull request opened with the workflow's own GITHUB_TOKEN starts
# no workflow (GitHub's rule against loops). With PR_CHECKS=native the token is a GitHub App's
# (release-check.yml mints it) and pull_request workflows start by themselves; otherwise
# (PR_CHECKS=dispatch, the default) pr.yml is dispatched on the branch, and its checks appear on
# the branch's head commit, which is the pull request's.
# Freshness runs: the changed entries (`runs` of the JSON, current or previous): CPU entries on
# GitHub's runners, ROCm entries on the GPU runners, unless ROCMLAB_GPU_RUNNERS=none (a repository
# variable: no GPU runner, the ROCm entries are left for a maintainer and the PR says so).
# Needs GH_TOKEN for the gh CLI. ROCMLAB_FIXTURES=DIR answers from recorded responses and
# ROCMLAB_TODAY=YYYY-MM-DD sets the day of the check (tests: tests/ci/test_release_check_*.py).
set -uo pipefail
branch="${BRANCH:-release-check/matrix}"
base="${BASE:-main}"
title="Upstream releases newer than the release matrix"
rocmlab="${ROCMLAB:-rocmlab}"
python="${PYTHON:-python3}"
bot_name="github-actions[bot]"
bot_email="41898282+github-actions[bot]@users.noreply.github.com"
codes=$("$rocmlab" releases exit-codes) || { echo "rocmlab releases exit-codes failed" >&2; exit 1; }
eval "$codes"
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
  "$EXIT_UP_TO_DATE" | "$EXIT_UPDATES" | "$EXIT_OFFLINE" | "$EXIT_NEEDS_PERSON")
    "$python" ci/route_failures.py --pins release-check.json \
      || echo "::warning::yanked pins could not be routed to issues (see above); they are listed in release-check.md"
    ;;
  *)
    echo "release check failed (exit $status)" >&2
    exit "$status"
    ;;
esac
issue=$(gh issue list --state open --search "in:title \"$title\"" --json number --jq '.[0].number // empty')

# the tracking issue: its body is the first argument's file, its lead line the second
keep_issue_open() {
  { echo "$2"; echo; cat "$1"; } > release-check-issue.md
  if [[ -n "$issue" ]]; then
    gh issue edit "$issue" --body-file release-check-issue.md || return 1
    gh issue comment "$issue" --body "$2 (check of $(date -u +%F))" || return 1
    echo "updated issue #$issue"
  else
    gh issue create --title "$title" --body-file release-check-issue.md --label release-matrix \
      || gh issue create --title "$title" --body-file release-check-issue.md || return 1
  fi
}

case "$status" in
  "$EXIT_UP_TO_DATE")
    echo "the matrix is up to date"
    if [[ -n "$issue" ]]; then
      gh issue close "$issue" --comment "The release matrix has caught up with upstream (check of $(date -u +%F))."
    fi
    exit 0
    ;;
  "$EXIT_OFFLINE")
    echo "::warning::partial release check: a source or a release could not be read (release-check.md)"
    keep_issue_open release-check.md "Partial check: a source or a release could not be read; a person is needed." || exit 1
    exit 0
    ;;
  "$EXIT_NEEDS_PERSON")
    echo "::warning::the release check needs a person (release-check.md)"
    keep_issue_open release-check.md "Nothing to edit, but a person is needed (the reasons below)." || exit 1
    exit 0
    ;;
esac

# EXIT_UPDATES: whether the matrix file changed at all (a yanked pin alone does not), and what runs again
# (`runs` of the JSON, as the PR body lists it: entries with a runner, and ROCm entries left without one)
read -r edits entries skipped < <("$python" - <<'PY'
import json
found = json.load(open("release-check.json"))
edits = "yes" if found["new_entries"] or found["updates"] else "no"
runs = [r["entry"] for r in found["runs"] if r["runner"] != "none"]
skipped = [r["entry"] for r in found["runs"] if r["runner"] == "none"]
print(edits, ",".join(runs) or "-", ",".join(skipped) or "-")
PY
)
[[ "$entries" == "-" ]] && entries=""
[[ "$skipped" == "-" ]] && skipped=""
if [[ "$edits" != "yes" ]]; then
  echo "no matrix edit (yanked pins only: routed to issues)"
  exit 0
fi
"$rocmlab" env dockerfiles || exit 1

# the branch as it is on the remote: whose commits it holds, and the tree last pushed
remote_head=""
if git fetch --quiet origin "+refs/heads/$branch:refs/remotes/origin/$branch" 2>/dev/null; then
  remote_head=$(git rev-parse "refs/remotes/origin/$branch")
fi
others=""
if [[ -n "$remote_head" ]]; then
  others=$(git log --format='%h %an <%ae>: %s' "HEAD..$remote_head" | grep -vF "<$bot_email>:" || true)
fi

git switch -C "$branch" || exit 1
for path in env/matrix.toml env/docker README.md docs; do
  if [[ -e "$path" ]]; then git add "$path" || exit 1; fi
done
GIT_AUTHOR_NAME="$bot_name" GIT_AUTHOR_EMAIL="$bot_email" GIT_COMMITTER_NAME="$bot_name" GIT_COMMITTER_EMAIL="$bot_email" \
  git commit --quiet -m "Release matrix: upstream releases newer than env/matrix.toml" -m "$(head -c 60000 release-check.md)" || exit 1

pr=$(gh pr list --head "$branch" --state open --json number --jq '.[0].number // empty')
if [[ -n "$others" ]]; then
  echo "::warning::$branch holds commits not made by the bot: nothing pushed"
  {
    echo "The bot branch \`$branch\` holds commits that the bot did not make, so this week's edit was not"
    echo "pushed over them (the bot never force-pushes over someone else's work):"
    echo
    while read -r line; do echo "- $line"; done <<< "$others"
    echo
    echo "Merge or close pull request #${pr:-?}, or apply the edit below on the branch by hand."
  } > release-check-blocked.md
  cat release-check.md >> release-check-blocked.md
  keep_issue_open release-check-blocked.md "The bot branch holds a maintainer's commits: this week's edit waits for a person." || exit 1
  exit 0
fi
if [[ -n "$remote_head" && -n "$pr" ]] && git diff --quiet "$remote_head" HEAD -- env/matrix.toml; then
  echo "the edit is the one already on $branch (pull request #$pr): nothing pushed, nothing dispatched"
  gh pr edit "$pr" --body-file release-check.md || exit 1
  exit 0
fi
# the lease: the remote branch is still the bot's commit seen above (or still absent)
git push --force-with-lease="$branch:$remote_head" origin "$branch" || exit 1

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
keep_issue_open release-check.md "Pull request: #${pr:-?} (branch \`$branch\`); freshness run of ${entries:-no entry} started on it." || exit 1
