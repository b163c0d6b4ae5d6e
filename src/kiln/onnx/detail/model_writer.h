#pragma once
// A traced inference graph as an ONNX ModelProto: each live node through its op's mapping
// (op_mappings.h), state and constants as initializers, the one input and output named and
// typed, dim 0 the symbolic "batch" when asked.
#include <onnx/onnx.pb.h>

#include <string>
#include <utility>
#include <vector>

#include "kiln/graph/ir.h"

namespace kiln::onnx {

struct ModelSpec {
  std::string input_name, output_name;
  bool symbolic_batch = true;
  std::string graph_name, doc_string;
  std::vector<std::pair<std::string, std::string>> metadata;
};

struct ModelCounts {
  int64_t nodes = 0, initializers = 0, initializer_elements = 0;
};

// Error naming the op when a live node has no mapping or its mapping refuses it.
::onnx::ModelProto write_model(const graph::Graph& traced, const ModelSpec& spec,
                               ModelCounts* counts = nullptr);

}  // namespace kiln::onnx
