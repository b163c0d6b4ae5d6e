// Reductions and shape ops. The traced shapes hold the batch size the network was traced at;
// where an ONNX attribute or shape tensor would repeat it, these write it so that any batch size
// works (Reshape's 0 "copy this dim", Expand's 1 "keep the input's", Slice's open end), and
// export.cpp traces at two batch sizes to check that no shape kept it.
#include <cstring>
#include <limits>

#include "kiln/onnx/detail/emitters.h"

namespace kiln::onnx {
namespace {

std::vector<int64_t> normalized_axes(const std::vector<int64_t>& axes, int rank) {
  std::vector<int64_t> out;
  for (int64_t a : axes) out.push_back(a < 0 ? a + rank : a);
  return out;
}

// Reshape's shape input from `from` to `to`: dim 0 copies the input's (0) where it is kept,
// else is inferred (-1), so a batch in dim 0 flows through; the other dims are fixed.
std::vector<int64_t> reshape_target(const Shape& from, const Shape& to) {
  std::vector<int64_t> target = to.dims();
  if (target.empty() || from.rank() == 0 || to.numel() == 0) return target;
  target[0] = to[0] == from[0] ? 0 : -1;
  return target;
}

}  // namespace

void emit_sum(NodeEmitter& e) {
  const ops::ReduceAttrs& a = e.attrs<ops::ReduceAttrs>();
  std::vector<std::string> inputs{e.input(0)};
  // No axes input: every dimension (noop_with_empty_axes = 0).
  if (!a.axes.empty())
    inputs.push_back(e.constant_i64(normalized_axes(a.axes, e.input_meta(0).shape.rank())));
  e.add("ReduceSum", inputs, {e.output(0)}).i("keepdims", a.keepdims);
}

namespace {

// ReduceMean and ReduceMax take their axes as an attribute up to opset 17.
void reduce_with_axes_attribute(NodeEmitter& e, std::string_view op_type) {
  const ops::ReduceAttrs& a = e.attrs<ops::ReduceAttrs>();
  OnnxNode node = e.add(op_type, {e.input(0)}, {e.output(0)});
  node.i("keepdims", a.keepdims);
  if (!a.axes.empty()) node.ints("axes", normalized_axes(a.axes, e.input_meta(0).shape.rank()));
}

}  // namespace

void emit_mean(NodeEmitter& e) {
  reduce_with_axes_attribute(e, "ReduceMean");
}
void emit_max(NodeEmitter& e) {
  reduce_with_axes_attribute(e, "ReduceMax");
}

void emit_argmax(NodeEmitter& e) {
  const ops::ReduceAttrs& a = e.attrs<ops::ReduceAttrs>();
  if (a.axes.size() != 1) e.fail("ONNX's ArgMax takes exactly one axis");
  const int rank = e.input_meta(0).shape.rank();
  e.add("ArgMax", {e.input(0)}, {e.output(0)})
      .i("axis", normalized_axes(a.axes, rank)[0])
      .i("keepdims", a.keepdims);
}

// The inverse of broadcasting: sums the leading dims the target lacks and, keeping them, the
// dims where the target has 1; then drops the leading ones.
void emit_sum_to_shape(NodeEmitter& e) {
  const Shape& in = e.input_meta(0).shape;
  const Shape& target = e.output_meta(0).shape;
  const int lead = in.rank() - target.rank();
  std::vector<int64_t> axes;
  for (int k = 0; k < in.rank(); ++k) {
    if (k < lead || (target[k - lead] == 1 && in[k] != 1)) axes.push_back(k);
  }
  std::string summed = e.input(0);
  Shape summed_shape = in;
  if (!axes.empty()) {
    summed = e.temp();
    e.add("ReduceSum", {e.input(0), e.constant_i64(axes)}, {summed}).i("keepdims", 1);
    for (int64_t k : axes) summed_shape[int(k)] = 1;
  }
  e.add("Reshape", {summed, e.constant_i64(reshape_target(summed_shape, target))}, {e.output(0)});
}

void emit_broadcast_to(NodeEmitter& e) {
  const Shape& in = e.input_meta(0).shape;
  std::vector<int64_t> shape = e.output_meta(0).shape.dims();
  const int lead = int(shape.size()) - in.rank();
  // Where the input already has the size, 1 keeps it (Expand broadcasts both ways).
  for (int k = 0; k < in.rank(); ++k) {
    if (shape[size_t(lead + k)] == in[k]) shape[size_t(lead + k)] = 1;
  }
  e.add("Expand", {e.input(0), e.constant_i64(shape)}, {e.output(0)});
}

void emit_reshape(NodeEmitter& e) {
  // The inferred output shape: the attribute may hold a -1.
  const std::vector<int64_t> target = reshape_target(e.input_meta(0).shape, e.output_meta(0).shape);
  e.add("Reshape", {e.input(0), e.constant_i64(target)}, {e.output(0)});
}

void emit_transpose(NodeEmitter& e) {
  const std::vector<int64_t> perm =
      normalized_axes(e.attrs<ops::PermuteAttrs>().perm, e.input_meta(0).shape.rank());
  e.add("Transpose", {e.input(0)}, {e.output(0)}).ints("perm", perm);
}

void emit_concat(NodeEmitter& e) {
  std::vector<std::string> inputs;
  for (int i = 0; i < e.num_inputs(); ++i) inputs.push_back(e.input(i));
  const int rank = e.output_meta(0).shape.rank();
  e.add("Concat", inputs, {e.output(0)})
      .i("axis", normalized_axes({e.attrs<ops::AxisAttrs>().axis}, rank)[0]);
}

// Both follow Python's slicing (negative bounds from the end, clamped); an end at or past the
// dimension is written open, so slicing a whole batch dimension keeps any batch.
void emit_slice(NodeEmitter& e) {
  const ops::SliceAttrs& a = e.attrs<ops::SliceAttrs>();
  const Shape& in = e.input_meta(0).shape;
  const int64_t axis = normalized_axes({a.axis}, in.rank())[0];
  const int64_t end = a.end >= in[int(axis)] ? std::numeric_limits<int64_t>::max() : a.end;
  e.add("Slice",
        {e.input(0), e.constant_i64({a.start}), e.constant_i64({end}), e.constant_i64({axis}),
         e.constant_i64({a.step})},
        {e.output(0)});
}

void emit_cast(NodeEmitter& e) {
  e.add("Cast", {e.input(0)}, {e.output(0)})
      .i("to", onnx_element_type(e.attrs<ops::CastAttrs>().dtype));
}

void emit_one_hot(NodeEmitter& e) {
  const ops::OneHotAttrs& a = e.attrs<ops::OneHotAttrs>();
  // values = [off, on] in the output dtype; every dtype's zero is all zero bits.
  Tensor values = Tensor::ones({2}, a.dtype);
  std::memset(values.raw_data(), 0, dtype_size(a.dtype));
  // int64 ids: what runtimes implement OneHot for with every output type.
  std::string ids = e.input(0);
  if (e.input_meta(0).dtype != DType::i64) {
    ids = e.temp();
    e.add("Cast", {e.input(0)}, {ids}).i("to", onnx_element_type(DType::i64));
  }
  e.add("OneHot", {ids, e.constant_i64({a.num_classes}), e.constant(values)}, {e.output(0)})
      .i("axis", -1);
}

}  // namespace kiln::onnx
