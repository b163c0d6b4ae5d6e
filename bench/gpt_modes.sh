#!/usr/bin/env bash
# The GPT language model's training speed, eager vs graph mode (with and without graph-kernel
# fusion), side by side: `kiln train --model gpt` on Debian's GPL-3 text, the configurations
# alternating within each round. Prints tokens/s (median of --repeats rounds) and the ratios to
# eager.
#
#   bench/gpt_modes.sh [--build DIR] [--repeats N] [--threads N] [--steps N] [--batch N]
#                      [--context N] [--kiln-args "..."]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../build"
repeats=3
threads=2
steps=60
batch=32
context=64
kiln_args=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --context) context=$2; shift 2 ;;
    --kiln-args) kiln_args=$2; shift 2 ;;
    *) echo "gpt_modes: unknown argument $1" >&2; exit 2 ;;
  esac
done
kiln="$build/src/kiln/kiln"
[ -x "$kiln" ] || { echo "gpt_modes: $kiln not found; build first (cmake --build build)" >&2; exit 1; }
# shellcheck source=bench/side_by_side.sh
source "$here/side_by_side.sh"

configs=("eager off" "graph off" "graph on")
declare -A tps
for ((r = 0; r < repeats; r++)); do
  for cfg in "${configs[@]}"; do
    read -r mode fusion <<<"$cfg"
    # 10 more steps than measured: the first 10 (compilation, warm-up) are left out of tokens/s.
    out=$("$kiln" train --model gpt --optimizer adam --batch-size "$batch" --context "$context" \
          --steps "$((steps + 10))" --threads "$threads" --mode "$mode" --graph-kernel "$fusion" \
          --print-every 0 --json $kiln_args 2>/dev/null | tail -n 1)
    tps[$cfg]+="$(echo "$out" | field tokens_per_sec) "
  done
done
eager=$(printf '%s\n' ${tps["eager off"]} | median)
printf '%-22s %12s %8s   %s\n' configuration tokens/s ratio rounds
for cfg in "${configs[@]}"; do
  m=$(printf '%s\n' ${tps[$cfg]} | median)
  label="$cfg"
  case "$cfg" in "eager off") label=eager ;; "graph off") label="graph, no fusion" ;; "graph on") label="graph + fusion" ;; esac
  printf '%-22s %12.0f %7.2fx   %s\n' "$label" "$m" "$(python3 -c "print($m / $eager)")" "${tps[$cfg]}"
done
