// Dtype changes: cast (any dtype to any, round-to-nearest-even into bf16/f16) and one_hot.
#include <vector>

#include "kiln/ops/dispatch.h"
#include "kiln/ops/functional.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::ops {
namespace {

std::vector<TensorMeta> infer_cast(std::span<const TensorMeta> in, const Attrs& a) {
  return {TensorMeta{in[0].shape, a.as<CastAttrs>().dtype, in[0].layout}};
}

// Tensor::copy_from rearranges first (in the source dtype), then converts in one flat pass.
void cast_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  out[0].copy_from(in[0]);
}

Cost cast_cost(std::span<const TensorMeta> in, std::span<const TensorMeta> out, const Attrs&) {
  double n = double(in[0].shape.numel());
  return {n, n * double(dtype_size(in[0].dtype) + dtype_size(out[0].dtype))};
}

std::vector<TensorMeta> infer_one_hot(std::span<const TensorMeta> in, const Attrs& attrs) {
  const OneHotAttrs& a = attrs.as<OneHotAttrs>();
  DType t = in[0].dtype;
  if (t != DType::i32 && t != DType::i64 && t != DType::u8) {
    throw ShapeError("one_hot: expects integer indices (i32, i64 or u8), got " +
                     describe_meta(in[0]));
  }
  if (a.num_classes <= 0) {
    throw ShapeError(detail::concat("one_hot: num_classes must be positive, got ", a.num_classes,
                                    " for indices ", describe_meta(in[0])));
  }
  std::vector<int64_t> dims = in[0].shape.dims();
  dims.push_back(a.num_classes);
  return {TensorMeta{Shape(std::move(dims)), a.dtype}};
}

void one_hot_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& idx = in[0];
  Tensor& y = out[0];
  const int64_t n = idx.numel(), classes = a.as<OneHotAttrs>().num_classes;
  std::vector<int64_t> index = idx.to_vector<int64_t>();
  // Validate before writing: a bad label is the caller's error, never an out-of-bounds write.
  for (int64_t i = 0; i < n; ++i) {
    if (index[size_t(i)] < 0 || index[size_t(i)] >= classes) {
      throw Error(detail::concat("one_hot: index ", index[size_t(i)], " at position ", i,
                                 " of indices ", describe(idx), " is out of range [0, ", classes,
                                 ")"));
    }
  }
  Tensor values = y.dtype() == DType::f32 ? y : Tensor::empty(y.shape(), DType::f32);
  float* v = values.data<float>();
  std::fill(v, v + n * classes, 0.0f);
  for (int64_t i = 0; i < n; ++i) v[i * classes + index[size_t(i)]] = 1.0f;
  if (!values.same(y)) convert(v, DType::f32, y.raw_data(), y.dtype(), n * classes);
}

Cost one_hot_cost(std::span<const TensorMeta>, std::span<const TensorMeta> out, const Attrs&) {
  return {0, double(out[0].shape.numel()) * double(dtype_size(out[0].dtype))};
}

}  // namespace

const OpDef op_def_cast = {
    .name = "cast",
    .attrs = attrs_kind<CastAttrs>,
    .infer = infer_cast,
    .kernel = cast_kernel,
    // Only floating → floating casts take part in differentiation (integer outputs get no grad).
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      return {cast(c.grad_outputs[0], c.input_metas[0].dtype)};
    },
    .cost = cast_cost,
    .shard = &kElementwiseShardRule,
};

const OpDef op_def_one_hot = {
    .name = "one_hot",
    .attrs = attrs_kind<OneHotAttrs>,
    .infer = infer_one_hot,
    .kernel = one_hot_kernel,
    .no_grad_reason = "one_hot takes integer indices",
    .cost = one_hot_cost,
    .shard = &kOneHotShardRule,
};

Tensor cast(const Tensor& x, DType dtype) {
  Attrs a = CastAttrs{.dtype = dtype};
  return call_one_output(OpKind::cast, {x}, a);
}

Tensor one_hot(const Tensor& indices, int64_t num_classes, DType dtype) {
  Attrs a = OneHotAttrs{.num_classes = num_classes, .dtype = dtype};
  return call_one_output(OpKind::one_hot, {indices}, a);
}

}  // namespace kiln::ops
