#!/usr/bin/env bash
# Builds the data pipeline tests with ThreadSanitizer (build-tsan/) and runs them. The pipeline is
# the most threaded part of Kiln; this catches data races that the normal build cannot. Also the
# ThreadGroup's (core/thread_group.h: the meetings of a batch-split step's slices) and the
# allocator's per-thread caches, whose tests run on plain threads (OpenMP's runtime is not
# instrumented).
# Usage: scripts/tsan_data_tests.sh [extra gtest args]   (JOBS=N to change build parallelism)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-tsan"
jobs="${JOBS:-2}"

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_TSAN=ON \
  -DKILN_BENCH=OFF -DKILN_FUZZ=OFF >/dev/null
ninja -C "$build" -j"$jobs" kiln_data_tests kiln_core_tests

# halt_on_error: the first race fails the run; second_deadlock_stack: readable lock reports.
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
export OMP_NUM_THREADS=1
"$build/tests/kiln_core_tests" --gtest_filter='ThreadGroup.*:AllocatorThreadCache.*'
"$build/tests/kiln_data_tests" "$@"
