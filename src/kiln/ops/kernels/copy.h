#pragma once
// Layout changes the ops make: contiguous and dense copies (the strided copy itself is core's,
// core/strided_copy.h).
#include "kiln/core/strided_copy.h"
#include "kiln/core/tensor.h"

namespace kiln::ops {

using kiln::strided_copy;

// A row-major copy of x (or x itself when already contiguous), same dtype.
Tensor contiguous_copy(const Tensor& x);

// x as f32 with every element stored exactly once (x itself when it already is), keeping x's
// memory order when x is dense so that channels-last stays channels-last.
Tensor dense_f32(const Tensor& x);

}  // namespace kiln::ops
