#pragma once
// Why a test does not run on this CPU, for GTEST_SKIP: the code it checks does not run here.
#include "kiln/core/cpu_isa.h"

namespace kiln::testing {

inline constexpr const char* kNoBf16Arithmetic =
    "this CPU has no bf16 arithmetic (oneDNN runs bf16 from AVX-512 on)";
inline constexpr const char* kNoAvx512Kernels =
    "Kiln's own AVX-512 kernels for this do not run here (the CPU has no AVX-512, or "
    "KILN_MAX_CPU_ISA=baseline)";

// Whether Kiln's AVX-512 kernel variants run in this process (kiln/core/cpu_isa.h).
inline bool avx512_kernels_run() {
  return cpu::kernel_isa() == cpu::Isa::avx512;
}

}  // namespace kiln::testing
