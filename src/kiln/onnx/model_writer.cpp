#include "kiln/onnx/detail/model_writer.h"

#include "kiln/core/error.h"
#include "kiln/onnx/detail/node_emitter.h"
#include "kiln/onnx/export.h"
#include "kiln/onnx/op_mappings.h"

namespace kiln::onnx {
namespace {

void set_tensor_type(::onnx::ValueInfoProto& info, const ops::TensorMeta& meta,
                     bool symbolic_dim0) {
  ::onnx::TypeProto_Tensor* tensor = info.mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(onnx_element_type(meta.dtype));
  ::onnx::TensorShapeProto* shape = tensor->mutable_shape();
  for (int k = 0; k < meta.shape.rank(); ++k) {
    ::onnx::TensorShapeProto_Dimension* dim = shape->add_dim();
    if (k == 0 && symbolic_dim0) {
      dim->set_dim_param("batch");
    } else {
      dim->set_dim_value(meta.shape[k]);
    }
  }
}

// The nodes whose outputs the graph's outputs need, in schedule order: a node nothing reads
// (say, a statistic only training uses) is not exported, so it needs no mapping either.
std::vector<graph::NodeId> live_nodes(const graph::Graph& g) {
  std::vector<bool> needed(g.num_values());
  for (graph::ValueId v : g.outputs()) needed[size_t(v)] = true;
  const std::vector<graph::NodeId> schedule = g.schedule();
  std::vector<graph::NodeId> live;
  for (auto it = schedule.rbegin(); it != schedule.rend(); ++it) {
    const graph::Node& node = g.node(*it);
    bool used = false;
    for (graph::ValueId v : node.outputs) used = used || needed[size_t(v)];
    if (!used) continue;
    live.push_back(*it);
    for (graph::ValueId v : node.inputs)
      if (v != graph::kNoValue) needed[size_t(v)] = true;
  }
  return {live.rbegin(), live.rend()};
}

}  // namespace

::onnx::ModelProto write_model(const graph::Graph& g, const ModelSpec& spec, ModelCounts* counts) {
  if (g.inputs().size() != 1 || g.outputs().size() != 1) {
    throw Error("ONNX export: the traced network has " + std::to_string(g.inputs().size()) +
                " inputs and " + std::to_string(g.outputs().size()) +
                " outputs; the exporter writes networks of one input and one output");
  }
  ::onnx::ModelProto model;
  model.set_ir_version(::onnx::IR_VERSION);
  model.set_producer_name("kiln");
  model.set_producer_version(KILN_VERSION);
  model.set_doc_string(spec.doc_string);
  ::onnx::OperatorSetIdProto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpsetVersion);
  for (const auto& [key, value] : spec.metadata) {
    ::onnx::StringStringEntryProto* entry = model.add_metadata_props();
    entry->set_key(key);
    entry->set_value(value);
  }
  ::onnx::GraphProto& out = *model.mutable_graph();
  out.set_name(spec.graph_name);
  GraphWriter writer(g, out);

  const graph::ValueId input = g.inputs()[0], output = g.outputs()[0];
  const ops::TensorMeta& input_meta = g.value(input).meta;
  writer.set_name(input, spec.input_name);
  set_tensor_type(*out.add_input(), input_meta, spec.symbolic_batch);
  out.mutable_input(0)->set_name(spec.input_name);
  // The node that computes the output writes it under the output's name.
  const bool output_is_computed = g.value(output).kind == graph::ValueKind::intermediate;
  if (output_is_computed) writer.reserve_name(output, spec.output_name);

  for (graph::NodeId id : live_nodes(g)) {
    const graph::Node& node = g.node(id);
    if (node.type != graph::NodeType::op) {
      throw Error("ONNX export: the traced graph holds a " + graph::node_label(node) +
                  " node, which only compiling makes (internal: export the trace itself)");
    }
    const OpMapping& mapping = op_mapping(node.op);
    NodeEmitter emitter(writer, node);
    if (!mapping.emit) {
      emitter.fail("op '" + std::string(ops::op_name(node.op)) +
                   "' has no ONNX mapping: " + mapping.no_mapping_reason);
    }
    mapping.emit(emitter);
  }
  if (!output_is_computed) {
    // The network returns its input or a parameter as it is.
    writer.add_node("Identity", {writer.name_of(output)}, {spec.output_name}, "output");
  } else if (writer.name_of(output).empty()) {
    const graph::Value& value = g.value(output);
    throw Error("ONNX export: the network returns output " + std::to_string(value.output_index) +
                " of " + std::string(ops::op_name(g.node(value.producer).op)) +
                ", which its ONNX mapping does not write (inference does not compute it)");
  }

  const ops::TensorMeta& output_meta = g.value(output).meta;
  const bool batch_first = spec.symbolic_batch && output_meta.shape.rank() > 0 &&
                           input_meta.shape.rank() > 0 &&
                           output_meta.shape[0] == input_meta.shape[0];
  set_tensor_type(*out.add_output(), output_meta, batch_first);
  out.mutable_output(0)->set_name(spec.output_name);
  if (counts) {
    counts->nodes = out.node_size();
    counts->initializers = writer.initializers();
    counts->initializer_elements = writer.initializer_elements();
  }
  return model;
}

}  // namespace kiln::onnx
