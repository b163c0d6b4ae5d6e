#include "kiln/graph/ir.h"

#include <sstream>

#include "kiln/core/error.h"
#include "kiln/ops/dispatch.h"

namespace kiln::graph {
namespace {

// Only the attributes that differ from their family's defaults, so lines stay short.
std::string attrs_str(const Node& n) {
  std::string s = ops::attrs_str(n.attrs);
  if (n.nchw16c != 0) s += " nChw16c=" + ops::layout_bits_str(n.nchw16c);
  return s.empty() ? s : " {" + s.substr(1) + "}";
}

std::string meta_str(const ops::TensorMeta& m) {
  std::string s = ops::describe_meta(m);
  if (m.layout == ops::Layout::channels_last) s += " nhwc";
  return s;
}

const char* kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::input:
      return "input";
    case ValueKind::state:
      return "state";
    case ValueKind::constant:
      return "const";
    case ValueKind::intermediate:
      return "value";
  }
  return "?";
}

}  // namespace

ValueId Graph::add_value(const ops::TensorMeta& meta, ValueKind kind, std::string name) {
  Value v;
  v.meta = meta;
  v.kind = kind;
  v.name = std::move(name);
  values_.push_back(std::move(v));
  return ValueId(values_.size() - 1);
}

NodeId Graph::add_node(Node node, const std::vector<ops::TensorMeta>& output_metas) {
  if (node.type == NodeType::op) ops::check_attrs(node.op, node.attrs);
  NodeId id = NodeId(nodes_.size());
  node.outputs.clear();
  for (size_t i = 0; i < output_metas.size(); ++i) {
    ValueId v = add_value(output_metas[i], ValueKind::intermediate);
    values_[size_t(v)].producer = id;
    values_[size_t(v)].output_index = int(i);
    node.outputs.push_back(v);
  }
  nodes_.push_back(std::move(node));
  return id;
}

std::vector<NodeId> Graph::schedule() const {
  std::vector<NodeId> order;
  order.reserve(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!nodes_[i].dead) order.push_back(NodeId(i));
  }
  return order;
}

size_t Graph::num_live_nodes() const {
  size_t n = 0;
  for (const Node& node : nodes_) n += node.dead ? 0 : 1;
  return n;
}

void Graph::replace_uses(ValueId from, ValueId to) {
  for (Node& node : nodes_) {
    if (node.dead) continue;
    for (ValueId& v : node.inputs) {
      if (v == from) v = to;
    }
  }
  for (ValueId& v : outputs_) {
    if (v == from) v = to;
  }
}

std::vector<std::vector<NodeId>> Graph::users() const {
  std::vector<std::vector<NodeId>> out(values_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].dead) continue;
    for (ValueId v : nodes_[i].inputs) {
      if (v != kNoValue) out[size_t(v)].push_back(NodeId(i));
    }
  }
  return out;
}

void Graph::reorder(const std::vector<NodeId>& order) {
  std::vector<Node> nodes;
  nodes.reserve(order.size());
  for (NodeId n : order) nodes.push_back(std::move(nodes_[size_t(n)]));
  nodes_ = std::move(nodes);
  for (Value& v : values_) v.producer = -1;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    for (size_t j = 0; j < nodes_[i].outputs.size(); ++j) {
      Value& v = values_[size_t(nodes_[i].outputs[j])];
      v.producer = NodeId(i);
      v.output_index = int(j);
    }
  }
  // Values whose producer vanished are unreachable; mark them so verify() catches misuse.
}

std::string Graph::str() const {
  std::ostringstream s;
  for (ValueId v : inputs_) {
    s << "input %" << v << " " << value(v).name << " : " << meta_str(value(v).meta) << "\n";
  }
  // Bound values that live nodes use, in id order.
  std::vector<bool> used(values_.size());
  for (const Node& n : nodes_) {
    if (n.dead) continue;
    for (ValueId v : n.inputs) {
      if (v != kNoValue) used[size_t(v)] = true;
    }
  }
  for (size_t i = 0; i < values_.size(); ++i) {
    const Value& v = values_[i];
    if (!used[i] || (v.kind != ValueKind::state && v.kind != ValueKind::constant)) continue;
    s << kind_name(v.kind) << " %" << i;
    if (!v.name.empty()) s << " " << v.name;
    s << " : " << meta_str(v.meta) << "\n";
  }
  for (const Node& n : nodes_) {
    if (n.dead) continue;
    for (size_t j = 0; j < n.outputs.size(); ++j) s << (j ? ", %" : "%") << n.outputs[j];
    s << (n.outputs.empty() ? "" : " = ") << node_label(n) << "(";
    for (size_t j = 0; j < n.inputs.size(); ++j) {
      s << (j ? ", " : "");
      if (n.inputs[j] == kNoValue) {
        s << "none";
      } else {
        s << "%" << n.inputs[j];
      }
    }
    s << ")" << attrs_str(n) << (n.stream_output ? " stream_output" : "");
    if (!n.outputs.empty()) s << " :";
    for (size_t j = 0; j < n.outputs.size(); ++j) {
      s << (j ? ", " : " ") << meta_str(value(n.outputs[j]).meta);
    }
    s << "\n";
  }
  s << "return";
  for (size_t j = 0; j < outputs_.size(); ++j) s << (j ? ", %" : " %") << outputs_[j];
  s << "\n";
  return s.str();
}

