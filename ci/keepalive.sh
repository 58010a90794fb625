#!/usr/bin/env bash
# Keep the scheduled workflows alive. GitHub disables the scheduled workflows of a public
# repository after 60 days without repository activity ("This scheduled workflow is disabled
# because there hasn't been activity in this repository for at least 60 days"):
# https://docs.github.com/en/actions/managing-workflow-runs-and-deployments/managing-workflow-runs/disabling-and-enabling-a-workflow
# When the last commit is KEEPALIVE_AFTER_DAYS (default 50) days old, this re-enables each workflow
# through the REST API (PUT /repos/{owner}/{repo}/actions/workflows/{file}/enable), the way the
# keepalive-workflow action's API mode does. The call needs a token with actions:write that is not
# the job's own GITHUB_TOKEN: GH_TOKEN from the KEEPALIVE_TOKEN secret. Run from the repository root.
set -euo pipefail
after_days="${KEEPALIVE_AFTER_DAYS:-50}"
workflows="${KEEPALIVE_WORKFLOWS:-freshness.yml release-check.yml}"
last=$(git log -1 --format=%ct)
now="${KEEPALIVE_NOW:-$(date +%s)}"
age=$(( (now - last) / 86400 ))
echo "last commit: ${age} day(s) ago"
if (( age < after_days )); then
  echo "keepalive: nothing to do before day ${after_days}"
  exit 0
fi
if [[ -z "${GH_TOKEN:-}" ]]; then
  echo "::error title=Keepalive has no token::the last commit is ${age} days old and GitHub disables scheduled workflows at 60; add a KEEPALIVE_TOKEN secret (actions:write)"
  exit 1
fi
for workflow in $workflows; do
  gh api --method PUT "repos/${GITHUB_REPOSITORY:?}/actions/workflows/${workflow}/enable"
  echo "keepalive: re-enabled ${workflow}"
done
