#!/usr/bin/env bash
# Fuzzes every reader of outside bytes: the record reader (scripts/fuzz_record.sh runs it alone,
# for longer), the IDX reader, checkpoint loading with its training state, YAML configuration
# files with the numeric option checks, the PNG/JPEG decoders, and the command line (every
# subcommand's parser with its option checks; cli_args_fuzzer links the whole engine: the Release
# build's libraries where build/ has them, else compiled here, plain). Builds fuzz/ with clang
# (libFuzzer + ASan + UBSan) in build-fuzz, then runs each fuzzer for a bounded time from its
# corpus in fuzz/corpus/<name> (copied, so runs never grow the repository): three rounds of
# SECONDS, two fuzzers at a time. Exits non-zero when a fuzzer finds a crash; the reproducer is
# left in build-fuzz/fuzz/ (make it a regression test).
#   scripts/fuzz_readers.sh [SECONDS_PER_FUZZER=12]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_FUZZ_BUILD:-$root/build-fuzz}
seconds=${1:-12}

# The argument fuzzer links the engine's libraries from the Release build when there is one
# (brought up to date first; scripts/test.sh has just built it), instead of compiling them again.
engine=${KILN_BUILD_DIR:-$root/build}
engine_flag=-DKILN_ENGINE_BUILD=
if [ -f "$engine/KilnBuildTreeTargets.cmake" ]; then
  cmake --build "$engine" --target kiln_profile kiln_onnx >/dev/null
  engine_flag=-DKILN_ENGINE_BUILD=$engine
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DKILN_FUZZ=ON -DKILN_TESTS=OFF -DKILN_BENCH=OFF "$engine_flag" >/dev/null
ninja -C "$build" -j "${KILN_FUZZ_JOBS:-2}" idx_fuzzer checkpoint_fuzzer yaml_config_fuzzer \
  image_decoder_fuzzer cli_args_fuzzer record_reader_fuzzer

# Two fuzzers at a time (libFuzzer runs one process each; CI has two cores), each into its own
# log, printed whole when it fails and as one line otherwise.
run() {  # fuzzer corpus [libFuzzer flags...]
  local fuzzer=$1 corpus=$2
  shift 2
  local work=$build/fuzz/corpus-$fuzzer
  mkdir -p "$work"
  # -rss_limit_mb / -malloc_limit_mb: a lying length must never turn into a huge allocation.
  if (cd "$build/fuzz" && "$build/fuzz/$fuzzer" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 "$@" "$work" "$root/fuzz/corpus/$corpus") \
    >"$work.log" 2>&1; then
    echo "fuzz: $fuzzer for ${seconds}s, no failure ($(find "$work" -type f | wc -l) new inputs kept)"
  else
    echo "fuzz: $fuzzer FOUND A FAILURE:"
    cat "$work.log"
    return 1
  fi
}
status=0
run idx_fuzzer idx -malloc_limit_mb=256 -max_len=4096 &
first=$!
run checkpoint_fuzzer checkpoint -malloc_limit_mb=256 -max_len=16384 \
  -dict="$root/fuzz/checkpoint.dict" || status=1
wait $first || status=1
run yaml_config_fuzzer yaml -malloc_limit_mb=256 -max_len=4096 -dict="$root/fuzz/yaml.dict" &
first=$!
# Decoded images may reach 1 GiB (codec.cpp's limit) before their data is found missing.
run image_decoder_fuzzer image -malloc_limit_mb=1100 -max_len=16384 || status=1
wait $first || status=1
# An argument list is parsed in about a millisecond, the inputs are short.
run cli_args_fuzzer cli_args -malloc_limit_mb=256 -max_len=1024 -dict="$root/fuzz/cli_args.dict" &
first=$!
run record_reader_fuzzer record -malloc_limit_mb=256 -max_len=65536 -dict="$root/fuzz/record.dict" ||
  status=1
wait $first || status=1
exit $status
