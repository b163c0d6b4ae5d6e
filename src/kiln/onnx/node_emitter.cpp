#include "kiln/onnx/detail/node_emitter.h"

#include <cstring>

#include "kiln/core/error.h"

namespace kiln::onnx {

int32_t onnx_element_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ::onnx::TensorProto_DataType_FLOAT;
    case DType::f16:
      return ::onnx::TensorProto_DataType_FLOAT16;
    case DType::bf16:
      return ::onnx::TensorProto_DataType_BFLOAT16;
    case DType::i32:
      return ::onnx::TensorProto_DataType_INT32;
    case DType::i64:
      return ::onnx::TensorProto_DataType_INT64;
    case DType::u8:
      return ::onnx::TensorProto_DataType_UINT8;
    case DType::boolean:
      return ::onnx::TensorProto_DataType_BOOL;
  }
  throw Error("ONNX export: no ONNX element type for dtype " + std::string(dtype_name(dtype)));
}

// ------------------------------------------------------------------------------ OnnxNode

OnnxNode& OnnxNode::i(std::string_view name, int64_t value) {
  ::onnx::AttributeProto* a = proto_->add_attribute();
  a->set_name(std::string(name));
  a->set_type(::onnx::AttributeProto_AttributeType_INT);
  a->set_i(value);
  return *this;
}

OnnxNode& OnnxNode::ints(std::string_view name, std::span<const int64_t> values) {
  ::onnx::AttributeProto* a = proto_->add_attribute();
  a->set_name(std::string(name));
  a->set_type(::onnx::AttributeProto_AttributeType_INTS);
  for (int64_t v : values) a->add_ints(v);
  return *this;
}

OnnxNode& OnnxNode::f(std::string_view name, float value) {
  ::onnx::AttributeProto* a = proto_->add_attribute();
  a->set_name(std::string(name));
  a->set_type(::onnx::AttributeProto_AttributeType_FLOAT);
  a->set_f(value);
  return *this;
}

// ------------------------------------------------------------------------------ GraphWriter

std::string GraphWriter::name_of(graph::ValueId v) {
  auto it = names_.find(v);
  if (it != names_.end()) return it->second;
  const graph::Value& value = graph_.value(v);
  if (value.kind != graph::ValueKind::state && value.kind != graph::ValueKind::constant) return {};
  const std::string name =
      unique_name(value.name.empty() ? "constant_" + std::to_string(v) : value.name);
  add_initializer(value.tensor, name);
  return names_[v] = name;
}

const std::string& GraphWriter::set_name(graph::ValueId v, const std::string& name) {
  used_names_.insert(name);
  return names_[v] = name;
}

void GraphWriter::reserve_name(graph::ValueId v, const std::string& name) {
  used_names_.insert(name);
  reserved_[v] = name;
}

std::string GraphWriter::reserved_name(graph::ValueId v) const {
  auto it = reserved_.find(v);
  return it == reserved_.end() ? std::string() : it->second;
}

std::string GraphWriter::unique_name(const std::string& hint) {
  std::string name = hint;
  for (int k = 1; used_names_.count(name); ++k) name = hint + "_" + std::to_string(k);
  used_names_.insert(name);
  return name;
}

::onnx::NodeProto* GraphWriter::add_node(std::string_view op_type,
                                         const std::vector<std::string>& inputs,
                                         const std::vector<std::string>& outputs,
                                         const std::string& name) {
  ::onnx::NodeProto* node = out_.add_node();
  node->set_op_type(std::string(op_type));
  node->set_name(name);
  for (const std::string& in : inputs) node->add_input(in);
  for (const std::string& out : outputs) node->add_output(out);
  return node;
}

std::string GraphWriter::add_initializer(const Tensor& t, const std::string& name) {
  const Tensor data = t.contiguous();
  ::onnx::TensorProto* init = out_.add_initializer();
  init->set_name(name);
  init->set_data_type(onnx_element_type(data.dtype()));
  for (int64_t d : data.shape()) init->add_dims(d);
  init->set_raw_data(static_cast<const char*>(data.raw_data()), data.nbytes());
  initializer_elements_ += data.numel();
  return name;
}

