#!/usr/bin/env bash
# Sets up, builds and runs every test: the unit and training tests (ctest), the data pipeline's
# tests under ThreadSanitizer, the file readers' tests under AddressSanitizer + UBSan, and
# bounded libFuzzer runs of every file reader (record, IDX, checkpoint, YAML config, PNG/JPEG).
# Each stage's time is printed as it ends (CI's budget is 20 minutes on 2 cores).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
status=0
stage() {  # name command...: runs one stage, records a failure, prints its time
  local name=$1 start=$SECONDS
  shift
  "$@" || { status=1; echo "test.sh: $name FAILED" >&2; }
  echo "test.sh: $name took $((SECONDS - start)) s" >&2
}
build_release() { bash "$root/scripts/build.sh" --tests; }
run_ctest() { (cd "$build" && ctest --output-on-failure -j "$(nproc)" --timeout 900); }
# The ONNX export tests run the exported models in onnxruntime-node when the build tree has it
# (they skip that check otherwise): one quiet npm install, cached in the build tree.
install_onnxruntime() { bash "$root/scripts/install_onnxruntime.sh" "$build"; }

stage build build_release
[ $status -eq 0 ] || exit 1
stage "onnxruntime-node" install_onnxruntime
stage ctest run_ctest
stage "data tests under ThreadSanitizer" bash "$root/scripts/tsan_data_tests.sh"
stage "reader tests under ASan+UBSan" bash "$root/scripts/asan_reader_tests.sh"
stage "fuzzers" bash "$root/scripts/fuzz_readers.sh"
echo "test.sh: all stages in $SECONDS s" >&2
exit $status
