#!/usr/bin/env bash
# Side-by-side training throughput of two builds of Kiln (a change against the commit before
# it): the same `kiln train` run alternately with each binary, so both see the same machine load.
# Prints images/s (median of --repeats runs) and the ratio new / old.
#
#   bench/compare_builds.sh OLD_KILN NEW_KILN [--repeats N] [--threads N] [--steps N]
#                           [--kiln-args "--mode graph --graph-kernel on"] [model:batch ...]
#                           (default: lenet:64 resnet20:128 mlp:512)
#
# e.g. build the parent commit in build-old/ and compare:
#   bench/compare_builds.sh build-old/src/kiln/kiln build/src/kiln/kiln --kiln-args "--mode graph"
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,11p "$0" >&2; exit 2; }
old=$1 new=$2
shift 2
for binary in "$old" "$new"; do
  [ -x "$binary" ] || { echo "compare_builds: $binary is not an executable kiln" >&2; exit 2; }
done
repeats=5
threads=2
kiln_args=""
fixed_steps=""
configs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) repeats=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --steps) fixed_steps=$2; shift 2 ;;
    --kiln-args) kiln_args=$2; shift 2 ;;
    *) configs+=("$1"); shift ;;
  esac
done
[ ${#configs[@]} -gt 0 ] || configs=(lenet:64 resnet20:128 mlp:512)

steps_for() {
  case "$1" in lenet) echo 1500 ;; resnet20) echo 30 ;; mlp) echo 300 ;; *) echo 50 ;; esac
}
# shellcheck source=bench/side_by_side.sh
source "$(dirname "$0")/side_by_side.sh"
run() {  # binary model batch steps
  # shellcheck disable=SC2086  # kiln_args is a list of flags
  "$1" train --model "$2" --batch-size "$3" --steps "$(($4 + 10))" --threads "$threads" --json \
    $kiln_args 2>/dev/null | field images_per_sec
}

printf '%-10s %6s %12s %12s %8s\n' model batch old_img/s new_img/s new/old
for cfg in "${configs[@]}"; do
  model=${cfg%%:*}
  batch=${cfg##*:}
  steps=${fixed_steps:-$(steps_for "$model")}
  old_ips=() new_ips=()
  for ((r = 0; r < repeats; r++)); do
    # Alternate which binary goes first, so neither always runs on a warmer machine.
    if ((r % 2 == 0)); then
      old_ips+=("$(run "$old" "$model" "$batch" "$steps")")
      new_ips+=("$(run "$new" "$model" "$batch" "$steps")")
    else
      new_ips+=("$(run "$new" "$model" "$batch" "$steps")")
      old_ips+=("$(run "$old" "$model" "$batch" "$steps")")
    fi
  done
  o=$(printf '%s\n' "${old_ips[@]}" | median)
  n=$(printf '%s\n' "${new_ips[@]}" | median)
  printf '%-10s %6s %12.0f %12.0f %7.3fx\n' "$model" "$batch" "$o" "$n" "$(python3 -c "print($n / $o)")"
done
