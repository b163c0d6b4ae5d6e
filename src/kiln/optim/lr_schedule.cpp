#include "kiln/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "kiln/core/error.h"

namespace kiln::optim {

LearningRate piecewise_constant_lr(std::vector<int64_t> milestones, std::vector<double> values) {
  if (values.empty()) throw Error("piecewise_constant_lr: no learning rates given");
  if (values.size() != milestones.size() && values.size() != milestones.size() + 1) {
    throw Error("piecewise_constant_lr: " + std::to_string(values.size()) + " learning rates for " +
                std::to_string(milestones.size()) + " milestones (need as many, or one more)");
  }
  for (size_t i = 1; i < milestones.size(); ++i) {
    if (milestones[i] <= milestones[i - 1]) {
      throw Error("piecewise_constant_lr: milestones must increase, got " +
                  std::to_string(milestones[i - 1]) + " then " + std::to_string(milestones[i]));
    }
  }
  return [milestones = std::move(milestones), values = std::move(values)](int64_t step) {
    auto it = std::upper_bound(milestones.begin(), milestones.end(), step);
    size_t i = size_t(it - milestones.begin());
    return values[std::min(i, values.size() - 1)];
  };
}

LearningRate step_lr(double base, int64_t step_size, double gamma) {
  if (step_size <= 0)
    throw Error("step_lr: step_size must be > 0, got " + std::to_string(step_size));
  return [=](int64_t step) { return base * std::pow(gamma, double(step / step_size)); };
}

LearningRate cosine_decay_lr(double min_lr, double max_lr, int64_t total_steps) {
  if (total_steps <= 0) {
    throw Error("cosine_decay_lr: total_steps must be > 0, got " + std::to_string(total_steps));
  }
  return [=](int64_t step) {
    double t = std::min(double(step), double(total_steps)) / double(total_steps);
    return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * t));
  };
}

LearningRate linear_warmup(LearningRate after, int64_t warmup_steps, double start_factor) {
  if (!after) throw Error("linear_warmup: the schedule after warm-up is empty");
  if (warmup_steps < 0) {
    throw Error("linear_warmup: warmup_steps must be >= 0, got " + std::to_string(warmup_steps));
  }
  return [after = std::move(after), warmup_steps, start_factor](int64_t step) {
    if (step >= warmup_steps) return after(step - warmup_steps);
    double frac = double(step + 1) / double(warmup_steps);
    return after(0) * (start_factor + (1.0 - start_factor) * frac);
  };
}

}  // namespace kiln::optim
