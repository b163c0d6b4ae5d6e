#include "kiln/models/zoo.h"

#include "kiln/core/error.h"
#include "kiln/models/lenet.h"
#include "kiln/models/mlp.h"
#include "kiln/models/resnet.h"

namespace kiln::models {

std::vector<std::string> model_names() {
  return {"lenet", "resnet20", "mlp"};
}

std::shared_ptr<nn::Cell> create(const std::string& name, const ModelConfig& config) {
  if (name == "lenet" || name == "lenet5") {
    return std::make_shared<LeNet5>(config.num_classes, config.in_channels);
  }
  if (name == "resnet20") return std::make_shared<ResNet20>(config.num_classes, config.in_channels);
  if (name == "mlp") {
    int64_t in = config.in_channels * config.image_size * config.image_size;
    return std::make_shared<MLP>(in, std::vector<int64_t>{1024, 1024}, config.num_classes);
  }
  throw Error("unknown model '" + name + "' (expected lenet, resnet20 or mlp)");
}

}  // namespace kiln::models
