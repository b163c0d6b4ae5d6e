#include "kiln/nn/dense.h"

#include <cmath>

#include "kiln/core/error.h"
#include "kiln/ops/functional.h"

namespace kiln::nn {

Dense::Dense(int64_t in_channels, int64_t out_channels, DenseOptions options)
    : Cell("Dense"), in_(in_channels), out_(out_channels) {
  if (in_channels <= 0 || out_channels <= 0) {
    throw Error("Dense: in_channels and out_channels must be > 0, got " +
                std::to_string(in_channels) + " and " + std::to_string(out_channels));
  }
  InitializerPtr w_init = options.weight_init ? options.weight_init : HeUniform(std::sqrt(5.0));
  weight_ = register_parameter("weight", initializer(w_init, {out_, in_}));
  if (options.has_bias) {
    InitializerPtr b_init =
        options.bias_init ? options.bias_init : Uniform(1.0 / std::sqrt(double(in_)));
    bias_ = register_parameter("bias", initializer(b_init, {out_}));
  }
}

Tensor Dense::construct(const Tensor& x) {
  if (x.rank() < 1 || x.dim(-1) != in_) {
    throw ShapeError("Dense: input " + describe(x) +
                     " does not end in in_channels=" + std::to_string(in_));
  }
  Tensor y = matmul_.run([&] { return ops::matmul(x, weight_, false, true); });
  return bias_.defined() ? bias_add_.run([&] { return ops::add(y, bias_); }) : y;
}

}  // namespace kiln::nn
