#pragma once
// What a checkpoint must carry for `kiln eval` and `kiln predict` to rebuild its network without
// the training flags: the zoo model's name, the input it takes, the class names and the
// normalization. `kiln train` writes these as checkpoint metadata ("model", "num_classes",
// "in_channels", "image_height", "image_width", "class_names" and "normalize_mean" /
// "normalize_std" as JSON arrays); for a language model "model", "num_classes",
// "context_length" and "vocabulary" (a JSON array of byte values).
#include <map>
#include <memory>
#include <string>

#include "kiln/cli/data_spec.h"
#include "kiln/nn/cell.h"

namespace kiln::cli {

// A language model's input: the context it was trained with and its byte vocabulary
// (data/text_dataset.h), so predict encodes a prompt with the ids training used.
struct TextModelInfo {
  int64_t context_length = 0;
  std::vector<uint8_t> vocabulary;
};

struct ModelDescription {
  std::string model;
  ImageDataInfo input;  // a language model: num_classes alone (its vocabulary size)
  Normalization normalization;
  TextModelInfo text;  // language models (models::is_language_model) only
};

std::map<std::string, std::string> to_checkpoint_metadata(const ModelDescription& description);

// FileError naming the checkpoint and the missing or malformed key.
ModelDescription from_checkpoint_metadata(const std::map<std::string, std::string>& metadata,
                                          const std::string& checkpoint_path);

struct TrainedModel {
  ModelDescription description;
  std::shared_ptr<nn::Cell> network;  // weights loaded, in evaluation mode
};

// Reads `path`, rebuilds the zoo model and loads every weight (strict: a missing or extra tensor
// is an error naming it).
TrainedModel load_trained_model(const std::string& path);

}  // namespace kiln::cli
