#include "kiln/models/mobilenet_v2.h"

#include "kiln/ops/functional.h"

namespace kiln::models {
namespace {

// min(max(x, 0), 6): MobileNet's activation, bounded so that low precision keeps its range.
class ReLU6 : public nn::Cell {
 public:
  ReLU6() : Cell("ReLU6") {}
  Tensor construct(const Tensor& x) override {
    return ops::minimum(ops::relu(x), Tensor::scalar(6.0, x.dtype()));
  }
};

// conv (no bias, "pad" k/2) + BN [+ ReLU6], as every layer of the net is.
void conv_bn(nn::SequentialCell& seq, int64_t in, int64_t out, int64_t kernel, int64_t stride,
             int64_t groups, bool relu6) {
  seq.append(std::make_shared<nn::Conv2d>(
      in, out, kernel,
      nn::Conv2dOptions{.stride = {stride, stride},
                        .pad_mode = kernel > 1 ? "pad" : "valid",
                        .padding = {kernel / 2, kernel / 2},
                        .group = groups,
                        .weight_init = nn::HeNormal(0.0, nn::FanMode::fan_out, "relu")}));
  seq.append(std::make_shared<nn::BatchNorm2d>(out));
  if (relu6) seq.append(std::make_shared<ReLU6>());
}

}  // namespace

InvertedResidual::InvertedResidual(int64_t in_channels, int64_t out_channels, int64_t stride,
                                   int64_t expansion)
    : Cell("InvertedResidual"), residual_(stride == 1 && in_channels == out_channels) {
  const int64_t hidden = in_channels * expansion;
  auto layers = std::make_shared<nn::SequentialCell>();
  if (expansion != 1) conv_bn(*layers, in_channels, hidden, 1, 1, 1, true);
  conv_bn(*layers, hidden, hidden, 3, stride, hidden, true);
  conv_bn(*layers, hidden, out_channels, 1, 1, 1, false);
  layers_ = register_cell("layers", layers);
}

Tensor InvertedResidual::construct(const Tensor& x) {
  Tensor y = layers_->construct(x);
  return residual_ ? ops::add(x, y) : y;
}

MobileNetV2::MobileNetV2(int64_t num_classes, int64_t in_channels, int64_t height, int64_t width)
    : Cell("MobileNetV2") {
  const bool small =
      height < kMobileNetV2FullStrideMinSize || width < kMobileNetV2FullStrideMinSize;
  struct Stage {
    int64_t expansion, channels, blocks, stride;
  };
  const Stage stages[] = {{1, 16, 1, 1}, {6, 24, 2, small ? 1 : 2},
                          {6, 32, 3, 2}, {6, 64, 4, 2},
                          {6, 96, 3, 1}, {6, 160, 3, 2},
                          {6, 320, 1, 1}};
  auto features = std::make_shared<nn::SequentialCell>();
  conv_bn(*features, in_channels, 32, 3, small ? 1 : 2, 1, true);
  int64_t channels = 32;
  for (const Stage& s : stages) {
    for (int64_t b = 0; b < s.blocks; ++b) {
      features->append(std::make_shared<InvertedResidual>(channels, s.channels,
                                                          b == 0 ? s.stride : 1, s.expansion));
      channels = s.channels;
    }
  }
  conv_bn(*features, channels, 1280, 1, 1, 1, true);
  features_ = register_cell("features", features);
  classifier_ = register_cell("classifier", std::make_shared<nn::Dense>(1280, num_classes));
}

Tensor MobileNetV2::construct(const Tensor& x) {
  return classifier_->construct(ops::mean(features_->construct(x), {2, 3}));
}

}  // namespace kiln::models
