#include "kiln/optim/momentum.h"

#include <cstring>

#include "kiln/core/error.h"
#include "kiln/ops/functional.h"

namespace kiln::optim {

Momentum::Momentum(std::vector<Tensor> params, LearningRate lr, MomentumOptions options)
    : Optimizer(std::move(params), std::move(lr), options.weight_decay), options_(options) {
  if (options.momentum < 0) {
    throw Error("Momentum: momentum must be >= 0, got " + std::to_string(options.momentum));
  }
  velocities_.reserve(params_.size());
  for (const Tensor& p : params_) {
    Tensor v = Tensor::empty_like(p);
    std::memset(v.raw_data(), 0, v.nbytes());
    velocities_.push_back(v);
  }
}

void Momentum::apply(const std::vector<Tensor>& grads) {
  check_grads(grads);
  for (size_t i = 0; i < params_.size(); ++i) {
    ops::momentum_update(params_[i], grads[i], velocities_[i], lr_tensor_, options_.momentum,
                         weight_decay_, options_.nesterov);
  }
}

std::vector<nn::NamedTensor> Momentum::state_and_names() const {
  std::vector<nn::NamedTensor> out;
  for (size_t i = 0; i < velocities_.size(); ++i) {
    out.emplace_back("moments." + std::to_string(i), velocities_[i]);
  }
  for (auto& s : Optimizer::state_and_names()) out.push_back(std::move(s));
  return out;
}

}  // namespace kiln::optim
