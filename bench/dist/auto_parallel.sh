#!/usr/bin/env bash
# AUTO_PARALLEL on 2 ranks against one process, and the plan's predicted step against the
# measured one. For each config, alternating runs of kiln_auto_parallel_bench: one process with
# 2 kernel threads and no limit, then 2 ranks x 1 thread under AUTO_PARALLEL (every rank reads the
# whole batch) with the config's memory limit per rank, planned with measured op times, then the
# same planned with estimated ones. Prints images/s of the first two (median of --repeats), their
# ratio, the measured-times plan's predicted and measured step (median) with the prediction's
# error, and the estimated-times plan's error against its own measured step.
#
#   bench/dist/auto_parallel.sh [--build DIR] [--repeats N] [model:batch[:limit_mb] ...]
#   (default: mlp4096:64:128 mlp:512 lenet:64 resnet20:64 gpt:16)
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
[ ${#configs[@]} -gt 0 ] || configs=(mlp4096:64:128 mlp:512 lenet:64 resnet20:64 gpt:16)
bench="$build/bench/kiln_auto_parallel_bench"
[ -x "$bench" ] || { echo "auto_parallel: $bench not found; build first" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mpi_yield_when_idle=1
# shellcheck source=bench/side_by_side.sh
source "$here/../side_by_side.sh"

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "| model | batch | limit MiB | 1 x 2 img/s | 2 x 1 AUTO img/s | AUTO / 1 | predicted ms | measured ms | error | error, estimated op times |\n"
printf "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
for config in "${configs[@]}"; do
  IFS=: read -r model batch limit <<<"$config"
  limit=${limit:-0}
  single=() auto=() predicted=() measured=() estimated_error=()
  auto_run() {
    OMP_NUM_THREADS=1 mpirun -np 2 --map-by slot:PE=1 --bind-to core \
      -x OMPI_MCA_btl_vader_single_copy_mechanism -x OMPI_MCA_mpi_yield_when_idle \
      -x OMP_NUM_THREADS "$bench" "$model" --batch "$batch" --memory-limit-mb "$limit" "$@"
  }
  for _ in $(seq "$repeats"); do
    out=$(OMP_NUM_THREADS=2 "$bench" "$model" --batch "$batch")
    single+=("$(echo "$out" | field images_per_sec)")
    out=$(auto_run --op-times measured)
    auto+=("$(echo "$out" | field images_per_sec)")
    predicted+=("$(echo "$out" | field predicted_step_ms)")
    measured+=("$(echo "$out" | field step_ms)")
    out=$(auto_run --op-times estimated)
    estimated_error+=("$(python3 -c "print(($(echo "$out" | field predicted_step_ms) - \
      $(echo "$out" | field step_ms)) / $(echo "$out" | field step_ms))")")
  done
  s=$(printf "%s\n" "${single[@]}" | median)
  a=$(printf "%s\n" "${auto[@]}" | median)
  p=$(printf "%s\n" "${predicted[@]}" | median)
  m=$(printf "%s\n" "${measured[@]}" | median)
  e=$(printf "%s\n" "${estimated_error[@]}" | median)
  python3 -c "
s, a, p, m, e = $s, $a, $p, $m, $e
print(f'| $model | $batch | $limit | {s:,.0f} | {a:,.0f} | {a / s:.2f} | {p:.2f} | {m:.2f} | {100 * (p - m) / m:+.0f}% | {100 * e:+.0f}% |')"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
