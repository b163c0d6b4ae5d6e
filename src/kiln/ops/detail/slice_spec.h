#pragma once
// Slice bounds shared by slice and its gradient pad_slice_grad.
#include <algorithm>
#include <string>

#include "kiln/core/error.h"
#include "kiln/ops/op.h"

namespace kiln::ops::shape {

struct SliceSpec {
  int axis;
  int64_t start, length, step;
};

// Python semantics: negative start/end count from the end, both are clamped to the dimension,
// step must be positive. Throws ShapeError naming `op` and the input.
inline SliceSpec slice_spec(const char* op, const TensorMeta& in, const SliceAttrs& a) {
  const Shape& s = in.shape;
  auto where = [&] { return std::string(dtype_name(in.dtype)) + s.str(); };
  const int64_t axis = a.axis < 0 ? a.axis + s.rank() : a.axis;
  if (axis < 0 || axis >= s.rank()) {
    throw ShapeError(detail::concat(op, ": axis ", a.axis, " is out of range for ", where()));
  }
  if (a.step <= 0) {
    throw ShapeError(detail::concat(op, ": step must be positive, got ", a.step, " for ", where()));
  }
  const int64_t dim = s[int(axis)];
  auto clamp = [&](int64_t v) { return std::clamp(v < 0 ? v + dim : v, int64_t(0), dim); };
  const int64_t start = clamp(a.start), end = clamp(a.end);
  const int64_t length = end > start ? (end - start + a.step - 1) / a.step : 0;
  return {int(axis), start, length, a.step};
}

}  // namespace kiln::ops::shape
