#pragma once
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct AdamOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  // Adam: L2 added to the gradient. AdamW: decoupled decay, param *= 1 - lr * weight_decay.
  double weight_decay = 0.0;
};

// Adam (Kingma & Ba) with the bias correction folded into the step size:
//   step_size = lr * sqrt(1 - beta2^t) / (1 - beta1^t), t = global_step + 1
//   param -= step_size * m / (sqrt(v) + eps)
// (MindSpore's form; PyTorch's differs only in where eps enters, see ops/optimizer/adam_update).
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, LearningRate lr, AdamOptions options = {});
  // A plain number is a constant rate: Adam(params, 1e-3).
  Adam(std::vector<Tensor> params, double lr, AdamOptions options = {})
      : Adam(std::move(params), constant_lr(lr), options) {}
  void apply(const std::vector<Tensor>& grads) override;
  void prepare_step() override;
  std::string name() const override { return decoupled_ ? "AdamW" : "Adam"; }
  std::vector<Tensor> step_scalars() const override { return {lr_tensor_, step_size_}; }
  // "moment1.<i>", "moment2.<i>" per parameter, then "global_step".
  std::vector<nn::NamedTensor> state_and_names() const override;

 protected:
  Adam(std::vector<Tensor> params, LearningRate lr, AdamOptions options, bool decoupled);

 private:
  AdamOptions options_;
  bool decoupled_;
  Tensor step_size_;
  std::vector<Tensor> m_, v_;
};

// AdamW (Loshchilov & Hutter): Adam with decoupled weight decay (default 0.01, as PyTorch).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, LearningRate lr, AdamOptions options = {.weight_decay = 0.01});
  AdamW(std::vector<Tensor> params, double lr, AdamOptions options = {.weight_decay = 0.01})
      : AdamW(std::move(params), constant_lr(lr), options) {}
};

}  // namespace kiln::optim
