#!/usr/bin/env bash
# The device check (docs/device-check.md): the gpu profile on an NVIDIA machine lent for minutes,
# which reaches no package index and no model hub, as one prepared command. Run in the repository
# root with the kit of `make device-kit` carried beside it:
#
#   OUT=/folder/that/comes/back ci/device_check.sh             on the GPU machine (gpu profile, entry cuda-h100)
#   OUT=/tmp/out PYTHON=.venv/bin/python ci/device_check.sh --dry-run    the same steps on this CPU (smoke profile)
#
# Steps: install the kit offline (the dry run asks pip whether it would install, for the device's
# platform, without installing); `rocmlab doctor`; every lab with the course model and a time cap,
# several at once, all within DEVICE_CHECK_BUDGET_S; the summary. What comes back under $OUT (at
# most 8 files): summary.md, doctor.txt, records.tar.gz (every record, the executed notebook of each
# lab that did not pass), device_check.log. Exit status: 0 when every lab passed, 1 when one did not
# or a step failed, 2 on bad usage.
#
#   DEVICE_KIT (device-kit)  PYTHON (python3)  DEVICE_CHECK_LABS (every lab; e.g. "01 07")
#   DEVICE_CHECK_BUDGET_S (480)  DEVICE_CHECK_LAB_CAP_S (240)  DEVICE_CHECK_JOBS (4)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

mode=gpu
case "${1:-}" in
  "") ;;
  --dry-run) mode=dry-run ;;
  *) echo "usage: OUT=DIR ci/device_check.sh [--dry-run]" >&2; exit 2 ;;
esac
if [[ -z "${OUT:-}" ]]; then
  echo "ci/device_check.sh: set OUT to the folder whose files come back" >&2
  exit 2
fi
kit="${DEVICE_KIT:-device-kit}"
[[ "$kit" == /* ]] || kit="$PWD/$kit"
python="${PYTHON:-python3}"
budget="${DEVICE_CHECK_BUDGET_S:-480}"
cap="${DEVICE_CHECK_LAB_CAP_S:-240}"
jobs="${DEVICE_CHECK_JOBS:-4}"
read -r -a labs <<<"${DEVICE_CHECK_LABS:-}"
if [[ "$mode" == gpu ]]; then
  profile=gpu entry=cuda-h100
else
  profile=smoke entry=device-dry-run
fi
# The device's interpreter: CPython 3.12 on manylinux x86_64 (the tags of device_kit.PLATFORMS).
platforms=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64
  manylinux_2_5_x86_64 manylinux1_x86_64)

install_kit() {
  local wheel pip_args=(--disable-pip-version-check --no-index --no-deps --no-cache-dir --find-links "$kit/wheels")
  wheel=$(compgen -G "$kit/wheels/rocmlab-*.whl" | head -n 1)
  if [[ ! -f "$kit/manifest.json" || -z "$wheel" ]]; then
    echo "no device kit at $kit (its manifest.json and rocmlab wheel): run \`make device-kit\` and carry it"
    return 1
  fi
  if [[ "$mode" == gpu ]]; then
    if ! compgen -G "$kit/cache/models/*/model.safetensors" >/dev/null; then
      echo "the kit at $kit has no course model (built with --no-assets?): run \`make device-kit\`"
      return 1
    fi
    "$python" -m pip install --quiet "${pip_args[@]}" -r "$kit/requirements.txt" "$wheel" || return 1
    "$python" -c 'import papermill, nbclient, ipykernel, jupytext, jieba, rocmlab' || return 1
  else
    local platform_args=() target
    for platform in "${platforms[@]}"; do platform_args+=(--platform "$platform"); done
    target=$(mktemp -d)
    "$python" -m pip install "${pip_args[@]}" --dry-run --ignore-installed --target "$target" \
      --python-version 3.12 --implementation cp "${platform_args[@]}" --only-binary=:all: \
      -r "$kit/requirements.txt" "$wheel"
    local status=$?
    rm -rf "$target"
    return "$status"
  fi
}

check() {
  local results doctor_status=0 run_status=0 summary_status=0
  results=$(mktemp -d)
  echo "== device check ($mode): profile $profile, entry $entry, kit $kit, $(date -u +%FT%TZ)"
  echo "== 1/4 install the kit offline"
  if ! install_kit; then
    printf '# Device check: %s\n\nThe kit did not install: see device_check.log.\n' "$entry" >"$OUT/summary.md"
    rm -rf "$results"
    return 1
  fi
  export ROCMLAB_CACHE="$kit/cache" HF_HUB_OFFLINE=1
  echo "course assets: $ROCMLAB_CACHE"
  echo "== 2/4 rocmlab doctor"
  "$python" -m rocmlab doctor --lang en >"$OUT/doctor.txt" 2>&1 || doctor_status=$?
  cat "$OUT/doctor.txt"
  echo "== 3/4 labs (each at most ${cap}s, $jobs at once, all within ${budget}s)"
  timeout --signal=TERM --kill-after=15 "$budget" "$python" -m rocmlab.execution.device_check run \
    --profile "$profile" --entry "$entry" --results "$results" --cap-s "$cap" --jobs "$jobs" "${labs[@]}" \
    || run_status=$?
  echo "== 4/4 summary (labs: exit $run_status)"
  "$python" -m rocmlab.execution.device_check summary --profile "$profile" --entry "$entry" \
    --results "$results" --jobs "$jobs" --doctor-status "$doctor_status" \
    --summary "$OUT/summary.md" --bundle "$OUT/records.tar.gz" "${labs[@]}" || summary_status=$?
  rm -rf "$results"
  return $((run_status || summary_status))
}

mkdir -p "$OUT"
check 2>&1 | tee "$OUT/device_check.log"
exit "${PIPESTATUS[0]}"
