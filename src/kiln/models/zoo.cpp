#include "kiln/models/zoo.h"

#include <string>

#include "kiln/core/error.h"
#include "kiln/models/gpt.h"
#include "kiln/models/lenet.h"
#include "kiln/models/mlp.h"
#include "kiln/models/resnet.h"

namespace kiln::models {

std::vector<std::string> model_names() {
  return {"lenet", "resnet20", "mlp", "gpt"};
}

bool is_language_model(const std::string& name) {
  return name == "gpt";
}

std::shared_ptr<nn::Cell> create(const std::string& name, const ModelConfig& config) {
  if (name == "gpt") {  // reads token ids: the image sizes do not apply (Gpt checks its own)
    GptConfig gpt;
    gpt.vocab_size = config.num_classes;
    gpt.context_length = config.context_length;
    return std::make_shared<Gpt>(gpt);
  }
  if (config.num_classes < 1 || config.in_channels < 1 || config.image_height < 1 ||
      config.image_width < 1) {
    throw ShapeError("model " + name + ": classes, channels and image size must be >= 1, got " +
                     std::to_string(config.num_classes) + " classes of " +
                     std::to_string(config.in_channels) + "x" +
                     std::to_string(config.image_height) + "x" +
                     std::to_string(config.image_width) + " images");
  }
  if (name == "lenet" || name == "lenet5") {
    return std::make_shared<LeNet5>(config.num_classes, config.in_channels, config.image_height,
                                    config.image_width);
  }
  // ResNet-20 ends in a global average pool: any input size works.
  if (name == "resnet20") return std::make_shared<ResNet20>(config.num_classes, config.in_channels);
  if (name == "mlp") {
    int64_t in = config.in_channels * config.image_height * config.image_width;
    return std::make_shared<MLP>(in, std::vector<int64_t>{1024, 1024}, config.num_classes);
  }
  throw Error("unknown model '" + name + "' (expected lenet, resnet20, mlp or gpt)");
}

}  // namespace kiln::models
