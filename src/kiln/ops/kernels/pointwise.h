#pragma once
// The elementwise engine: runs an f32 tile function over broadcast inputs of any dtype and layout,
// writing the output in its own memory order. Eager elementwise kernels and the fusion engine's
// fused kernels both run through it, so a fused chain makes one pass over memory.
#include <cstdint>
#include <span>

#include "kiln/core/tensor.h"
#include "kiln/ops/op.h"

namespace kiln::ops {

// Elements per tile: small enough that a chain's temporaries stay in L1/L2.
inline constexpr int64_t kTile = 1024;

// out[i] = body(inputs[..][i]) over n ≤ kTile contiguous elements; inputs already broadcast and
// converted to f32.
struct TileBody {
  void (*fn)(const void* ctx, float* out, const float* const* inputs, int64_t n);
  const void* ctx;
};

// `out` must already have the broadcast shape of the inputs.
void pointwise_apply(std::span<const Tensor> inputs, Tensor& out, TileBody body);

// The kernel of a plain elementwise op: its TileFn over its inputs.
void pointwise_kernel(OpKind kind, std::span<const Tensor> inputs, std::span<Tensor> outputs,
                      const Attrs& attrs);

// Output meta for elementwise ops: broadcast shape, the first input's dtype (all floating inputs
// must agree), channels-last when a full-size input is channels-last.
std::vector<TensorMeta> infer_pointwise(std::string_view op, std::span<const TensorMeta> inputs);

}  // namespace kiln::ops
