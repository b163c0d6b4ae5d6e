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
#include "kiln/graph/passes/passes.h"

namespace kiln::graph::passes {
namespace {
using ops::OpKind;

bool f32_matrix(const Graph& graph, ValueId v) {
  const ops::TensorMeta& m = graph.value(v).meta;
  return m.dtype == DType::f32 && m.shape.rank() == 2 && dense_as_meta(graph, v);
}

}  // namespace

int fuse_matmul_momentum(Graph& graph) {
  const ScheduleView view(graph);
  std::vector<NodeId> steps_after(graph.num_nodes(), -1);  // fused update -> its parameter step
  std::vector<Node> steps;
  int fused = 0;
  for (NodeId un : view.order) {
    const Node& update = graph.node(un);
    if (!is_live_op(update, OpKind::momentum_update) || update.attrs.nesterov) continue;
    const ValueId g = update.inputs[1];
    const NodeId mn = graph.value(g).producer;
    if (mn < 0 || view.is_output[size_t(g)] || view.users[size_t(g)].size() != 1) continue;
    const Node& mm = graph.node(mn);
    if (!is_live_op(mm, OpKind::matmul) || mm.inputs.size() != 2) continue;
    const ValueId a = mm.inputs[0], b = mm.inputs[1], p = update.inputs[0], v = update.inputs[2];
    if (!f32_matrix(graph, a) || !f32_matrix(graph, b) || !f32_matrix(graph, g) ||
        !f32_matrix(graph, v) || !f32_matrix(graph, p) ||
        graph.value(v).meta.layout != ops::Layout::contiguous ||
        graph.value(p).meta.layout != ops::Layout::contiguous) {
      continue;
    }
    // The product moves to the update's place: nothing in between may write its operands.
    if (crosses_write(graph, view.order, mm, view.pos[size_t(mn)], view.pos[size_t(un)])) {
      continue;
    }
    Node step;
    step.op = OpKind::sgd_update;
    step.inputs = {p, v, update.inputs[3]};
    step.attrs.weight_decay = 0.0;  // the velocity has it

    Node f;
    f.type = NodeType::fused_update;
    f.op = OpKind::momentum_update;
    f.attrs = update.attrs;
    f.attrs.transpose_a = mm.attrs.transpose_a;
    f.attrs.transpose_b = mm.attrs.transpose_b;
    f.inputs.resize(4);
    f.inputs[kFusedUpdateParam] = p;
    f.inputs[kFusedUpdateA] = a;
    f.inputs[kFusedUpdateVelocity] = v;
    f.inputs[kFusedUpdateB] = b;
    f.members = {"matmul", "momentum_update"};
    graph.node(mn).dead = true;
    graph.node(un) = std::move(f);
    steps_after[size_t(un)] = NodeId(steps.size());
    steps.push_back(std::move(step));
    ++fused;
  }
  if (fused == 0) return 0;
  // Each step right after its fused update, for now; schedule_updates_early moves both.
  std::vector<NodeId> order;
  for (NodeId n : graph.schedule()) {
    order.push_back(n);
    if (const NodeId s = steps_after[size_t(n)]; s >= 0) {
      order.push_back(graph.add_node(std::move(steps[size_t(s)]), {}));
    }
  }
  graph.reorder(order);
  return fused;
}

}  // namespace kiln::graph::passes
