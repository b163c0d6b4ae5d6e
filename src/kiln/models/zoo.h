#pragma once
// The model zoo: models::create("lenet" | "resnet20" | "resnet56" | "resnet18" | "resnet50" |
// "mobilenetv2" | "mlp" | "gpt").
#include <memory>
#include <string>
#include <vector>

#include "kiln/nn/cell.h"

namespace kiln::models {

struct ModelConfig {
  int64_t num_classes = 10;
  int64_t in_channels = 1;
  // lenet: at least 12; mlp: in_features = channels * height * width; resnet18/50 and
  // mobilenetv2: below 64 on a side, the small-image stem (imagenet_resnet.h, mobilenet_v2.h)
  int64_t image_height = 28;
  int64_t image_width = 28;
  // gpt: the longest token sequence; its vocabulary is num_classes (the other sizes are
  // GptConfig's defaults).
  int64_t context_length = 64;
};

// Throws Error naming the unknown model and listing the known ones, or ShapeError when the model
// cannot take the configured input size.
std::shared_ptr<nn::Cell> create(const std::string& name, const ModelConfig& config = {});
std::vector<std::string> model_names();
// Whether the model reads token ids [B, T] and predicts the next token at each position (gpt),
// rather than classifying images.
bool is_language_model(const std::string& name);

}  // namespace kiln::models
