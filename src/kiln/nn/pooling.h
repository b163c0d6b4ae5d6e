#pragma once
#include <array>
#include <string>

#include "kiln/nn/cell.h"
#include "kiln/nn/primitive.h"
#include "kiln/ops/functional.h"

namespace kiln::nn {

struct Pool2dOptions {
  std::array<int64_t, 2> stride{0, 0};  // {0, 0}: equal to kernel_size
  // "valid" (no padding), "same" (output = ceil(input / stride); symmetric padding only) or
  // "pad" (use `padding`).
  std::string pad_mode = "valid";
  std::array<int64_t, 2> padding{0, 0};
};

// The window and pad_mode settings MaxPool2d and AvgPool2d share.
class Pool2d : public Cell {
 public:
  // The layer's op (max_pool2d or avg_pool2d), for SEMI_AUTO_PARALLEL strategies.
  Primitive& pool() { return pool_; }

 protected:
  Pool2d(const char* name, ops::OpKind op, std::array<int64_t, 2> kernel_size,
         Pool2dOptions options);
  // The op's window for input x (pad_mode "same" resolved against x's spatial size).
  ops::Pool2dOptions window_for(const Tensor& x) const;

 private:
  std::array<int64_t, 2> kernel_;
  Pool2dOptions options_;
  Primitive pool_;
};

class MaxPool2d : public Pool2d {
 public:
  MaxPool2d(std::array<int64_t, 2> kernel_size, Pool2dOptions options = {})
      : Pool2d("MaxPool2d", ops::OpKind::max_pool2d, kernel_size, std::move(options)) {}
  explicit MaxPool2d(int64_t kernel_size, Pool2dOptions options = {})
      : MaxPool2d({kernel_size, kernel_size}, std::move(options)) {}
  Tensor construct(const Tensor& x) override;
};

// Padded positions are excluded from the average (MindSpore's and oneDNN's exclude-padding mode).
class AvgPool2d : public Pool2d {
 public:
  AvgPool2d(std::array<int64_t, 2> kernel_size, Pool2dOptions options = {})
      : Pool2d("AvgPool2d", ops::OpKind::avg_pool2d, kernel_size, std::move(options)) {}
  explicit AvgPool2d(int64_t kernel_size, Pool2dOptions options = {})
      : AvgPool2d({kernel_size, kernel_size}, std::move(options)) {}
  Tensor construct(const Tensor& x) override;
};

}  // namespace kiln::nn
