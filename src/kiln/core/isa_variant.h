#pragma once
// One kernel source, compiled for the baseline and again for AVX-512, with the choice made per
// call from the CPU (core/cpu_isa.h). The build (kiln_isa_variants in src/kiln/CMakeLists.txt)
// compiles a listed source a second time with KILN_ISA_VARIANT_AVX512 defined. The source is laid
// out as:
//
//   #include <every header it needs, standard and Kiln's>     // before the target switch
//   #include "kiln/core/isa_variant.h"
//   KILN_ISA_TARGET_BEGIN
//   #include "kiln/ops/kernels/pool_window.h"   // headers of the variant's own inline code
//   namespace kiln::ops::KILN_ISA {
//   ... the kernels; AVX-512 code under #if KILN_ISA_AVX512 ...
//   }
//   KILN_ISA_TARGET_END
//   #if KILN_ISA_DISPATCH                  // in the baseline compile only
//   namespace kiln::ops {
//   KILN_ISA_DECLARE(bool f(const Tensor& x));
//   bool f(const Tensor& x) { return KILN_ISA_CALL(f, x); }
//   }
//   #endif
//
// Why a target pragma rather than -mavx512f on the whole file: inline functions and templates of
// the headers included before it keep the baseline target, so the copies the linker merges
// between files never hold AVX-512 code that a baseline CPU would then run. Everything defined
// after it lives in the variant's own namespace (isa_baseline or isa_avx512), or has internal
// linkage; tests/core/isa_variants_test.sh checks the built objects for that. GCC's C++ front
// end reads the whole file before it applies the pragma, so __AVX512F__ does not follow it:
// variant code tests KILN_ISA_AVX512 instead.
#include "kiln/core/cpu_isa.h"

#if defined(KILN_ISA_VARIANT_AVX512)
#define KILN_ISA isa_avx512
#define KILN_ISA_AVX512 1
// The variant serves every AVX-512 CPU, so it rounds to bf16 without AVX512_BF16's instruction.
#define KILN_ISA_AVX512_BF16 0
#define KILN_ISA_DISPATCH 0
// clang-format off
#define KILN_ISA_TARGET_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx512cd,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt,movbe\")")
// clang-format on
#define KILN_ISA_TARGET_END _Pragma("GCC pop_options")
#else
#define KILN_ISA isa_baseline
// A -DKILN_NATIVE=ON build on an AVX-512 machine has AVX-512 as its baseline.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
#define KILN_ISA_AVX512 1
#else
#define KILN_ISA_AVX512 0
#endif
#if KILN_ISA_AVX512 && defined(__AVX512BF16__)
#define KILN_ISA_AVX512_BF16 1
#else
#define KILN_ISA_AVX512_BF16 0
#endif
#define KILN_ISA_DISPATCH 1
#define KILN_ISA_TARGET_BEGIN
#define KILN_ISA_TARGET_END
#endif

// The baseline compile's entry points: declare a function of the AVX-512 variant, and call the
// variant the CPU runs.
#if defined(KILN_ISA_AVX512_VARIANTS)
#define KILN_ISA_DECLARE(...) \
  namespace isa_avx512 {      \
  __VA_ARGS__;                \
  }
#define KILN_ISA_CALL(fn, ...)                                                         \
  (::kiln::cpu::kernel_isa() == ::kiln::cpu::Isa::avx512 ? isa_avx512::fn(__VA_ARGS__) \
                                                         : isa_baseline::fn(__VA_ARGS__))
#else
#define KILN_ISA_DECLARE(...)
#define KILN_ISA_CALL(fn, ...) isa_baseline::fn(__VA_ARGS__)
#endif
