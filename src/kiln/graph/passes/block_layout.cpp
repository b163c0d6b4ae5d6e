// Layout propagation. oneDNN's fastest f32 convolutions on this CPU (Winograd above all) read
// and write the blocked nChw16c layout; Kiln's tensors are channels-last. Eager mode converts
// at every convolution; a compiled step can instead keep an activation blocked from the
// convolution that writes it to every kernel that reads it, when those kernels all understand
// the layout:
//  - convolutions (conv2d, conv2d_backward_data, conv2d_backward_weights, plain or reading
//    relu(batch_norm(x)) on the fly) take each activation in either layout (their layout bits say
//    which) and write a blocked one where it pays;
//  - batch norm (plain, fused with relu / residual add, or its statistics alone) and elementwise
//    ops do not care where an element lives as long as all their full-size operands agree: they
//    run in the layout most of their inputs have, and their outputs get it too. Elementwise
//    operands with one value per (sample, channel) ([N, C, 1, 1], [1, C, 1, 1], scalars) stay
//    channels-last: against a blocked output the kernel repeats them with the layout's period
//    (kernels/blocked_spatial.cpp);
//  - a mean or sum over exactly H and W (the global average pool) reads either layout as it is;
//  - anything else (pooling, reshapes, broadcasts, graph outputs) reads channels-last, through
//    a reorder node inserted before it (one per value and direction, shared by its readers).
// A blocked value keeps its channels-last meta (same shape, dtype and size); only the kernels
// that were told read it differently.
#include <algorithm>
#include <unordered_map>

#include "kiln/core/error.h"
#include "kiln/graph/detail/fused_kernels.h"
#include "kiln/graph/detail/passes.h"

namespace kiln::graph::passes {
namespace {
using ops::OpKind;

// The activation arguments of a convolution node: input positions, output positions.
struct ConvArgs {
  std::vector<int> inputs, outputs;
};

// A convolution runs blocked only where every activation it touches has whole blocks of 16
// channels: oneDNN has no fast kernel mixing a blocked tensor with a channels-last one of, say,
// 3 channels, so such a convolution stays channels-last, and so do its arguments.
bool convolution_args(const Graph& graph, const Node& node, ConvArgs& args) {
  if (node.type != NodeType::op && node.type != NodeType::bn_relu_conv) return false;
  switch (node.op) {
    case OpKind::conv2d:
    case OpKind::conv2d_backward_data:
      args = {{0}, {0}};
      break;
    case OpKind::conv2d_backward_weights:
      args = {{0, 1}, {}};
      break;
    default:
      return false;
  }
  auto whole_blocks = [&](ValueId v) { return graph.value(v).meta.shape[1] % 16 == 0; };
  for (int i : args.inputs) {
    if (!whole_blocks(node.inputs[size_t(i)])) return false;
  }
  for (int j : args.outputs) {
    if (!whole_blocks(node.outputs[size_t(j)])) return false;
  }
  return true;
}

// A mean or sum of an f32 [N, C, H, W] over exactly H and W: it reads its input in either layout
// (one pass over the blocked memory gives [N, C/16, 16], which is [N, C]) and writes a
// channels-last result.
bool spatial_reduction_args(const Graph& graph, const Node& node, ConvArgs& args) {
  if (node.type != NodeType::op || (node.op != OpKind::mean && node.op != OpKind::sum) ||
      node.inputs.size() != 1) {
    return false;
  }
  const ops::TensorMeta& in = graph.value(node.inputs[0]).meta;
  const std::vector<int64_t>& axes = node.attrs.as<ops::ReduceAttrs>().axes;
  if (in.dtype != DType::f32 || in.shape.rank() != 4 || axes.size() != 2) return false;
  bool axis[4] = {};
  for (int64_t a : axes) axis[in.shape.normalize_axis(int(a))] = true;
  if (axis[0] || axis[1] || !axis[2] || !axis[3]) return false;
  args = {{0}, {}};
  return true;
}

// Nodes that take each activation in either layout, as it is (convolutions, spatial reductions).
bool either_layout_args(const Graph& graph, const Node& node, ConvArgs& args) {
  return convolution_args(graph, node, args) || spatial_reduction_args(graph, node, args);
}

// An f32 elementwise operand with one value per (sample, channel) of an f32 output (see
// is_per_sample_channel).
bool per_channel_operand(const ops::TensorMeta& operand, const ops::TensorMeta& out) {
  return operand.dtype == DType::f32 && out.dtype == DType::f32 &&
         is_per_sample_channel(operand.shape, out.shape);
}

// The full-size operands of a node that runs in either layout as long as they all agree
// (batch norm and its fusions, elementwise ops); false for any other node.
bool layout_agnostic_args(const Graph& graph, const Node& node, ConvArgs& args) {
  switch (node.type) {
    case NodeType::bn_relu:
      args = {{0}, {0}};
      if (node.inputs.size() > 5) args.inputs.push_back(5);  // the residual
      return true;
    case NodeType::bn_relu_grad:
      args = {{0, 1, 2}, {0}};
      return true;
    case NodeType::bn_stats:
      args = {{0}, {}};
      return true;
    case NodeType::bn_add_relu_grad:
      args = {{0, 1, 2, 3}, {0, 3}};
      return true;
    case NodeType::fused_elementwise:
      break;
    case NodeType::op:
      if (node.op == OpKind::batch_norm) {
        args = {{0}, {0}};
        return true;
      }
      if (node.op == OpKind::batch_norm_grad) {
        args = {{0, 1}, {0}};
        return true;
      }
      if (ops::op_def(node.op).tile == nullptr || ops::op_def(node.op).mutated_inputs != 0) {
        return false;
      }
      break;
    default:
      return false;
  }
  // Elementwise: every input has the output's shape (position i is position i in either layout)
  // or, with at least one that has, holds one value per (sample, channel): other broadcasts map
  // positions through the layout.
  if (node.outputs.size() != 1) return false;
  const ops::TensorMeta& out = graph.value(node.outputs[0]).meta;
  args = {{}, {0}};
  bool per_channel = false;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    if (node.inputs[i] == kNoValue) return false;
    const ops::TensorMeta& m = graph.value(node.inputs[i]).meta;
    if (m.shape == out.shape) {
      args.inputs.push_back(int(i));
    } else if (per_channel_operand(m, out)) {
      per_channel = true;
    } else {
      return false;
    }
  }
  return !per_channel || !args.inputs.empty();
}

class LayoutPropagation {
 public:
  explicit LayoutPropagation(Graph& graph)
      : graph_(graph), view_(graph), mutated_(mutated_values(graph)) {}

