#!/usr/bin/env bash
# Sets up, builds and runs every test: the unit and training tests (ctest), the data pipeline's
# tests under ThreadSanitizer, and a bounded libFuzzer run of the record reader.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
bash "$root/scripts/build.sh"
status=0
(cd "$build" && ctest --output-on-failure -j "$(nproc)" --timeout 900) || status=1
if [ -x "$root/scripts/tsan_data_tests.sh" ]; then
  bash "$root/scripts/tsan_data_tests.sh" || status=1
fi
if [ -x "$root/scripts/fuzz_record.sh" ]; then
  bash "$root/scripts/fuzz_record.sh" || status=1
fi
exit $status
