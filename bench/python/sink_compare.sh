#!/usr/bin/env bash
# Data sink mode against per-step training, side by side: from Python (sink_bench.py: the
# examples' Python LeNet, graph mode with fusion, the guide's callbacks, over a GeneratorDataset
# of Python rows and over a native pipeline; per-step Model.train, sink mode, and the per-step loop
# of MindSpore's non-sink mode written in Python) and from C++ (`kiln train --sink-size`, LeNet
# on Fashion-MNIST). Runs alternate; medians of --repeats. From Python also the CPU time per step
# (the process's user + system time: what a loaded machine distorts least).
#
#   bench/python/sink_compare.sh [--build DIR] [--repeats N] [--steps N] [--batch-size N]
#                                [--threads N] [--sink-size N]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../../build"
repeats=5
steps=400
batch=32
threads=1
sink=-1
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --batch-size) batch=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --sink-size) sink=$2; shift 2 ;;
    *) echo "sink_compare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
export PYTHONPATH="$build/python"
py=/usr/bin/python3
# shellcheck source=bench/side_by_side.sh
source "$here/../side_by_side.sh"
for data in python native; do
  $py "$here/sink_bench.py" --compare --repeats "$repeats" --data "$data" --steps "$steps" \
    --batch-size "$batch" --threads "$threads" --sink-size "$sink"
done

# kiln train: steady-state images/s, measured from the first sink end after 10 warm-up steps,
# so its sinks are shorter than the run: --sink-size, or a tenth of the steps for -1.
cli_sink=$sink
[ "$cli_sink" -eq -1 ] && cli_sink=$((steps / 10))
kiln_run() {
  "$build/src/kiln/kiln" train --model lenet --mode graph --graph-kernel on --batch-size "$batch" \
    --steps "$steps" --epochs 1 --threads "$threads" --compile-log off --json "$@" | \
    field images_per_sec
}
per_step=(); sunk=()
for ((r = 0; r < repeats; r++)); do
  per_step+=("$(kiln_run)")
  sunk+=("$(kiln_run --sink-size "$cli_sink")")
done
p=$(printf '%s\n' "${per_step[@]}" | median)
s=$(printf '%s\n' "${sunk[@]}" | median)
pb=$(printf '%s\n' "${per_step[@]}" | sort -g | tail -1)
sb=$(printf '%s\n' "${sunk[@]}" | sort -g | tail -1)
printf 'kiln train (C++) LeNet b%s graph mode, %s steps; images/s median (best) of %s:\n' \
  "$batch" "$steps" "$repeats"
printf '  per step   %8.0f (%6.0f) images/s\n' "$p" "$pb"
printf '  sink %5s %8.0f (%6.0f) images/s\n' "$cli_sink" "$s" "$sb"
printf '  sink / per step: %.2fx median, %.2fx best; load average %s\n' \
  "$($py -c "print($s / $p)")" "$($py -c "print($sb / $pb)")" "$(cut -d' ' -f1 /proc/loadavg)"
