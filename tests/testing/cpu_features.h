#pragma once
// Why a test does not run on this CPU, for GTEST_SKIP: the code it checks does not exist here.
namespace kiln::testing {

inline constexpr const char* kNoBf16Arithmetic =
    "this CPU has no bf16 arithmetic (oneDNN runs bf16 from AVX-512 on)";
inline constexpr const char* kNoAvx512Kernels =
    "built without AVX-512: Kiln's own kernels for this fusion are not compiled in";
#if defined(__AVX512F__)
inline constexpr bool kAvx512KernelsBuilt = true;
#else
inline constexpr bool kAvx512KernelsBuilt = false;
#endif

}  // namespace kiln::testing
