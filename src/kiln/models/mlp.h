#pragma once
#include <memory>
#include <vector>

#include "kiln/nn/nn.h"

namespace kiln::models {

// Flatten, then Dense+ReLU per hidden size, then Dense to num_classes. The default is
// 784-1024-1024-10.
class MLP : public nn::Cell {
 public:
  explicit MLP(int64_t in_features = 784, std::vector<int64_t> hidden = {1024, 1024},
               int64_t num_classes = 10);
  Tensor construct(const Tensor& x) override;

 private:
  std::shared_ptr<nn::SequentialCell> layers_;
};

}  // namespace kiln::models
