#!/usr/bin/env bash
# One freshness job: build the matrix entry's container (env/docker/NAME.Dockerfile, generated
# from env/matrix.toml) and run every lab in the gpu profile inside it, GPU devices passed through.
# Usage: ci/freshness_job.sh NAME [TIMEOUT_S]    (run from the repository root)
set -euo pipefail
name="${1:?usage: ci/freshness_job.sh NAME [TIMEOUT_S]}"
limit="${2:-7200}"
dockerfile="env/docker/${name}.Dockerfile"
[[ -f "$dockerfile" ]] || { echo "no $dockerfile: run 'rocmlab env dockerfiles'" >&2; exit 2; }
[[ -e /dev/kfd && -d /dev/dri ]] || { echo "this runner has no /dev/kfd or /dev/dri: not a ROCm host" >&2; exit 2; }

docker build -f "$dockerfile" -t "rocmlab:${name}" .
mkdir -p results
container="rocmlab-${name}-${GITHUB_RUN_ID:-local}"
trap 'docker rm -f "$container" >/dev/null 2>&1 || true' EXIT
timeout --kill-after=60 "$limit" docker run --name "$container" --rm \
  --device /dev/kfd --device /dev/dri --group-add video --ipc=host --shm-size 8g \
  --security-opt seccomp=unconfined \
  -v "$PWD:/work" -w /work -e ROCMLAB_ENV="$name" "rocmlab:${name}" \
  bash -c "rocmlab doctor || true; rocmlab run --profile gpu --env '${name}'"
