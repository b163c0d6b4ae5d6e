// broadcast_to and its inverse sum_to_shape, the pair every broadcasting gradient is written with.
#include "kiln/ops/dispatch.h"
#include "kiln/ops/functional.h"
#include "kiln/ops/kernels/copy.h"
#include "kiln/ops/kernels/reduce.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::ops {
namespace {

// Whether `small` broadcasts to `big` (NumPy rules, aligned at the last dimension).
bool broadcasts_to(const Shape& small, const Shape& big) {
  if (small.rank() > big.rank()) return false;
  const int shift = big.rank() - small.rank();
  for (int i = 0; i < small.rank(); ++i) {
    if (small[i] != 1 && small[i] != big[i + shift]) return false;
  }
  return true;
}

std::vector<TensorMeta> infer_sum_to_shape(std::span<const TensorMeta> in, const Attrs& attrs) {
  const ShapeAttrs& a = attrs.as<ShapeAttrs>();
  Shape target(a.shape);
  if (!broadcasts_to(target, in[0].shape)) {
    throw ShapeError("sum_to_shape: cannot sum " + describe_meta(in[0]) + " to shape " +
                     target.str() + " (the target must broadcast to the input)");
  }
  return {TensorMeta{target, in[0].dtype}};
}

void sum_to_shape_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const ShapeAttrs& a = attrs.as<ShapeAttrs>();
  const Shape& s = in[0].shape();
  const int shift = s.rank() - int(a.shape.size());
  std::vector<bool> mask(size_t(s.rank()));
  for (int i = 0; i < s.rank(); ++i) {
    mask[size_t(i)] = i < shift || (a.shape[size_t(i - shift)] == 1 && s[i] != 1);
  }
  reduce_tensor(ReduceKind::sum, in[0], mask, 1.0, out[0]);
}

std::vector<TensorMeta> infer_broadcast_to(std::span<const TensorMeta> in, const Attrs& attrs) {
  const ShapeAttrs& a = attrs.as<ShapeAttrs>();
  Shape target(a.shape);
  if (!broadcasts_to(in[0].shape, target)) {
    throw ShapeError("broadcast_to: cannot broadcast " + describe_meta(in[0]) + " to shape " +
                     target.str());
  }
  return {TensorMeta{target, in[0].dtype}};
}

// Materializes the broadcast: a stride-0 view of the input copied out row by row.
void broadcast_to_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor& x = in[0];
  const Shape& target = out[0].shape();
  const int shift = target.rank() - x.rank();
  Strides strides(size_t(target.rank()), 0);
  for (int i = 0; i < x.rank(); ++i) {
    strides[size_t(i + shift)] = x.shape()[i] == 1 ? 0 : x.strides()[size_t(i)];
  }
  strided_copy(x.view_as(target, strides, x.offset()), out[0]);
}

Cost copy_cost(std::span<const TensorMeta> in, std::span<const TensorMeta> out, const Attrs&) {
  double n_in = double(in[0].shape.numel()), n_out = double(out[0].shape.numel());
  return {std::max(n_in, n_out) - std::min(n_in, n_out),
          (n_in + n_out) * double(dtype_size(in[0].dtype))};
}

}  // namespace

const OpDef op_def_sum_to_shape = {
    .name = "sum_to_shape",
    .attrs = attrs_kind<ShapeAttrs>,
    .infer = infer_sum_to_shape,
    .kernel = sum_to_shape_kernel,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      return {broadcast_to(c.grad_outputs[0], c.input_metas[0].shape)};
    },
    .cost = copy_cost,
    .shard = &kSumToShapeShardRule,
};

const OpDef op_def_broadcast_to = {
    .name = "broadcast_to",
    .attrs = attrs_kind<ShapeAttrs>,
    .infer = infer_broadcast_to,
    .kernel = broadcast_to_kernel,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      return {sum_to_shape(c.grad_outputs[0], c.input_metas[0].shape)};
    },
    .cost = copy_cost,
    .shard = &kBroadcastToShardRule,
};

Tensor sum_to_shape(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  Attrs a = ShapeAttrs{.shape = shape.dims()};
  return call_one_output(OpKind::sum_to_shape, {x}, a);
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  Attrs a = ShapeAttrs{.shape = shape.dims()};
  return call_one_output(OpKind::broadcast_to, {x}, a);
}

}  // namespace kiln::ops
