#pragma once
// The SSA IR of graph mode. A Graph is a list of nodes in schedule order (the order they were
// traced in, which is always a valid program order, also for in-place updates of step state);
// every value is defined exactly once, by a node or by binding (inputs, state, constants).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/graph/fusion_list.h"
#include "kiln/ops/op.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::graph {

using ValueId = int32_t;
using NodeId = int32_t;
inline constexpr ValueId kNoValue = -1;

enum class ValueKind : uint8_t {
  input,         // fed by the caller every step (images, labels): read where the caller keeps
                 // it, or copied into the arena (CompileOptions::inputs_in_place)
  state,         // a real tensor bound by reference (parameters, BN running stats, optimizer
                 // state, the lr scalar): kernels read and update it in place
  constant,      // a tensor nobody outside the graph can see or change: foldable
  intermediate,  // produced by a node; lives in the arena (or aliases one, for views)
};

struct Value {
  ops::TensorMeta meta;
  ValueKind kind = ValueKind::intermediate;
  NodeId producer = -1;  // intermediates only
  int output_index = 0;
  Tensor tensor;  // state and constant values: the bound tensor
  std::string name;
};

// One step of a fused elementwise kernel: `op`'s tile over `args`, each an external input of the
// fused node (arg >= 0) or the result of an earlier step (arg = -1 - step).
struct FusedStep {
  ops::OpKind op;
  ops::Attrs attrs;
  std::vector<int> args;
};

// What a conv2d/matmul node applies to its result before writing it (oneDNN post-ops).
enum class PostOp : uint8_t {
  relu,          // max(y, 0)
  add_residual,  // y + extra input (the node's last input)
  relu_grad,     // max_pool2d_grad only: y * (x > 0), x being the pool's input (a relu output)
};

// What a node runs: one op from the op table, a node of the layout passes, or a node type that
// a fusion makes (graph/fusion_list.h lists them with the fusion and the kernel of each).
#define KILN_FUSED_NODE_TYPE(type, fusion, counted_as, kernel) type,
enum class NodeType : uint8_t {
  op,         // one op from the op table
  reorder,    // a 4-D activation between channels-last and oneDNN's blocked nChw16c
              // (direction in Node::nchw16c; passes/block_layout.cpp)
  relu_mask,  // u8 1 where the f32 input is > 0, else 0: what a later relu_grad reads of
              // a relu output that is otherwise dead (passes/compact_relu_masks.cpp)
  KILN_FOR_EACH_FUSED_NODE(KILN_FUSED_NODE_TYPE)
};
#undef KILN_FUSED_NODE_TYPE

// A fused_update node's inputs: the parameter (read for weight decay), the product's operands,
// the velocity it writes.
inline constexpr int kFusedUpdateParam = 0, kFusedUpdateA = 1, kFusedUpdateVelocity = 2,
                     kFusedUpdateB = 3;

struct Node {
  NodeType type = NodeType::op;
  ops::OpKind op{};
  ops::Attrs attrs;
  std::vector<ValueId> inputs;  // kNoValue where an optional input is absent
  std::vector<ValueId> outputs;
  std::vector<FusedStep> chain;      // fused_elementwise / fused_reduction
  std::vector<PostOp> post_ops;      // epilogue
  std::vector<std::string> members;  // names of the ops a fused node replaced (dump, tests)
  ops::TensorMeta chain_meta;        // fused_reduction: the chain's result, before reducing
  // Which activation arguments are in the blocked nChw16c layout (ops::kNchw16cOutputBit), for
  // nodes whose attrs have no layout field of their own: elementwise ops and spatial reductions
  // (run by kernels/blocked_spatial.cpp) and reorders. Set by passes/block_layout.cpp; read and
  // write it through layout_bits / set_layout_bits, which pick the attrs' field where there is one
  // (convolutions, batch norm).
  uint32_t nchw16c = 0;
  // bn_relu: output 0 is written with streaming stores, past the caches
  // (passes/stream_stores.cpp).
  bool stream_output = false;
  bool dead = false;
  // The user's strategy for this op under SEMI_AUTO_PARALLEL (ops::ShardScope around the call
  // that traced it); empty: none given, sharding propagation decides.
  ops::Strategy strategy;
};

class Graph {
 public:
  ValueId add_value(const ops::TensorMeta& meta, ValueKind kind, std::string name = {});
  // Appends a node and creates its output values; returns the node's id.
  NodeId add_node(Node node, const std::vector<ops::TensorMeta>& output_metas);

  Value& value(ValueId v) { return values_[size_t(v)]; }
  const Value& value(ValueId v) const { return values_[size_t(v)]; }
  Node& node(NodeId n) { return nodes_[size_t(n)]; }
  const Node& node(NodeId n) const { return nodes_[size_t(n)]; }
  size_t num_values() const { return values_.size(); }
  size_t num_nodes() const { return nodes_.size(); }
  // Live nodes in schedule order.
  std::vector<NodeId> schedule() const;
  size_t num_live_nodes() const;

  std::vector<ValueId>& inputs() { return inputs_; }
  const std::vector<ValueId>& inputs() const { return inputs_; }
  std::vector<ValueId>& outputs() { return outputs_; }
  const std::vector<ValueId>& outputs() const { return outputs_; }

  // Rewrites every use of `from` (node inputs, graph outputs) to `to`.
  void replace_uses(ValueId from, ValueId to);
  // Consumers of every value (live nodes only; a node appears once per use).
  std::vector<std::vector<NodeId>> users() const;
  // Replaces the nodes list by `order` (live nodes, a valid order); ids are renumbered.
  void reorder(const std::vector<NodeId>& order);

  // One line per node: "%7 = conv2d(%3, %5, %6) {stride=[1,1] …} : f32[64, 6, 28, 28]".
  std::string str() const;
  // Throws Error if a live node uses an undefined value or a value before its definition.
  void verify() const;

 private:
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<ValueId> inputs_;
  std::vector<ValueId> outputs_;
};

// The node's layout bits: its attrs' (ops::ConvAttrs / BatchNormAttrs::nchw16c) where its family
// has them, else Node::nchw16c.
uint32_t layout_bits(const Node& node);
void set_layout_bits(Node& node, uint32_t bits);
inline bool input_is_nchw16c(const Node& node, int i) {
  return ops::input_is_nchw16c(layout_bits(node), i);
}
inline bool output_is_nchw16c(const Node& node, int j) {
  return ops::output_is_nchw16c(layout_bits(node), j);
}

// Display name of a node: the op's name, "fused[add,mul,relu]" for fused nodes.
std::string node_label(const Node& node);
// Bit k set: the node writes input k in place (an op's OpDef::mutated_inputs; a fused node's
// are those of the member with the side effect).
uint32_t mutated_inputs(const Node& node);
// Whether the node writes one of its inputs in place (optimizer updates, BN running stats):
// such nodes are never removed, merged, fused or moved.
bool has_side_effects(const Node& node);
// Whether the op's output aliases its first input (reshape, transpose, slice).
bool is_view(const Node& node);
// Whether the node is elementwise: a fused chain, or one op with a tile function.
bool is_elementwise(const Node& node);
// Whether the node is a collective across ranks (never merged, folded, fused or removed apart
// from its rank peers: every rank must run the same collectives in the same order).
bool is_collective(const Node& node);

}  // namespace kiln::graph
