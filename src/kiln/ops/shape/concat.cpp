// concat, and pad_slice_grad (the gradient of slice): ops that place blocks of one tensor into a
// larger one.
#include <cstring>

#include "kiln/ops/detail/slice_spec.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/functional.h"
#include "kiln/ops/kernels/copy.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::ops {
namespace {

Cost output_copy_cost(std::span<const TensorMeta>, std::span<const TensorMeta> out, const Attrs&) {
  return {0, 2.0 * double(out[0].shape.numel()) * double(dtype_size(out[0].dtype))};
}

int concat_axis(std::span<const TensorMeta> in, const AxisAttrs& a) {
  if (in.empty()) throw ShapeError("concat: needs at least one input");
  const int rank = in[0].shape.rank();
  const int64_t axis = a.axis < 0 ? a.axis + rank : a.axis;
  if (axis < 0 || axis >= rank) {
    throw ShapeError(detail::concat("concat: axis ", a.axis, " is out of range for input 0 ",
                                    describe_meta(in[0])));
  }
  return int(axis);
}

std::vector<TensorMeta> infer_concat(std::span<const TensorMeta> in, const Attrs& a) {
  const int axis = concat_axis(in, a.as<AxisAttrs>());
  Shape out = in[0].shape;
  out[axis] = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const Shape& s = in[i].shape;
    bool match = s.rank() == out.rank() && in[i].dtype == in[0].dtype;
    for (int d = 0; match && d < s.rank(); ++d) match = d == axis || s[d] == in[0].shape[d];
    if (!match) {
      throw ShapeError(detail::concat("concat: input ", i, " ", describe_meta(in[i]),
                                      " does not match input 0 ", describe_meta(in[0]),
                                      " outside axis ", axis));
    }
    out[axis] += s[axis];
  }
  return {TensorMeta{out, in[0].dtype}};
}

void concat_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  Tensor& y = out[0];
  const int64_t axis0 = a.as<AxisAttrs>().axis;
  const int64_t axis = axis0 < 0 ? axis0 + y.rank() : axis0;
  const int64_t axis_stride = y.strides()[size_t(axis)];
  int64_t at = 0;
  for (const Tensor& x : in) {
    Tensor part = y.view_as(x.shape(), y.strides(), y.offset() + at * axis_stride);
    strided_copy(x, part);
    at += x.shape()[int(axis)];
  }
}

std::vector<TensorMeta> infer_pad_slice_grad(std::span<const TensorMeta> in, const Attrs& attrs) {
  const SliceAttrs& a = attrs.as<SliceAttrs>();
  TensorMeta full{Shape(a.shape), in[0].dtype};
  shape::SliceSpec s = shape::slice_spec("pad_slice_grad", full, a);
  Shape expected = full.shape;
  expected[s.axis] = s.length;
  if (in[0].shape != expected) {
    throw ShapeError("pad_slice_grad: grad " + describe_meta(in[0]) + " does not match the slice " +
                     expected.str() + " of shape " + full.shape.str());
  }
  return {full};
}

void pad_slice_grad_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  Tensor& y = out[0];
  std::memset(y.raw_data(), 0, y.nbytes());
  shape::SliceSpec s = shape::slice_spec("pad_slice_grad", meta_of(y), a.as<SliceAttrs>());
  if (s.length == 0) return;
  Strides strides = y.strides();
  const int64_t offset = y.offset() + s.start * strides[size_t(s.axis)];
  strides[size_t(s.axis)] *= s.step;
  Tensor window = y.view_as(in[0].shape(), strides, offset);
  strided_copy(in[0], window);
}

}  // namespace

const OpDef op_def_concat = {
    .name = "concat",
    .attrs = attrs_kind<AxisAttrs>,
    .num_inputs = -1,
    .infer = infer_concat,
    .kernel = concat_kernel,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      const int axis = concat_axis(c.input_metas, c.attrs.as<AxisAttrs>());
      std::vector<Tensor> grads(c.input_metas.size());
      int64_t at = 0;
      for (size_t i = 0; i < grads.size(); ++i) {
        const int64_t n = c.input_metas[i].shape[axis];
        if (c.needs_grad[i]) grads[i] = slice(c.grad_outputs[0], axis, at, at + n);
        at += n;
      }
      return grads;
    },
    .cost = output_copy_cost,
    .shard = &kConcatShardRule,
};

const OpDef op_def_pad_slice_grad = {
    .name = "pad_slice_grad",
    .attrs = attrs_kind<SliceAttrs>,
    .infer = infer_pad_slice_grad,
    .kernel = pad_slice_grad_kernel,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      const SliceAttrs& a = c.attrs.as<SliceAttrs>();
      return {slice(c.grad_outputs[0], a.axis, a.start, a.end, a.step)};
    },
    .cost = output_copy_cost,
    .shard = &kSliceShardRule,  // Conv2d's "same" padding calls it in the forward too
};

Tensor concat(const std::vector<Tensor>& xs, int64_t axis) {
  Attrs a = AxisAttrs{.axis = axis};
  return std::move(call(OpKind::concat, std::span<const Tensor>(xs), a)[0]);
}

Tensor pad_slice_grad(const Tensor& grad, const Shape& shape, int64_t axis, int64_t start,
                      int64_t end, int64_t step) {
  Attrs a =
      SliceAttrs{.axis = axis, .start = start, .end = end, .step = step, .shape = shape.dims()};
  return call_one_output(OpKind::pad_slice_grad, {grad}, a);
}

}  // namespace kiln::ops
