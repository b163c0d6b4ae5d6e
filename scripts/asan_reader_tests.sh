#!/usr/bin/env bash
# Builds the tests of every reader of outside bytes (IDX, PNG/JPEG, record files, safetensors
# checkpoints with their training state, YAML config, option checks) with AddressSanitizer +
# UndefinedBehaviorSanitizer in build-asan/ and runs them; the first report fails the run.
# The readers are compiled from their sources into one binary (tests/CMakeLists.txt,
# kiln_reader_tests), so this does not build the rest of Kiln a second time.
#   scripts/asan_reader_tests.sh [extra gtest args]   (JOBS=N to change build parallelism)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${KILN_ASAN_BUILD:-$root/build-asan}"
jobs="${JOBS:-2}"

# -O1: the sanitizers' usual level; compiling is about twice as fast as at -O2.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
  -DKILN_ASAN=ON -DKILN_BENCH=OFF -DKILN_FUZZ=OFF >/dev/null
ninja -C "$build" -j"$jobs" kiln_reader_tests

export ASAN_OPTIONS="detect_leaks=1 abort_on_error=1 ${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1 ${UBSAN_OPTIONS:-}"
export OMP_NUM_THREADS=1
cd "$build"
"$build/tests/kiln_reader_tests" "$@"
