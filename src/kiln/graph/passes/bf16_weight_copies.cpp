// Mixed precision: a weight cast to bf16 every step is instead kept as a bf16 copy that the
// optimizer update writes while it writes the weight (the update's optional last input,
// ops/optimizer/common.h). Most of a cast's cost was its write of a copy that had left the
// caches; the update has the new values in L1 and streams the copy past the caches instead. The
// MLP's O2 step (b512, 2 threads): the 1024 x 1024 weight's cast (0.17-0.18 ms) and update
// (0.14-0.18) became one update of 0.21 ms.
//
// The copy is a state value: it lives from one step to the next, so it is right only if
// nothing but this graph's update wrote the weight since. The executor checks that before every
// step (Storage::writes, core/tensor.h) and casts afresh where it cannot tell
// (Executable::refresh_bf16_copies); the values the step computes are the same either way, bit
// for bit, since the update rounds exactly as the cast does.
#include <map>

#include "kiln/graph/detail/passes.h"

namespace kiln::graph::passes {
namespace {

// The update that writes `param`, if exactly one live node writes it and that node is an
// optimizer update op that does not keep a copy yet; else -1.
NodeId sole_update_of(const Graph& graph, ValueId param) {
  NodeId found = -1;
  for (NodeId n : graph.schedule()) {
    const Node& node = graph.node(n);
    const uint32_t bits = mutated_inputs(node);
    for (size_t i = 0; i < node.inputs.size() && i < 32; ++i) {
      if (!(bits >> i & 1u) || node.inputs[i] != param) continue;
      if (found >= 0 || i != 0 || node.type != NodeType::op || !is_optimizer_update(node)) {
        return -1;
      }
      const ops::OpDef& def = ops::op_def(node.op);
      if (def.optional_inputs != 1 || node.inputs.size() + 1 != size_t(def.num_inputs)) return -1;
      found = n;
    }
  }
  return found;
}

}  // namespace

int keep_bf16_weight_copies(Graph& graph) {
  const ScheduleView view(graph);
  // Per weight: its casts to bf16.
  std::map<ValueId, std::vector<NodeId>> casts;
  for (NodeId n : view.order) {
    const Node& node = graph.node(n);
    if (!is_live_op(node, ops::OpKind::cast)) continue;
    if (node.attrs.as<ops::CastAttrs>().dtype != DType::bf16) continue;
    const Value& w = graph.value(node.inputs[0]);
    if (w.kind != ValueKind::state || w.meta.dtype != DType::f32 || !w.tensor.defined()) continue;
    if (!w.tensor.is_contiguous() && !w.tensor.is_channels_last()) continue;
    casts[node.inputs[0]].push_back(n);
  }
  int kept = 0;
  for (const auto& [weight, cast_nodes] : casts) {
    const NodeId update = sole_update_of(graph, weight);
    if (update < 0) continue;
    // Every reader of every cast runs before the update rewrites the copy.
    bool read_before_update = true;
    for (NodeId c : cast_nodes) {
      const ValueId cast_out = graph.node(c).outputs[0];
      read_before_update = read_before_update && !view.is_output[size_t(cast_out)] &&
                           view.pos[size_t(c)] < view.pos[size_t(update)];
      for (NodeId reader : view.users[size_t(cast_out)]) {
        read_before_update =
            read_before_update && view.pos[size_t(reader)] < view.pos[size_t(update)];
      }
    }
    if (!read_before_update) continue;
    const Tensor w = graph.value(weight).tensor;  // a handle: add_value may move the values
    const ops::TensorMeta meta{w.shape(), DType::bf16, graph.value(weight).meta.layout};
    const ValueId copy =
        graph.add_value(meta, ValueKind::state, graph.value(weight).name + ".bf16");
    graph.value(copy).tensor = Tensor::empty_strided(w.shape(), w.strides(), DType::bf16);
    for (NodeId c : cast_nodes) {
      graph.replace_uses(graph.node(c).outputs[0], copy);
      graph.node(c).dead = true;
    }
    graph.node(update).inputs.push_back(copy);
    ++kept;
  }
  return kept;
}

std::vector<Bf16WeightCopy> bf16_weight_copies(const Graph& graph) {
  std::vector<Bf16WeightCopy> copies;
  for (NodeId n : graph.schedule()) {
    const Node& node = graph.node(n);
    if (node.type != NodeType::op || !is_optimizer_update(node)) continue;
    const ops::OpDef& def = ops::op_def(node.op);
    if (def.optional_inputs == 1 && node.inputs.size() == size_t(def.num_inputs)) {
      copies.push_back({node.inputs[0], node.inputs.back(), n});
    }
  }
  return copies;
}

}  // namespace kiln::graph::passes
