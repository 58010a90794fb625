#!/usr/bin/env bash
# Scheduled release check: open (or update) one issue listing upstream releases newer than
# env/matrix.toml. Exit status of `rocmlab releases check`: 0 up to date, 10 updates, 11 offline.
# Needs GH_TOKEN for the gh CLI.
set -uo pipefail
title="Upstream releases newer than the release matrix"
rocmlab releases check --body-out release-check.md
status=$?
case "$status" in
  0) echo "matrix is up to date"; exit 0 ;;
  11) echo "::warning::release check could not reach upstream"; exit 0 ;;
  10) ;;
  *) echo "release check failed (exit $status)" >&2; exit "$status" ;;
esac
existing=$(gh issue list --state open --search "in:title \"$title\"" --json number --jq '.[0].number // empty')
if [[ -n "$existing" ]]; then
  gh issue edit "$existing" --body-file release-check.md
  echo "updated issue #$existing"
else
  gh issue create --title "$title" --body-file release-check.md --label release-matrix \
    || gh issue create --title "$title" --body-file release-check.md
fi
