// Common-subexpression elimination: the same op, attributes and inputs computed twice is
// computed once. Autodiff produces such repeats (two rules both taking transpose(w), say).
#include <unordered_map>

#include "kiln/graph/detail/passes.h"

namespace kiln::graph::passes {
namespace {

size_t node_hash(const Node& n) {
  size_t h = ops::hash_attrs(n.attrs) ^ (size_t(n.op) * 0x9e3779b97f4a7c15ull) ^ n.nchw16c;
  for (ValueId v : n.inputs) h = (h ^ size_t(uint32_t(v))) * 1099511628211ull;
  return h;
}

bool same_computation(const Node& a, const Node& b) {
  return a.type == b.type && a.op == b.op && a.inputs == b.inputs && a.attrs == b.attrs &&
         a.nchw16c == b.nchw16c && a.outputs.size() == b.outputs.size();
}

}  // namespace

int eliminate_common_subexpressions(Graph& graph) {
  // A value written in place may differ between two reads of it: never merge across that.
  std::vector<bool> mutated = mutated_values(graph);
  std::unordered_multimap<size_t, NodeId> seen;
  int merged = 0;
  for (NodeId n : graph.schedule()) {
    Node& node = graph.node(n);
    if (node.type != NodeType::op || !is_pure(node)) continue;
    bool reads_mutated = false;
    for (ValueId v : node.inputs)
      reads_mutated = reads_mutated || (v != kNoValue && mutated[size_t(v)]);
    if (reads_mutated) continue;
    size_t h = node_hash(node);
    auto [lo, hi] = seen.equal_range(h);
    NodeId match = -1;
    for (auto it = lo; it != hi; ++it) {
      if (same_computation(graph.node(it->second), node)) {
        match = it->second;
        break;
      }
    }
    if (match < 0) {
      seen.emplace(h, n);
      continue;
    }
    const std::vector<ValueId> keep = graph.node(match).outputs;
    for (size_t i = 0; i < node.outputs.size(); ++i) graph.replace_uses(node.outputs[i], keep[i]);
    graph.node(n).dead = true;
    ++merged;
  }
  return merged;
}

}  // namespace kiln::graph::passes
