#pragma once
#include <array>
#include <string>

#include "kiln/nn/cell.h"
#include "kiln/nn/initializer.h"
#include "kiln/nn/primitive.h"
#include "kiln/ops/functional.h"

namespace kiln::nn {

struct Conv2dOptions {
  std::array<int64_t, 2> stride{1, 1};
  // MindSpore's pad_mode: "same" (output = ceil(input / stride), padding split with the extra
  // row/column at the bottom/right), "valid" (no padding) or "pad" (use `padding`).
  std::string pad_mode = "same";
  std::array<int64_t, 2> padding{0, 0};  // only with pad_mode "pad"
  std::array<int64_t, 2> dilation{1, 1};
  int64_t group = 1;
  bool has_bias = false;  // MindSpore's default
  // Null: HeUniform(sqrt(5)) and U(±1/sqrt(fan_in)), as MindSpore 2.x and PyTorch.
  InitializerPtr weight_init;
  InitializerPtr bias_init;
};

// 2-D convolution over NCHW tensors; weight [out, in/group, kh, kw].
class Conv2d : public Cell {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel_size,
         Conv2dOptions options = {});
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dOptions options = {})
      : Conv2d(in_channels, out_channels, {kernel_size, kernel_size}, std::move(options)) {}
  Tensor construct(const Tensor& x) override;

  Tensor weight() const { return weight_; }
  Tensor bias() const { return bias_; }
  // The layer's op, for SEMI_AUTO_PARALLEL strategies (MindSpore's `conv.conv2d.shard(...)`):
  // conv2d(x, weight[, bias]), weight [out, in/group, kh, kw] as stored.
  Primitive& conv2d() { return conv2d_; }

 private:
  int64_t in_, out_;
  std::array<int64_t, 2> kernel_;
  Conv2dOptions options_;
  Tensor weight_;
  Tensor bias_;  // undefined without bias
  Primitive conv2d_{ops::OpKind::conv2d};
};

// "same" padding of one spatial dim: {before, after}.
std::array<int64_t, 2> same_padding(int64_t input, int64_t kernel, int64_t stride,
                                    int64_t dilation);

}  // namespace kiln::nn
