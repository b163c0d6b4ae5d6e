#include "kiln/ops/detail/nn_common.h"

namespace kiln::ops::nn {

void throw_shape_error(std::string_view op, const std::string& what,
                       std::span<const TensorMeta> inputs) {
  throw ShapeError(std::string(op) + ": " + what + " (inputs: " + describe_metas(inputs) + ")");
}

void check_float(std::string_view op, const TensorMeta& m, const char* what, bool allow_bf16,
                 std::span<const TensorMeta> inputs) {
  if (m.dtype == DType::f32 || (allow_bf16 && m.dtype == DType::bf16)) return;
  throw_shape_error(op,
                    std::string(what) + " has dtype " + std::string(dtype_name(m.dtype)) +
                        ", expected f32" + (allow_bf16 ? " or bf16" : ""),
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

void run_normalization_backward(dnnl_util::PrimitiveRunner& r, const Tensor& x, const Tensor& dy,
                                void* dx, const Tensor& mean, void* variance, const Tensor& gamma,
                                Tensor& dgamma, Tensor& dbeta) {
  r.set(DNNL_ARG_SRC, x.raw_data());
  r.set(DNNL_ARG_DIFF_DST, dy.raw_data());
  r.set(DNNL_ARG_DIFF_SRC, dx);
  r.set(DNNL_ARG_MEAN, mean.raw_data());
  r.set(DNNL_ARG_VARIANCE, variance);
  r.set(DNNL_ARG_SCALE, gamma.raw_data());
  // oneDNN 2.6 insists on a shift argument in backward though the gradients do not depend on
  // it; gamma's memory (read-only, the right size) stands in.
  r.set(DNNL_ARG_SHIFT, gamma.raw_data());
  r.set(DNNL_ARG_DIFF_SCALE, dgamma.raw_data());
  r.set(DNNL_ARG_DIFF_SHIFT, dbeta.raw_data());
  r.run();
}

}  // namespace kiln::ops::nn
