// kiln tune's search: the trials, their windows sized to the budget, and the greedy choice.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <optional>
#include <vector>

#include "kiln/cli/training_setup.h"
#include "kiln/cli/tune_command.h"
#include "kiln/core/context.h"
#include "kiln/core/error.h"
#include "kiln/core/random.h"
#include "kiln/core/threads.h"
#include "kiln/data/config.h"
#include "kiln/nn/loss.h"
#include "kiln/ops/cpu_support.h"
#include "kiln/train/callback.h"
#include "kiln/train/model.h"

namespace kiln::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Steps of a trial before its window: compilation and the races of graph mode, the pipeline
// filling its queues.
constexpr int kTrialWarmupSteps = 3;
constexpr double kMinWindowS = 0.4;           // a shorter window measures the machine's noise
constexpr double kMaxWindowS = 4.0;           // longer ones buy little precision
constexpr double kFirstGuessOverheadS = 1.0;  // a trial's warm-up before any was timed
constexpr double kGraphGuessOverheadS = 3.0;  // ... in graph mode (compilation, races)
constexpr int64_t kTrialEpochs = 1'000'000;   // trials stop on time, never on epochs

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Times the steps after the warm-up and stops training when the window is over or the budget
// is spent. A trial's figure is the images over the window's wall time: what training gets,
// stalls of the data pipeline included (a median step would hide the stalls that workers and
// prefetch depth are tried for).
class TrialClock : public train::Callback {
 public:
  TrialClock(double window_s, Clock::time_point deadline)
      : window_s_(window_s), deadline_(deadline) {}
  void on_train_step_end(train::RunContext& ctx) override {
    const auto now = Clock::now();
    ++steps_;
    if (steps_ == kTrialWarmupSteps) {
      start_ = now;
    } else if (steps_ > kTrialWarmupSteps) {
      const auto& p = ctx.original_args();
      step_s_.push_back(seconds_between(last_, now) /
                        double(std::max<int64_t>(p.steps_this_sink, 1)));
      batch_ = p.batch_size;
    }
    last_ = now;
    if (now >= deadline_ ||
        (steps_ > kTrialWarmupSteps && seconds_between(start_, now) >= window_s_)) {
      ctx.request_stop();
    }
  }
  int64_t timed_steps() const { return int64_t(step_s_.size()); }
  double timed_seconds() const { return seconds_between(start_, last_); }
  // Images/s over the window; nullopt when too few steps were timed to say.
  std::optional<double> images_per_sec() const {
    if (step_s_.size() < 3) return std::nullopt;
    double seconds = 0;
    for (double s : step_s_) seconds += s;
    return seconds > 0 ? std::optional<double>(double(batch_) * double(step_s_.size()) / seconds)
                       : std::nullopt;
  }

 private:
  double window_s_;
  Clock::time_point deadline_, start_, last_;
  int64_t steps_ = 0, batch_ = 0;
  std::vector<double> step_s_;
};

