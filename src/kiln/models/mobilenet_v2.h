#pragma once
#include <memory>

#include "kiln/nn/nn.h"

namespace kiln::models {

// MobileNetV2's inverted residual (Sandler et al. 2018): a 1×1 expansion to t·in channels
// (none when t = 1), a 3×3 depthwise convolution (groups = channels) with the block's stride,
// each followed by BN and ReLU6, then a linear 1×1 projection + BN; the input is added back
// when the stride is 1 and the channels match.
class InvertedResidual : public nn::Cell {
 public:
  InvertedResidual(int64_t in_channels, int64_t out_channels, int64_t stride, int64_t expansion);
  Tensor construct(const Tensor& x) override;

 private:
  std::shared_ptr<nn::SequentialCell> layers_;
  bool residual_;
};

// Images below this size on either side run the first two downsamplings at stride 1.
inline constexpr int64_t kMobileNetV2FullStrideMinSize = 64;

// MobileNetV2 at width 1.0: conv3×3/2 32 + BN + ReLU6, seventeen inverted residuals (t, c, n, s
// = 1,16,1,1 · 6,24,2,2 · 6,32,3,2 · 6,64,4,2 · 6,96,3,1 · 6,160,3,2 · 6,320,1,1), conv1×1 1280
// + BN + ReLU6, global average pool, dense to num_classes (no dropout). Images smaller than
// kMobileNetV2FullStrideMinSize on a side (CIFAR, MNIST) take the stem and the first
// 24-channel block at stride 1, as the CIFAR adaptations do, so 32×32 ends at 4×4 rather than
// 1×1; the parameters are the same either way.
class MobileNetV2 : public nn::Cell {
 public:
  MobileNetV2(int64_t num_classes = 1000, int64_t in_channels = 3, int64_t height = 224,
              int64_t width = 224);
  Tensor construct(const Tensor& x) override;

 private:
  std::shared_ptr<nn::SequentialCell> features_;
  std::shared_ptr<nn::Dense> classifier_;
};

}  // namespace kiln::models
