#pragma once
// Optimizers. An update is one fused in-place op per parameter (ops/functional.h: sgd_update,
// momentum_update, adam_update), so the same `apply` runs eagerly or is traced into a graph-mode
// training step. The learning rate (and Adam's bias-corrected step size) live in scalar tensors
// that the host rewrites each step, so a schedule never changes a compiled graph.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/nn/cell.h"

namespace kiln::optim {

// Learning rate as a function of the global step (0-based).
using LearningRate = std::function<double(int64_t step)>;
inline LearningRate constant_lr(double lr) {
  return [lr](int64_t) { return lr; };
}

class Optimizer {
 public:
  Optimizer(std::vector<Tensor> params, LearningRate lr, double weight_decay);
  virtual ~Optimizer() = default;

  // Updates every parameter from grads (same order as parameters()). Works on traced tensors too.
  virtual void apply(const std::vector<Tensor>& grads) = 0;
  // Sets the step's scalar tensors (lr, step sizes) from the schedule. Called once per step,
  // before apply; advance() moves to the next step afterwards.
  virtual void prepare_step();
  void advance() { ++global_step_; }
  // Eager convenience: prepare_step(); apply(each parameter's .grad()); advance().
  void step();
  void zero_grad();

  const std::vector<Tensor>& parameters() const { return params_; }
  int64_t global_step() const { return global_step_; }
  void set_global_step(int64_t s) { global_step_ = s; }
  double current_lr() const { return lr_(global_step_); }
  // Optimizer state for checkpoints ("moments.<i>", "global_step", …).
  virtual std::vector<nn::NamedTensor> state_and_names() const;

 protected:
  std::vector<Tensor> params_;
  LearningRate lr_;
  double weight_decay_;
  int64_t global_step_ = 0;
  Tensor lr_tensor_;  // scalar f32, rewritten by prepare_step()
};

}  // namespace kiln::optim
