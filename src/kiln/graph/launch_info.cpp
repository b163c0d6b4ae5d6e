// What each launch of a compiled graph runs, described for the profiler: the node, its tensors,
// the kind of kernel and the work it does (the op table's cost where the node is one op).
#include <exception>

#include "kiln/graph/detail/executor_internal.h"

namespace kiln::graph {
namespace {

double bytes_of(const std::vector<ops::TensorMeta>& metas) {
  double bytes = 0;
  for (const ops::TensorMeta& m : metas) bytes += double(m.shape.numel() * dtype_size(m.dtype));
  return bytes;
}

// Fused nodes count the work of the op they are built around (a convolution's or a matmul's
// flops; each elementwise step one flop per element) over the bytes they actually move.
ops::Cost node_cost(const Graph& graph, const Node& node,
                    const std::vector<ops::TensorMeta>& inputs,
                    const std::vector<ops::TensorMeta>& outputs) {
  ops::Cost cost{0, bytes_of(inputs) + bytes_of(outputs)};
  if (node.type == NodeType::fused_elementwise || node.type == NodeType::fused_reduction) {
    const double elements = outputs.empty() ? 0 : double(outputs[0].shape.numel());
    const double inner =
        node.type == NodeType::fused_reduction ? double(node.chain_meta.shape.numel()) : elements;
    cost.flops = inner * double(node.chain.size());
    return cost;
  }
  const ops::OpDef& def = ops::op_def(node.op);
  // Only where the node's leading inputs are the op's own; the other fused forms rearrange them.
  const bool op_inputs_lead = node.type == NodeType::op || node.type == NodeType::epilogue ||
                              node.type == NodeType::conv_relu_pool;
  if (def.cost == nullptr || !op_inputs_lead || outputs.empty()) return cost;
  // The op's inputs in its own order (an absent optional one as an empty meta); a fused node's
  // extra inputs (post-op operands, statistics) come after them and are left out.
  std::vector<ops::TensorMeta> op_inputs;
  for (ValueId v : node.inputs) {
    op_inputs.push_back(v == kNoValue ? ops::TensorMeta{} : graph.value(v).meta);
  }
  if (def.num_inputs >= 0 && op_inputs.size() > size_t(def.num_inputs)) {
    op_inputs.resize(size_t(def.num_inputs));
  }
  try {
    ops::Cost op_cost = def.cost(op_inputs, outputs, node.attrs);
    cost.flops = op_cost.flops;
    if (node.type == NodeType::op) cost.bytes = op_cost.bytes;
  } catch (const std::exception&) {
    // The fused form's tensors do not fit the op's cost formula: its flops stay uncounted.
  }
  return cost;
}

// Kiln's kernel for a node the executor runs as a special kernel (fused nodes, layout nodes).
std::string own_kernel_name(const Node& node) {
  switch (node.type) {
    case NodeType::op:
      return "kiln:" + std::string(ops::op_name(node.op));
    case NodeType::reorder:
      return "kiln:reorder";
    case NodeType::relu_mask:
      return "kiln:relu_mask";
#define KILN_FUSED_NODE_KERNEL_NAME(type, fusion, counted_as, kernel) \
  case NodeType::type:                                                \
    return "kiln:" #type;
      KILN_FOR_EACH_FUSED_NODE(KILN_FUSED_NODE_KERNEL_NAME)
#undef KILN_FUSED_NODE_KERNEL_NAME
  }
  return "kiln:?";
}

}  // namespace

namespace detail {

ops::Cost node_cost(const Graph& graph, const Node& node) {
  std::vector<ops::TensorMeta> inputs, outputs;
  for (ValueId v : node.inputs) {
    if (v != kNoValue) inputs.push_back(graph.value(v).meta);
  }
  for (ValueId v : node.outputs) {
    if (v != kNoValue) outputs.push_back(graph.value(v).meta);
  }
  return graph::node_cost(graph, node, inputs, outputs);
}

}  // namespace detail

size_t Executable::num_launches() const {
  return launches_.size();
}

LaunchInfo Executable::launch_info(size_t i) const {
  const Launch& launch = launches_.at(i);
  auto kernel_kind = [](const Launch& launch) {
    using Kind = Launch::Kind;
    switch (launch.kind) {
      case Kind::kernel:
        return "op kernel";
      case Kind::pointwise:
        return "pointwise";
      case Kind::copy_reshape:
        return "strided copy";
      case Kind::view_copy:
        return "view copy";
      case Kind::special:  // fused elementwise chains too, since fusions became table entries
        return "graph kernel";
    }
    return "?";
  };
  const Node& node = graph_.node(launch.node);
  LaunchInfo info;
  info.node = launch.node;
  info.label = node_label(node);
  info.kernel = kernel_kind(launch);
  switch (launch.kind) {
    case Launch::Kind::kernel:
      info.own_kernel = "kiln:" + std::string(ops::op_name(node.op));
      break;
    case Launch::Kind::pointwise:
      info.own_kernel = "kiln:pointwise";
      break;
    case Launch::Kind::copy_reshape:
      info.own_kernel = "kiln:strided_copy";
      break;
    case Launch::Kind::view_copy:
      info.own_kernel = "kiln:view_copy";
      break;
    case Launch::Kind::special:
      info.own_kernel = own_kernel_name(node);
      break;
  }
  for (ValueId v : node.inputs) {
    if (v != kNoValue) info.inputs.push_back(graph_.value(v).meta);
  }
  for (ValueId v : node.outputs) {
    if (v != kNoValue) info.outputs.push_back(graph_.value(v).meta);
  }
  info.cost = node_cost(graph_, node, info.inputs, info.outputs);
  return info;
}

int Executable::launch_threads(size_t i) const {
  return launches_.at(i).threads;
}

}  // namespace kiln::graph
