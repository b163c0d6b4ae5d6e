// Graph-kernel fusion (e): a weight gradient made by a matmul and applied by momentum SGD.
//
//   g = matmul(a, b)                    [g read by the update only]
//   momentum_update(p, g, v, lr)        v = μ·v + g + wd·p;  p -= lr·v
//       ->  fused[matmul,momentum_update](p, a, v, b)      v = μ·v + a·b + wd·p
//           sgd_update(p, v, lr) {weight_decay=0}          p -= lr·v
//
// The product accumulates straight into the velocity (oneDNN's sum post-op with scale μ), so the
// gradient never exists as a buffer: for the MLP's 1024×1024 layer that is 4 MiB off the step's
// peak memory, and a write and a read of it less. The parameter's step is a node of its own
// because the backward still reads p (for the layer's input gradient, dz·W): the velocity
// only waits for its operands, so the scheduler runs its matmul while the layer's activation and
// gradient are the only large tensors alive, and the step waits for p's last reader. With one
// node both had to wait, and the product's scratchpad met the input gradient (the MLP's plan:
// 7.3 -> 6.25 MiB). Nesterov momentum needs g itself after the velocity update and is left alone;
// so is a gradient anything else reads (loss scaling's unscale and overflow check, for one).
//
// A gradient that is a sum of matmuls (one per micro-batch, CompileOptions::micro_batches)
// becomes one velocity node per product, in schedule order: the first scales the velocity by μ
// and adds wd·p, the others add their product (μ = 1, wd = 0). Each runs as soon as its slice's
// backward made its operands, so no slice's gradient is ever a buffer either.
#include "kiln/graph/detail/passes.h"

#include <algorithm>

namespace kiln::graph::passes {
namespace {
using ops::OpKind;

bool f32_matrix(const Graph& graph, ValueId v) {
  const ops::TensorMeta& m = graph.value(v).meta;
  return m.dtype == DType::f32 && m.shape.rank() == 2 && dense_as_meta(graph, v);
}

// Whether only one node reads v, and v is not a graph output.
bool read_once(const ScheduleView& view, ValueId v) {
  return !view.is_output[size_t(v)] && view.users[size_t(v)].size() == 1;
}

// The matmuls whose sum is g (g itself a product, or an add of such sums), each a value read
// once; their adds go to `adds`. False if g is anything else.
bool summed_matmuls(const Graph& graph, const ScheduleView& view, ValueId g,
                    std::vector<NodeId>& matmuls, std::vector<NodeId>& adds) {
  const NodeId n = graph.value(g).producer;
  if (n < 0 || !read_once(view, g) || !f32_matrix(graph, g)) return false;
  const Node& node = graph.node(n);
  if (is_live_op(node, OpKind::matmul) && node.inputs.size() == 2) {
    matmuls.push_back(n);
    return true;
  }
  if (!is_live_op(node, OpKind::add) || node.inputs.size() != 2) return false;
  for (ValueId term : node.inputs) {
    if (graph.value(term).meta.shape != graph.value(g).meta.shape) return false;  // broadcast
    if (!summed_matmuls(graph, view, term, matmuls, adds)) return false;
  }
  adds.push_back(n);
  return true;
}

}  // namespace

int fuse_matmul_momentum(Graph& graph) {
  const ScheduleView view(graph);
  // fused update -> the nodes that follow it (more velocity nodes, then the parameter's step)
  std::vector<std::vector<Node>> nodes_after(graph.num_nodes());
  int fused = 0;
  for (NodeId un : view.order) {
    const Node& update = graph.node(un);
    if (!is_live_op(update, OpKind::momentum_update) ||
        update.attrs.as<ops::MomentumAttrs>().nesterov)
      continue;
    std::vector<NodeId> matmuls, adds;
    if (!summed_matmuls(graph, view, update.inputs[1], matmuls, adds)) continue;
    const ValueId p = update.inputs[0], v = update.inputs[2];
    if (!f32_matrix(graph, v) || !f32_matrix(graph, p) ||
        graph.value(v).meta.layout != ops::Layout::contiguous ||
        graph.value(p).meta.layout != ops::Layout::contiguous) {
      continue;
    }
    // Each product moves to the update's place: nothing in between may write its operands.
    const bool movable = std::all_of(matmuls.begin(), matmuls.end(), [&](NodeId mn) {
      const Node& mm = graph.node(mn);
      return f32_matrix(graph, mm.inputs[0]) && f32_matrix(graph, mm.inputs[1]) &&
             !crosses_write(graph, view.order, mm, view.pos[size_t(mn)], view.pos[size_t(un)]);
    });
    if (!movable) continue;
    std::sort(matmuls.begin(), matmuls.end(),
              [&](NodeId a, NodeId b) { return view.pos[size_t(a)] < view.pos[size_t(b)]; });

    std::vector<Node> velocity_nodes;
    for (NodeId mn : matmuls) {
      const Node& mm = graph.node(mn);
      Node f;
      f.type = NodeType::fused_update;
      f.op = OpKind::momentum_update;
      const auto& momentum = update.attrs.as<ops::MomentumAttrs>();
      const auto& product = mm.attrs.as<ops::MatmulAttrs>();
      ops::MatmulMomentumAttrs fused{.transpose_a = product.transpose_a,
                                     .transpose_b = product.transpose_b,
                                     .momentum = momentum.momentum,
                                     .weight_decay = momentum.weight_decay};
      if (!velocity_nodes.empty()) {  // the velocity is scaled, and wd·p added, once
        fused.momentum = 1.0;
        fused.weight_decay = 0.0;
      }
      f.attrs = fused;
      f.inputs.resize(4);
      f.inputs[kFusedUpdateParam] = p;
      f.inputs[kFusedUpdateA] = mm.inputs[0];
      f.inputs[kFusedUpdateVelocity] = v;
      f.inputs[kFusedUpdateB] = mm.inputs[1];
      f.members = {"matmul", "momentum_update"};
      velocity_nodes.push_back(std::move(f));
    }
    Node step;
    step.op = OpKind::sgd_update;
    step.inputs = {p, v, update.inputs[3]};
    step.attrs = ops::SgdAttrs{.weight_decay = 0.0};  // the velocity has it

    for (NodeId n : matmuls) graph.node(n).dead = true;
    for (NodeId n : adds) graph.node(n).dead = true;
    graph.node(un) = std::move(velocity_nodes[0]);
    std::vector<Node>& after = nodes_after[size_t(un)];
    for (size_t i = 1; i < velocity_nodes.size(); ++i)
      after.push_back(std::move(velocity_nodes[i]));
    after.push_back(std::move(step));
    ++fused;
  }
  if (fused == 0) return 0;
  // The rest right after the first velocity node, for now; schedule_updates_early moves them.
  std::vector<NodeId> order;
  for (NodeId n : graph.schedule()) {
    order.push_back(n);
    for (Node& node : nodes_after[size_t(n)]) order.push_back(graph.add_node(std::move(node), {}));
  }
  graph.reorder(order);
  return fused;
}

}  // namespace kiln::graph::passes
