#include "kiln/ops/nn/common.h"

namespace kiln::ops::nn {

std::string describe_metas(std::span<const TensorMeta> metas) {
  std::string s;
  for (size_t i = 0; i < metas.size(); ++i) {
    if (i) s += ", ";
    s += std::string(dtype_name(metas[i].dtype)) + metas[i].shape.str();
  }
  return s;
}

void fail(std::string_view op, const std::string& what, std::span<const TensorMeta> inputs) {
  throw ShapeError(std::string(op) + ": " + what + " (inputs: " + describe_metas(inputs) + ")");
}

void check_float(std::string_view op, const TensorMeta& m, const char* what, bool allow_bf16,
                 std::span<const TensorMeta> inputs) {
  if (m.dtype == DType::f32 || (allow_bf16 && m.dtype == DType::bf16)) return;
  fail(op,
       std::string(what) + " has dtype " + std::string(dtype_name(m.dtype)) + ", expected f32" +
           (allow_bf16 ? " or bf16" : ""),
       inputs);
}

double bytes_of(const TensorMeta& m) {
  return double(m.shape.numel()) * double(dtype_size(m.dtype));
}

double bytes_of(std::span<const TensorMeta> metas) {
  double b = 0;
  for (const TensorMeta& m : metas) b += bytes_of(m);
  return b;
}

Tensor plain(const Tensor& t) {
  if (t.is_contiguous() || t.is_channels_last()) return t;
  return t.contiguous();
}

Tensor as_f32_row_major(const Tensor& t) {
  if (t.dtype() == DType::f32) return row_major(t);
  Tensor out = Tensor::empty(t.shape(), DType::f32);
  out.copy_from(t);
  return out;
}

}  // namespace kiln::ops::nn
