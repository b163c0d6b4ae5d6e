#pragma once
#include <memory>

#include "kiln/nn/nn.h"

namespace kiln::models {

// The CIFAR-style basic block: conv3×3-BN-ReLU-conv3×3-BN, plus the shortcut, then ReLU.
// When the shape changes the shortcut is option B: a strided 1×1 conv followed by BN.
class BasicBlock : public nn::Cell {
 public:
  BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride);
  Tensor construct(const Tensor& x) override;

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<nn::SequentialCell> shortcut_;  // null: identity
};

// ResNet-20 (He et al. 2016, CIFAR variant): conv3×3 16 + BN + ReLU, three stages of three
// basic blocks with 16/32/64 channels (stages 2 and 3 start with stride 2), global average pool,
// dense to num_classes. `in_channels` defaults to 1 (Fashion-MNIST). Shortcuts: option B.
class ResNet20 : public nn::Cell {
 public:
  explicit ResNet20(int64_t num_classes = 10, int64_t in_channels = 1);
  Tensor construct(const Tensor& x) override;

 private:
  std::shared_ptr<nn::SequentialCell> stem_, layers_;
  std::shared_ptr<nn::Dense> fc_;
};

}  // namespace kiln::models
