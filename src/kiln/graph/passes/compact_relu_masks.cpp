// Relu masks in bytes: a relu output that the backward still needs only for the relu's gradient
// is squeezed into one byte per element, right after its last other reader.
//
//   h = relu(...)     read by the next layer's matmul, by that layer's weight gradient, and last
//                     by relu_grad(dh, h) (fused with the bias gradient's sum)
//     ->  m = relu_mask(h)   right after the weight gradient, h's last other reader
//         relu_grad(dh, m)   the fused reduction widens m's bytes to 0/1 (FlatInput::u8)
//
// What happens in between is the backward's largest allocation: the layer's input gradient dh =
// dz·W, as large as h. The MLP (batch 512, 1024 hidden) holds h, dz and dh there, 2 MiB each; with
// the mask it holds 0.5 MiB of h. relu_grad tests only h > 0, which the byte keeps exactly (NaN
// included: neither passes), so the results are bit for bit the same.
//
// Only large activations (the pass adds a launch and a read of h) that a fused reduction masks
// (the one kernel that reads bytes), in row-major f32, and only where a node runs between the
// last other reader and the relu_grad (else h dies there anyway).
#include "kiln/graph/detail/passes.h"

namespace kiln::graph::passes {
namespace {

constexpr int64_t kMinMaskedBytes = int64_t(1) << 20;

// Whether every use of external input k in the fused chain is as the y of a relu_grad.
bool chain_reads_only_as_relu_mask(const Node& node, int k) {
  bool used = false;
  for (const FusedStep& step : node.chain) {
    for (size_t a = 0; a < step.args.size(); ++a) {
      if (step.args[a] != k) continue;
      if (step.op != ops::OpKind::relu_grad || a != 1) return false;
      used = true;
    }
  }
  return used;
}

bool maskable(const Graph& graph, const ScheduleView& view, ValueId y) {
  const Value& v = graph.value(y);
  if (v.kind != ValueKind::intermediate || v.producer < 0 || view.is_output[size_t(y)]) {
    return false;
  }
  const ops::TensorMeta& m = v.meta;
  return m.dtype == DType::f32 && m.layout == ops::Layout::contiguous &&
         m.shape.numel() * 4 >= kMinMaskedBytes && dense_as_meta(graph, y) &&
         !output_is_nchw16c(graph.node(v.producer), v.output_index);
}

}  // namespace

int compact_relu_masks(Graph& graph) {
  const ScheduleView view(graph);
  struct Masked {
    NodeId consumer;
    size_t input;
    int after;  // the schedule position the mask follows
  };
  std::vector<Masked> found;
  std::vector<bool> taken(view.order.size());  // one mask per position keeps the order simple
  for (NodeId cn : view.order) {
    const Node& consumer = graph.node(cn);
    if (consumer.type != NodeType::fused_reduction) continue;
    for (size_t k = 0; k < consumer.inputs.size(); ++k) {
      const ValueId y = consumer.inputs[k];
      if (!chain_reads_only_as_relu_mask(consumer, int(k)) || !maskable(graph, view, y)) continue;
      int last_other = -1;
      bool later_reader = false;
      for (NodeId u : view.users[size_t(y)]) {
        if (u == cn) continue;
        last_other = std::max(last_other, view.pos[size_t(u)]);
        later_reader |= view.pos[size_t(u)] > view.pos[size_t(cn)];
      }
      if (later_reader || last_other < 0 || view.pos[size_t(cn)] - last_other < 2 ||
          taken[size_t(last_other)]) {
        continue;
      }
      taken[size_t(last_other)] = true;
      found.push_back({cn, k, last_other});
    }
  }
  if (found.empty()) return 0;
  std::vector<NodeId> mask_after(view.order.size(), -1);
  for (const Masked& f : found) {
    const ValueId y = graph.node(f.consumer).inputs[f.input];
    ops::TensorMeta meta = graph.value(y).meta;
    meta.dtype = DType::u8;
    Node mask;
    mask.type = NodeType::relu_mask;
    mask.inputs = {y};
    const NodeId mn = graph.add_node(std::move(mask), {meta});
    graph.node(f.consumer).inputs[f.input] = graph.node(mn).outputs[0];
    mask_after[size_t(f.after)] = mn;
  }
  std::vector<NodeId> order;
  for (size_t i = 0; i < view.order.size(); ++i) {
    order.push_back(view.order[i]);
    if (mask_after[i] >= 0) order.push_back(mask_after[i]);
  }
  graph.reorder(order);
  return int(found.size());
}

}  // namespace kiln::graph::passes