  int run() {
    blocked_.assign(graph_.num_values(), false);
    for (NodeId n : view_.order) {
      ConvArgs args;
      if (either_layout_args(graph_, graph_.node(n), args)) {
        place_convolution(n, args);
      } else if (layout_agnostic_args(graph_, graph_.node(n), args)) {
        place_agnostic(n, args);
        if (is_elementwise(graph_.node(n))) {
          place_channels_last_reader(n, args.inputs);  // its per-channel operands
        }
      } else {
        place_channels_last_reader(n);
      }
      order_.push_back(n);
    }
    graph_.reorder(order_);
    int count = 0;
    for (bool b : blocked_) count += b ? 1 : 0;
    return count;
  }

 private:
  // Whether a reorder can convert v: a dense channels-last f32 activation of 32+ channels (a
  // multiple of 16; with 16 both layouts are the same bytes) that nothing writes in place (a
  // converted copy made before such a write would go stale).
  bool convertible(ValueId v) const {
    const ops::TensorMeta& m = graph_.value(v).meta;
    return m.dtype == DType::f32 && m.shape.rank() == 4 && m.layout == ops::Layout::channels_last &&
           m.shape[1] % 16 == 0 && m.shape[1] >= 32 && dense_as_meta(graph_, v) &&
           !mutated_[size_t(v)];
  }

  // Whether v may live blocked: convertible, made by the step itself, and not a graph output
  // (which callers read channels-last).
  bool can_block(ValueId v) const {
    return graph_.value(v).kind == ValueKind::intermediate && convertible(v) &&
           !view_.is_output[size_t(v)];
  }

  // Whether every reader of v takes the blocked layout without a reorder, at every position it
  // reads v.
  bool readers_take_blocked(ValueId v) const {
    for (NodeId u : view_.users[size_t(v)]) {
      ConvArgs args;
      const Node& node = graph_.node(u);
      if (!either_layout_args(graph_, node, args) && !layout_agnostic_args(graph_, node, args)) {
        return false;
      }
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        if (node.inputs[i] == v &&
            std::find(args.inputs.begin(), args.inputs.end(), int(i)) == args.inputs.end()) {
          return false;
        }
      }
    }
    return !view_.users[size_t(v)].empty();
  }

  // v in the wanted layout: itself, or the output of a reorder node (made once per value and
  // direction, scheduled before the first reader that needs it).
  ValueId in_layout(ValueId v, bool want_blocked) {
    if (blocked_[size_t(v)] == want_blocked) return v;
    auto& converted = want_blocked ? as_blocked_ : as_channels_last_;
    if (auto it = converted.find(v); it != converted.end()) return it->second;
    Node r;
    r.type = NodeType::reorder;
    r.inputs = {v};
    r.nchw16c = want_blocked ? 1u << ops::kNchw16cOutputBit : 1u;
    const ops::TensorMeta meta = graph_.value(v).meta;
    NodeId id = graph_.add_node(std::move(r), {meta});
    ValueId out = graph_.node(id).outputs[0];
    blocked_.resize(graph_.num_values(), false);
    blocked_[size_t(out)] = want_blocked;
    order_.push_back(id);
    converted.emplace(v, out);
    return out;
  }

