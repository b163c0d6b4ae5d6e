// Graph-kernel fusion (g): a batch norm + relu whose output only 3x3 stride-1 convolutions of
// 16 or 32 channels read (the first half of a ResNet block: conv -> BN -> relu -> conv), each
// large enough for Kiln's Winograd kernel to pay (ops/kernels/conv_winograd.h), is applied by
// those convolutions to their input as they read it:
//
//   (r, mean, inv_std) = fused[batch_norm,relu](x, gamma, beta, running_mean, running_var)
//   y = conv2d(r, w);  dw = conv2d_backward_weights(dy, r)
//   (dx, dgamma, dbeta) = fused[relu_grad,batch_norm_grad](g, r, x, gamma, mean, inv_std, beta)
// ->
//   (mean, inv_std) = batch_norm[statistics](x, gamma, beta, running_mean, running_var)
//   y = fused[batch_norm,relu,conv2d](x, w, gamma, beta, mean, inv_std)
//   dw = fused[batch_norm,relu,conv2d_backward_weights](dy, x, gamma, beta, mean, inv_std)
//   (dx, dgamma, dbeta) = fused[relu_grad,batch_norm_grad](g, x, x, gamma, mean, inv_std, beta)
//
// r is never written nor kept for the backward: the batch norm reads x once instead of twice and
// writes nothing of x's size, and a tensor of x's size fewer is live from the forward to the
// backward. The backward's batch-norm gradient already finds the relu mask from x and beta (it
// is given beta), so its r input, which it does not read, becomes x. The convolutions compute
// relu(batch_norm(x)) with the batch-norm kernel's own arithmetic, so their results are those
// of the unfused step bit for bit.
//
// Runs after fuse_bn_relu (which makes the bn_relu nodes) and fuse_epilogues (a convolution
// with post-ops keeps reading r).
#include "kiln/graph/detail/passes.h"
#include "kiln/ops/kernels/conv_winograd.h"

namespace kiln::graph::passes {
namespace {
using ops::OpKind;

// How a reader of r (the bn_relu's output) takes part.
enum class Reader { convolution, weight_gradient, bn_gradient, other };

// The kernel reads and writes activations dense channels-last (or nChw16c, which the layout pass
// may make of them later). A gradient that comes back through a reshape (a Flatten before a
// Dense) is row-major: a convolution reading it keeps its unfused kernels.
bool winograd_laid_out(const Graph& graph, ValueId v) {
  return graph.value(v).meta.layout == ops::Layout::channels_last && dense_as_meta(graph, v);
}

Reader classify(const Graph& graph, const Node& user, ValueId r, ValueId x) {
  const ops::TensorMeta& rm = graph.value(r).meta;
  auto reads_only_at = [&](size_t at) {
    for (size_t i = 0; i < user.inputs.size(); ++i) {
      if ((user.inputs[i] == r) != (i == at)) return false;
    }
    return true;
  };
  // (The kernel reads the weights as they lie: a dense OIHW tensor.)
  if (is_live_op(user, OpKind::conv2d) && user.inputs.size() == 2 && reads_only_at(0) &&
      winograd_laid_out(graph, user.outputs[0]) && dense_as_meta(graph, user.inputs[1]) &&
      graph.value(user.inputs[1]).meta.layout == ops::Layout::contiguous &&
      ops::winograd_3x3_fits(rm.shape, graph.value(user.inputs[1]).meta.shape,
                             user.attrs.as<ops::ConvAttrs>()) &&
      ops::winograd_3x3_chosen(rm.shape, user.attrs.as<ops::ConvAttrs>())) {
    return Reader::convolution;
  }
  if (is_live_op(user, OpKind::conv2d_backward_weights) &&
      !user.attrs.as<ops::ConvAttrs>().bias_grad && reads_only_at(1) &&
      winograd_laid_out(graph, user.inputs[0]) &&
      ops::winograd_3x3_fits(rm.shape, Shape(user.attrs.as<ops::ConvAttrs>().shape),
                             user.attrs.as<ops::ConvAttrs>()) &&
      ops::winograd_3x3_chosen(rm.shape, user.attrs.as<ops::ConvAttrs>())) {
    return Reader::weight_gradient;
  }
  // Given beta (input 6) the fused gradient recomputes the relu mask from x: its r is not read.
  if (user.type == NodeType::bn_relu_grad && !user.dead && user.inputs.size() > 6 &&
      user.inputs[2] == x && reads_only_at(1)) {
    return Reader::bn_gradient;
  }
  return Reader::other;
}

}  // namespace

int fuse_bn_relu_conv(Graph& graph) {
  const ScheduleView view(graph);
  int fused = 0;
  for (NodeId bn_id : view.order) {
    const Node& bn = graph.node(bn_id);
    // Without a residual: the relu's input is the batch norm's output alone.
    if (bn.type != NodeType::bn_relu || bn.dead || bn.inputs.size() != 5) continue;
    const ValueId x = bn.inputs[0], r = bn.outputs[0];
    const ops::TensorMeta& xm = graph.value(x).meta;
    if (xm.dtype != DType::f32 || xm.shape.rank() != 4 || !winograd_laid_out(graph, x) ||
        view.is_output[size_t(r)]) {
      continue;
    }
    bool all_fit = true, any_convolution = false;
    for (NodeId u : view.users[size_t(r)]) {
      const Reader kind = classify(graph, graph.node(u), r, x);
      all_fit = all_fit && kind != Reader::other;
      any_convolution = any_convolution || kind == Reader::convolution;
    }
    if (!all_fit || !any_convolution) continue;

    const ValueId gamma = bn.inputs[1], beta = bn.inputs[2], mean = bn.outputs[1],
                  inv_std = bn.outputs[2];
    for (NodeId u : view.users[size_t(r)]) {
      Node& user = graph.node(u);
      switch (classify(graph, user, r, x)) {
        case Reader::convolution:
          user.type = NodeType::bn_relu_conv;
          user.inputs = {x, user.inputs[1], gamma, beta, mean, inv_std};
          user.members = {"batch_norm", "relu", "conv2d"};
          break;
        case Reader::weight_gradient:
          user.type = NodeType::bn_relu_conv;
          user.inputs = {user.inputs[0], x, gamma, beta, mean, inv_std};
          user.members = {"batch_norm", "relu", "conv2d_backward_weights"};
          break;
        case Reader::bn_gradient:
          user.inputs[1] = x;
          break;
        case Reader::other:
          break;
      }
    }
    Node& stats = graph.node(bn_id);
    stats.type = NodeType::bn_stats;
    stats.outputs = {mean, inv_std};
    stats.members = {"batch_norm[statistics]"};
    for (size_t i = 0; i < 2; ++i) {
      Value& v = graph.value(stats.outputs[i]);
      v.producer = bn_id;
      v.output_index = int(i);
    }
    graph.value(r).producer = -1;
    ++fused;
  }
  return fused;
}

}  // namespace kiln::graph::passes
