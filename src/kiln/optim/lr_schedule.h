#pragma once
// Learning-rate schedules: plain functions of the global step, so they compose
// (e.g. `linear_warmup(cosine_decay_lr(0.0, 0.05, 4000), 500)`).
#include <cstdint>
#include <vector>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

// MindSpore's piecewise_constant_lr: values[i] while step < milestones[i]; the last value after
// the last milestone. milestones must increase; values.size() == milestones.size() or one more.
LearningRate piecewise_constant_lr(std::vector<int64_t> milestones, std::vector<double> values);

// lr = base * gamma^(step / step_size) (PyTorch's StepLR, in steps).
LearningRate step_lr(double base, int64_t step_size, double gamma = 0.1);

// Cosine from max_lr down to min_lr over total_steps, then min_lr:
//   min + (max - min) * (1 + cos(pi * step / total_steps)) / 2
LearningRate cosine_decay_lr(double min_lr, double max_lr, int64_t total_steps);

// Linear warm-up in front of another schedule: for step < warmup_steps,
//   lr = after(0) * (start_factor + (1 - start_factor) * (step + 1) / warmup_steps);
// afterwards after(step - warmup_steps): the wrapped schedule starts when warm-up ends.
LearningRate linear_warmup(LearningRate after, int64_t warmup_steps, double start_factor = 0.0);

}  // namespace kiln::optim
