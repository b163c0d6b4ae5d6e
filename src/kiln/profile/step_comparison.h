#pragma once
// The profiled training step timed under the settings the performance guide would have a user
// try next, so that the report's recommendations give measured gains, not guesses:
//
//   run in eager mode               -> graph mode, and graph mode with fusion
//   graph mode without fusion       -> fusion on
//   mixed precision (O1..O3)        -> O0 (is low precision slower for this model here?)
//   O0 on a CPU with bf16 arithmetic -> O2
//
//   profiler.stop();
//   profiler.add_step_comparison(profile::compare_step_settings(parts, images, labels));
//   profiler.analyse();
//
// Each setting gets its own train::Model over the same network and optimizer, a few warm-up
// steps (compilation, the AMP and thread races) and then steps interleaved with the others on
// the same batch, so every setting sees the same machine load; the medians are compared. The
// parameters, BatchNorm statistics, optimizer state and execution context are restored after.
#include <memory>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/nn/cell.h"
#include "kiln/optim/optimizer.h"
#include "kiln/profile/collection.h"
#include "kiln/train/model.h"

namespace kiln::profile {

// The settings' names in StepTiming::setting, which recommendations look for.
inline constexpr const char* kProfiledSetting = "this run";
inline constexpr const char* kGraphSetting = "graph mode";
inline constexpr const char* kGraphFusionSetting = "graph mode + fusion";
inline constexpr const char* kFusionSetting = "fusion on";
inline constexpr const char* kAmpO0Setting = "AMP O0";
inline constexpr const char* kAmpO2Setting = "AMP O2";

struct StepParts {
  std::shared_ptr<nn::Cell> network;
  std::shared_ptr<nn::LossCell> loss;
  std::shared_ptr<optim::Optimizer> optimizer;
  train::ModelOptions options;  // the profiled run's (AMP level, loss scale, ...)
};

struct ComparisonOptions {
  int warmup_steps = 2;  // per setting, not timed
  int rounds = 4;        // timed steps per setting, interleaved
};

// The profiled settings first (kProfiledSetting, profiled = true), then the others that apply.
// Empty under mpirun (a step there joins the other ranks' collectives). Errors of a setting
// (one the model cannot run) leave that setting out.
std::vector<StepTiming> compare_step_settings(const StepParts& parts, const Tensor& images,
                                              const Tensor& labels,
                                              const ComparisonOptions& options = {});

}  // namespace kiln::profile
