#!/usr/bin/env bash
# What profiling costs, side by side. On: images/s of Model.train with the profiler collecting
# against not, in alternating blocks of steps (kiln_profiler_overhead_bench, medians of the
# blocks), on eager LeNet and the ResNet-20 graph step. Off: with --baseline OLD_KILN (a build
# of the commit before the profiler's hooks), `kiln train` without --profile, this build against
# that one, alternating runs (bench/compare_builds.sh). Prints the load average before and after:
# on a shared machine the figures are only as good as the load lets them be.
#
#   bench/profile/overhead.sh [--build DIR] [--rounds N] [--baseline OLD_KILN]
set -euo pipefail
build=build
rounds=6
baseline=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --baseline) baseline=$2; shift 2 ;;
    *) sed -n 2,10p "$0" >&2; exit 2 ;;
  esac
done
bench=$build/bench/kiln_profiler_overhead_bench
[ -x "$bench" ] || { echo "overhead: build $bench first (ninja kiln_profiler_overhead_bench)" >&2; exit 2; }
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# model batch mode steps-per-block
for cfg in "lenet 64 eager 30" "resnet20 16 graph 8"; do
  # shellcheck disable=SC2086  # the configuration is a list of arguments
  set -- $cfg
  "$bench" "$1" "$2" "$3" "$4" "$rounds" 2>/dev/null | tail -1
done
if [ -n "$baseline" ]; then
  here=$(dirname "$0")/..
  "$here/compare_builds.sh" "$baseline" "$build/src/kiln/kiln" --repeats "$rounds" lenet:64
  "$here/compare_builds.sh" "$baseline" "$build/src/kiln/kiln" --repeats "$rounds" \
    --kiln-args "--mode graph" resnet20:16
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
