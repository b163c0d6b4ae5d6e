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

  // --- Extensions ---
  // "SGD", "Momentum", "Adam", "AdamW": for messages and checkpoints.
  virtual std::string name() const = 0;
  // The one-element f32 tensors prepare_step() rewrites in place (their storage never changes):
  // a compiled step reads them as inputs, never folds them into constants.
  virtual std::vector<Tensor> step_scalars() const { return {lr_tensor_}; }
  // Restores what state_and_names() saved (names and shapes must match; "global_step" is read
  // as an integer). Throws Error naming a missing or mis-shaped entry.
  void load_state(const std::vector<nn::NamedTensor>& state);

 protected:
  // Checks grads against the parameters (count, shapes); names the optimizer and the index.
  void check_grads(const std::vector<Tensor>& grads) const;

  std::vector<Tensor> params_;
  LearningRate lr_;
  double weight_decay_;
  int64_t global_step_ = 0;
  Tensor lr_tensor_;  // scalar f32, rewritten by prepare_step()
};

}  // namespace kiln::optim
