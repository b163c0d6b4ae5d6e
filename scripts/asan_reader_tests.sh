#!/usr/bin/env bash
# Builds the tests of every reader of outside bytes (IDX, PNG/JPEG, record files, safetensors
# checkpoints with their training state, YAML config, option checks) with clang,
# AddressSanitizer + UndefinedBehaviorSanitizer, and runs them; the first report fails the run.
# They are built in the fuzzers' tree (build-fuzz/, fuzz/CMakeLists.txt) from the same
# instrumented objects as the fuzzers, so the readers are compiled once for both.
#   scripts/asan_reader_tests.sh [extra gtest args]   (JOBS=N to change build parallelism)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build=${KILN_FUZZ_BUILD:-$root/build-fuzz}
jobs="${JOBS:-2}"

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DKILN_FUZZ=ON -DKILN_TESTS=OFF -DKILN_BENCH=OFF >/dev/null
ninja -C "$build" -j"$jobs" kiln_reader_tests

export ASAN_OPTIONS="detect_leaks=1 abort_on_error=1 ${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1 ${UBSAN_OPTIONS:-}"
export OMP_NUM_THREADS=1
cd "$build"
"$build/fuzz/kiln_reader_tests" "$@"
