#!/bin/bash
# Installs the built tree into a temporary prefix, then builds examples/consumer against it the way
# a user would (find_package(Kiln), -O2 -march=native, no Kiln flags of its own) and runs it; then
# the same program through pkg-config. Usage: consumer_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
source=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-consumer-XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null
for f in lib/cmake/Kiln/KilnConfig.cmake lib/cmake/Kiln/KilnConfigVersion.cmake \
         lib/pkgconfig/kiln.pc include/kiln/kiln.h bin/kiln; do
  [[ -e $prefix/$f ]] || { echo "FAIL: the install lacks $f"; exit 1; }
done
"$prefix/bin/kiln" --version

# GCC 12 miscompiles braced int64 lists with -march=native unless the exported target carries the
# switch; the program below checks one, but only CPUs with AVX-512 show the bug, so check the flag.
if [[ $(c++ -dumpfullversion 2>/dev/null | cut -d. -f1) -lt 13 ]] && c++ --version | grep -q GCC; then
  grep -q fno-tree-slp-vectorize "$prefix/lib/cmake/Kiln/KilnTargets.cmake" ||
    { echo "FAIL: Kiln::kiln does not carry -fno-tree-slp-vectorize for GCC 12"; exit 1; }
  grep -q fno-tree-slp-vectorize "$prefix/lib/pkgconfig/kiln.pc" ||
    { echo "FAIL: kiln.pc does not carry -fno-tree-slp-vectorize for GCC 12"; exit 1; }
fi

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
export CCACHE_BASEDIR=$work
# Configures and builds examples/consumer in $work/NAME with the extra cmake flags, then runs it.
build_and_run_consumer() {  # NAME [cmake flags...]
  local dir=$work/$1
  shift
  cmake -S "$source/examples/consumer" -B "$dir" -G Ninja "${launcher[@]}" \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_FLAGS="-O2 -march=native" "$@" >/dev/null
  cmake --build "$dir" >/dev/null
  OMP_NUM_THREADS=2 "$dir/kiln_consumer"
}
build_and_run_consumer consumer

# The same program against libkiln.so, where the build made it (KILN_BUILD_SHARED): it must load
# Kiln from the shared library, with no static copy of the engine in the program.
if [[ -e $prefix/lib/libkiln.so ]]; then
  build_and_run_consumer consumer_shared -DKILN_CONSUMER_SHARED=ON
  # Each listing whole before grep reads it: under pipefail, grep -q leaving early would fail
  # the pipe with the writer's SIGPIPE.
  libs=$(ldd "$work/consumer_shared/kiln_consumer")
  grep -q "libkiln.so.* => $prefix/lib/" <<<"$libs" ||
    { echo "FAIL: the shared consumer does not load $prefix/lib/libkiln.so"; exit 1; }
  symbols=$(nm -C "$work/consumer_shared/kiln_consumer")
  if grep -q " T kiln::models::create(" <<<"$symbols"; then
    echo "FAIL: the shared consumer holds a static copy of the engine"; exit 1
  fi
fi

# shellcheck disable=SC2046  # pkg-config's output is a list of words
PKG_CONFIG_PATH=$prefix/lib/pkgconfig c++ -O2 -march=native "$source/examples/consumer/main.cpp" \
  -o "$work/pc_consumer" $(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs kiln)
OMP_NUM_THREADS=2 "$work/pc_consumer"
echo "PASS: find_package(Kiln) (static$([[ -e $prefix/lib/libkiln.so ]] && echo " and shared")) and pkg-config consumers built and ran"
