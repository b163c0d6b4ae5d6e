#pragma once
// Shared pieces of the elementwise op declarations.
#include <cmath>
#include <string>

#include "kiln/ops/dispatch.h"
#include "kiln/ops/functional.h"
#include "kiln/ops/kernels/pointwise.h"

namespace kiln::ops::elementwise {

template <OpKind K>
void kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  pointwise_kernel(K, in, out, attrs);
}

template <const char* Name>
std::vector<TensorMeta> infer(std::span<const TensorMeta> in, const Attrs&) {
  return infer_pointwise(Name, in);
}

// As infer, for ops only defined on floating-point values (exp, log, gelu, …).
template <const char* Name>
std::vector<TensorMeta> infer_floating(std::span<const TensorMeta> in, const Attrs&) {
  for (const TensorMeta& m : in) {
    if (!is_floating(m.dtype)) {
      throw ShapeError(std::string(Name) + ": expects floating-point inputs, got " +
                       describe_meta(m));
    }
  }
  return infer_pointwise(Name, in);
}

// Cost of an elementwise op doing `flops_per_element` operations per output element.
template <int FlopsPerElement>
Cost cost(std::span<const TensorMeta> in, std::span<const TensorMeta> out, const Attrs&) {
  double bytes = 0;
  for (const TensorMeta& m : in) bytes += double(m.shape.numel()) * double(dtype_size(m.dtype));
  double n = double(out[0].shape.numel());
  bytes += n * double(dtype_size(out[0].dtype));
  return {n * FlopsPerElement, bytes};
}

// Reduces a broadcast gradient to the shape of the input it flows to.
inline Tensor unbroadcast(const Tensor& grad, const TensorMeta& input) {
  return grad.shape() == input.shape ? grad : sum_to_shape(grad, input.shape);
}

}  // namespace kiln::ops::elementwise
