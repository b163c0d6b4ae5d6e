#!/usr/bin/env bash
# How training speed grows with the threads it is given: the same `kiln train` run with each
# thread count in turn (alternating the order every round, so no count always runs on a warmer
# or quieter machine), medians over --repeats rounds, and the ratio of each count to one
# thread. With --baseline OLD_KILN the old binary runs beside the new one at every count too
# (the "no loss at 1 thread" check). Prints a markdown table and the load before and after.
#
#   bench/thread_scaling.sh [--kiln KILN] [--baseline OLD_KILN] [--repeats N] [--threads "1 2"]
#                           [--steps-scale F] [--step-bench STEP_BENCH|none] [config ...]
#   config: model:batch:mode (mode graph = graph + fusion, or eager)
#   --steps-scale: fewer (0.25) or more steps than the defaults (LeNet 1200, MLP 120, ResNet-20 24;
#           LeNet's first ~300 steps at 2 threads are the trial of its thread strategies)
#           default: lenet:64:graph lenet:256:graph resnet20:128:graph mlp:512:graph lenet:64:eager
#
# e.g. bench/thread_scaling.sh --baseline /work/main/build/src/kiln/kiln --repeats 5
set -euo pipefail
cd "$(dirname "$0")/.."
kiln=build/src/kiln/kiln
baseline=""
repeats=5
steps_scale=1
thread_counts="1 2"
step_bench=build/bench/kiln_graph_step_bench
configs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --kiln) kiln=$2; shift 2 ;;
    --baseline) baseline=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --threads) thread_counts=$2; shift 2 ;;
    --step-bench) step_bench=$2; shift 2 ;;
    --steps-scale) steps_scale=$2; shift 2 ;;
    -h|--help) sed -n 2,14p "$0"; exit 0 ;;
    *) configs+=("$1"); shift ;;
  esac
done
[ ${#configs[@]} -gt 0 ] ||
  configs=(lenet:64:graph lenet:256:graph resnet20:128:graph mlp:512:graph lenet:64:eager)
[ -x "$kiln" ] || { echo "thread_scaling: $kiln is not an executable kiln" >&2; exit 2; }
# shellcheck source=bench/side_by_side.sh
source bench/side_by_side.sh

steps_for() {
  local n
  case "$1" in lenet) n=1200 ;; resnet20) n=24 ;; mlp) n=120 ;; *) n=50 ;; esac
  python3 -c "print(max(5, int($n * $steps_scale)))"
}
mode_args() {
  if [ "$1" = graph ]; then echo "--mode graph --graph-kernel on"; else echo "--mode eager"; fi
}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# run BINARY MODEL BATCH MODE THREADS: images/s (the compile log goes to $log).
run() {
  # shellcheck disable=SC2046  # mode_args is a list of flags
  timeout 600 "$1" train --model "$2" --batch-size "$3" --steps "$(($(steps_for "$2") + 10))" \
    --threads "$5" --json $(mode_args "$4") 2>"$log" | field images_per_sec
}
strategy() {  # what the last run's compile log says about its threads
  { grep -o 'threads: [^(;,]*' "$log" || echo "threads: -"; } | tail -1 | sed 's/threads: //; s/ *$//'
}

echo "load before: $(uptime | sed 's/.*load average: //')"
binaries=("$kiln")
[ -z "$baseline" ] || binaries+=("$baseline")
header="| model | mode | batch |"
rule="|---|---|---|"
for t in $thread_counts; do
  header+=" ${t} thr img/s |"
  rule+="---|"
done
for t in $thread_counts; do
  [ "$t" = 1 ] && continue
  header+=" ${t}/1 |"
  rule+="---|"
done
header+=" strategy at max threads |"
rule+="---|"
if [ -n "$baseline" ]; then
  for t in $thread_counts; do
    header+=" old ${t} thr |"
    rule+="---|"
  done
  header+=" new/old at 1 | old max/1 |"
  rule+="---|---|"
fi
echo "$header"
echo "$rule"
for cfg in "${configs[@]}"; do
  IFS=: read -r model batch mode <<<"$cfg"
  declare -A samples=()
  chosen="-"
  for ((r = 0; r < repeats; r++)); do
    order=$thread_counts
    ((r % 2 == 1)) && order=$(echo "$thread_counts" | tr ' ' '\n' | tac | tr '\n' ' ')
    for t in $order; do
      for b in "${binaries[@]}"; do
        ips=$(run "$b" "$model" "$batch" "$mode" "$t")
        samples["$b|$t"]+="$ips "
        if [ "$b" = "$kiln" ] && [ "$t" = "${thread_counts##* }" ]; then chosen=$(strategy); fi
      done
    done
  done
  med() { echo "${samples["$1|$2"]}" | tr ' ' '\n' | grep . | median; }
  line="| $model | $mode | $batch |"
  for t in $thread_counts; do line+=" $(printf '%.0f' "$(med "$kiln" "$t")") |"; done
  one=$(med "$kiln" 1)
  for t in $thread_counts; do
    [ "$t" = 1 ] && continue
    line+=" **$(python3 -c "print(f'{$(med "$kiln" "$t") / $one:.2f}')")x** |"
  done
  line+=" $chosen |"
  if [ -n "$baseline" ]; then
    for t in $thread_counts; do line+=" $(printf '%.0f' "$(med "$baseline" "$t")") |"; done
    old_one=$(med "$baseline" 1)
    old_max=$(med "$baseline" "${thread_counts##* }")
    line+=" $(python3 -c "print(f'{$one / $old_one:.3f}')") | $(python3 -c "print(f'{$old_max / $old_one:.2f}')")x |"
  fi
  echo "$line"
  unset samples
done
# The training step alone (no data pipeline, no evaluation): kiln_graph_step_bench's step_ms.
if [ -x "$step_bench" ]; then
  echo
  echo "| step bench | 1 thr ms/step | ${thread_counts##* } thr ms/step | speed-up |"
  echo "|---|---|---|---|"
  for cfg in "lenet 64 graph on 1500" "mlp 512 graph on 100" "lenet 64 eager on 1000"; do
    s1=() sn=()
    for ((r = 0; r < repeats; r++)); do
      # shellcheck disable=SC2086  # cfg is the bench's argument list
      a=$(OMP_NUM_THREADS=1 timeout 600 "$step_bench" $cfg 2>/dev/null | field step_ms)
      # shellcheck disable=SC2086
      b=$(OMP_NUM_THREADS=${thread_counts##* } timeout 600 "$step_bench" $cfg 2>/dev/null | field step_ms)
      s1+=("$a") sn+=("$b")
    done
    m1=$(printf '%s\n' "${s1[@]}" | median)
    mn=$(printf '%s\n' "${sn[@]}" | median)
    echo "| ${cfg% *} | $m1 | $mn | **$(python3 -c "print(f'{$m1 / $mn:.2f}')")x** |"
  done
fi
echo "load after: $(uptime | sed 's/.*load average: //')"
