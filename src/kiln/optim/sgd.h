#pragma once
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

// param -= lr * (grad + weight_decay * param)
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, LearningRate lr, double weight_decay = 0.0);
  // A plain number is a constant rate: SGD(params, 0.1).
  SGD(std::vector<Tensor> params, double lr, double weight_decay = 0.0)
      : SGD(std::move(params), constant_lr(lr), weight_decay) {}
  void apply(const std::vector<Tensor>& grads) override;
  std::string name() const override { return "SGD"; }
};

}  // namespace kiln::optim
