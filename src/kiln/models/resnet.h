#pragma once
#include <memory>

#include "kiln/nn/nn.h"

namespace kiln::models {

// The basic block: conv3×3-BN-ReLU-conv3×3-BN, plus the shortcut, then ReLU (the same block in
// the CIFAR ResNets and in ImageNet's ResNet-18/34). When the shape changes the shortcut is
// option B: a strided 1×1 conv followed by BN.
class BasicBlock : public nn::Cell {
 public:
  BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride);
  Tensor construct(const Tensor& x) override;

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<nn::SequentialCell> shortcut_;  // null: identity
};

// The CIFAR ResNet of depth 6n + 2 (He et al. 2016, section 4.2): conv3×3 16 + BN + ReLU, three
// stages of n basic blocks with 16/32/64 channels (stages 2 and 3 start with stride 2), global
// average pool, dense to num_classes. Shortcuts: option B. Any input size works.
class CifarResNet : public nn::Cell {
 public:
  // Throws Error unless depth is 6n + 2 for some n >= 1.
  CifarResNet(int64_t depth, int64_t num_classes, int64_t in_channels);
  Tensor construct(const Tensor& x) override;

 private:
  std::shared_ptr<nn::SequentialCell> stem_, layers_;
  std::shared_ptr<nn::Dense> fc_;
};

// `in_channels` defaults to 1 (Fashion-MNIST).
class ResNet20 : public CifarResNet {
 public:
  explicit ResNet20(int64_t num_classes = 10, int64_t in_channels = 1)
      : CifarResNet(20, num_classes, in_channels) {}
};

class ResNet56 : public CifarResNet {
 public:
  explicit ResNet56(int64_t num_classes = 10, int64_t in_channels = 1)
      : CifarResNet(56, num_classes, in_channels) {}
};

// A 3×3 ("pad" 1) or 1×1 convolution without bias, He-normal (fan out) as the ResNets use.
std::shared_ptr<nn::Conv2d> resnet_conv(int64_t in, int64_t out, int64_t kernel, int64_t stride);

}  // namespace kiln::models
