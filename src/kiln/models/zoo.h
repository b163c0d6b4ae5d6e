#pragma once
// The model zoo: models::create("lenet" | "resnet20" | "mlp").
#include <memory>
#include <string>
#include <vector>

#include "kiln/nn/cell.h"

namespace kiln::models {

struct ModelConfig {
  int64_t num_classes = 10;
  int64_t in_channels = 1;  // lenet, resnet20
  int64_t image_size = 28;  // mlp: in_features = in_channels * image_size²
};

// Throws Error naming the unknown model and listing the known ones.
std::shared_ptr<nn::Cell> create(const std::string& name, const ModelConfig& config = {});
std::vector<std::string> model_names();

}  // namespace kiln::models
