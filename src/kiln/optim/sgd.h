#pragma once
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

// param -= lr * (grad + weight_decay * param)
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, LearningRate lr, double weight_decay = 0.0);
  void apply(const std::vector<Tensor>& grads) override;
  std::string name() const override { return "SGD"; }
};

}  // namespace kiln::optim
