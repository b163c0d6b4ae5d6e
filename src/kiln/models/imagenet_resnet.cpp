#include "kiln/models/imagenet_resnet.h"

#include <string>

#include "kiln/core/error.h"
#include "kiln/ops/functional.h"

namespace kiln::models {
namespace {

std::shared_ptr<nn::SequentialCell> downsample(int64_t in, int64_t out, int64_t stride) {
  return std::make_shared<nn::SequentialCell>(std::vector<std::shared_ptr<nn::Cell>>{
      resnet_conv(in, out, 1, stride), std::make_shared<nn::BatchNorm2d>(out)});
}

}  // namespace

Bottleneck::Bottleneck(int64_t in_channels, int64_t width, int64_t stride) : Cell("Bottleneck") {
  const int64_t out = width * kExpansion;
  conv1_ = register_cell("conv1", resnet_conv(in_channels, width, 1, 1));
  bn1_ = register_cell("bn1", std::make_shared<nn::BatchNorm2d>(width));
  conv2_ = register_cell("conv2", resnet_conv(width, width, 3, stride));
  bn2_ = register_cell("bn2", std::make_shared<nn::BatchNorm2d>(width));
  conv3_ = register_cell("conv3", resnet_conv(width, out, 1, 1));
  // The last BN's gamma starts at zero (MindSpore's ResNet-50 does, as Goyal et al. 2017): each
  // block starts as its shortcut, which keeps the 16-block net from diverging in its first steps.
  bn3_ = register_cell("bn3", std::make_shared<nn::BatchNorm2d>(
                                  out, nn::BatchNorm2dOptions{.gamma_init = nn::Zero()}));
  if (stride != 1 || in_channels != out) {
    shortcut_ = register_cell("shortcut", downsample(in_channels, out, stride));
  }
}

Tensor Bottleneck::construct(const Tensor& x) {
  Tensor y = ops::relu(bn1_->construct(conv1_->construct(x)));
  y = ops::relu(bn2_->construct(conv2_->construct(y)));
  y = bn3_->construct(conv3_->construct(y));
  Tensor identity = shortcut_ ? shortcut_->construct(x) : x;
  return ops::relu(ops::add(y, identity));
}

ImageNetResNet::ImageNetResNet(int64_t depth, int64_t num_classes, int64_t in_channels,
                               int64_t image_height, int64_t image_width)
    : Cell("ResNet" + std::to_string(depth)) {
  std::vector<int64_t> blocks;
  bool bottleneck = false;
  if (depth == 18) {
    blocks = {2, 2, 2, 2};
  } else if (depth == 50) {
    blocks = {3, 4, 6, 3};
    bottleneck = true;
  } else {
    throw Error("ImageNetResNet: depth " + std::to_string(depth) + " is not one of 18, 50");
  }
  auto stem = std::make_shared<nn::SequentialCell>();
  if (small_stem(image_height, image_width)) {
    stem->append(resnet_conv(in_channels, 64, 3, 1));
  } else {
    stem->append(std::make_shared<nn::Conv2d>(
        in_channels, 64, 7,
        nn::Conv2dOptions{.stride = {2, 2},
                          .pad_mode = "pad",
                          .padding = {3, 3},
                          .weight_init = nn::HeNormal(0.0, nn::FanMode::fan_out, "relu")}));
  }
  stem->append(std::make_shared<nn::BatchNorm2d>(64));
  stem->append(std::make_shared<nn::ReLU>());
  if (!small_stem(image_height, image_width)) {
    stem->append(std::make_shared<nn::MaxPool2d>(
        3, nn::Pool2dOptions{.stride = {2, 2}, .pad_mode = "pad", .padding = {1, 1}}));
  }
  stem_ = register_cell("stem", stem);
  auto layers = std::make_shared<nn::SequentialCell>();
  int64_t channels = 64;
  const int64_t widths[] = {64, 128, 256, 512};
  for (size_t stage = 0; stage < blocks.size(); ++stage) {
    for (int64_t block = 0; block < blocks[stage]; ++block) {
      const int64_t stride = (block == 0 && stage > 0) ? 2 : 1;
      if (bottleneck) {
        layers->append(std::make_shared<Bottleneck>(channels, widths[stage], stride));
        channels = widths[stage] * Bottleneck::kExpansion;
      } else {
        layers->append(std::make_shared<BasicBlock>(channels, widths[stage], stride));
        channels = widths[stage];
      }
    }
  }
  layers_ = register_cell("layers", layers);
  fc_ = register_cell("fc", std::make_shared<nn::Dense>(channels, num_classes));
}

Tensor ImageNetResNet::construct(const Tensor& x) {
  Tensor y = layers_->construct(stem_->construct(x));
  return fc_->construct(ops::mean(y, {2, 3}));
}

}  // namespace kiln::models
