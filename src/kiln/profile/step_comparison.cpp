#include "kiln/profile/step_comparison.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "kiln/comm/communicator.h"
#include "kiln/core/context.h"
#include "kiln/core/error.h"
#include "kiln/core/threads.h"
#include "kiln/ops/cpu_support.h"
#include "kiln/train/step_trial.h"

namespace kiln::profile {
namespace {

struct Setting {
  std::string name;
  Context context;
  std::string amp_level;
  std::unique_ptr<train::Model> model;
  std::vector<double> ms;
};

// The network, its buffers and the optimizer's state as they were, put back on destruction.
class SavedState {
 public:
  explicit SavedState(const StepParts& parts)
      : optimizer_(*parts.optimizer), global_step_(parts.optimizer->global_step()) {
    for (const auto& [name, t] : parts.network->state_and_names())
      saved_.emplace_back(t, t.clone());
    for (const auto& [name, t] : parts.optimizer->state_and_names()) {
      saved_.emplace_back(t, t.clone());
    }
  }
  ~SavedState() {
    for (auto& [t, copy] : saved_) t.copy_from(copy);
    optimizer_.set_global_step(global_step_);
  }

 private:
  optim::Optimizer& optimizer_;
  int64_t global_step_;
  std::vector<std::pair<Tensor, Tensor>> saved_;
};

// The execution context and the kernel thread budget as they were. The budget too: timing
// another setting's first steps (AMP's per-shape measurements, on batch slices side by side)
// must not leave it changed for the rest of the run.
class ContextGuard {
 public:
  ContextGuard() : saved_(get_context()), threads_(num_threads()) {}
  ~ContextGuard() {
    set_context(saved_);
    set_num_threads(threads_);
  }

 private:
  Context saved_;
  int threads_;
};

}  // namespace

std::vector<StepTiming> compare_step_settings(const StepParts& parts, const Tensor& images,
                                              const Tensor& labels,
                                              const ComparisonOptions& options) {
  if (comm::size() > 1) return {};
  if (!parts.network || !parts.loss || !parts.optimizer) {
    throw Error("compare_step_settings: needs the network, the loss and the optimizer");
  }
  ContextGuard context_guard;
  SavedState saved(parts);
  const Context profiled = get_context();
  const std::string level = parts.options.amp_level;
  const bool graph = profiled.mode == GRAPH_MODE;
  std::vector<Setting> settings;
  auto add = [&](std::string name, ExecutionMode mode, bool fusion, std::string amp_level) {
    Context c = profiled;
    c.mode = mode;
    c.enable_graph_kernel = fusion;
    settings.push_back({std::move(name), c, std::move(amp_level), nullptr, {}});
  };
  add(kProfiledSetting, profiled.mode, profiled.enable_graph_kernel, level);
  if (!graph) {
    add(kGraphSetting, GRAPH_MODE, false, level);
    add(kGraphFusionSetting, GRAPH_MODE, true, level);
  } else if (!profiled.enable_graph_kernel) {
    add(kFusionSetting, GRAPH_MODE, true, level);
  }
  if (level != "O0") {
    add(kAmpO0Setting, profiled.mode, profiled.enable_graph_kernel, "O0");
  } else if (ops::arithmetic_available(DType::bf16)) {
    add(kAmpO2Setting, profiled.mode, profiled.enable_graph_kernel, "O2");
  }

  auto step_ms = [&](Setting& s) {
    set_context(s.context);
    const auto t0 = std::chrono::steady_clock::now();
    s.model->train_step(images, labels);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  for (Setting& s : settings) {
    try {
      train::ModelOptions o = parts.options;
      o.amp_level = s.amp_level;
      o.compile_log = false;
      s.model = std::make_unique<train::Model>(parts.network, parts.loss, parts.optimizer, o);
      for (int i = 0; i < options.warmup_steps; ++i) step_ms(s);
    } catch (const Error&) {
      s.model.reset();  // this model cannot run so (micro-batches with BatchNorm, ...)
    }
  }
  for (int r = 0; r < options.rounds; ++r) {
    for (Setting& s : settings) {
      if (s.model) s.ms.push_back(step_ms(s));
    }
  }
  std::vector<StepTiming> out;
  for (const Setting& s : settings) {
    if (s.model) out.push_back({s.name, train::median(s.ms), s.name == kProfiledSetting});
  }
  return out;
}

}  // namespace kiln::profile
