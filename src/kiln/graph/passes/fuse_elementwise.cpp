// Graph-kernel fusion (a): a chain of elementwise ops whose intermediates have no other consumer
// becomes one fused node. Its kernel walks memory once, tile by tile, running each op's tile
// function on L1-resident temporaries (see graph/fused_elementwise.h).
#include <algorithm>
#include <string>

#include "kiln/graph/detail/passes.h"

namespace kiln::graph::passes {
namespace {

constexpr int kMaxInputs = 8;  // the pointwise engine's limit
constexpr int kMaxSteps = 24;

bool fusible(const Graph& g, const Node& n) {
  if (n.type != NodeType::op || !is_pure(n) || n.outputs.size() != 1) return false;
  const ops::OpDef& def = ops::op_def(n.op);
  // broadcast_to is an identity whose input the engine broadcasts (FusedElementwise knows it).
  if (!def.tile && n.op != ops::OpKind::broadcast_to) return false;
  DType dt = g.value(n.outputs[0]).meta.dtype;
  if (dt != DType::f32 && dt != DType::bf16) return false;
  for (ValueId v : n.inputs) {
    if (v == kNoValue || g.value(v).meta.dtype != dt) return false;
  }
  return true;
}

}  // namespace

// Whether moving node `n` from position `from` to `to` (later) crosses a node that writes one of
// its inputs.
bool crosses_write(const Graph& g, const std::vector<NodeId>& order, const Node& n, int from,
                   int to) {
  for (int p = from + 1; p < to; ++p) {
    const Node& other = g.node(order[size_t(p)]);
    if (!has_side_effects(other)) continue;
    for (ValueId w : other.inputs) {
      for (ValueId r : n.inputs) {
        if (w == r) return true;
      }
    }
  }
  return false;
}

int fuse_elementwise(Graph& graph) {
  const std::vector<NodeId> order = graph.schedule();
  std::vector<int> pos(graph.num_nodes(), -1);
  for (size_t i = 0; i < order.size(); ++i) pos[size_t(order[i])] = int(i);
  const std::vector<std::vector<NodeId>> users = graph.users();
  std::vector<bool> taken(graph.num_nodes());
  int fused = 0;

  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const NodeId root = *it;
    if (taken[size_t(root)] || !fusible(graph, graph.node(root))) continue;
    const ops::TensorMeta out_meta = graph.value(graph.node(root).outputs[0]).meta;
    std::vector<NodeId> group{root};
    auto in_group = [&](NodeId n) {
      return std::find(group.begin(), group.end(), n) != group.end();
    };
    auto external_inputs = [&]() {
      std::vector<ValueId> ext;
      for (NodeId m : group) {
        for (ValueId v : graph.node(m).inputs) {
          const Value& val = graph.value(v);
          bool internal = val.producer >= 0 && in_group(val.producer);
          if (!internal && std::find(ext.begin(), ext.end(), v) == ext.end()) ext.push_back(v);
        }
      }
      return ext;
    };
    for (size_t k = 0; k < group.size() && int(group.size()) < kMaxSteps; ++k) {
      const std::vector<ValueId> inputs = graph.node(group[k]).inputs;
      for (ValueId v : inputs) {
        const Value& val = graph.value(v);
        if (val.kind != ValueKind::intermediate || val.producer < 0) continue;
        NodeId p = val.producer;
        if (taken[size_t(p)] || in_group(p) || !fusible(graph, graph.node(p))) continue;
        // Same elements (shape, dtype): the layout of a fused intermediate never matters, it is
        // computed tile by tile in the output's order and never stored.
        if (val.meta.shape != out_meta.shape || val.meta.dtype != out_meta.dtype) continue;
        bool all_inside = true;
        for (NodeId u : users[size_t(v)]) all_inside = all_inside && in_group(u);
        if (!all_inside) continue;
        if (crosses_write(graph, order, graph.node(p), pos[size_t(p)], pos[size_t(root)])) continue;
        group.push_back(p);
        if (int(external_inputs().size()) > kMaxInputs) group.pop_back();
        if (int(group.size()) >= kMaxSteps) break;
      }
    }
    if (group.size() < 2) continue;

    std::sort(group.begin(), group.end(),
              [&](NodeId a, NodeId b) { return pos[size_t(a)] < pos[size_t(b)]; });
    std::vector<ValueId> ext = external_inputs();
    Node fusedn;
    fusedn.type = NodeType::fused_elementwise;
    fusedn.op = graph.node(root).op;
    fusedn.inputs = ext;
    fusedn.outputs = graph.node(root).outputs;
    for (size_t s = 0; s < group.size(); ++s) {
      const Node& m = graph.node(group[s]);
      FusedStep step{m.op, m.attrs, {}};
      for (ValueId v : m.inputs) {
        const Value& val = graph.value(v);
        auto inner = std::find(group.begin(), group.end(), val.producer);
        if (val.producer >= 0 && inner != group.end()) {
          step.args.push_back(-1 - int(inner - group.begin()));
        } else {
          step.args.push_back(int(std::find(ext.begin(), ext.end(), v) - ext.begin()));
        }
      }
      fusedn.chain.push_back(std::move(step));
      fusedn.members.emplace_back(ops::op_name(m.op));
    }
    for (NodeId m : group) {
      taken[size_t(m)] = true;
      if (m != root) graph.node(m).dead = true;
    }
    graph.node(root) = std::move(fusedn);
    ++fused;
  }
  return fused;
}

}  // namespace kiln::graph::passes
