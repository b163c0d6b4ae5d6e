// The baseline check runs before the rest of the process, so this file is compiled for plain
// x86-64 (src/kiln/CMakeLists.txt) and uses nothing but the C library: every other file may
// already hold instructions of the baseline level, which an older CPU dies on.
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "kiln/core/cpu_isa.h"

// Set by the build for its KILN_BASELINE_ISA; a native build (or one outside CMake's set-up) is
// made for the machine it runs on, level 0 checks nothing.
#ifndef KILN_BASELINE_ISA_NAME
#define KILN_BASELINE_ISA_NAME "native"
#endif
#ifndef KILN_BASELINE_ISA_LEVEL
#define KILN_BASELINE_ISA_LEVEL 0
#endif

namespace kiln::cpu {

std::string_view baseline_isa() {
  return KILN_BASELINE_ISA_NAME;
}

bool cpu_runs_baseline() {
  __builtin_cpu_init();
  // The features each level adds that GCC uses in vectorized code (x86-64 itself has SSE2);
  // named one by one because clang's __builtin_cpu_supports does not know the level names.
  bool ok = true;
#if KILN_BASELINE_ISA_LEVEL >= 2
  ok = ok && __builtin_cpu_supports("ssse3") && __builtin_cpu_supports("sse4.2") &&
       __builtin_cpu_supports("popcnt");
#endif
#if KILN_BASELINE_ISA_LEVEL >= 3
  ok = ok && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
       __builtin_cpu_supports("bmi2");
#endif
#if KILN_BASELINE_ISA_LEVEL >= 4
  ok = ok && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#endif
  return ok;
}

namespace {

// Priority 101: before the static initializers of the rest of Kiln, which the compiler may
// already have vectorized for the baseline.
[[gnu::constructor(101)]] void refuse_a_cpu_below_the_baseline() {
  if (cpu_runs_baseline()) return;
  std::fprintf(stderr,
               "kiln: this CPU cannot run this build of Kiln, which was compiled for %s "
               "(KILN_BASELINE_ISA); rebuild it with cmake -DKILN_BASELINE_ISA=x86-64-v2 or "
               "-DKILN_BASELINE_ISA=x86-64\n",
               KILN_BASELINE_ISA_NAME);
  std::_Exit(1);
}

}  // namespace
}  // namespace kiln::cpu