class Tuner {
 public:
  Tuner(const TuneConfig& config, std::ostream& out)
      : config_(config), out_(out), begin_(Clock::now()) {
    deadline_ = begin_ + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(config.budget_s));
  }

  TuneResult run() {
    // The guide's starting point, whatever kiln train's defaults are: eager, fp32, no fusion.
    TrainConfig base;
    base.mode = "eager";
    base.graph_kernel = false;
    base.amp_level = "O0";
    base.micro_batches = 1;
    base.model = config_.model;
    base.batch_size = config_.batch_size;
    base.data = config_.data;
    base.data_dir = config_.data_dir;
    base.threads = config_.threads;
    base.seed = config_.seed;
    base.compile_log = false;
    if (config_.threads > 0) set_num_threads(config_.threads);
    setup_ = open_training_setup(base);
    out_ << setup_.description << "\n"
         << "kiln tune: " << config_.model << ", batch " << config_.batch_size << ", "
         << num_threads() << " kernel thread(s), budget " << config_.budget_s << " s\n";

    const int cores = available_cores();
    std::vector<int> workers;
    for (int w = 1; w < cores; w *= 2) workers.push_back(w);
    planned_ = 1 + 1 + 1 + 2 + int(workers.size()) + 2 + 2;

    best_ = base;
    result_.baseline_images_per_sec = trial("baseline", "eager, O0, fusion off", base);
    best_ips_ = result_.baseline_images_per_sec;
    if (best_ips_ <= 0) {
      throw Error("kiln tune: the baseline trial could not be measured within --budget " +
                  std::to_string(int(config_.budget_s)) + "s (" + result_.trials.back().note +
                  "); give a larger budget");
    }
    result_.trials.back().kept = true;

    try_option("mode", "graph", [](TrainConfig& c) { c.mode = "graph"; });
    try_option("fusion", "on", [](TrainConfig& c) {
      c.mode = "graph";
      c.graph_kernel = true;
    });
    for (const char* level : {"O2", "O3"}) {
      if (!ops::arithmetic_available(DType::bf16)) {
        skip("amp-level", level, "no bf16 arithmetic on this CPU: every level trains in fp32");
      } else {
        try_option("amp-level", level, [level](TrainConfig& c) { c.amp_level = level; });
      }
    }
    for (int w : workers) {
      try_option("workers", std::to_string(w), [w](TrainConfig& c) { c.workers = w; });
    }
    for (int depth : {4, 64}) {
      try_option("prefetch", std::to_string(depth),
                 [depth](TrainConfig& c) { c.prefetch = depth; });
    }
    for (int slices : {2, 4}) {
      if (best_.mode != "graph") {
        skip("micro-batches", std::to_string(slices), "needs graph mode, which was slower");
      } else if (config_.batch_size % slices != 0) {
        skip("micro-batches", std::to_string(slices),
             "the batch does not split into " + std::to_string(slices));
      } else {
        try_option("micro-batches", std::to_string(slices),
                   [slices](TrainConfig& c) { c.micro_batches = slices; });
      }
    }
    result_.best = best_;
    result_.best_images_per_sec = best_ips_;
    result_.elapsed_s = seconds_between(begin_, Clock::now());
    return result_;
  }

 private:
  template <class Change>
  void try_option(const std::string& option, const std::string& value, Change change) {
    TrainConfig candidate = best_;
    change(candidate);
    const double ips = trial(option, value, candidate);
    TuneTrial& t = result_.trials.back();
    if (ips > 0 && ips > best_ips_ * (1 + kTuneMinGain)) {
      best_ = candidate;
      best_ips_ = ips;
      t.kept = true;
    }
  }

  void skip(const std::string& option, const std::string& value, const std::string& why) {
    result_.trials.push_back({.option = option, .value = value, .note = "not tried: " + why});
    out_ << "  " << option << " " << value << ": not tried (" << why << ")\n";
  }

  // One timed trial of `c`; 0 when it did not fit in the budget or failed (its note says why).
  double trial(const std::string& option, const std::string& value, const TrainConfig& c) {
    const auto start = Clock::now();
    const int left = std::max(planned_ - int(result_.trials.size()), 1);
    const double remaining = seconds_between(start, deadline_);
    const bool graph = c.mode == "graph";
    const double overhead = graph ? graph_overhead_s_ : eager_overhead_s_;
    // The time left shared by the trials still to run; when it is short the later ones are
    // left out rather than every window made too short to measure.
    const double window =
        std::clamp((remaining - overhead * left) / double(left), kMinWindowS, kMaxWindowS);
    TuneTrial t{.option = option, .value = value};
    if (remaining < overhead + kMinWindowS) {
      t.note = "not tried: the budget is spent";
      result_.trials.push_back(t);
      out_ << "  " << option << " " << value << ": not tried (the budget is spent)\n";
      return 0;
    }
    double ips = 0;
    try {
      ips = measure(c, window, t.note);
    } catch (const Error& e) {
      t.note = std::string("failed: ") + e.what();
    }
    t.seconds = seconds_between(start, Clock::now());
    (graph ? graph_overhead_s_ : eager_overhead_s_) = std::max(0.0, t.seconds - window);
    t.images_per_sec = ips;
    if (ips > 0 && result_.baseline_images_per_sec > 0) {
      t.vs_baseline = ips / result_.baseline_images_per_sec - 1;
      t.vs_best = ips / best_ips_ - 1;
    }
    out_ << "  " << option << " " << value << ": "
         << (ips > 0 ? std::to_string(int(std::lround(ips))) + " images/s, " : std::string())
         << t.note << " (" << std::fixed << std::setprecision(1) << t.seconds
         << " s with its warm-up)" << std::defaultfloat << "\n";
    result_.trials.push_back(std::move(t));
    return ips;
  }

  // Trains `c` for a warm-up and a window of `window_s`; images/s of the window.
  double measure(const TrainConfig& c, double window_s, std::string& note) {
    Context context = get_context();
    context.mode = c.mode == "graph" ? GRAPH_MODE : PYNATIVE_MODE;
    context.enable_graph_kernel = c.graph_kernel;
    context.micro_batches = c.micro_batches;
    set_context(context);
    data::config::set_num_parallel_workers(c.workers);
    data::config::set_prefetch_size(c.prefetch > 0 ? c.prefetch : 16);
    set_seed(c.seed);
    auto loss = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean");
    auto optimizer = make_optimizer(c, setup_.net->trainable_params(), 1000);
    train::Model model(setup_.net, loss, optimizer,
                       {.amp_level = c.amp_level, .compile_log = false});
    auto clock = std::make_shared<TrialClock>(window_s, deadline_);
    model.train(kTrialEpochs, setup_.train, {clock});
    const std::optional<double> ips = clock->images_per_sec();
    if (!ips) {
      note = "not measured: the budget ended during its warm-up";
      return 0;
    }
    char what[64];
    std::snprintf(what, sizeof what, "%lld steps in %.2f s",
                  static_cast<long long>(clock->timed_steps()), clock->timed_seconds());
    note = what;
    return *ips;
  }

  const TuneConfig& config_;
  std::ostream& out_;
  Clock::time_point begin_, deadline_;
  TrainingSetup setup_;
  TrainConfig best_;
  double best_ips_ = 0;
  int planned_ = 1;
  double eager_overhead_s_ = kFirstGuessOverheadS, graph_overhead_s_ = kGraphGuessOverheadS;
  TuneResult result_;
};

}  // namespace

TuneResult run_tune_trials(const TuneConfig& config, std::ostream& out) {
  const Context saved = get_context();
  TuneResult result;
  try {
    result = Tuner(config, out).run();
  } catch (...) {
    set_context(saved);
    data::config::set_num_parallel_workers(0);
    data::config::set_prefetch_size(16);
    throw;
  }
  set_context(saved);
  data::config::set_num_parallel_workers(0);
  data::config::set_prefetch_size(16);
  return result;
}

}  // namespace kiln::cli
