#include "kiln/nn/conv.h"

#include <cmath>

#include "kiln/core/error.h"

namespace kiln::nn {

std::array<int64_t, 2> same_padding(int64_t input, int64_t kernel, int64_t stride,
                                    int64_t dilation) {
  int64_t output = (input + stride - 1) / stride;
  int64_t total = std::max<int64_t>((output - 1) * stride + (kernel - 1) * dilation + 1 - input, 0);
  return {total / 2, total - total / 2};
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel_size,
               Conv2dOptions options)
    : Cell("Conv2d"),
      in_(in_channels),
      out_(out_channels),
      kernel_(kernel_size),
      options_(std::move(options)) {
  const auto& o = options_;
  if (in_ <= 0 || out_ <= 0 || kernel_[0] <= 0 || kernel_[1] <= 0) {
    throw Error("Conv2d: channels and kernel_size must be > 0, got in=" + std::to_string(in_) +
                " out=" + std::to_string(out_) + " kernel=" + std::to_string(kernel_[0]) + "x" +
                std::to_string(kernel_[1]));
  }
  if (o.group <= 0 || in_ % o.group != 0 || out_ % o.group != 0) {
    throw Error("Conv2d: group=" + std::to_string(o.group) + " must divide in_channels=" +
                std::to_string(in_) + " and out_channels=" + std::to_string(out_));
  }
  if (o.pad_mode != "same" && o.pad_mode != "valid" && o.pad_mode != "pad") {
    throw Error("Conv2d: pad_mode '" + o.pad_mode + "' is not one of same, valid, pad");
  }
  if (o.pad_mode != "pad" && (o.padding[0] != 0 || o.padding[1] != 0)) {
    throw Error("Conv2d: padding must be 0 unless pad_mode is 'pad' (pad_mode is '" + o.pad_mode +
                "')");
  }
  Shape w_shape{out_, in_ / o.group, kernel_[0], kernel_[1]};
  InitializerPtr w_init = o.weight_init ? o.weight_init : HeUniform(std::sqrt(5.0));
  weight_ = register_parameter("weight", initializer(w_init, w_shape));
  if (o.has_bias) {
    InitializerPtr b_init =
        o.bias_init ? o.bias_init : Uniform(1.0 / std::sqrt(double(fan_in(w_shape))));
    bias_ = register_parameter("bias", initializer(b_init, {out_}));
  }
}

Tensor Conv2d::construct(const Tensor& x) {
  if (x.rank() != 4 || x.dim(1) != in_) {
    throw ShapeError("Conv2d: input " + describe(x) + " is not [N, " + std::to_string(in_) +
                     ", H, W]");
  }
  ops::Conv2dOptions conv{
      .stride = options_.stride, .dilation = options_.dilation, .groups = options_.group};
  Tensor input = x;
  if (options_.pad_mode == "pad") {
    conv.padding = options_.padding;
  } else if (options_.pad_mode == "same") {
    for (int d = 0; d < 2; ++d) {
      auto [before, after] = same_padding(x.dim(2 + d), kernel_[size_t(d)],
                                          options_.stride[size_t(d)], options_.dilation[size_t(d)]);
      conv.padding[size_t(d)] = before;
      if (after != before) {
        // oneDNN pads symmetrically; the one extra bottom/right row is zero-padded here.
        Shape padded = input.shape();
        padded[2 + d] += after - before;
        input = ops::pad_slice_grad(input, padded, 2 + d, 0, input.dim(2 + d), 1);
      }
    }
  }
  return conv2d_.run([&] { return ops::conv2d(input, weight_, bias_, conv); });
}

}  // namespace kiln::nn
