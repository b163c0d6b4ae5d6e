#include "kiln/models/resnet.h"

#include <string>

#include "kiln/core/error.h"
#include "kiln/ops/functional.h"

namespace kiln::models {

std::shared_ptr<nn::Conv2d> resnet_conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return std::make_shared<nn::Conv2d>(
      in, out, kernel,
      nn::Conv2dOptions{.stride = {stride, stride},
                        .pad_mode = kernel > 1 ? "pad" : "valid",
                        .padding = {kernel / 2, kernel / 2},
                        .weight_init = nn::HeNormal(0.0, nn::FanMode::fan_out, "relu")});
}

BasicBlock::BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride)
    : Cell("BasicBlock") {
  conv1_ = register_cell("conv1", resnet_conv(in_channels, out_channels, 3, stride));
  bn1_ = register_cell("bn1", std::make_shared<nn::BatchNorm2d>(out_channels));
  conv2_ = register_cell("conv2", resnet_conv(out_channels, out_channels, 3, 1));
  bn2_ = register_cell("bn2", std::make_shared<nn::BatchNorm2d>(out_channels));
  if (stride != 1 || in_channels != out_channels) {
    shortcut_ = register_cell(
        "shortcut", std::make_shared<nn::SequentialCell>(std::vector<std::shared_ptr<nn::Cell>>{
                        resnet_conv(in_channels, out_channels, 1, stride),
                        std::make_shared<nn::BatchNorm2d>(out_channels)}));
  }
}

Tensor BasicBlock::construct(const Tensor& x) {
  Tensor y = ops::relu(bn1_->construct(conv1_->construct(x)));
  y = bn2_->construct(conv2_->construct(y));
  Tensor identity = shortcut_ ? shortcut_->construct(x) : x;
  return ops::relu(ops::add(y, identity));
}

CifarResNet::CifarResNet(int64_t depth, int64_t num_classes, int64_t in_channels)
    : Cell("ResNet" + std::to_string(depth)) {
  if (depth < 8 || (depth - 2) % 6 != 0) {
    throw Error("CifarResNet: depth " + std::to_string(depth) +
                " is not 6n + 2 for some n >= 1 (20, 32, 44, 56, 110, ...)");
  }
  const int64_t blocks = (depth - 2) / 6;
  stem_ = register_cell(
      "stem", std::make_shared<nn::SequentialCell>(std::vector<std::shared_ptr<nn::Cell>>{
                  resnet_conv(in_channels, 16, 3, 1), std::make_shared<nn::BatchNorm2d>(16),
                  std::make_shared<nn::ReLU>()}));
  auto layers = std::make_shared<nn::SequentialCell>();
  int64_t channels = 16;
  for (int64_t stage_channels : {16, 32, 64}) {
    for (int64_t block = 0; block < blocks; ++block) {
      int64_t stride = (block == 0 && stage_channels != 16) ? 2 : 1;
      layers->append(std::make_shared<BasicBlock>(channels, stage_channels, stride));
      channels = stage_channels;
    }
  }
  layers_ = register_cell("layers", layers);
  fc_ = register_cell("fc", std::make_shared<nn::Dense>(64, num_classes));
}

Tensor CifarResNet::construct(const Tensor& x) {
  Tensor y = layers_->construct(stem_->construct(x));
  return fc_->construct(ops::mean(y, {2, 3}));
}

}  // namespace kiln::models
