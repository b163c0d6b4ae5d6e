#pragma once
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct MomentumOptions {
  double momentum = 0.9;
  double weight_decay = 0.0;  // L2, added to the gradient
  bool nesterov = false;
};

// MindSpore's nn.Momentum (= PyTorch SGD with momentum, dampening 0):
//   v = momentum * v + (grad + wd * param);  param -= lr * (nesterov ? g + momentum * v : v)
class Momentum : public Optimizer {
 public:
  Momentum(std::vector<Tensor> params, LearningRate lr, MomentumOptions options = {});
  // A plain number is a constant rate: Momentum(params, 0.01).
  Momentum(std::vector<Tensor> params, double lr, MomentumOptions options = {})
      : Momentum(std::move(params), constant_lr(lr), options) {}
  void apply(const std::vector<Tensor>& grads) override;
  std::string name() const override { return "Momentum"; }
  // "moments.<i>" per parameter, then "global_step".
  std::vector<nn::NamedTensor> state_and_names() const override;

 private:
  MomentumOptions options_;
  std::vector<Tensor> velocities_;
};

}  // namespace kiln::optim
