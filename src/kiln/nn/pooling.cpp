#include "kiln/nn/pooling.h"

#include "kiln/core/error.h"
#include "kiln/nn/conv.h"
#include "kiln/ops/functional.h"

namespace kiln::nn {
namespace {

void validate(const char* cell, const std::array<int64_t, 2>& kernel, Pool2dOptions& o) {
  if (kernel[0] <= 0 || kernel[1] <= 0) {
    throw Error(std::string(cell) + ": kernel_size must be > 0, got " + std::to_string(kernel[0]) +
                "x" + std::to_string(kernel[1]));
  }
  if (o.stride[0] == 0 && o.stride[1] == 0) o.stride = kernel;
  if (o.stride[0] <= 0 || o.stride[1] <= 0) {
    throw Error(std::string(cell) + ": stride must be > 0");
  }
  if (o.pad_mode != "same" && o.pad_mode != "valid" && o.pad_mode != "pad") {
    throw Error(std::string(cell) + ": pad_mode '" + o.pad_mode +
                "' is not one of same, valid, pad");
  }
}

ops::Pool2dOptions resolve(const char* cell, const Tensor& x, const std::array<int64_t, 2>& kernel,
                           const Pool2dOptions& o) {
  if (x.rank() != 4)
    throw ShapeError(std::string(cell) + ": input " + describe(x) + " is not NCHW");
  ops::Pool2dOptions p{.kernel = kernel, .stride = o.stride};
  if (o.pad_mode == "pad") p.padding = o.padding;
  if (o.pad_mode == "same") {
    for (int d = 0; d < 2; ++d) {
      auto [before, after] = same_padding(x.dim(2 + d), kernel[size_t(d)], o.stride[size_t(d)], 1);
      if (before != after) {
        throw ShapeError(std::string(cell) +
                         ": pad_mode 'same' needs asymmetric padding for input " + describe(x) +
                         "; use 'pad' or 'valid'");
      }
      p.padding[size_t(d)] = before;
    }
  }
  return p;
}

}  // namespace

Pool2d::Pool2d(const char* name, ops::OpKind op, std::array<int64_t, 2> kernel_size,
               Pool2dOptions options)
    : Cell(name), kernel_(kernel_size), options_(std::move(options)), pool_(op) {
  validate(name, kernel_, options_);
}

ops::Pool2dOptions Pool2d::window_for(const Tensor& x) const {
  return resolve(cell_name().c_str(), x, kernel_, options_);
}

Tensor MaxPool2d::construct(const Tensor& x) {
  return pool().run([&] { return ops::max_pool2d(x, window_for(x)); });
}

Tensor AvgPool2d::construct(const Tensor& x) {
  return pool().run([&] { return ops::avg_pool2d(x, window_for(x)); });
}

}  // namespace kiln::nn
