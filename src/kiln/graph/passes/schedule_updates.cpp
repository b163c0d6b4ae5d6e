// Scheduling: each in-place update (optimizer step of one parameter) runs as soon as it can,
// right after its gradient is ready and the last earlier reader of the parameter has run,
// instead of all at the end of backward. A gradient then dies as soon as it is applied, so the
// memory plan does not have to hold every parameter's gradient at once (what eager mode must do).
#include "kiln/graph/detail/passes.h"

namespace kiln::graph::passes {

bool is_optimizer_update(const Node& n) {
  return (n.type == NodeType::op || n.type == NodeType::fused_update) && !n.dead &&
         (n.op == ops::OpKind::sgd_update || n.op == ops::OpKind::momentum_update ||
          n.op == ops::OpKind::adam_update);
}

namespace {

// Whether node n writes value v in place.
bool writes(const Node& n, ValueId v) {
  const uint32_t bits = mutated_inputs(n);
  for (size_t k = 0; k < n.inputs.size() && k < 32; ++k) {
    if ((bits >> k & 1u) && n.inputs[k] == v) return true;
  }
  return false;
}

}  // namespace

int schedule_updates_early(Graph& graph) {
  const std::vector<NodeId> order = graph.schedule();
  const size_t n = order.size();
  std::vector<int> pos(graph.num_nodes(), -1);
  for (size_t i = 0; i < n; ++i) pos[size_t(order[i])] = int(i);
  const auto users = graph.users();
  // For each update: the position after which it may run.
  std::vector<std::vector<NodeId>> ready_after(n);
  std::vector<bool> moved(graph.num_nodes());
  // Where each node runs: after the node at this position (an update moved early runs right
  // after `after`; one that depends on it, like a fused velocity's parameter step, follows it).
  std::vector<int> runs_at = pos;
  int count = 0;
  for (size_t i = 0; i < n; ++i) {
    const NodeId u = order[i];
    const Node& node = graph.node(u);
    if (!is_optimizer_update(node)) continue;
    int after = -1;
    const uint32_t mutated = mutated_inputs(node);
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const ValueId v = node.inputs[k];
      if (v == kNoValue) continue;
      const Value& val = graph.value(v);
      if (val.producer >= 0) after = std::max(after, runs_at[size_t(val.producer)]);
      // Everything that read or wrote this value before the update must still come first
      // (parameters and optimizer state are read by forward and backward; the lr by all updates).
      for (NodeId r : users[size_t(v)]) {
        if (r != u && pos[size_t(r)] < int(i) && (k < 32 && (mutated >> k & 1u))) {
          after = std::max(after, runs_at[size_t(r)]);
        }
      }
      // A value some earlier node writes in place (state shared with it) keeps its order too.
      for (NodeId r : users[size_t(v)]) {
        if (r != u && pos[size_t(r)] < int(i) && writes(graph.node(r), v)) {
          after = std::max(after, runs_at[size_t(r)]);
        }
      }
    }
    if (after < 0 || after + 1 >= int(i)) continue;  // already as early as it can be
    ready_after[size_t(after)].push_back(u);
    moved[size_t(u)] = true;
    runs_at[size_t(u)] = after;
    ++count;
  }
  if (count == 0) return 0;
  std::vector<NodeId> next;
  next.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (!moved[size_t(order[i])]) next.push_back(order[i]);
    for (NodeId u : ready_after[i]) next.push_back(u);
  }
  graph.reorder(next);
  return count;
}

}  // namespace kiln::graph::passes
