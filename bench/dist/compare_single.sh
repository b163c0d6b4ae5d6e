#!/usr/bin/env bash
# Data parallelism against one process on the same machine and global batch, graph mode with
# fusion: `kiln launch -n 2 -- train --parallel-mode data` (2 ranks x 1 thread, batch B/2 per
# rank) against `kiln train --threads 2` (batch B), alternating runs. Prints each one's images/s
# (median of --repeats), the ratio, and the data-parallel runs' all-reduce time per step and the
# share of it hidden behind the backward pass.
#
#   bench/dist/compare_single.sh [--build DIR] [--repeats N] [model:global_batch ...]
#                                (default: lenet:64 resnet20:128 mlp:512)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../../build"
repeats=3
configs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    *) configs+=("$1"); shift ;;
  esac
done
[ ${#configs[@]} -gt 0 ] || configs=(lenet:64 resnet20:128 mlp:512)
kiln="$build/src/kiln/kiln"
[ -x "$kiln" ] || { echo "compare_single: $kiln not found; build first" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
steps_for() {
  case "$1" in lenet) echo 400 ;; resnet20) echo 40 ;; mlp) echo 150 ;; *) echo 50 ;; esac
}
# shellcheck source=bench/side_by_side.sh
source "$here/../side_by_side.sh"

printf "%-10s %6s %14s %14s %7s %14s %8s\n" model batch "1x2 img/s" "2x1 img/s" ratio \
  "allreduce ms" hidden
for config in "${configs[@]}"; do
  model=${config%%:*}
  batch=${config##*:}
  steps=$(steps_for "$model")
  common=(--model "$model" --mode graph --graph-kernel on --epochs 1 --steps "$steps" --json)
  single=() parallel=() comm_ms=() hidden=()
  for _ in $(seq "$repeats"); do
    out=$("$kiln" train "${common[@]}" --threads 2 --batch-size "$batch" 2>/dev/null)
    single+=("$(echo "$out" | field images_per_sec)")
    out=$("$kiln" launch -n 2 -- train "${common[@]}" --parallel-mode data \
      --batch-size $((batch / 2)) 2>/dev/null)
    parallel+=("$(echo "$out" | field images_per_sec)")
    comm_ms+=("$(echo "$out" | field allreduce_ms_per_step)")
    hidden+=("$(echo "$out" | field allreduce_hidden)")
  done
  s=$(printf "%s\n" "${single[@]}" | median)
  p=$(printf "%s\n" "${parallel[@]}" | median)
  c=$(printf "%s\n" "${comm_ms[@]}" | median)
  h=$(printf "%s\n" "${hidden[@]}" | median)
  printf "%-10s %6s %14.0f %14.0f %7.2f %14.3f %8.2f\n" "$model" "$batch" "$s" "$p" \
    "$(echo "$p $s" | awk '{print $1 / $2}')" "$c" "$h"
done
