#!/usr/bin/env bash
# Installs what Kiln needs (scripts/setup.sh), then configures and builds a Release tree in
# build/ (or $KILN_BUILD_DIR): the kiln command, the libraries, the Python module and the
# examples; with --tests the tests too, with --bench the benchmarks too (each also installs what
# it needs). Further arguments go to cmake's configure step.
#   scripts/build.sh [--tests] [--bench] [cmake arguments...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
setup=() tests=OFF bench=OFF
while [ $# -gt 0 ]; do
  case "$1" in
    --tests) setup+=(--tests); tests=ON; shift ;;
    --bench) setup+=(--bench); bench=ON; shift ;;
    *) break ;;
  esac
done
bash "$root/scripts/setup.sh" "${setup[@]}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=$tests \
  -DKILN_BUILD_BENCH=$bench "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
