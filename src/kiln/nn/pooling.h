#pragma once
#include <array>
#include <string>

#include "kiln/nn/cell.h"

namespace kiln::nn {

struct Pool2dOptions {
  std::array<int64_t, 2> stride{0, 0};  // {0, 0}: equal to kernel_size
  // "valid" (no padding), "same" (output = ceil(input / stride); symmetric padding only) or
  // "pad" (use `padding`).
  std::string pad_mode = "valid";
  std::array<int64_t, 2> padding{0, 0};
};

class MaxPool2d : public Cell {
 public:
  MaxPool2d(std::array<int64_t, 2> kernel_size, Pool2dOptions options = {});
  explicit MaxPool2d(int64_t kernel_size, Pool2dOptions options = {})
      : MaxPool2d({kernel_size, kernel_size}, std::move(options)) {}
  Tensor construct(const Tensor& x) override;

 private:
  std::array<int64_t, 2> kernel_;
  Pool2dOptions options_;
};

// Padded positions are excluded from the average (MindSpore's and oneDNN's exclude-padding mode).
class AvgPool2d : public Cell {
 public:
  AvgPool2d(std::array<int64_t, 2> kernel_size, Pool2dOptions options = {});
  explicit AvgPool2d(int64_t kernel_size, Pool2dOptions options = {})
      : AvgPool2d({kernel_size, kernel_size}, std::move(options)) {}
  Tensor construct(const Tensor& x) override;

 private:
  std::array<int64_t, 2> kernel_;
  Pool2dOptions options_;
};

}  // namespace kiln::nn