std::string GraphWriter::add_constant(const Tensor& t, const std::string& hint) {
  const Tensor data = t.contiguous();
  std::string key(dtype_name(data.dtype()));
  key += data.shape().str();
  key.append(static_cast<const char*>(data.raw_data()), data.nbytes());
  auto it = constants_.find(key);
  if (it != constants_.end()) return it->second;
  return constants_[key] = add_initializer(data, unique_name(hint));
}

// ------------------------------------------------------------------------------ NodeEmitter

const ops::TensorMeta& NodeEmitter::input_meta(int i) const {
  if (!has_input(i)) fail("input " + std::to_string(i) + " is absent");
  return writer_.graph().value(node_.inputs[size_t(i)]).meta;
}

const ops::TensorMeta& NodeEmitter::output_meta(int j) const {
  return writer_.graph().value(node_.outputs[size_t(j)]).meta;
}

std::string NodeEmitter::input(int i) {
  if (!has_input(i)) fail("input " + std::to_string(i) + " is absent");
  const graph::ValueId v = node_.inputs[size_t(i)];
  std::string name = writer_.name_of(v);
  if (!name.empty()) return name;
  const graph::Value& value = writer_.graph().value(v);
  std::string from = "no node";
  if (value.producer >= 0) {
    from = "output " + std::to_string(value.output_index) + " of " +
           std::string(ops::op_name(writer_.graph().node(value.producer).op)) +
           ", which its ONNX mapping does not write (inference does not compute it)";
  }
  fail("input " + std::to_string(i) + " comes from " + from);
}

std::string NodeEmitter::output(int j) {
  const graph::ValueId v = node_.outputs[size_t(j)];
  std::string name = writer_.reserved_name(v);
  if (name.empty()) {
    name = writer_.unique_name(std::string(ops::op_name(node_.op)) + "_" + std::to_string(v));
  }
  return writer_.set_name(v, name);
}

std::string NodeEmitter::temp() {
  return writer_.unique_name(base_name() + "_t" + std::to_string(temps_++));
}

OnnxNode NodeEmitter::add(std::string_view op_type, const std::vector<std::string>& inputs,
                          const std::vector<std::string>& outputs) {
  std::string name = base_name();
  if (emitted_ > 0) name.append("_").append(std::to_string(emitted_));
  ++emitted_;
  ::onnx::NodeProto* proto = writer_.add_node(op_type, inputs, outputs, name);
  proto->set_doc_string(std::string(ops::op_name(node_.op)));  // the Kiln op it comes from
  return OnnxNode(proto);
}

std::string NodeEmitter::constant(const Tensor& t) {
  return writer_.add_constant(t, base_name() + "_c");
}

std::string NodeEmitter::constant_i64(std::vector<int64_t> values) {
  const int64_t n = int64_t(values.size());
  return constant(Tensor::from_vector(values, {n}));
}

std::string NodeEmitter::scalar(double value, DType dtype) {
  return constant(Tensor::scalar(value, dtype));
}

std::string NodeEmitter::describe() const {
  std::string text(ops::op_name(node_.op));
  text += "(";
  for (size_t i = 0; i < node_.inputs.size(); ++i) {
    if (i) text += ", ";
    if (node_.inputs[i] == graph::kNoValue) {
      text += "none";
      continue;
    }
    const ops::TensorMeta& m = writer_.graph().value(node_.inputs[i]).meta;
    text += ops::describe_meta(m);
  }
  return text + ")" + ops::attrs_str(node_.attrs);
}

void NodeEmitter::fail(const std::string& why) const {
  throw Error("ONNX export: " + describe() + ": " + why);
}

std::string NodeEmitter::base_name() const {
  const graph::ValueId first = node_.outputs.empty() ? -1 : node_.outputs[0];
  return std::string(ops::op_name(node_.op)) + "_" + std::to_string(first);
}

}  // namespace kiln::onnx
