#!/usr/bin/env bash
# Sets up, builds and runs every test: the unit and training tests (ctest), the data pipeline's
# tests under ThreadSanitizer, the file readers' tests under AddressSanitizer + UBSan, and
# bounded libFuzzer runs of every file reader (record, IDX, checkpoint, YAML config, PNG/JPEG).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
bash "$root/scripts/build.sh"
status=0
(cd "$build" && ctest --output-on-failure -j "$(nproc)" --timeout 900) || status=1
if [ -x "$root/scripts/tsan_data_tests.sh" ]; then
  bash "$root/scripts/tsan_data_tests.sh" || status=1
fi
if [ -x "$root/scripts/asan_reader_tests.sh" ]; then
  bash "$root/scripts/asan_reader_tests.sh" || status=1
fi
if [ -x "$root/scripts/fuzz_record.sh" ]; then
  bash "$root/scripts/fuzz_record.sh" || status=1
fi
if [ -x "$root/scripts/fuzz_readers.sh" ]; then
  bash "$root/scripts/fuzz_readers.sh" || status=1
fi
exit $status
