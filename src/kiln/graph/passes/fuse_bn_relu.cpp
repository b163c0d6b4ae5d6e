// Graph-kernel fusion (d): BatchNorm + [residual add +] ReLU forward, ReLU-grad + BatchNorm-grad
// backward, on the rows kernels (ops/kernels/batch_norm_rows.h): f32 or bf16 activations laid
// out channels-last 4-D or [N, C], training or eval.
//
// Forward:  (y, mean, inv_std) = batch_norm(x, ...); r = relu(y)          [y read by relu only]
//       ->  (r, mean, inv_std) = fused[batch_norm,relu](x, ...)
// Residual: (y, mean, inv_std) = batch_norm(x, ...); z = add(y, s); r = relu(z)
//                                                          [y read by add, z by relu only]
//       ->  (r, mean, inv_std) = fused[batch_norm,add,relu](x, ..., s)
// y (and z) are never written. The residual form is a ResNet block's second BN; it takes the
// relu's place in the schedule, since the shortcut s is often computed after the BN.
//
// Backward: t = relu_grad(g, r); (dx, dgamma, dbeta) = batch_norm_grad(t, x, gamma, mean, inv_std)
//                                                                    [t read by the BN grad only]
//       ->  (dx, dgamma, dbeta) = fused[relu_grad,batch_norm_grad](g, r, x, gamma, mean, inv_std,
//                                                                   beta)
// t is never written: the kernel masks g where relu_grad(g, r) would have, r > 0. For f32 it
// does not even read r: r > 0 exactly where the forward's pre-relu value
// fma(x - mean, gamma·inv_std, beta) > 0, which it recomputes from x (read anyway) and beta,
// with the forward's own float arithmetic. (After a residual add t usually also feeds the
// shortcut's gradient, and then stays; where it does not, r depends on the shortcut too, so
// no beta is passed and r is read.)
//
// Runs before fuse_elementwise, which would otherwise take the add + relu.
#include "kiln/graph/detail/passes.h"

