#include "kiln/ops/kernels/copy.h"

namespace kiln::ops {

Tensor contiguous_copy(const Tensor& x) {
  if (x.is_contiguous()) return x;
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  strided_copy(x, out);
  return out;
}

Tensor dense_f32(const Tensor& x) {
  if (x.is_dense()) {
    if (x.dtype() == DType::f32) return x;
    Tensor out = Tensor::empty_strided(x.shape(), x.strides(), DType::f32);
    convert(x.raw_data(), x.dtype(), out.raw_data(), DType::f32, x.numel());
    return out;
  }
  Tensor c = contiguous_copy(x);
  if (c.dtype() == DType::f32) return c;
  Tensor out = Tensor::empty(x.shape(), DType::f32);
  convert(c.raw_data(), c.dtype(), out.raw_data(), DType::f32, c.numel());
  return out;
}

}  // namespace kiln::ops
