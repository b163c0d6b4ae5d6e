#include "kiln/cli/export_command.h"

#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>

#include "kiln/cli/option_checks.h"
#include "kiln/cli/trained_model.h"
#include "kiln/core/error.h"
#include "kiln/models/zoo.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

std::string default_output(const std::string& checkpoint) {
  return fs::path(checkpoint).replace_extension(".onnx").string();
}

// What a runtime needs to feed the model, in words (the model's doc_string).
std::string input_doc(const ModelDescription& d) {
  if (models::is_language_model(d.model)) {
    return "tokens: i64 [batch, " + std::to_string(d.text.context_length) +
           "], ids into metadata 'vocabulary' (byte values). logits: f32 [batch, " +
           std::to_string(d.text.context_length) + ", " + std::to_string(d.input.num_classes) +
           "], position t scoring the token after it. Attention is causal, so a shorter text "
           "right-padded with any id has the same logits at its own positions.";
  }
  return "images: f32 [batch, " + std::to_string(d.input.channels) + ", " +
         std::to_string(d.input.height) + ", " + std::to_string(d.input.width) +
         "], channels first, each value (pixel / 255 - normalize_mean[c]) / normalize_std[c] "
         "(metadata). logits: f32 [batch, " +
         std::to_string(d.input.num_classes) +
         "], in the order of metadata 'class_names'; their softmax is kiln predict's "
         "probabilities.";
}

}  // namespace

ExportResult run_export(const ExportRequest& request) {
  if (request.format != "onnx") {
    throw Error("kiln export: --format " + request.format + " is not known (onnx is)");
  }
  TrainedModel trained = load_trained_model(request.checkpoint);
  const ModelDescription& d = trained.description;
  const bool language = models::is_language_model(d.model);
  onnx::InputSpec input;
  if (language) {
    input = {.shape = {d.text.context_length}, .dtype = DType::i64};
  } else {
    input = {.shape = {d.input.channels, d.input.height, d.input.width}, .dtype = DType::f32};
  }
  onnx::ExportOptions options{.input_name = language ? "tokens" : "images",
                              .output_name = "logits",
                              .batch_size = request.batch_size,
                              .graph_name = d.model,
                              .doc_string = input_doc(d)};
  for (const auto& [key, value] : to_checkpoint_metadata(d))
    options.metadata.emplace_back(key, value);
  ExportResult result;
  result.path = request.output.empty() ? default_output(request.checkpoint) : request.output;
  std::error_code ec;
  if (fs::equivalent(result.path, request.checkpoint, ec)) {
    throw Error("kiln export: the model would replace its checkpoint " + request.checkpoint +
                "; give another -o FILE");
  }
  try {
    result.summary = onnx::export_onnx(*trained.network, input, result.path, options);
  } catch (const FileError&) {
    throw;
  } catch (const Error& e) {
    throw Error("kiln export " + request.checkpoint + ": " + e.what());
  }
  return result;
}

std::string describe_export(const ExportResult& r) {
  const onnx::ExportSummary& s = r.summary;
  return "wrote " + r.path + " (ONNX opset " + std::to_string(onnx::kOpsetVersion) + ", " +
         std::to_string(s.bytes) + " bytes): input " + s.input + " -> output " + s.output + "; " +
         std::to_string(s.nodes) + " nodes, " + std::to_string(s.initializers) + " initializers (" +
         std::to_string(s.parameter_elements) + " values)";
}

void add_export_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("export", "A checkpoint's network as an ONNX model");
  auto request = std::make_shared<ExportRequest>();
  cmd->add_option("CKPT", request->checkpoint, "Checkpoint written by kiln train --ckpt-dir")
      ->required();
  cmd->add_option("--format", request->format, "Model format (default onnx, the only one)")
      ->check(CLI::IsMember({"onnx"}));
  cmd->add_option("-o,--output", request->output,
                  "The model file (default: the checkpoint's path ending in .onnx)");
  cmd->add_option("--batch-size", request->batch_size,
                  "Fix the batch dimension to N (default: symbolic, any batch size)")
      ->check(integer_in(1, 1 << 20));
  cmd->callback([request] {
    const ExportResult result = run_export(*request);
    std::cout << "kiln export: " << describe_export(result) << "\n";
  });
}

}  // namespace kiln::cli
