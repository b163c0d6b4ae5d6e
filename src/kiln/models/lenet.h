#pragma once
#include <memory>

#include "kiln/nn/nn.h"

namespace kiln::models {

// LeNet-5 for 28×28 single-channel images:
//   conv 5×5 pad 2 → 6, relu, maxpool 2; conv 5×5 → 16, relu, maxpool 2;
//   flatten 400 → dense 120 → relu → dense 84 → relu → dense num_classes.
class LeNet5 : public nn::Cell {
 public:
  explicit LeNet5(int64_t num_classes = 10, int64_t in_channels = 1);
  Tensor construct(const Tensor& x) override;

 private:
  std::shared_ptr<nn::SequentialCell> features_, classifier_;
};

}  // namespace kiln::models
