#!/usr/bin/env bash
# Accuracy under mixed precision: trains each model for --epochs epochs at O0 (fp32) and at
# --amp (bf16 by default) from the same seed, data order and schedule, and prints both
# Fashion-MNIST test accuracies and their difference in points. Accuracy, not speed: the two
# runs need not be quiet, but they take minutes (ResNet-20: ~3 min per fp32 epoch on 2 cores).
#
#   bench/amp_accuracy.sh [--build DIR] [--epochs N] [--amp O2] [--amp-dtype bf16|fp16]
#                         [--seed S] [--kiln-args "--mode graph --graph-kernel on"]
#                         [model:batch ...]            (default: lenet:64 resnet20:128)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../build"
epochs=3
amp=O2
amp_dtype=bf16
seed=1
kiln_args="--mode graph --graph-kernel on"
configs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --amp) amp=$2; shift 2 ;;
    --amp-dtype) amp_dtype=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --kiln-args) kiln_args=$2; shift 2 ;;
    *) configs+=("$1"); shift ;;
  esac
done
[ ${#configs[@]} -gt 0 ] || configs=(lenet:64 resnet20:128)
kiln="$build/src/kiln/kiln"
[ -x "$kiln" ] || { echo "amp_accuracy: $kiln not found; build first (cmake --build build)" >&2; exit 1; }
# shellcheck source=bench/side_by_side.sh
source "$here/side_by_side.sh"

printf '%-10s %6s %7s %10s %10s %12s %10s %10s\n' model batch epochs O0_acc "${amp}_acc" diff_points \
  O0_img/s "${amp}_img/s"
for cfg in "${configs[@]}"; do
  model=${cfg%%:*}
  batch=${cfg##*:}
  declare -A acc ips
  for level in O0 "$amp"; do
    # shellcheck disable=SC2086  # kiln_args is a list of flags
    out=$("$kiln" train --model "$model" --batch-size "$batch" --epochs "$epochs" --seed "$seed" \
          --amp-level "$level" --amp-dtype "$amp_dtype" --json --print-every 1000000 $kiln_args \
          2>/dev/null | tail -n 1)
    acc[$level]=$(echo "$out" | field test_accuracy)
    ips[$level]=$(echo "$out" | field images_per_sec)
  done
  printf '%-10s %6s %7s %10.4f %10.4f %+12.2f %10.0f %10.0f\n' "$model" "$batch" "$epochs" \
    "${acc[O0]}" "${acc[$amp]}" "$(python3 -c "print(100 * (${acc[$amp]} - ${acc[O0]}))")" \
    "${ips[O0]}" "${ips[$amp]}"
  unset acc ips
done
