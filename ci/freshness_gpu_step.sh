#!/usr/bin/env bash
# The step of a GPU freshness job (.github/workflows/freshness.yml) on a self-hosted runner:
# rocmlab in a virtual environment of the runner's python3 (3.11 or newer; no torch on the host),
# the image layer cache on GHCR (ghcr.io/<owner>/<repo>/rocmlab, lower-case, pushed and run by
# digest), then ci/freshness_job.sh. A lab that fails is a finding for the report, so the step
# fails only when the job left no lab record (an entry check, a build or a pre-fetch that failed).
#
#   ci/freshness_gpu_step.sh ENTRY PROFILE GFX
#   REPOSITORY=owner/repo GHCR_USER=… GHCR_TOKEN=…   the GHCR layer cache (without them: local build only)
set -euo pipefail
cd "$(dirname "$0")/.."
entry="${1:?usage: ci/freshness_gpu_step.sh ENTRY PROFILE GFX}"
profile="${2:?profile}"
gfx="${3:?gfx}"
# Docker-in-docker (ARC or Kubernetes runners with a dind sidecar): the host has /dev/kfd, but the
# engine that starts the containers runs elsewhere and has no GPU. Say so up front; the entry check
# (`rocmlab env check-entry`, before any lab) stops such a job in every case.
engine_os=$("${ROCMLAB_DOCKER:-docker}" info --format '{{.OperatingSystem}}' 2>/dev/null || true)
if [[ "${DOCKER_HOST:-}" == tcp://* || "$engine_os" == *containerized* ]]; then
  echo "::warning::the Docker engine is not on this GPU host (DOCKER_HOST=${DOCKER_HOST:-unset}, engine OS: ${engine_os:-unknown}): docker-in-docker gives the containers no GPU (docs/release-matrix.md, 'The runner')"
fi
python3 -m venv .job-venv
.job-venv/bin/pip install --quiet --disable-pip-version-check -e .
export ROCMLAB="$PWD/.job-venv/bin/rocmlab"
if [[ -n "${REPOSITORY:-}" && -n "${GHCR_TOKEN:-}" ]]; then
  printf '%s' "$GHCR_TOKEN" | "${ROCMLAB_DOCKER:-docker}" login ghcr.io --username "${GHCR_USER:?GHCR_USER}" --password-stdin
  export ROCMLAB_IMAGE_REPO="ghcr.io/${REPOSITORY,,}/rocmlab"
fi
status=0
bash ci/freshness_job.sh "$entry" --profile "$profile" --gfx "$gfx" || status=$?
records=$(find "results/$entry" -maxdepth 1 -name '*.json' ! -name doctor.json ! -name entry.json 2>/dev/null | wc -l)
if [[ "$records" -eq 0 ]]; then
  echo "::error::$entry left no lab record (exit $status): see the log above and results/$entry/"
  exit "$(( status ? status : 2 ))"
fi
case "$status" in
  0 | 1 | 3) exit 0 ;;
  *) exit "$status" ;;
esac
