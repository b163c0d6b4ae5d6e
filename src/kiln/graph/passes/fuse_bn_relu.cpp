// Graph-kernel fusion (d): BatchNorm + ReLU, forward and backward, as oneDNN's batch
// normalization with fuse_norm_relu.
//
// Forward:  (y, mean, inv_std) = batch_norm(x, ...); r = relu(y)      [y read by relu only]
//       ->  (r, mean, inv_std, ws) = fused[batch_norm,relu](x, ...)
// y is never written; ws is oneDNN's workspace, a bit per element of where relu passed.
//
// Backward: t = relu_grad(g, r); (dx, dgamma, dbeta) = batch_norm_grad(t, x, gamma, mean, inv_std)
//                                                                    [t read by the BN grad only]
//       ->  (dx, dgamma, dbeta) = fused[relu_grad,batch_norm_grad](g, x, gamma, mean, inv_std, ws)
// t is never written: the backward primitive masks g with ws as it reads it.
#include <oneapi/dnnl/dnnl.hpp>

#include "kiln/graph/passes/passes.h"
#include "kiln/ops/dnnl/context.h"

namespace kiln::graph::passes {
namespace {
using ops::OpKind;

bool is_op(const Node& n, OpKind k) {
  return !n.dead && n.type == NodeType::op && n.op == k;
}

// Bytes of the workspace oneDNN wants for a fused BN+ReLU over data of this meta.
int64_t workspace_bytes(const ops::TensorMeta& x, double eps) {
  namespace du = ops::dnnl_util;
  auto md = du::desc_of(x, "batch_norm");
  auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift |
               dnnl::normalization_flags::fuse_norm_relu;
  dnnl::batch_normalization_forward::primitive_desc pd(
      dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_training, md, float(eps),
                                              flags),
      du::scratchpad_attr(), du::engine());
  return int64_t(pd.workspace_desc().get_size());
}

}  // namespace

int fuse_bn_relu(Graph& graph) {
  const std::vector<NodeId> order = graph.schedule();
  const auto users = graph.users();
  std::vector<bool> is_output(graph.num_values());
  for (ValueId v : graph.outputs()) is_output[size_t(v)] = true;
  int fused = 0;
  for (NodeId bn_id : order) {
    const Node& bn = graph.node(bn_id);
    if (!is_op(bn, OpKind::batch_norm) || !bn.attrs.training) continue;
    const ValueId y = bn.outputs[0];
    const ValueId x_in = bn.inputs[0];
    const ops::TensorMeta xm = graph.value(bn.inputs[0]).meta;
    if (xm.dtype != DType::f32 || xm.shape.rank() < 2 || is_output[size_t(y)]) continue;
    const auto& yu = users[size_t(y)];
    if (yu.size() != 1 || !is_op(graph.node(yu[0]), OpKind::relu)) continue;
    // x must be dense in its meta's layout (the kernel reads it as such).
    if (!dense_as_meta(graph, bn.inputs[0])) continue;
    const NodeId relu_id = yu[0];
    const ValueId r = graph.node(relu_id).outputs[0];
    if (!(graph.value(r).meta == xm)) continue;

    int64_t ws_bytes = workspace_bytes(xm, bn.attrs.eps);
    // Forward: the relu's place is after the BN's; the BN (with its running-statistics side
    // effect) stays where it is and produces r directly, so nothing moves earlier than its inputs.
    Node fwd;
    fwd.type = NodeType::bn_relu;
    fwd.op = OpKind::batch_norm;
    fwd.attrs = bn.attrs;
    fwd.inputs = bn.inputs;
    fwd.members = {"batch_norm", "relu"};
    const std::vector<ValueId> bn_outputs = bn.outputs;
    ValueId ws = graph.add_value(
        ops::TensorMeta{Shape{std::max<int64_t>(ws_bytes, 1)}, DType::u8, ops::Layout::contiguous},
        ValueKind::intermediate, "bn_relu_workspace");
    fwd.outputs = {r, bn_outputs[1], bn_outputs[2], ws};
    graph.node(relu_id).dead = true;
    graph.node(bn_id) = std::move(fwd);
    for (size_t i = 0; i < 4; ++i) {
      Value& v = graph.value(graph.node(bn_id).outputs[i]);
      v.producer = bn_id;
      v.output_index = int(i);
    }
    ++fused;

    // Backward: relu_grad(g, r) feeding only this BN's gradient.
    for (NodeId rg_id : users[size_t(r)]) {
      const Node& rg = graph.node(rg_id);
      if (!is_op(rg, OpKind::relu_grad) || rg.inputs[1] != r) continue;
      const ValueId t = rg.outputs[0];
      if (is_output[size_t(t)] || !(graph.value(t).meta == xm)) continue;
      const auto& tu = users[size_t(t)];
      if (tu.size() != 1) continue;
      const Node& bg = graph.node(tu[0]);
      if (!is_op(bg, OpKind::batch_norm_grad) || bg.inputs[0] != t || bg.inputs[1] != x_in ||
          bg.inputs[3] != bn_outputs[1] || bg.inputs[4] != bn_outputs[2]) {
        continue;
      }
      if (!(graph.value(rg.inputs[0]).meta == xm) || !dense_as_meta(graph, rg.inputs[0])) continue;
      Node bwd;
      bwd.type = NodeType::bn_relu_grad;
      bwd.op = OpKind::batch_norm_grad;
      bwd.attrs = bg.attrs;
      bwd.inputs = {rg.inputs[0], bg.inputs[1], bg.inputs[2], bg.inputs[3], bg.inputs[4], ws};
      bwd.outputs = bg.outputs;
      bwd.members = {"relu_grad", "batch_norm_grad"};
      NodeId bg_id = tu[0];
      graph.node(rg_id).dead = true;
      graph.node(bg_id) = std::move(bwd);
      ++fused;
      break;
    }
  }
  return fused;
}

}  // namespace kiln::graph::passes
