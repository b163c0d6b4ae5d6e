#pragma once
// Layout changes: copies between tensors of the same shape and dtype with arbitrary strides
// (contiguous ↔ channels-last, transposes, slices, broadcasts with stride 0 in the source).
#include "kiln/core/tensor.h"

namespace kiln::ops {

// dst[i] = src[i] for every logical index i. Same shape and dtype; any strides on both sides
// (src strides may be 0). Rows that are contiguous on both sides are memcpy'd; a source whose
// fastest dimension is not the destination's is copied by cache-blocked 2-D transposes.
void strided_copy(const Tensor& src, Tensor& dst);

// A row-major copy of x (or x itself when already contiguous), same dtype.
Tensor contiguous_copy(const Tensor& x);

// x as f32 with every element stored exactly once (x itself when it already is), keeping x's
// memory order when x is dense so that channels-last stays channels-last.
Tensor dense_f32(const Tensor& x);

}  // namespace kiln::ops
