#include "kiln/models/lenet.h"

namespace kiln::models {

LeNet5::LeNet5(int64_t num_classes, int64_t in_channels) : Cell("LeNet5") {
  using namespace nn;
  features_ = register_cell(
      "features",
      std::make_shared<SequentialCell>(std::vector<std::shared_ptr<Cell>>{
          std::make_shared<Conv2d>(
              in_channels, 6, 5,
              Conv2dOptions{.pad_mode = "pad", .padding = {2, 2}, .has_bias = true}),
          std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
          std::make_shared<Conv2d>(6, 16, 5, Conv2dOptions{.pad_mode = "valid", .has_bias = true}),
          std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2), std::make_shared<Flatten>()}));
  classifier_ = register_cell("classifier",
                              std::make_shared<SequentialCell>(std::vector<std::shared_ptr<Cell>>{
                                  std::make_shared<Dense>(400, 120), std::make_shared<ReLU>(),
                                  std::make_shared<Dense>(120, 84), std::make_shared<ReLU>(),
                                  std::make_shared<Dense>(84, num_classes)}));
}

Tensor LeNet5::construct(const Tensor& x) {
  return classifier_->construct(features_->construct(x));
}

}  // namespace kiln::models
