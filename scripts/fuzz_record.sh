#!/usr/bin/env bash
# Fuzzes the record reader: builds fuzz/record_reader_fuzzer with clang (libFuzzer + ASan + UBSan)
# in build-fuzz and runs it for a bounded time from the seed corpus of valid record files kept in
# fuzz/corpus/record (written by fuzz/make_seed_corpus.cpp: `ninja -C build-fuzz
# record_seed_corpus && build-fuzz/fuzz/record_seed_corpus fuzz/corpus/record` after a format
# change). New inputs go to build-fuzz, so runs never grow the repository. Exits non-zero when the fuzzer finds a crash (the reproducer is left in build-fuzz/fuzz/).
#   scripts/fuzz_record.sh [SECONDS=40]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_FUZZ_BUILD:-$root/build-fuzz}
seconds=${1:-40}

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DKILN_FUZZ=ON -DKILN_TESTS=OFF -DKILN_BENCH=OFF >/dev/null
ninja -C "$build" -j "${KILN_FUZZ_JOBS:-2}" record_reader_fuzzer

corpus=$build/fuzz/corpus
mkdir -p "$corpus"

cd "$build/fuzz"
# -rss_limit_mb: a lying length must never turn into a huge allocation.
exec "$build/fuzz/record_reader_fuzzer" -max_total_time="$seconds" -timeout=10 \
  -rss_limit_mb=1024 -malloc_limit_mb=256 -max_len=65536 -print_final_stats=1 \
  -dict="$root/fuzz/record.dict" "$corpus" "$root/fuzz/corpus/record"
