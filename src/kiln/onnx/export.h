#pragma once
// A trained network as an ONNX model (opset 17): the network is traced by graph mode in
// evaluation mode, and each traced op becomes the ONNX nodes its mapping emits (op_mappings.h);
// parameters and buffers become initializers. One input (dim 0 the batch, symbolic unless a
// batch size is fixed), one output.
//
//   kiln::onnx::export_onnx(*net, {.shape = {3, 32, 32}}, "model.onnx",
//                           {.input_name = "images"});
//
// An op without an ONNX mapping is an Error naming it; nothing is written then.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/nn/cell.h"

namespace kiln::onnx {

inline constexpr int64_t kOpsetVersion = 17;

// One sample of the network's input; the batch dimension is put in front of it.
struct InputSpec {
  Shape shape;  // [C, H, W] for images, [T] for token ids
  DType dtype = DType::f32;
};

struct ExportOptions {
  std::string input_name = "input";
  std::string output_name = "logits";
  // 0: the batch dimension of the input and the output is the symbolic "batch" (the network is
  // traced at two batch sizes, which must give the same model); N > 0: fixed to N.
  int64_t batch_size = 0;
  std::string graph_name = "kiln";
  std::string doc_string;  // what the input and output hold (the model's doc_string)
  std::vector<std::pair<std::string, std::string>> metadata;  // the model's metadata_props
};

struct ExportSummary {
  std::string input;   // "images f32[batch, 3, 32, 32]"
  std::string output;  // "logits f32[batch, 10]"
  int64_t nodes = 0;
  int64_t initializers = 0;
  int64_t parameter_elements = 0;  // elements over all initializers
  int64_t bytes = 0;               // of the serialized model
};

// The serialized ModelProto. The network is in evaluation mode while it is traced and gets its
// own mode back afterwards.
std::string onnx_model_bytes(nn::Cell& network, const InputSpec& input,
                             const ExportOptions& options, ExportSummary* summary = nullptr);

// Writes onnx_model_bytes to `path` atomically (a temporary file beside it, renamed over it): an
// existing file is replaced only by a complete model. FileError naming the file on failure.
ExportSummary export_onnx(nn::Cell& network, const InputSpec& input, const std::string& path,
                          const ExportOptions& options);

}  // namespace kiln::onnx
