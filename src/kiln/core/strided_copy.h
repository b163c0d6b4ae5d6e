#pragma once
// Layout changes: copies between tensors of the same shape and dtype with arbitrary strides
// (contiguous <-> channels-last, transposes, slices, broadcasts with stride 0 in the source).
// Tensor::copy_from and contiguous() go through it, as do the ops' layout changes.
#include "kiln/core/tensor.h"

namespace kiln {

// dst[i] = src[i] for every logical index i. Same shape and dtype; any strides on both sides
// (src strides may be 0). Rows that are contiguous on both sides are memcpy'd; a source whose
// fastest dimension is not the destination's is copied by cache-blocked 2-D transposes.
void strided_copy(const Tensor& src, Tensor& dst);

}  // namespace kiln