namespace kiln::graph::passes {
namespace {
using ops::OpKind;

// Whether the rows kernels can read v as the arena (or the caller's input) holds it: a
// dense f32/bf16 activation, channels-last 4-D or row-major with only N and C (> 1).
bool rows_activation(const Graph& graph, ValueId v) {
  const Value& val = graph.value(v);
  const ops::TensorMeta& m = val.meta;
  if (m.dtype != DType::f32 && m.dtype != DType::bf16) return false;
  if (m.shape.rank() < 2) return false;
  const bool channels_last = m.layout == ops::Layout::channels_last && m.shape.rank() == 4;
  const bool rows_major =
      m.layout == ops::Layout::contiguous && m.shape.numel() == m.shape[0] * m.shape[1];
  if (!channels_last && !rows_major) return false;
  if (val.kind != ValueKind::intermediate && val.kind != ValueKind::input) return false;
  return dense_as_meta(graph, v);
}

// The single live reader of v (read once), or -1.
NodeId only_user(const ScheduleView& view, ValueId v) {
  if (view.is_output[size_t(v)]) return -1;
  const auto& u = view.users[size_t(v)];
  return u.size() == 1 ? u[0] : -1;
}

// Whether the BN may move from its place to the relu's: nothing in between writes what it
// reads, reads the running statistics it writes, or reads its mean/inv_std outputs early.
bool can_move_bn(const Graph& graph, const ScheduleView& view, const Node& bn, NodeId bn_id,
                 NodeId to_id) {
  const int from = view.pos[size_t(bn_id)], to = view.pos[size_t(to_id)];
  if (crosses_write(graph, view.order, bn, from, to)) return false;
  for (int p = from + 1; p < to; ++p) {
    for (ValueId in : graph.node(view.order[size_t(p)]).inputs) {
      if (in != kNoValue && (in == bn.inputs[3] || in == bn.inputs[4])) return false;
    }
  }
  for (size_t i = 1; i < bn.outputs.size(); ++i) {
    for (NodeId u : view.users[size_t(bn.outputs[i])]) {
      if (view.pos[size_t(u)] < to) return false;
    }
  }
  return true;
}

// relu_grad(g, r) feeding only this BN's gradient -> one fused backward node. Returns 1 if fused.
// `beta` (kNoValue after a residual add, where r also depends on the shortcut): the BN's beta,
// from which the kernel recomputes the relu mask out of x instead of reading r.
int fuse_backward(Graph& graph, const ScheduleView& view, ValueId r, ValueId x, ValueId beta,
                  const std::vector<ValueId>& bn_outputs) {
  const ops::TensorMeta& xm = graph.value(x).meta;
  for (NodeId rg_id : view.users[size_t(r)]) {
    const Node& rg = graph.node(rg_id);
    if (!is_live_op(rg, OpKind::relu_grad) || rg.inputs[1] != r) continue;
    const ValueId t = rg.outputs[0], g = rg.inputs[0];
    if (!(graph.value(t).meta == xm)) continue;
    const NodeId bg_id = only_user(view, t);
    if (bg_id < 0) continue;
    const Node& bg = graph.node(bg_id);
    if (!is_live_op(bg, OpKind::batch_norm_grad) || bg.inputs[0] != t || bg.inputs[1] != x ||
        bg.inputs[3] != bn_outputs[1] || bg.inputs[4] != bn_outputs[2]) {
      continue;
    }
    if (!(graph.value(g).meta == xm) || !rows_activation(graph, g)) continue;
    Node bwd;
    bwd.type = NodeType::bn_relu_grad;
    bwd.op = OpKind::batch_norm_grad;
    bwd.attrs = bg.attrs;
    bwd.inputs = {g, r, x, bg.inputs[2], bg.inputs[3], bg.inputs[4]};
    if (beta != kNoValue) bwd.inputs.push_back(beta);
    bwd.outputs = bg.outputs;
    bwd.members = {"relu_grad", "batch_norm_grad"};
    graph.node(rg_id).dead = true;
    graph.node(bg_id) = std::move(bwd);
    return 1;
  }
  return 0;
}

// At the end of a residual block's backward the two gradients that reach its output (the
// shortcut's and the next block's) are added and masked by its relu, and that gradient feeds
// the block's last BN gradient:
//   s = add(a, b); t = relu_grad(s, r); (dx, dgamma, dbeta) = batch_norm_grad(t, x, ...)
//   ->  (dx, dgamma, dbeta, t) = fused[add,relu_grad,batch_norm_grad](a, b, r, x, ...)
// t is still written (the shortcut's gradient reads it) but in the BN gradient's first pass,
// which then need not read it back. The fused node takes the BN gradient's place, so t's other
// readers must all come after it.
int fuse_add_relu_grad_into_bn_grad(Graph& graph) {
  const ScheduleView view(graph);
  int fused = 0;
  auto producer_op = [&](ValueId v, OpKind k) -> NodeId {
    const NodeId p = graph.value(v).producer;
    return p >= 0 && is_live_op(graph.node(p), k) ? p : -1;
  };
  for (NodeId bg_id : view.order) {
    const Node& bg = graph.node(bg_id);
    if (!is_live_op(bg, OpKind::batch_norm_grad)) continue;
    const ValueId t = bg.inputs[0], x = bg.inputs[1];
    const NodeId rg_id = producer_op(t, OpKind::relu_grad);
    if (rg_id < 0) continue;
    const Node& rg = graph.node(rg_id);
    const ValueId s = rg.inputs[0], r = rg.inputs[1];
    const NodeId add_id = producer_op(s, OpKind::add);
    if (add_id < 0 || only_user(view, s) != rg_id || view.is_output[size_t(t)]) continue;
    const Node& add = graph.node(add_id);
    const ValueId a = add.inputs[0], b = add.inputs[1];
    const ops::TensorMeta& xm = graph.value(x).meta;
    bool alike = true;
    for (ValueId v : {a, b, r, t, x}) {
      alike = alike && graph.value(v).meta == xm && rows_activation(graph, v);
    }
    if (!alike) continue;
    const int at = view.pos[size_t(bg_id)];
    bool readers_after = true;
    for (NodeId u : view.users[size_t(t)])
      readers_after = readers_after && view.pos[size_t(u)] >= at;
    if (!readers_after || crosses_write(graph, view.order, add, view.pos[size_t(add_id)], at) ||
        crosses_write(graph, view.order, rg, view.pos[size_t(rg_id)], at)) {
      continue;
    }
    Node fused_node;
    fused_node.type = NodeType::bn_add_relu_grad;
    fused_node.op = OpKind::batch_norm_grad;
    fused_node.attrs = bg.attrs;
    fused_node.inputs = {a, b, r, x, bg.inputs[2], bg.inputs[3], bg.inputs[4]};
    fused_node.outputs = bg.outputs;
    fused_node.outputs.push_back(t);
    fused_node.members = {"add", "relu_grad", "batch_norm_grad"};
    graph.node(add_id).dead = true;
    graph.node(rg_id).dead = true;
    graph.node(bg_id) = std::move(fused_node);
    Value& tv = graph.value(t);
    tv.producer = bg_id;
    tv.output_index = 3;
    ++fused;
  }
  return fused;
}

}  // namespace

int fuse_bn_relu(Graph& graph) {
  const ScheduleView view(graph);
  int fused = 0;
  for (NodeId bn_id : view.order) {
    const Node& bn = graph.node(bn_id);
    if (!is_live_op(bn, OpKind::batch_norm)) continue;
    const ValueId x = bn.inputs[0], y = bn.outputs[0];
    const ops::TensorMeta xm = graph.value(x).meta;
    if (!rows_activation(graph, x)) continue;
    const NodeId next = only_user(view, y);
    if (next < 0) continue;

    // relu(y), or relu(add(y, s)) with s a full-size activation like x.
    NodeId relu_id = -1;
    ValueId shortcut = kNoValue;
    if (is_live_op(graph.node(next), OpKind::relu)) {
      relu_id = next;
    } else if (is_live_op(graph.node(next), OpKind::add)) {
      const Node& add = graph.node(next);
      const ValueId s = add.inputs[0] == y ? add.inputs[1] : add.inputs[0];
      const ValueId z = add.outputs[0];
      const NodeId after = only_user(view, z);
      if (s != y && graph.value(s).meta == xm && rows_activation(graph, s) &&
          graph.value(z).meta == xm && after >= 0 && is_live_op(graph.node(after), OpKind::relu) &&
          can_move_bn(graph, view, bn, bn_id, after)) {
        relu_id = after;
        shortcut = s;
      }
    }
    if (relu_id < 0) continue;
    const ValueId r = graph.node(relu_id).outputs[0];
    if (!(graph.value(r).meta == xm)) continue;

    Node fwd;
    fwd.type = NodeType::bn_relu;
    fwd.op = OpKind::batch_norm;
    fwd.attrs = bn.attrs;
    fwd.inputs = bn.inputs;
    fwd.members = {"batch_norm", "relu"};
    if (shortcut != kNoValue) {
      fwd.inputs.push_back(shortcut);
      fwd.members = {"batch_norm", "add", "relu"};
    }
    const std::vector<ValueId> bn_outputs = bn.outputs;
    fwd.outputs = {r, bn_outputs[1], bn_outputs[2]};
    // Without a residual the fused node stays in the BN's place (its running-statistics update
    // does not move); with one it takes the relu's place, after the shortcut is computed.
    const NodeId at = shortcut == kNoValue ? bn_id : relu_id;
    if (shortcut != kNoValue) graph.node(next).dead = true;  // the add
    graph.node(shortcut == kNoValue ? relu_id : bn_id).dead = true;
    graph.node(at) = std::move(fwd);
    for (size_t i = 0; i < 3; ++i) {
      Value& v = graph.value(graph.node(at).outputs[i]);
      v.producer = at;
      v.output_index = int(i);
    }
    ++fused;
    fused += fuse_backward(graph, view, r, x,
                           shortcut == kNoValue ? graph.node(at).inputs[2] : kNoValue, bn_outputs);
  }
  return fused + fuse_add_relu_grad_into_bn_grad(graph);
}

}  // namespace kiln::graph::passes
