// Reductions over axes: sum, mean, max, argmax. The kernels live in kernels/reduce.cpp; they
// accumulate in f32 whatever the input dtype, so the AMP class is `follow` (no cast pass needed).
#include "kiln/ops/kernels/reduce.h"
#include "kiln/ops/shard_rule.h"

#include "kiln/ops/detail/reduce_axes.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/functional.h"

namespace kiln::ops {
namespace {
using reduce::reduce_mask;
using reduce::reduced_count;
using reduce::reduced_shape;

std::vector<TensorMeta> infer_sum(std::span<const TensorMeta> in, const Attrs& attrs) {
  const ReduceAttrs& a = attrs.as<ReduceAttrs>();
  std::vector<bool> mask = reduce_mask("sum", in[0], a.axes);
  DType dtype = in[0].dtype == DType::boolean ? DType::i64 : in[0].dtype;
  return {TensorMeta{reduced_shape(in[0].shape, mask, a.keepdims), dtype}};
}

std::vector<TensorMeta> infer_mean(std::span<const TensorMeta> in, const Attrs& attrs) {
  const ReduceAttrs& a = attrs.as<ReduceAttrs>();
  if (!is_floating(in[0].dtype)) {
    throw ShapeError("mean: expects a floating-point input, got " + describe_meta(in[0]));
  }
  std::vector<bool> mask = reduce_mask("mean", in[0], a.axes);
  return {TensorMeta{reduced_shape(in[0].shape, mask, a.keepdims), in[0].dtype}};
}

// max and argmax have no value over an empty dimension.
void check_not_empty(const char* op, const TensorMeta& in, const std::vector<bool>& mask) {
  for (int i = 0; i < in.shape.rank(); ++i) {
    if (mask[size_t(i)] && in.shape[i] == 0) {
      throw ShapeError(
          detail::concat(op, ": cannot reduce the empty dimension ", i, " of ", describe_meta(in)));
    }
  }
}

std::vector<TensorMeta> infer_max(std::span<const TensorMeta> in, const Attrs& attrs) {
  const ReduceAttrs& a = attrs.as<ReduceAttrs>();
  std::vector<bool> mask = reduce_mask("max", in[0], a.axes);
  check_not_empty("max", in[0], mask);
  return {TensorMeta{reduced_shape(in[0].shape, mask, a.keepdims), in[0].dtype}};
}

std::vector<TensorMeta> infer_argmax(std::span<const TensorMeta> in, const Attrs& attrs) {
  const ReduceAttrs& a = attrs.as<ReduceAttrs>();
  if (a.axes.size() != 1) {
    throw ShapeError(detail::concat("argmax: expects exactly one axis, got ", a.axes.size(),
                                    " for input ", describe_meta(in[0])));
  }
  std::vector<bool> mask = reduce_mask("argmax", in[0], a.axes);
  check_not_empty("argmax", in[0], mask);
  return {TensorMeta{reduced_shape(in[0].shape, mask, a.keepdims), DType::i64}};
}

Cost reduce_cost(std::span<const TensorMeta> in, std::span<const TensorMeta> out, const Attrs&) {
  double n = double(in[0].shape.numel());
  return {n, n * double(dtype_size(in[0].dtype)) +
                 double(out[0].shape.numel()) * double(dtype_size(out[0].dtype))};
}

template <ReduceKind Kind, bool Mean>
void reduce_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const ReduceAttrs& a = attrs.as<ReduceAttrs>();
  std::vector<bool> mask = reduce_mask("reduce", meta_of(in[0]), a.axes);
  double scale = Mean ? 1.0 / double(reduced_count(in[0].shape(), mask)) : 1.0;
  reduce_tensor(Kind, in[0], mask, scale, out[0]);
}

void argmax_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const ReduceAttrs& a = attrs.as<ReduceAttrs>();
  argmax_tensor(in[0], in[0].shape().normalize_axis(int(a.axes[0])), out[0]);
}

// The gradient of a reduction, spread back over the input's shape.
Tensor spread(const Tensor& g, const TensorMeta& in, const Attrs& attrs) {
  const ReduceAttrs& a = attrs.as<ReduceAttrs>();
  std::vector<bool> mask = reduce_mask("reduce", in, a.axes);
  Shape kept = reduced_shape(in.shape, mask, true);
  return broadcast_to(g.shape() == kept ? g : reshape(g, kept), in.shape);
}

}  // namespace

const OpDef op_def_sum = {
    .name = "sum",
    .attrs = attrs_kind<ReduceAttrs>,
    .infer = infer_sum,
    .kernel = reduce_kernel<ReduceKind::sum, false>,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      return {spread(c.grad_outputs[0], c.input_metas[0], c.attrs)};
    },
    .cost = reduce_cost,
    .shard = &kSumShardRule,
};

const OpDef op_def_mean = {
    .name = "mean",
    .attrs = attrs_kind<ReduceAttrs>,
    .infer = infer_mean,
    .kernel = reduce_kernel<ReduceKind::sum, true>,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      const TensorMeta& in = c.input_metas[0];
      int64_t n = reduced_count(in.shape, reduce_mask("mean", in, c.attrs.as<ReduceAttrs>().axes));
      return {mul_scalar(spread(c.grad_outputs[0], in, c.attrs), 1.0 / double(n))};
    },
    .cost = reduce_cost,
    .shard = &kMeanShardRule,
};

// Ties share the gradient equally (as PyTorch's amax does), so it still sums to the incoming one.
const OpDef op_def_max = {
    .name = "max",
    .attrs = attrs_kind<ReduceAttrs>,
    .infer = infer_max,
    .kernel = reduce_kernel<ReduceKind::max, false>,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      const TensorMeta& in = c.input_metas[0];
      std::vector<bool> mask = reduce_mask("max", in, c.attrs.as<ReduceAttrs>().axes);
      Shape kept = reduced_shape(in.shape, mask, true);
      const Tensor &g = c.grad_outputs[0], &y = c.outputs[0];
      Tensor winners = compare_equal(c.inputs[0], reshape(y, kept));
      Tensor count = sum(winners, c.attrs.as<ReduceAttrs>().axes, true);
      return {mul(winners, div(reshape(g, kept), count))};
    },
    .saved_inputs = 0b1,
    .saves_outputs = true,
    .cost = reduce_cost,
    .shard = &kMaxReduceShardRule,
};

const OpDef op_def_argmax = {
    .name = "argmax",
    .attrs = attrs_kind<ReduceAttrs>,
    .infer = infer_argmax,
    .kernel = argmax_kernel,
    .no_grad_reason = "argmax returns integer indices",
    .cost = reduce_cost,
    .shard = &kMaxReduceShardRule,
};

Tensor sum(const Tensor& x, std::vector<int64_t> axes, bool keepdims) {
  return call_one_output(OpKind::sum, {x},
                         ReduceAttrs{.axes = std::move(axes), .keepdims = keepdims});
}

Tensor mean(const Tensor& x, std::vector<int64_t> axes, bool keepdims) {
  return call_one_output(OpKind::mean, {x},
                         ReduceAttrs{.axes = std::move(axes), .keepdims = keepdims});
}

Tensor max(const Tensor& x, std::vector<int64_t> axes, bool keepdims) {
  return call_one_output(OpKind::max, {x},
                         ReduceAttrs{.axes = std::move(axes), .keepdims = keepdims});
}

Tensor argmax(const Tensor& x, int64_t axis, bool keepdims) {
  return call_one_output(OpKind::argmax, {x}, ReduceAttrs{.axes = {axis}, .keepdims = keepdims});
}

}  // namespace kiln::ops
