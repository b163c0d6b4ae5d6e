#pragma once
// bf16 <-> f32 over arrays: the AMP hot path behind convert() (every cast, and every bf16 tile the
// pointwise engine loads or stores), compiled for the baseline and for AVX-512 (isa_variant.h).
#include <cstdint>

#include "kiln/core/dtype.h"

namespace kiln::detail {

void bf16_to_f32_n(const bf16_t* in, float* out, int64_t n);
// Rounds as float_to_bf16 does (nearest even, NaN kept quiet), bit for bit on every path.
void f32_to_bf16_n(const float* in, bf16_t* out, int64_t n);

}  // namespace kiln::detail
