#pragma once
// What the ONNX mappings (op_mappings.h) write through. GraphWriter holds the ONNX graph being
// built and the ONNX name of every traced value (a state or constant value becomes an
// initializer when a node first reads it); NodeEmitter is one traced node's view of it, handed
// to that op's emit function.
#include <onnx/onnx.pb.h>

#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/graph/ir.h"

namespace kiln::onnx {

// ONNX's TensorProto element type of a dtype.
int32_t onnx_element_type(DType dtype);

// One ONNX node being written; attributes are chained on: add(...).i("axis", 1).
class OnnxNode {
 public:
  explicit OnnxNode(::onnx::NodeProto* proto) : proto_(proto) {}
  OnnxNode& i(std::string_view name, int64_t value);
  OnnxNode& ints(std::string_view name, std::span<const int64_t> values);
  OnnxNode& f(std::string_view name, float value);

 private:
  ::onnx::NodeProto* proto_;
};

class GraphWriter {
 public:
  GraphWriter(const graph::Graph& graph, ::onnx::GraphProto& out) : graph_(graph), out_(out) {}

  const graph::Graph& graph() const { return graph_; }
  // The ONNX name of v: given by set_name, or the initializer of a state or constant value
  // (added now if it is the first use); empty for an intermediate no emitted node produced.
  std::string name_of(graph::ValueId v);
  // Fixes v's ONNX name (the graph's input, a node's output); returns it.
  const std::string& set_name(graph::ValueId v, const std::string& name);
  // The name the node that computes v is to give it (the graph's output), or empty.
  void reserve_name(graph::ValueId v, const std::string& name);
  std::string reserved_name(graph::ValueId v) const;
  // A name no other value has, made from `hint`.
  std::string unique_name(const std::string& hint);
  ::onnx::NodeProto* add_node(std::string_view op_type, const std::vector<std::string>& inputs,
                              const std::vector<std::string>& outputs, const std::string& name);
  // The initializer holding `t` (same dtype, shape and bytes: the same initializer).
  std::string add_constant(const Tensor& t, const std::string& hint);

  int64_t initializers() const { return int64_t(out_.initializer_size()); }
  int64_t initializer_elements() const { return initializer_elements_; }

 private:
  std::string add_initializer(const Tensor& t, const std::string& name);

  const graph::Graph& graph_;
  ::onnx::GraphProto& out_;
  std::map<graph::ValueId, std::string> names_;
  std::map<graph::ValueId, std::string> reserved_;
  std::set<std::string> used_names_;
  std::map<std::string, std::string> constants_;  // dtype, shape and bytes -> initializer name
  int64_t initializer_elements_ = 0;
};

class NodeEmitter {
 public:
  NodeEmitter(GraphWriter& writer, const graph::Node& node) : writer_(writer), node_(node) {}

  const graph::Node& node() const { return node_; }
  template <class A>
  const A& attrs() const {
    return node_.attrs.as<A>();
  }
  int num_inputs() const { return int(node_.inputs.size()); }
  bool has_input(int i) const {
    return i < num_inputs() && node_.inputs[size_t(i)] != graph::kNoValue;
  }
  const ops::TensorMeta& input_meta(int i) const;
  const ops::TensorMeta& output_meta(int j) const;

  // The ONNX name of input i; an Error naming this op when no mapping produced it (say, an
  // output of batch_norm that only training computes).
  std::string input(int i);
  // The ONNX name output j gets; a mapping writes each output later nodes may read.
  std::string output(int j);
  // A new name for a value between the nodes one mapping writes.
  std::string temp();

  OnnxNode add(std::string_view op_type, const std::vector<std::string>& inputs,
               const std::vector<std::string>& outputs);
  std::string constant(const Tensor& t);
  std::string constant_i64(std::vector<int64_t> values);  // a 1-D int64 tensor
  std::string scalar(double value, DType dtype);          // a rank-0 tensor

  // Error: "ONNX export: <op>(<inputs>) {attrs}: <why>".
  [[noreturn]] void fail(const std::string& why) const;
  // The op with its input types and attributes, for messages.
  std::string describe() const;

 private:
  std::string base_name() const;

  GraphWriter& writer_;
  const graph::Node& node_;
  int emitted_ = 0;
  int temps_ = 0;
};

}  // namespace kiln::onnx
