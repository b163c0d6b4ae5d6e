#include "kiln/optim/sgd.h"

#include "kiln/ops/functional.h"

namespace kiln::optim {

SGD::SGD(std::vector<Tensor> params, LearningRate lr, double weight_decay)
    : Optimizer(std::move(params), std::move(lr), weight_decay) {}

void SGD::apply(const std::vector<Tensor>& grads) {
  check_grads(grads);
  for (size_t i = 0; i < params_.size(); ++i) {
    ops::sgd_update(params_[i], grads[i], lr_tensor_, weight_decay_);
  }
}

}  // namespace kiln::optim