void Graph::verify() const {
  std::vector<bool> defined(values_.size());
  for (size_t i = 0; i < values_.size(); ++i) {
    defined[i] = values_[i].kind != ValueKind::intermediate;
  }
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (n.dead) continue;
    for (ValueId v : n.inputs) {
      if (v == kNoValue) continue;
      if (v < 0 || size_t(v) >= values_.size() || !defined[size_t(v)]) {
        throw Error("graph verify: node " + std::to_string(i) + " (" + node_label(n) + ") uses %" +
                    std::to_string(v) + " before it is defined");
      }
    }
    for (ValueId v : n.outputs) defined[size_t(v)] = true;
    if (n.type == NodeType::op && n.attrs.kind() != ops::op_def(n.op).attrs) {
      throw Error("graph verify: node " + std::to_string(i) + " (" + node_label(n) + ") takes " +
                  std::string(ops::attrs_kind_name(ops::op_def(n.op).attrs)) + ", got " +
                  std::string(ops::attrs_kind_name(n.attrs.kind())));
    }
  }
  for (ValueId v : outputs_) {
    if (!defined[size_t(v)]) {
      throw Error("graph verify: output %" + std::to_string(v) + " is never defined");
    }
  }
}

uint32_t layout_bits(const Node& node) {
  const uint32_t* bits = node.attrs.layout_bits();
  return bits ? *bits : node.nchw16c;
}

void set_layout_bits(Node& node, uint32_t bits) {
  if (uint32_t* field = node.attrs.layout_bits()) {
    *field = bits;
  } else {
    node.nchw16c = bits;
  }
}

std::string node_label(const Node& node) {
  switch (node.type) {
    case NodeType::op:
      return std::string(ops::op_name(node.op));
    case NodeType::reorder:
      return output_is_nchw16c(node, 0) ? "reorder[nhwc->nChw16c]" : "reorder[nChw16c->nhwc]";
    case NodeType::max_pool_with_winners:
      return "max_pool2d+winners";
    case NodeType::relu_mask:
      return "relu_mask";
    case NodeType::bn_stats:
      return "batch_norm[statistics]";
    default: {  // a fused node: the ops it replaced
      std::string s = "fused[";
      for (size_t i = 0; i < node.members.size(); ++i) s += (i ? "," : "") + node.members[i];
      return s + "]";
    }
  }
}

uint32_t mutated_inputs(const Node& node) {
  switch (node.type) {
    case NodeType::op:
      return ops::op_def(node.op).mutated_inputs;
    case NodeType::bn_relu:  // the running statistics, at batch_norm's positions
    case NodeType::bn_stats:
      return node.attrs.as<ops::BatchNormAttrs>().training ? ops::op_def(node.op).mutated_inputs
                                                           : 0;
    case NodeType::fused_update:
      return 1u << kFusedUpdateVelocity;
    default:
      return 0;
  }
}

bool has_side_effects(const Node& node) {
  return mutated_inputs(node) != 0;
}

bool is_view(const Node& node) {
  return node.type == NodeType::op && ops::op_def(node.op).view != nullptr;
}

bool is_elementwise(const Node& node) {
  return node.type == NodeType::fused_elementwise ||
         (node.type == NodeType::op && ops::op_def(node.op).tile != nullptr);
}

bool is_collective(const Node& n) {
  if (n.type != NodeType::op) return false;
  switch (n.op) {
    case ops::OpKind::all_reduce:
    case ops::OpKind::broadcast:
    case ops::OpKind::all_gather:
    case ops::OpKind::reduce_scatter:
    case ops::OpKind::all_to_all:
    case ops::OpKind::barrier:
    case ops::OpKind::all_reduce_bucket_start:
    case ops::OpKind::all_reduce_bucket_wait:
      return true;
    default:
      return false;
  }
}

}  // namespace kiln::graph
