#!/usr/bin/env bash
# The kernels that use intrinsics compile for the lowest baseline a build may choose
# (-DKILN_BASELINE_ISA=x86-64, plain SSE2): their AVX2 and AVX-512 code must sit behind the ISA
# variants (core/isa_variant.h), never in the baseline path, or an x86-64 build fails. Compiled at
# -O0, since an intrinsic used outside its target is an error at any level.
#   baseline_isa_compiles.sh CXX SOURCE_DIR
set -euo pipefail
cxx=$1
source=$2
mapfile -t files < <(grep -rlE --include='*.cpp' 'immintrin|_mm(256|512)?_' "$source/src/kiln" | sort)
[ ${#files[@]} -ge 9 ] || { echo "FAIL: only ${#files[@]} sources with intrinsics found"; exit 1; }
status=0
for f in "${files[@]}"; do
  if ! "$cxx" -std=c++20 -fopenmp -O0 -march=x86-64 -Wno-psabi -DKILN_ISA_AVX512_VARIANTS=1 \
      -I"$source/src" -c "$f" -o /dev/null; then
    echo "FAIL: ${f#"$source"/} does not compile for x86-64"
    status=1
  fi
done
[ $status -eq 0 ] && echo "PASS: ${#files[@]} sources with intrinsics compile for x86-64"
exit $status
