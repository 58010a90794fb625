#!/usr/bin/env bash
# One freshness job of .github/workflows/freshness.yml: build the matrix entry's container
# (env/docker/NAME.Dockerfile, generated from env/matrix.toml), pre-fetch the profile's models
# into the cache volume, check torch / HIP / gfx arch against the entry, run every lab in it.
# The steps are `rocmlab env job` (src/rocmlab/freshness/jobs.py); this script gives them the runner's
# defaults.
#
#   ci/freshness_job.sh NAME [--profile gpu|multi-gpu|smoke] [--gfx GFX] [--labs LAB…] [--timeout S]
#
# Environment: ROCMLAB_CI_CACHE   model cache folder on the runner (default ~/.cache/rocmlab-ci);
#              ROCMLAB_IMAGE_REPO registry repository for the layer cache (e.g. ghcr.io/OWNER/rocmlab),
#                                 the image is then pushed and run by digest;
#              ROCMLAB            the rocmlab command (default: rocmlab on PATH);
#              ROCMLAB_DOCKER     the docker command (ci/standin/docker stands in on a machine without an engine).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 1 && $1 != -* ]] || { echo "usage: ci/freshness_job.sh NAME [--profile P] [--gfx GFX] [--labs LAB…]" >&2; exit 2; }
cache="${ROCMLAB_CI_CACHE:-$HOME/.cache/rocmlab-ci}"
repo_args=()
if [[ -n "${ROCMLAB_IMAGE_REPO:-}" ]]; then
  repo_args=(--image-repo "$ROCMLAB_IMAGE_REPO")
fi
exec "${ROCMLAB:-rocmlab}" env job "$@" --cache-dir "$cache" --results results "${repo_args[@]}"
