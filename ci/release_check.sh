#!/usr/bin/env bash
# Weekly release check (.github/workflows/release-check.yml), run from the repository root.
#
# `rocmlab releases check --apply` compares upstream with env/matrix.toml and writes what it
# finds into the matrix. Its exit status decides:
#   0  up to date       close the tracking issue, if one is open;
#   10 updates          regenerate env/docker/, force-push the fixed branch $BRANCH with the
#                       matrix edit, open or update its pull request, start a freshness run of
#                       only the new entries on that branch (without a new entry: of the updated
#                       ROCm entries), open or update the tracking issue with a link to the PR;
#   11 partial          a source could not be read: say so on the issue; never close it.
# Needs GH_TOKEN for the gh CLI. ROCMLAB_FIXTURES=DIR answers from recorded responses (tests).
set -uo pipefail
branch="${BRANCH:-release-check/matrix}"
base="${BASE:-main}"
title="Upstream releases newer than the release matrix"
rocmlab="${ROCMLAB:-rocmlab}"
check=(releases check --apply --json --body-out release-check.md)
if [[ -n "${ROCMLAB_FIXTURES:-}" ]]; then
  check+=(--fixtures "$ROCMLAB_FIXTURES")
fi

"$rocmlab" "${check[@]}" > release-check.json
status=$?
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

entries=$(python3 - <<'PY'
import json
found = json.load(open("release-check.json"))
names = [e["name"] for e in found["new_entries"]]  # only the new entries; without one, the updated ROCm entries
names = names or [u["entry"] for u in found["updates"] if u["entry"].startswith("rocm-")]
print(",".join(dict.fromkeys(names)))
PY
)
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
if [[ -n "$entries" ]]; then
  gh workflow run freshness.yml --ref "$branch" -f entries="$entries" || exit 1
  echo "freshness run started on $branch for: $entries"
fi

{
  echo "Pull request: #${pr:-?} (branch \`$branch\`); freshness run of ${entries:-no ROCm entry} started on it."
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
