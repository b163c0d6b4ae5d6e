// Graph-kernel fusion (b): an elementwise chain feeding sum / mean / sum_to_shape runs inside the
// reduction: each chunk of the chain's result is reduced while still in cache. When other nodes
// also read the chain's result (relu_grad feeding both a bias gradient and a matmul), the fused
// kernel writes it as a second output in the same pass instead of re-reading it.
#include "kiln/graph/detail/fused_kernels.h"
#include "kiln/graph/detail/passes.h"

namespace kiln::graph::passes {
namespace {
using ops::OpKind;

bool is_reduction(const Node& n) {
  return n.type == NodeType::op && !n.dead &&
         (n.op == OpKind::sum || n.op == OpKind::mean || n.op == OpKind::sum_to_shape);
}

// The chain computing `node`'s output, if it is elementwise over inputs that all share its
// output's memory order (or are one-element scalars).
bool chain_of(const Graph& g, const Node& node, std::vector<FusedStep>& chain,
              std::vector<std::string>& members) {
  const ops::TensorMeta& out = g.value(node.outputs[0]).meta;
  // f32, or bf16 (mixed precision) computed in f32 tiles and rounded where stored.
  if (out.dtype != DType::f32 && out.dtype != DType::bf16) return false;
  for (ValueId v : node.inputs) {
    if (v == kNoValue) return false;
    const Value& x = g.value(v);
    if (x.meta.dtype != out.dtype) return false;
    if (x.meta.shape.numel() == 1) continue;
    if (!(x.meta == out)) return false;
    if (!dense_as_meta(g, v)) return false;
  }
  if (node.type == NodeType::fused_elementwise) {
    chain = node.chain;
    members = node.members;
    return true;
  }
  if (node.type != NodeType::op || !is_pure(node) || !ops::op_def(node.op).tile ||
      node.outputs.size() != 1) {
    return false;
  }
  FusedStep step{node.op, node.attrs, {}};
  for (size_t i = 0; i < node.inputs.size(); ++i) step.args.push_back(int(i));
  chain = {step};
  members = {std::string(ops::op_name(node.op))};
  return true;
}

}  // namespace

int fuse_reductions(Graph& graph) {
  const ScheduleView view(graph);
  const auto& [order, pos, users, is_output] = view;
  int fused = 0;
  for (NodeId rn : order) {
    const Node& red = graph.node(rn);
    if (!is_reduction(red)) continue;
    const ValueId x = red.inputs[0];
    const Value& xv = graph.value(x);
    if (xv.kind != ValueKind::intermediate || xv.producer < 0) continue;
    const NodeId pn = xv.producer;
    const Node& prod = graph.node(pn);
    if (prod.dead || prod.outputs.size() != 1) continue;
    std::vector<FusedStep> chain;
    std::vector<std::string> members;
    if (!chain_of(graph, prod, chain, members)) continue;
    ReductionGeometry geom;
    if (!reduction_geometry(xv.meta, reduction_mask(red.op, red.attrs, xv.meta), geom)) continue;
    if (graph.value(red.outputs[0]).meta.layout != ops::Layout::contiguous) continue;
    if (graph.value(red.outputs[0]).meta.dtype != xv.meta.dtype) continue;
    // Does anything besides this reduction read the chain's result?
    bool shared = is_output[size_t(x)];
    for (NodeId u : users[size_t(x)]) shared = shared || u != rn;
    // The fused node sits where the producer was when the result is shared (its other readers
    // come later), else where the reduction was (the producer moves later to it).
    if (!shared && crosses_write(graph, order, prod, pos[size_t(pn)], pos[size_t(rn)])) continue;
    Node f;
    f.type = NodeType::fused_reduction;
    f.op = red.op;
    f.attrs = red.attrs;
    f.inputs = prod.inputs;
    f.chain = std::move(chain);
    f.members = std::move(members);
    f.members.emplace_back(ops::op_name(red.op));
    f.chain_meta = xv.meta;
    const ValueId reduced = red.outputs[0];
    f.outputs = {reduced};
    if (shared) {
      // The reduced value now appears at the producer's place, earlier than before: safe, as
      // its readers all came after the reduction.
      f.outputs.push_back(x);
      graph.node(rn).dead = true;
      graph.node(pn) = std::move(f);
      graph.value(reduced).producer = pn;
      graph.value(reduced).output_index = 0;
      graph.value(x).producer = pn;
      graph.value(x).output_index = 1;
    } else {
      graph.node(pn).dead = true;
      graph.node(rn) = std::move(f);
    }
    ++fused;
  }
  return fused;
}

}  // namespace kiln::graph::passes
