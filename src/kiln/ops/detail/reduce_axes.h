#pragma once
// Axis handling shared by the reduction ops.
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/ops/op.h"

namespace kiln::ops::reduce {

// Which dims of `shape` `axes` selects (negative axes count from the end; empty = all). Throws
// ShapeError naming `op`, the input and the offending axis.
inline std::vector<bool> reduce_mask(const char* op, const TensorMeta& in,
                                     const std::vector<int64_t>& axes) {
  const int rank = in.shape.rank();
  std::vector<bool> mask(size_t(rank), axes.empty());
  for (int64_t a : axes) {
    int64_t n = a < 0 ? a + rank : a;
    if (n < 0 || n >= rank) {
      throw ShapeError(detail::concat(op, ": axis ", a, " is out of range for input ",
                                      dtype_name(in.dtype), in.shape.str()));
    }
    if (mask[size_t(n)]) {
      throw ShapeError(detail::concat(op, ": axis ", a, " is given twice for input ",
                                      dtype_name(in.dtype), in.shape.str()));
    }
    mask[size_t(n)] = true;
  }
  return mask;
}

// The output shape: reduced dims become 1 (keepdims) or disappear.
inline Shape reduced_shape(const Shape& in, const std::vector<bool>& mask, bool keepdims) {
  std::vector<int64_t> dims;
  for (int i = 0; i < in.rank(); ++i) {
    if (!mask[size_t(i)]) {
      dims.push_back(in[i]);
    } else if (keepdims) {
      dims.push_back(1);
    }
  }
  return Shape(std::move(dims));
}

inline int64_t reduced_count(const Shape& in, const std::vector<bool>& mask) {
  int64_t n = 1;
  for (int i = 0; i < in.rank(); ++i) {
    if (mask[size_t(i)]) n *= in[i];
  }
  return n;
}

}  // namespace kiln::ops::reduce
