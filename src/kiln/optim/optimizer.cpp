#include "kiln/optim/optimizer.h"

#include <unordered_map>

#include "kiln/core/error.h"

namespace kiln::optim {

Optimizer::Optimizer(std::vector<Tensor> params, LearningRate lr, double weight_decay)
    : params_(std::move(params)),
      lr_(std::move(lr)),
      weight_decay_(weight_decay),
      lr_tensor_(Tensor::scalar(0.0)) {
  if (!lr_) throw Error("optimizer: the learning rate schedule is empty");
  if (weight_decay < 0) {
    throw Error("optimizer: weight_decay must be >= 0, got " + std::to_string(weight_decay));
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].defined() || params_[i].dtype() != DType::f32) {
      throw Error("optimizer: parameter " + std::to_string(i) + " is " + describe(params_[i]) +
                  "; parameters must be f32");
    }
  }
}

void Optimizer::prepare_step() {
  *lr_tensor_.data<float>() = float(lr_(global_step_));
}

void Optimizer::step() {
  std::vector<Tensor> grads;
  grads.reserve(params_.size());
  for (const Tensor& p : params_) {
    Tensor g = p.grad();
    grads.push_back(g.defined() ? g : Tensor::zeros(p.shape()));
  }
  prepare_step();
  apply(grads);
  advance();
}

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.zero_grad();
}

std::vector<nn::NamedTensor> Optimizer::state_and_names() const {
  return {{"global_step", Tensor::scalar(double(global_step_), DType::i64)}};
}

void Optimizer::check_grads(const std::vector<Tensor>& grads) const {
  if (grads.size() != params_.size()) {
    throw Error(name() + ": " + std::to_string(grads.size()) + " gradients for " +
                std::to_string(params_.size()) + " parameters");
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined() || grads[i].shape() != params_[i].shape()) {
      throw ShapeError(name() + ": gradient " + std::to_string(i) + " is " + describe(grads[i]) +
                       " but parameter " + std::to_string(i) + " is " + describe(params_[i]));
    }
  }
}

void Optimizer::load_state(const std::vector<nn::NamedTensor>& state) {
  std::unordered_map<std::string, const Tensor*> by_name;
  for (const auto& [n, t] : state) by_name.emplace(n, &t);
  // Every entry is checked before any is copied, so a bad state leaves the optimizer as it was.
  std::vector<std::pair<Tensor, const Tensor*>> copies;
  int64_t step = global_step_;
  for (auto& [n, mine] : state_and_names()) {
    auto it = by_name.find(n);
    if (it == by_name.end()) throw Error(name() + ": optimizer state '" + n + "' is missing");
    const Tensor& src = *it->second;
    if (n == "global_step") {
      if (src.numel() != 1 || src.dtype() != DType::i64 || src.item<int64_t>() < 0) {
        throw Error(name() + ": optimizer state 'global_step' must be one non-negative i64, got " +
                    describe(src) +
                    (src.numel() == 1 ? " = " + std::to_string(src.item<float>()) : ""));
      }
      step = src.item<int64_t>();
      continue;
    }
    if (src.shape() != mine.shape() || src.dtype() != mine.dtype()) {
      throw ShapeError(name() + ": optimizer state '" + n + "' is " + describe(src) +
                       " in the checkpoint, but " + describe(mine) + " here");
    }
    copies.emplace_back(mine, &src);
  }
  for (auto& [mine, src] : copies) mine.copy_from(*src);
  global_step_ = step;
}

}  // namespace kiln::optim
