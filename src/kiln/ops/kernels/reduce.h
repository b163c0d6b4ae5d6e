#pragma once
// The reduction engine behind sum, mean, max, argmax and sum_to_shape. Every reduction is brought
// to one or more passes of the form [outer, reduced, inner] → [outer, inner] over dense f32 memory,
// which covers the hot training shapes without per-element index math: the last axis (inner = 1),
// leading axes (bias gradients: outer = 1), and the middle (channels of NCHW, spatial dims of
// channels-last).
#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::ops {

enum class ReduceKind { sum, max };

// out[o, j] = reduce_r x[o, r, j]; x and out dense, row-major, f32. out may not alias x.
// Large reductions split among the kernel threads unless `use_threads` is false (a caller that
// already runs one part per thread).
void reduce_f32(ReduceKind kind, const float* x, int64_t outer, int64_t reduced, int64_t inner,
                float* out, bool use_threads = true);

// Reduces x (any dtype, any layout) over the dims flagged in `reduce`, multiplies by `scale`,
// and writes out (row-major; numel = product of the kept dims, dtype converted).
void reduce_tensor(ReduceKind kind, const Tensor& x, const std::vector<bool>& reduce, double scale,
                   Tensor& out);

// out (i64, row-major, x's shape without `axis`) = index of the first maximum along `axis`;
// NaN counts as the maximum, as in PyTorch.
void argmax_tensor(const Tensor& x, int axis, Tensor& out);

}  // namespace kiln::ops
