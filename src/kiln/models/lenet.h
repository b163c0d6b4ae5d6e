#pragma once
#include <memory>

#include "kiln/nn/nn.h"

namespace kiln::models {

// LeNet-5 (28×28 single-channel images by default):
//   conv 5×5 pad 2 → 6, relu, maxpool 2; conv 5×5 → 16, relu, maxpool 2;
//   flatten (400 at 28×28) → dense 120 → relu → dense 84 → relu → dense num_classes.
// Inputs must be at least kLeNetMinSize on each side (the second convolution needs 5×5).
inline constexpr int64_t kLeNetMinSize = 12;
class LeNet5 : public nn::Cell {
 public:
  explicit LeNet5(int64_t num_classes = 10, int64_t in_channels = 1, int64_t height = 28,
                  int64_t width = 28);
  Tensor construct(const Tensor& x) override;

 private:
  std::shared_ptr<nn::SequentialCell> features_, classifier_;
};

}  // namespace kiln::models
