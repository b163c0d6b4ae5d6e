#pragma once
// Graph passes. Each rewrites the graph in place and returns how many rewrites it made; each
// lives in its own file with its own tests (tests/graph/<pass>_test.cpp).
//
// Shared rules every pass keeps:
//  - nodes with side effects (optimizer updates, BatchNorm's running statistics) are never
//    removed, merged, fused or moved, and values they write are never treated as constants;
//  - dropout is never merged or folded (each call draws its own mask);
//  - a node only ever moves later in the schedule, and only past nodes that do not write any
//    of its inputs.
#include "kiln/graph/ir.h"

namespace kiln::graph::passes {

// Removes nodes whose outputs nothing needs (graph outputs and side effects are the roots).
int eliminate_dead_code(Graph& graph);
// Merges nodes that compute the same op with the same attributes on the same inputs.
int eliminate_common_subexpressions(Graph& graph);
// Evaluates, at compile time, nodes whose inputs are all constants (outputs up to a size cap).
int fold_constants(Graph& graph);
// Identities: x*1, x+0, x-0, x/1, mul_scalar(x,1), add_scalar(x,0), neg(neg(x)), same-shape
// reshape/broadcast_to/sum_to_shape, same-dtype cast, and mul_scalar(mul_scalar(x,a),b).
int simplify_algebra(Graph& graph);
// (a) Chains of elementwise ops with one consumer each become one kernel (one memory pass).
int fuse_elementwise(Graph& graph);
// (c) conv2d/matmul followed by bias add, relu, residual add: oneDNN post-ops.
int fuse_epilogues(Graph& graph);
// (b) Elementwise producers folded into the sum/mean that consumes them.
int fuse_reductions(Graph& graph);
// (d) batch_norm + [residual add +] relu forward, relu_grad + batch_norm_grad backward.
int fuse_bn_relu(Graph& graph);
// (e) A weight gradient made by a matmul and applied by momentum SGD: the product accumulates
// into the velocity, the gradient is never materialized (fuse_matmul_momentum.cpp).
int fuse_matmul_momentum(Graph& graph);
// (f) A 2×2/2 max pool's gradient [+ relu_grad] and the backward of the convolution before it:
// one kernel that adds only the pool gradient's non-zero entries. The forward pool then records
// its winners for it, fused with a one-input-channel conv + relu (the relu output never
// written) or alone (fuse_pooled_conv_grad.cpp).
int fuse_pooled_conv_grad(Graph& graph);

// (g) A batch norm + relu read only by 3x3 stride-1 convolutions of 16 or 32 channels (forward
// and weight gradient): they apply it to their input as they read it, the relu output is never
// written, and the batch norm keeps only its statistics (fuse_bn_relu_conv.cpp).
int fuse_bn_relu_conv(Graph& graph);

// Layout propagation: 4-D f32 activations of 32+ channels (a multiple of 16) stay in oneDNN's
// blocked nChw16c layout between the kernels that read it — convolutions, batch norm and
// same-shape elementwise ops (which do not care about element order) — so the convolutions
// need no reorders around them; a reorder node converts a value where it meets any other
// kernel. Marks the nodes' layout bits (graph::set_layout_bits) and renumbers nodes
// (Graph::reorder). Returns how many values it keeps blocked. Runs last, on the final schedule.
int block_layout(Graph& graph);
// Throws Error if some node reads a value in a layout other than the one it is in (or a graph
// output is left blocked): the layouts' counterpart of the memory plan checker.
void check_block_layout(const Graph& graph);

// Marks the fused batch_norm + relu nodes whose output is large (>= 1 MiB, f32) and read by
// convolutions alone (forward or backward-weights) to write it with streaming stores
// (Node::stream_output). Returns how many it marks. Runs after block_layout, on the final
// readers.
int mark_streaming_stores(Graph& graph);

// Gives a relu output that the backward reads last only to mask a gradient (in a fused
// reduction) a byte mask, made right after its last other reader; the f32 output dies there.
// Returns how many masks it adds. Runs last, on the final schedule (compact_relu_masks.cpp).
int compact_relu_masks(Graph& graph);

// Moves each optimizer update to just after its gradient (and the parameter's last earlier
// reader), so gradients die early. Renumbers nodes (Graph::reorder).
int schedule_updates_early(Graph& graph);

// Moves each of data parallelism's all_reduce_bucket_start nodes to just after the node that
// produces its last gradient (keeping the starts' order), so the all-reduce overlaps the rest
// of the backward. Renumbers nodes (Graph::reorder). Runs after schedule_updates_early
// (schedule_collectives.cpp).
int schedule_collectives(Graph& graph);

// Mixed precision: a weight that the step casts to bf16 and one optimizer update writes keeps a
// bf16 copy instead (a new state value), rewritten by that update after the step's last reader
// of the cast; the casts go. Returns how many weights keep one. Runs after scheduling, on the
// final order of updates (bf16_weight_copies.cpp; the executor refreshes a copy whose weight
// something else wrote).
int keep_bf16_weight_copies(Graph& graph);
// The weights that keep a bf16 copy, their copies and the updates that write both.
struct Bf16WeightCopy {
  ValueId weight;
  ValueId copy;
  NodeId update;
};
std::vector<Bf16WeightCopy> bf16_weight_copies(const Graph& graph);

// Helpers shared by the passes.
// Whether the node is an optimizer update (sgd_update, momentum_update, adam_update).
bool is_optimizer_update(const Node& node);
// Whether the node may be merged, folded or fused (no side effects, not random).
bool is_pure(const Node& node);
// Per value: whether some live node writes it in place.
std::vector<bool> mutated_values(const Graph& graph);
// Whether every element of a constant value equals `x` (false for non-constants).
bool constant_equals(const Graph& graph, ValueId v, double x);
// Whether the value's memory is dense in the layout its meta names (a transpose view's meta, or
// a slice's of anything but whole rows, can say "contiguous" for strided memory; a reshape's
// output is always row-major).
bool dense_as_meta(const Graph& graph, ValueId v);
// Whether moving node `n` later, from schedule position `from` to `to`, crosses a node that
// writes one of its inputs in place (`order`: the schedule).
bool crosses_write(const Graph& graph, const std::vector<NodeId>& order, const Node& n, int from,
                   int to);
// Whether the node is a live plain op of kind k (not dead, not already fused).
bool is_live_op(const Node& node, ops::OpKind k);

// What a fusion pass consults while it walks the schedule, taken once before it rewrites
// anything: the schedule, each node's position in it, each value's readers, and which values
// are graph outputs (those must stay materialized).
struct ScheduleView {
  explicit ScheduleView(const Graph& graph);
  std::vector<NodeId> order;
  std::vector<int> pos;
  std::vector<std::vector<NodeId>> users;
  std::vector<bool> is_output;
};

}  // namespace kiln::graph::passes
