#include "kiln/models/zoo.h"

#include <string>

#include "kiln/core/error.h"
#include "kiln/models/gpt.h"
#include "kiln/models/imagenet_resnet.h"
#include "kiln/models/lenet.h"
#include "kiln/models/mlp.h"
#include "kiln/models/mobilenet_v2.h"
#include "kiln/models/resnet.h"

namespace kiln::models {

std::vector<std::string> model_names() {
  return {"lenet", "resnet20", "resnet56", "resnet18", "resnet50", "mobilenetv2", "mlp", "gpt"};
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
  // The ResNets and MobileNetV2 end in a global average pool: any input size works (the
  // ImageNet ones pick their stem, and MobileNetV2 its first strides, from it).
  if (name == "resnet20") return std::make_shared<ResNet20>(config.num_classes, config.in_channels);
  if (name == "resnet56") return std::make_shared<ResNet56>(config.num_classes, config.in_channels);
  if (name == "resnet18" || name == "resnet50") {
    return std::make_shared<ImageNetResNet>(name == "resnet18" ? 18 : 50, config.num_classes,
                                            config.in_channels, config.image_height,
                                            config.image_width);
  }
  if (name == "mobilenetv2") {
    return std::make_shared<MobileNetV2>(config.num_classes, config.in_channels,
                                         config.image_height, config.image_width);
  }
  if (name == "mlp") {
    int64_t in = config.in_channels * config.image_height * config.image_width;
    return std::make_shared<MLP>(in, std::vector<int64_t>{1024, 1024}, config.num_classes);
  }
  std::string known;
  const std::vector<std::string> names = model_names();
  for (size_t i = 0; i < names.size(); ++i) {
    known += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  throw Error("unknown model '" + name + "' (expected " + known + ")");
}

}  // namespace kiln::models
