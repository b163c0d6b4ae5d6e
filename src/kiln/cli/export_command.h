#pragma once
// `kiln export CKPT [--format onnx] [-o FILE] [--batch-size N]`: a checkpoint written by
// `kiln train` as an ONNX model (onnx/export.h): input "images" f32[batch, C, H, W] (normalized
// as training normalized them) or, for a language model, "tokens" i64[batch, context]; output
// "logits". The checkpoint's metadata (class names, normalization, vocabulary) goes into the
// model's metadata_props. Without -o the model goes beside the checkpoint, as NAME.onnx.
#include <cstdint>
#include <string>

#include "kiln/onnx/export.h"

namespace CLI {
class App;
}

namespace kiln::cli {

struct ExportRequest {
  std::string checkpoint;
  std::string output;  // empty: the checkpoint's path with .onnx for its extension
  std::string format = "onnx";
  int64_t batch_size = 0;  // 0: a symbolic batch dimension
};

struct ExportResult {
  std::string path;
  onnx::ExportSummary summary;
};

ExportResult run_export(const ExportRequest& request);
// "wrote PATH (ONNX opset 17, N bytes): input ... -> output ...; N nodes, N initializers".
std::string describe_export(const ExportResult& result);

void add_export_command(CLI::App& app);

}  // namespace kiln::cli

using kiln::cli::add_export_command;
