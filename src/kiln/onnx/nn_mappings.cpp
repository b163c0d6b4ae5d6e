// Neural-network ops. The exporter traces in evaluation mode: batch norm reads its running
// statistics and dropout is the identity; an op traced in training mode anyway is refused.
#include "kiln/onnx/detail/emitters.h"

namespace kiln::onnx {

void emit_softmax(NodeEmitter& e) {
  e.add("Softmax", {e.input(0)}, {e.output(0)}).i("axis", e.attrs<ops::AxisAttrs>().axis);
}

void emit_log_softmax(NodeEmitter& e) {
  e.add("LogSoftmax", {e.input(0)}, {e.output(0)}).i("axis", e.attrs<ops::AxisAttrs>().axis);
}

// Where(mask, x, fill) with the [T, S] mask of the positions kept (j <= i + S - T) as a constant:
// the last two dims never hold the batch.
void emit_causal_mask(NodeEmitter& e) {
  const ops::TensorMeta& x = e.input_meta(0);
  const int64_t t = x.shape.dim(-2), s = x.shape.dim(-1);
  Tensor mask = Tensor::empty({t, s}, DType::boolean);
  auto* keep = static_cast<uint8_t*>(mask.raw_data());
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < s; ++j) keep[i * s + j] = j <= i + (s - t);
  const double fill = e.attrs<ops::ScalarAttrs>().scalar;
  e.add("Where", {e.constant(mask), e.input(0), e.scalar(fill, x.dtype)}, {e.output(0)});
}

namespace {

// x with its last two dims swapped.
std::string transposed(NodeEmitter& e, int input) {
  const int rank = e.input_meta(input).shape.rank();
  std::vector<int64_t> perm;
  for (int k = 0; k < rank; ++k) perm.push_back(k);
  std::swap(perm[size_t(rank - 2)], perm[size_t(rank - 1)]);
  const std::string out = e.temp();
  e.add("Transpose", {e.input(input)}, {out}).ints("perm", perm);
  return out;
}

}  // namespace

// MatMul has Kiln's semantics (the last two dims, leading dims broadcast); transposed operands
// become Transpose nodes, which runtimes fold into a constant weight.
void emit_matmul(NodeEmitter& e) {
  const ops::MatmulAttrs& a = e.attrs<ops::MatmulAttrs>();
  const std::string lhs = a.transpose_a ? transposed(e, 0) : e.input(0);
  const std::string rhs = a.transpose_b ? transposed(e, 1) : e.input(1);
  e.add("MatMul", {lhs, rhs}, {e.output(0)});
}

void emit_conv2d(NodeEmitter& e) {
  const ops::ConvAttrs& a = e.attrs<ops::ConvAttrs>();
  const Shape& w = e.input_meta(1).shape;
  std::vector<std::string> inputs{e.input(0), e.input(1)};
  if (e.has_input(2)) inputs.push_back(e.input(2));
  const int64_t kernel[] = {w[2], w[3]};
  const int64_t pads[] = {a.padding[0], a.padding[1], a.padding[0], a.padding[1]};
  e.add("Conv", inputs, {e.output(0)})
      .ints("kernel_shape", kernel)
      .ints("strides", a.stride)
      .ints("pads", pads)
      .ints("dilations", a.dilation)
      .i("group", a.groups);
}

namespace {

OnnxNode pool(NodeEmitter& e, std::string_view op_type) {
  const ops::PoolAttrs& a = e.attrs<ops::PoolAttrs>();
  const int64_t pads[] = {a.padding[0], a.padding[1], a.padding[0], a.padding[1]};
  // Output sizes round down in both (ceil_mode 0).
  OnnxNode node = e.add(op_type, {e.input(0)}, {e.output(0)});
  node.ints("kernel_shape", a.kernel).ints("strides", a.stride).ints("pads", pads);
  return node;
}

}  // namespace

void emit_max_pool2d(NodeEmitter& e) {
  pool(e, "MaxPool");
}

// Kiln's average counts the padding in the window (oneDNN's pooling_avg_include_padding).
void emit_avg_pool2d(NodeEmitter& e) {
  pool(e, "AveragePool").i("count_include_pad", 1);
}

void emit_batch_norm(NodeEmitter& e) {
  const ops::BatchNormAttrs& a = e.attrs<ops::BatchNormAttrs>();
  if (a.training) {
    e.fail(
        "batch statistics (training mode) cannot be exported; the exporter traces in "
        "evaluation mode, so this network calls batch_norm with training=true itself");
  }
  // Output 0 only: the saved statistics are for the backward pass.
  e.add("BatchNormalization", {e.input(0), e.input(1), e.input(2), e.input(3), e.input(4)},
        {e.output(0)})
      .f("epsilon", float(a.eps));
}

// Normalizes over the last gamma.rank() dims. Output 0 only: Kiln's saved mean and 1/std drop
// the normalized dims, ONNX's keep them as 1, and only the backward pass reads them.
void emit_layer_norm(NodeEmitter& e) {
  const int normalized = e.input_meta(1).shape.rank();
  e.add("LayerNormalization", {e.input(0), e.input(1), e.input(2)}, {e.output(0)})
      .i("axis", -normalized)
      .f("epsilon", float(e.attrs<ops::LayerNormAttrs>().eps));
}

void emit_dropout(NodeEmitter& e) {
  if (e.attrs<ops::DropoutAttrs>().training) {
    e.fail(
        "dropout in training mode cannot be exported; the exporter traces in evaluation "
        "mode, so this network calls dropout with training=true itself");
  }
  e.add("Identity", {e.input(0)}, {e.output(0)});
}

// embedding(table, indices): rows of the table, as Gather along axis 0.
void emit_embedding(NodeEmitter& e) {
  e.add("Gather", {e.input(0), e.input(1)}, {e.output(0)}).i("axis", 0);
}

}  // namespace kiln::onnx
