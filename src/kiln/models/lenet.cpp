#include "kiln/models/lenet.h"

#include <string>

#include "kiln/core/error.h"

namespace kiln::models {

LeNet5::LeNet5(int64_t num_classes, int64_t in_channels, int64_t height, int64_t width)
    : Cell("LeNet5") {
  using namespace nn;
  if (height < kLeNetMinSize || width < kLeNetMinSize) {
    throw ShapeError("lenet: inputs must be at least " + std::to_string(kLeNetMinSize) + "x" +
                     std::to_string(kLeNetMinSize) + ", got " + std::to_string(height) + "x" +
                     std::to_string(width) + " (give --image-size HxW to resize)");
  }
  // Same-padded conv, pool 2, valid 5×5 conv, pool 2.
  auto side = [](int64_t s) { return (s / 2 - 4) / 2; };
  const int64_t flat = 16 * side(height) * side(width);
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
                                  std::make_shared<Dense>(flat, 120), std::make_shared<ReLU>(),
                                  std::make_shared<Dense>(120, 84), std::make_shared<ReLU>(),
                                  std::make_shared<Dense>(84, num_classes)}));
}

Tensor LeNet5::construct(const Tensor& x) {
  return classifier_->construct(features_->construct(x));
}

}  // namespace kiln::models
