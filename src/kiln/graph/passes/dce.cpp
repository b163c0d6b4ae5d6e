// Dead-code elimination: a node lives if a graph output or a side effect needs it.
#include "kiln/graph/detail/passes.h"

namespace kiln::graph::passes {

int eliminate_dead_code(Graph& graph) {
  std::vector<bool> needed(graph.num_values());
  for (ValueId v : graph.outputs()) needed[size_t(v)] = true;
  std::vector<NodeId> order = graph.schedule();
  int removed = 0;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node& node = graph.node(*it);
    bool live = has_side_effects(node);
    for (ValueId v : node.outputs) live = live || needed[size_t(v)];
    if (!live) {
      node.dead = true;
      ++removed;
      continue;
    }
    for (ValueId v : node.inputs) {
      if (v != kNoValue) needed[size_t(v)] = true;
    }
  }
  return removed;
}

}  // namespace kiln::graph::passes
