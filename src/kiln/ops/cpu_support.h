#pragma once
// What the CPU Kiln runs on can compute, as opposed to what Kiln was built for: oneDNN chooses
// its kernels at run time, so bf16 and fp16 arithmetic exist only where its ISA has them.
#include "kiln/core/dtype.h"

namespace kiln::ops {

// Whether convolutions, matmuls and the other oneDNN ops run in `dtype` on this CPU: bf16 from
// AVX-512 on (native with AVX512_BF16 or AMX, emulated on AVX512_CORE), not on AVX2; fp16 ops run
// widened to f32 (ops/dispatch.cpp), f32 and the integer types everywhere.
bool arithmetic_available(DType dtype);

// Whether oneDNN's ISA on this CPU includes avx512_core: the one question behind bf16 arithmetic
// (above) and the blocked nChw16c layout, whose 16-channel blocks are AVX-512's
// (dnnl_util::dnnl_nchw16c_native).
bool dnnl_has_avx512_core();

}  // namespace kiln::ops
