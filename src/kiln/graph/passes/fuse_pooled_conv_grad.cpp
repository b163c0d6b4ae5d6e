// Graph-kernel fusion (f): a max pool's gradient (at most a quarter non-zero) into the backward of
// the convolution before it, so that gradient is never written; where it pays, the conv+relu+pool
// forward becomes one node that records each window's winner. Measured: bench/README.md, section
// 'Kernel choices measured here'.
#include <algorithm>
#include <array>

#include "kiln/graph/detail/fused_kernels.h"
#include "kiln/graph/detail/passes.h"
#include "kiln/ops/kernels/conv_single_channel.h"

namespace kiln::graph::passes {
namespace {
using ops::OpKind;

// 4-D values the kernel reads and writes channels-last (one channel: any dense layout is that).
bool channels_last_meta(const Graph& graph, ValueId v) {
  const ops::TensorMeta& m = graph.value(v).meta;
  return m.dtype == DType::f32 && m.shape.rank() == 4 && dense_as_meta(graph, v) &&
         (m.layout == ops::Layout::channels_last || m.shape[1] == 1);
}

// A live max_pool2d with 2×2 windows of stride 2 and no padding.
bool is_plain_pool(const Node& n) {
  const std::array<int64_t, 2> window{2, 2};
  if (!is_live_op(n, OpKind::max_pool2d)) return false;
  const ops::PoolAttrs& a = n.attrs.as<ops::PoolAttrs>();
  return a.kernel == window && a.stride == window && a.padding == std::array<int64_t, 2>{0, 0};
}

bool same_convolution(const ops::ConvAttrs& a, const ops::ConvAttrs& b) {
  return a.stride == b.stride && a.padding == b.padding && a.dilation == b.dilation &&
         a.groups == b.groups;
}

// The backward half (see the header), at the pool gradient node `pn`.
int fuse_backward(Graph& graph, NodeId pn, const ScheduleView& view) {
  const Node& pg = graph.node(pn);
  const bool masked = pg.type == NodeType::epilogue && pg.post_ops.size() == 1 &&
                      pg.post_ops[0] == PostOp::relu_grad;
  if (pg.dead || pg.op != OpKind::max_pool2d_grad || !(masked || pg.type == NodeType::op)) return 0;
  const ops::PoolAttrs& pool = pg.attrs.as<ops::PoolAttrs>();
  const std::array<int64_t, 2> window{2, 2};
  if (pool.kernel != window || pool.stride != window || pool.padding[0] != 0 ||
      pool.padding[1] != 0) {
    return 0;
  }
  const ValueId g = pg.outputs[0], dyp = pg.inputs[0], r = pg.inputs[1];
  if (view.is_output[size_t(g)] || graph.value(dyp).meta.dtype != DType::f32 ||
      !channels_last_meta(graph, r)) {
    return 0;
  }
  NodeId data = -1, weights = -1;
  for (NodeId u : view.users[size_t(g)]) {
    const Node& n = graph.node(u);
    if (u == data || u == weights) continue;
    if (is_live_op(n, OpKind::conv2d_backward_data) && data < 0 && n.inputs[0] == g &&
        n.inputs[1] != g) {
      data = u;
    } else if (is_live_op(n, OpKind::conv2d_backward_weights) && weights < 0 && n.inputs[0] == g &&
               n.inputs[1] != g) {
      weights = u;
    } else {
      return 0;  // another reader needs g itself
    }
  }
  if (weights < 0) return 0;
  const Node& bw = graph.node(weights);
  const ValueId x = bw.inputs[1];
  const ops::ConvAttrs& conv = bw.attrs.as<ops::ConvAttrs>();
  const bool has_db = conv.bias_grad;
  const Shape w_shape(conv.shape);
  if (bw.outputs.size() != size_t(1 + int(has_db)) || !channels_last_meta(graph, x) ||
      !pooled_conv_grad_fits(graph.value(x).meta.shape, w_shape, conv, data >= 0)) {
    return 0;
  }
  Node f;
  f.type = NodeType::pooled_conv_grad;
  f.op = OpKind::conv2d_backward_weights;
  f.attrs = bw.attrs;  // the pool window is the kernel's fixed 2×2
  f.inputs = {dyp, r, x, kNoValue};
  f.outputs = bw.outputs;
  f.post_ops = pg.post_ops;
  f.members = {"max_pool2d_grad"};
  if (masked) f.members.emplace_back("relu_grad");
  int last = view.pos[size_t(weights)];
  if (data >= 0) {
    const Node& bd = graph.node(data);
    const ValueId w = bd.inputs[1], dx = bd.outputs[0];
    if (!same_convolution(bd.attrs.as<ops::ConvAttrs>(), conv) ||
        graph.value(w).meta.shape != w_shape || graph.value(w).meta.dtype != DType::f32 ||
        !dense_as_meta(graph, w) || graph.value(w).meta.layout != ops::Layout::contiguous ||
        graph.value(dx).meta.shape != graph.value(x).meta.shape || !channels_last_meta(graph, dx)) {
      return 0;
    }
    f.inputs[3] = w;
    f.outputs.push_back(dx);
    f.members.emplace_back("conv2d_backward_data");
    last = std::max(last, view.pos[size_t(data)]);
  }
  f.members.emplace_back("conv2d_backward_weights");
  if (crosses_write(graph, view.order, f, view.pos[size_t(pn)], last)) return 0;
  graph.node(weights).dead = true;
  if (data >= 0) graph.node(data).dead = true;
  for (size_t i = 0; i < f.outputs.size(); ++i) {
    graph.value(f.outputs[i]).producer = pn;
    graph.value(f.outputs[i]).output_index = int(i);
  }
  graph.node(pn) = std::move(f);
  return 1;
}

// The one 2×2/2 max pool that reads r besides the backward node `bn`, where r has no other
// reader and is not a graph output; -1 otherwise.
NodeId only_pool_beside(const Graph& graph, const std::vector<std::vector<NodeId>>& users,
                        ValueId r, NodeId bn) {
  const std::vector<ValueId>& outputs = graph.outputs();
  if (std::find(outputs.begin(), outputs.end(), r) != outputs.end()) return -1;
  NodeId pool = -1;
  for (NodeId u : users[size_t(r)]) {
    if (u == bn) continue;
    if (pool >= 0 || !is_plain_pool(graph.node(u))) return -1;
    pool = u;
  }
  return pool;
}

// A new value for the winners of the pool whose output is `pooled`: one byte per element,
// channels-last (as the kernels record them).
ValueId add_winners_value(Graph& graph, ValueId pooled) {
  ops::TensorMeta winners = graph.value(pooled).meta;
  winners.dtype = DType::u8;
  winners.layout = ops::Layout::channels_last;
  return graph.add_value(winners, ValueKind::intermediate, "max_pool_with_winners");
}

// Where a flattening reshape is the pooled output's only reader (and it is no graph output),
// p is written row-major, in the order the reshape reads it.
void flatten_in_place(Graph& graph, const std::vector<std::vector<NodeId>>& users, ValueId pooled) {
  const std::vector<NodeId>& readers = users[size_t(pooled)];
  const Shape& ps = graph.value(pooled).meta.shape;
  const std::vector<ValueId>& outputs = graph.outputs();
  if (readers.size() == 1 && is_live_op(graph.node(readers[0]), OpKind::reshape) &&
      std::find(outputs.begin(), outputs.end(), pooled) == outputs.end() &&
      graph.value(graph.node(readers[0]).outputs[0]).meta.shape ==
          Shape{ps[0], ps[1] * ps[2] * ps[3]}) {
    graph.value(pooled).meta.layout = ops::Layout::contiguous;
  }
}

// Whether oneDNN's convolution `conv` (its output r read by the pool only) runs in batch chunks
// that each get pooled: channels-last f32 input, stride 1, no groups, and an output large enough
// for chunks to pay.
bool runs_in_chunks(const Graph& graph, const Node& conv, ValueId r) {
  const ops::TensorMeta& x = graph.value(conv.inputs[0]).meta;
  const ops::TensorMeta& w = graph.value(conv.inputs[1]).meta;
  const Shape& rs = graph.value(r).meta.shape;
  if (x.layout != ops::Layout::channels_last || w.layout != ops::Layout::contiguous ||
      w.dtype != DType::f32 || !dense_as_meta(graph, conv.inputs[1]) ||
      conv.attrs.as<ops::ConvAttrs>().groups != 1 ||
      conv.attrs.as<ops::ConvAttrs>().stride != std::array<int64_t, 2>{1, 1} || rs.rank() != 4 ||
      rs[0] == 0) {
    return false;
  }
  return conv_pool_chunk(rs[0], rs.numel() / rs[0] * int64_t(sizeof(float))) > 0;
}

// The forward half, for the fused backward node `bn` (see the header).
int fuse_forward(Graph& graph, NodeId bn) {
  const Node& back = graph.node(bn);
  const ValueId r = back.inputs[1];
  const Value& rv = graph.value(r);
  if (back.post_ops.empty() || rv.kind != ValueKind::intermediate || rv.producer < 0) return 0;
  const NodeId fn = rv.producer;
  const Node& conv = graph.node(fn);
  if (conv.dead || conv.type != NodeType::epilogue || conv.op != OpKind::conv2d ||
      conv.post_ops != std::vector<PostOp>{PostOp::relu} || conv.outputs.size() != 1) {
    return 0;
  }
  const std::vector<std::vector<NodeId>> users = graph.users();
  const NodeId pool = only_pool_beside(graph, users, r, bn);
  if (pool < 0) return 0;
  const Value& xv = graph.value(conv.inputs[0]);
  const ValueId pooled = graph.node(pool).outputs[0];
  if (graph.value(pooled).meta.layout != ops::Layout::channels_last ||
      xv.meta.dtype != DType::f32 || xv.meta.shape.rank() != 4 ||
      !dense_as_meta(graph, conv.inputs[0])) {
    return 0;
  }
  const bool single_channel =
      xv.meta.shape[1] == 1 &&
      ops::single_channel_conv_fits(xv.meta.shape, graph.value(conv.inputs[1]).meta.shape,
                                    conv.attrs.as<ops::ConvAttrs>());
  if (!single_channel && !runs_in_chunks(graph, conv, r)) return 0;
  const ValueId won = add_winners_value(graph, pooled);
  Node f;
  f.type = NodeType::conv_relu_pool;
  f.op = OpKind::conv2d;
  f.attrs = conv.attrs;
  f.inputs = conv.inputs;
  f.outputs = {pooled, won};
  f.members = {"conv2d", "relu", "max_pool2d"};
  for (size_t i = 0; i < f.outputs.size(); ++i) {
    graph.value(f.outputs[i]).producer = fn;
    graph.value(f.outputs[i]).output_index = int(i);
  }
  graph.node(pool).dead = true;
  graph.node(fn) = std::move(f);
  graph.node(bn).inputs[1] = won;
  if (!single_channel) flatten_in_place(graph, users, pooled);
  return 1;
}

// A max pool of r that records its winners for the backward node `bn` (see the header).
int record_max_pool_with_winners(Graph& graph, NodeId bn) {
  const ValueId r = graph.node(bn).inputs[1];
  if (graph.node(bn).post_ops.empty() || graph.value(r).meta.dtype != DType::f32) return 0;
  const std::vector<std::vector<NodeId>> users = graph.users();
  const NodeId pool = only_pool_beside(graph, users, r, bn);
  if (pool < 0) return 0;
  const ValueId pooled = graph.node(pool).outputs[0];
  const ValueId won = add_winners_value(graph, pooled);
  Node f;
  f.type = NodeType::max_pool_with_winners;
  f.op = OpKind::max_pool2d;
  f.attrs = graph.node(pool).attrs;
  f.inputs = {r};
  f.outputs = {pooled, won};
  f.members = {"max_pool2d"};
  graph.value(won).producer = pool;
  graph.value(won).output_index = 1;
  graph.node(pool) = std::move(f);
  graph.node(bn).inputs[1] = won;
  flatten_in_place(graph, users, pooled);
  return 1;
}

}  // namespace

int fuse_pooled_conv_grad(Graph& graph) {
  const ScheduleView view(graph);
  int fused = 0;
  std::vector<NodeId> backward;
  for (NodeId pn : view.order) {
    if (fuse_backward(graph, pn, view) == 1) {
      ++fused;
      backward.push_back(pn);
    }
  }
  for (NodeId bn : backward) {
    const int forward = fuse_forward(graph, bn);
    fused += forward > 0 ? forward : record_max_pool_with_winners(graph, bn);
  }
  return fused;
}

}  // namespace kiln::graph::passes
