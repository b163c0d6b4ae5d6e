#include "kiln/graph/detail/passes.h"

namespace kiln::graph::passes {

bool is_pure(const Node& node) {
  if (node.dead || has_side_effects(node) || is_collective(node)) return false;
  return !(node.type == NodeType::op && node.op == ops::OpKind::dropout);
}

std::vector<bool> mutated_values(const Graph& graph) {
  std::vector<bool> out(graph.num_values());
  for (NodeId n : graph.schedule()) {
    const Node& node = graph.node(n);
    const uint32_t bits = mutated_inputs(node);
    for (size_t i = 0; i < node.inputs.size() && i < 32; ++i) {
      if ((bits >> i & 1u) && node.inputs[i] != kNoValue) out[size_t(node.inputs[i])] = true;
    }
  }
  return out;
}

bool dense_as_meta(const Graph& graph, ValueId v) {
  const Value& x = graph.value(v);
  switch (x.kind) {
    case ValueKind::input:
      return true;  // read in the meta's layout (the executor stages a batch in another one)
    case ValueKind::state:
    case ValueKind::constant:
      return x.tensor.is_contiguous() || x.tensor.is_channels_last();
    case ValueKind::intermediate: {
      if (x.producer < 0) return false;
      const Node& p = graph.node(x.producer);
      if (!is_view(p)) return true;
      // reshape and contiguous return row-major memory whether they alias or copy.
      if (p.op == ops::OpKind::reshape || p.op == ops::OpKind::contiguous) return true;
      // So do whole rows of a row-major tensor (a micro-batch's slice of the batch).
      return p.op == ops::OpKind::slice && p.attrs.as<ops::SliceAttrs>().axis == 0 &&
             p.attrs.as<ops::SliceAttrs>().step == 1 &&
             graph.value(p.inputs[0]).meta.layout == ops::Layout::contiguous &&
             dense_as_meta(graph, p.inputs[0]);
    }
  }
  return false;
}

bool constant_equals(const Graph& graph, ValueId v, double x) {
  const Value& value = graph.value(v);
  if (value.kind != ValueKind::constant || !is_floating(value.meta.dtype)) return false;
  if (value.meta.shape.numel() > (1 << 20)) return false;
  for (float f : value.tensor.to_vector<float>()) {
    if (f != float(x)) return false;
  }
  return true;
}

bool is_live_op(const Node& node, ops::OpKind k) {
  return !node.dead && node.type == NodeType::op && node.op == k;
}

ScheduleView::ScheduleView(const Graph& graph)
    : order(graph.schedule()),
      pos(graph.num_nodes(), -1),
      users(graph.users()),
      is_output(graph.num_values()) {
  for (size_t i = 0; i < order.size(); ++i) pos[size_t(order[i])] = int(i);
  for (ValueId v : graph.outputs()) is_output[size_t(v)] = true;
}

}  // namespace kiln::graph::passes
