#!/usr/bin/env bash
# Builds and runs the record benchmark (README.md): 60,000 Fashion-MNIST PNG files vs 4 record
# shards. Extra arguments go to record_bench (--drop-caches adds cold-cache figures; root only).
#   BUILD_DIR=build bench/record/run.sh [--rounds 3] [--drop-caches]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build}
ninja -C "$build" record_bench
mkdir -p "$root/bench/results"
exec "$build/bench/record/record_bench" --json "$root/bench/results/record.json" "$@"
