#pragma once
#include <memory>
#include <vector>

#include "kiln/models/resnet.h"

namespace kiln::models {

// The bottleneck block of ResNet-50 (torchvision's "v1.5": the stride on the 3×3): conv1×1 to
// `width`, conv3×3, conv1×1 to 4·width, each followed by BN (ReLU after the first two; the last
// BN's gamma starts at zero), plus the shortcut (identity, or a strided 1×1 conv + BN where the
// shape changes), then ReLU.
class Bottleneck : public nn::Cell {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t in_channels, int64_t width, int64_t stride);
  Tensor construct(const Tensor& x) override;

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_, conv3_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_, bn3_;
  std::shared_ptr<nn::SequentialCell> shortcut_;  // null: identity
};

// Images below this size on either side get the small stem (ImageNetResNet::small_stem).
inline constexpr int64_t kImageNetStemMinSize = 64;

// The ImageNet ResNets (He et al. 2016, table 1): a stem, four stages of 64/128/256/512-wide
// blocks (stages 2-4 start with stride 2), global average pool, dense to num_classes. ResNet-18
// stacks [2, 2, 2, 2] basic blocks, ResNet-50 [3, 4, 6, 3] bottlenecks (4x wider outputs).
//
// The stem is ImageNet's (conv7×7/2 64 + BN + ReLU + max pool 3×3/2) for images of at least
// kImageNetStemMinSize on each side. Smaller images (CIFAR's 32×32, MNIST's 28×28) would shrink
// to 1×1 before the last stage, so they get the CIFAR adaptation instead: conv3×3/1 64 + BN +
// ReLU, no pool (the stages still downsample 8x: 28×28 ends at 4×4).
class ImageNetResNet : public nn::Cell {
 public:
  // depth 18 or 50 (Error otherwise).
  ImageNetResNet(int64_t depth, int64_t num_classes, int64_t in_channels, int64_t image_height,
                 int64_t image_width);
  Tensor construct(const Tensor& x) override;

  static bool small_stem(int64_t image_height, int64_t image_width) {
    return image_height < kImageNetStemMinSize || image_width < kImageNetStemMinSize;
  }

 private:
  std::shared_ptr<nn::SequentialCell> stem_, layers_;
  std::shared_ptr<nn::Dense> fc_;
};

class ResNet18 : public ImageNetResNet {
 public:
  explicit ResNet18(int64_t num_classes = 1000, int64_t in_channels = 3, int64_t height = 224,
                    int64_t width = 224)
      : ImageNetResNet(18, num_classes, in_channels, height, width) {}
};

class ResNet50 : public ImageNetResNet {
 public:
  explicit ResNet50(int64_t num_classes = 1000, int64_t in_channels = 3, int64_t height = 224,
                    int64_t width = 224)
      : ImageNetResNet(50, num_classes, in_channels, height, width) {}
};

}  // namespace kiln::models
