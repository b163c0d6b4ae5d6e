// Streaming stores for the batch-norm outputs that only convolutions read.
//
// A fused batch_norm + relu (no residual) in a ResNet writes a tensor that the next convolution
// reads, and that convolution's backward-weights reads again a whole forward pass later. By then
// it has long left the cache; and a convolution reads its input far below memory bandwidth, so
// finding it in cache gains little either way. What costs is the store: the tensor's place in
// the arena last held some tensor of the previous step, long evicted, and a plain store fetches
// each line from memory before overwriting it, a third more traffic for a kernel bound by it.
// A streaming store does not fetch. ResNet-20, batch 128, 2 threads, per call, ms (plain ->
// streaming): the fused kernel at 16×28×28 0.58 -> 0.37, 32×14×14 0.33 -> 0.25, 64×7×7 0.17 ->
// 0.12, the convolution after it unchanged within 0.03.
//
// Not where a bandwidth-bound kernel also reads the output (an elementwise op, a reorder): that
// kernel would then read it from memory instead of cache. A batch norm that adds it as its
// residual after a convolution has read it is the exception: a ResNet block's input is added
// back two convolutions later, from memory either way. ResNet-20's stem output: 0.63 -> 0.40 ms,
// the block's last batch norm that adds it 0.655 -> 0.653. Nor for small outputs, which may
// well stay cached until the convolution reads them.
#include "kiln/graph/detail/passes.h"

namespace kiln::graph::passes {
namespace {

constexpr int64_t kMinStreamBytes = int64_t(1) << 20;

// A convolution's forward, plain or with a fused epilogue.
bool is_convolution(const Node& node) {
  return node.op == ops::OpKind::conv2d &&
         (node.type == NodeType::op || node.type == NodeType::epilogue);
}

// Whether `user` reads y (an f32 bn_relu output) only as a convolution does, or not at all: the
// fused backward given beta finds the relu mask from x instead of y (fuse_bn_relu.cpp), so its
// edge from y reads nothing.
bool reads_slowly_or_not_at_all(const Node& user, ValueId y) {
  if (is_convolution(user)) return true;
  if (user.type == NodeType::bn_relu_grad)
    return user.inputs.size() > 6 && user.inputs[1] == y && user.inputs[0] != y &&
           user.inputs[2] != y;
  return user.type == NodeType::op && user.op == ops::OpKind::conv2d_backward_weights;
}

// Whether `user` adds y as its residual (and reads it no other way) after a convolution has read
// y: by then y has left the cache.
bool adds_late_residual(const Graph& graph, const ScheduleView& view, NodeId user_id, ValueId y) {
  const Node& user = graph.node(user_id);
  if (user.type != NodeType::bn_relu || user.inputs.size() < 6 || user.inputs[5] != y) return false;
  for (size_t i = 0; i < 5; ++i) {
    if (user.inputs[i] == y) return false;
  }
  for (NodeId u : view.users[size_t(y)]) {
    if (is_convolution(graph.node(u)) && view.pos[size_t(u)] < view.pos[size_t(user_id)]) {
      return true;
    }
  }
  return false;
}

}  // namespace

int mark_streaming_stores(Graph& graph) {
  const ScheduleView view(graph);
  int marked = 0;
  for (NodeId id : view.order) {
    Node& node = graph.node(id);
    if (node.type != NodeType::bn_relu || node.outputs.empty()) continue;
    const ValueId y = node.outputs[0];
    const ops::TensorMeta& m = graph.value(y).meta;
    if (m.dtype != DType::f32 || m.shape.numel() * 4 < kMinStreamBytes) continue;
    if (view.is_output[size_t(y)] || view.users[size_t(y)].empty()) continue;
    bool convolutions_only = true;
    for (NodeId u : view.users[size_t(y)]) {
      convolutions_only = convolutions_only && (reads_slowly_or_not_at_all(graph.node(u), y) ||
                                                adds_late_residual(graph, view, u, y));
    }
    node.stream_output = convolutions_only;
    marked += convolutions_only ? 1 : 0;
  }
  return marked;
}

}  // namespace kiln::graph::passes
