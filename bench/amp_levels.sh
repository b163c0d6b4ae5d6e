#!/usr/bin/env bash
# Mixed precision against fp32 on this CPU: one model's compiled training step (graph mode, fusion
# on) at O0, at O2 (bf16 where it pays, amp/placement.h) and at O2 with --amp-strict
# (MindSpore's placement), run alternately so all three see the same machine load. Prints the
# median step time of --repeats runs of each, the speed-ups over O0, and the speed-ups in CPU
# time per step (the work, which holds on a machine other jobs load).
#
#   bench/amp_levels.sh [--build DIR] [--repeats N] [--threads N] [--steps N] [model:batch ...]
#                       (default: mlp:512 resnet20:128 lenet:64)
#
# ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 in the environment measures the no-AMX path on a CPU that
# has AMX.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../build"
repeats=5
threads=2
steps=""
configs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) configs+=("$1"); shift ;;
  esac
done
[ ${#configs[@]} -gt 0 ] || configs=(mlp:512 resnet20:128 lenet:64)
bench="$build/bench/kiln_graph_step_bench"
[ -x "$bench" ] || { echo "amp_levels: $bench not found; build kiln_graph_step_bench" >&2; exit 1; }
# shellcheck source=bench/side_by_side.sh
source "$here/side_by_side.sh"

default_steps() {
  case "$1" in lenet) echo 1500 ;; resnet20) echo 20 ;; mlp) echo 300 ;; *) echo 30 ;; esac
}
run() {  # model batch steps args...: "step_ms cpu_ms_per_step"
  local out
  out=$(OMP_NUM_THREADS=$threads timeout 600 "$bench" "$1" "$2" graph on "$3" "${@:4}" 2>/dev/null |
    tail -n 1)
  echo "$(echo "$out" | field step_ms) $(echo "$out" | field cpu_ms_per_step)"
}
ratio() { python3 -c "print(f'{$1 / $2:.2f}x')"; }

printf '%-10s %6s %9s %9s %12s %7s %10s %9s %13s\n' model batch O0_ms O2_ms O2strict_ms O2/O0 strict/O0 O2/O0_cpu strict/O0_cpu
for cfg in "${configs[@]}"; do
  model=${cfg%%:*}
  batch=${cfg##*:}
  n=${steps:-$(default_steps "$model")}
  o0=(); o2=(); strict=(); o0c=(); o2c=(); strictc=()
  for ((r = 0; r < repeats; r++)); do
    read -r ms cpu < <(run "$model" "$batch" "$n" --amp-level O0); o0+=("$ms"); o0c+=("$cpu")
    read -r ms cpu < <(run "$model" "$batch" "$n" --amp-level O2); o2+=("$ms"); o2c+=("$cpu")
    read -r ms cpu < <(run "$model" "$batch" "$n" --amp-level O2 --amp-strict)
    strict+=("$ms"); strictc+=("$cpu")
  done
  a=$(printf '%s\n' "${o0[@]}" | median); ac=$(printf '%s\n' "${o0c[@]}" | median)
  b=$(printf '%s\n' "${o2[@]}" | median); bc=$(printf '%s\n' "${o2c[@]}" | median)
  c=$(printf '%s\n' "${strict[@]}" | median); cc=$(printf '%s\n' "${strictc[@]}" | median)
  printf '%-10s %6s %9.2f %9.2f %12.2f %7s %10s %9s %13s\n' "$model" "$batch" "$a" "$b" "$c" \
    "$(ratio "$a" "$b")" "$(ratio "$a" "$c")" "$(ratio "$ac" "$bc")" "$(ratio "$ac" "$cc")"
done