  // Convolutions take any mix; their activation outputs go blocked when every reader takes it.
  void place_convolution(NodeId n, const ConvArgs& args) {
    uint32_t bits = 0;
    for (int i : args.inputs) {
      if (blocked_[size_t(graph_.node(n).inputs[size_t(i)])]) bits |= 1u << i;
    }
    for (int j : args.outputs) {
      ValueId out = graph_.node(n).outputs[size_t(j)];
      if (can_block(out) && readers_take_blocked(out)) {
        blocked_[size_t(out)] = true;
        bits |= 1u << (ops::kNchw16cOutputBit + j);
      }
    }
    set_layout_bits(graph_.node(n), bits);
  }

  // Runs blocked when at least half its full-size inputs are and its outputs may be (its
  // outputs then feed convolutions without reorders); converts the inputs that disagree.
  void place_agnostic(NodeId n, const ConvArgs& args) {
    const Node& node = graph_.node(n);
    size_t blocked_inputs = 0;
    for (int i : args.inputs) blocked_inputs += blocked_[size_t(node.inputs[size_t(i)])] ? 1 : 0;
    bool run_blocked = blocked_inputs > 0 && 2 * blocked_inputs >= args.inputs.size();
    for (int i : args.inputs) run_blocked = run_blocked && convertible(node.inputs[size_t(i)]);
    for (int j : args.outputs) run_blocked = run_blocked && can_block(node.outputs[size_t(j)]);
    uint32_t bits = 0;
    for (int i : args.inputs) {
      ValueId v = in_layout(graph_.node(n).inputs[size_t(i)], run_blocked);
      graph_.node(n).inputs[size_t(i)] = v;
      if (run_blocked) bits |= 1u << i;
    }
    for (int j : args.outputs) {
      blocked_[size_t(graph_.node(n).outputs[size_t(j)])] = run_blocked;
      if (run_blocked) bits |= 1u << (ops::kNchw16cOutputBit + j);
    }
    set_layout_bits(graph_.node(n), bits);
  }

  // Converts n's blocked inputs to channels-last, except those at positions `keep`.
  void place_channels_last_reader(NodeId n, const std::vector<int>& keep = {}) {
    for (size_t i = 0; i < graph_.node(n).inputs.size(); ++i) {
      if (std::find(keep.begin(), keep.end(), int(i)) != keep.end()) continue;
      ValueId v = graph_.node(n).inputs[i];
      if (v != kNoValue && blocked_[size_t(v)]) graph_.node(n).inputs[i] = in_layout(v, false);
    }
  }

  Graph& graph_;
  const ScheduleView view_;
  const std::vector<bool> mutated_;
  std::vector<bool> blocked_;  // per value
  std::unordered_map<ValueId, ValueId> as_blocked_, as_channels_last_;
  std::vector<NodeId> order_;  // the new schedule, reorders included
};

// The layout each node expects of its inputs, per input position.
std::vector<bool> expected_input_layouts(const Graph& graph, const Node& node) {
  std::vector<bool> want(node.inputs.size(), false);
  ConvArgs args;
  if (node.type == NodeType::reorder) {
    want[0] = !output_is_nchw16c(node, 0);
  } else if (either_layout_args(graph, node, args) || layout_agnostic_args(graph, node, args)) {
    for (int i : args.inputs) want[size_t(i)] = input_is_nchw16c(node, i);
  }
  return want;
}

}  // namespace

int block_layout(Graph& graph) {
  return LayoutPropagation(graph).run();
}

void check_block_layout(const Graph& graph) {
  auto is_blocked = [&](ValueId v) {
    const Value& val = graph.value(v);
    if (val.kind != ValueKind::intermediate || val.producer < 0) return false;
    return output_is_nchw16c(graph.node(val.producer), val.output_index);
  };
  for (NodeId n : graph.schedule()) {
    const Node& node = graph.node(n);
    const std::vector<bool> want = expected_input_layouts(graph, node);
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      ValueId v = node.inputs[i];
      if (v == kNoValue || is_blocked(v) == want[i]) continue;
      throw Error("block_layout: " + node_label(node) + " reads input " + std::to_string(i) +
                  " (%" + std::to_string(v) + ") as " + (want[i] ? "nChw16c" : "channels-last") +
                  " but it is " + (want[i] ? "channels-last" : "nChw16c"));
    }
  }
  for (ValueId v : graph.outputs()) {
    if (is_blocked(v)) {
      throw Error("block_layout: graph output %" + std::to_string(v) + " is left in nChw16c");
    }
  }
}

}  // namespace kiln::graph::passes
