#include "kiln/optim/adam.h"

#include <cmath>
#include <cstring>

#include "kiln/core/error.h"
#include "kiln/ops/functional.h"

namespace kiln::optim {
namespace {
Tensor zeros_like(const Tensor& p) {
  Tensor t = Tensor::empty_like(p);
  std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}
}  // namespace

Adam::Adam(std::vector<Tensor> params, LearningRate lr, AdamOptions options)
    : Adam(std::move(params), std::move(lr), options, false) {}

Adam::Adam(std::vector<Tensor> params, LearningRate lr, AdamOptions options, bool decoupled)
    : Optimizer(std::move(params), std::move(lr), options.weight_decay),
      options_(options),
      decoupled_(decoupled),
      step_size_(Tensor::scalar(0.0)) {
  if (!(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1)) {
    throw Error(name() + ": betas must lie in [0, 1), got (" + std::to_string(options.beta1) +
                ", " + std::to_string(options.beta2) + ")");
  }
  if (!(options.eps > 0)) throw Error(name() + ": eps must be > 0");
  for (const Tensor& p : params_) {
    m_.push_back(zeros_like(p));
    v_.push_back(zeros_like(p));
  }
}

void Adam::prepare_step() {
  Optimizer::prepare_step();
  double t = double(global_step_ + 1);
  double lr = lr_(global_step_);
  double bias1 = 1.0 - std::pow(options_.beta1, t);
  double bias2 = 1.0 - std::pow(options_.beta2, t);
  *step_size_.data<float>() = float(lr * std::sqrt(bias2) / bias1);
}

void Adam::apply(const std::vector<Tensor>& grads) {
  check_grads(grads);
  for (size_t i = 0; i < params_.size(); ++i) {
    ops::adam_update(params_[i], grads[i], m_[i], v_[i], step_size_, lr_tensor_, options_.beta1,
                     options_.beta2, options_.eps, weight_decay_, decoupled_);
  }
}

std::vector<nn::NamedTensor> Adam::state_and_names() const {
  std::vector<nn::NamedTensor> out;
  for (size_t i = 0; i < m_.size(); ++i) out.emplace_back("moment1." + std::to_string(i), m_[i]);
  for (size_t i = 0; i < v_.size(); ++i) out.emplace_back("moment2." + std::to_string(i), v_[i]);
  for (auto& s : Optimizer::state_and_names()) out.push_back(std::move(s));
  return out;
}

AdamW::AdamW(std::vector<Tensor> params, LearningRate lr, AdamOptions options)
    : Adam(std::move(params), std::move(lr), options, true) {}

}  // namespace kiln::optim
