// kiln tune's search: the trials, their windows sized to the budget, and the greedy choice.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <optional>
#include <utility>
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
// filling its queues. In sink mode the warm-up ends at the first sink end past them.
constexpr int kTrialWarmupSteps = 3;
constexpr int kMinTimedSteps = 3;             // fewer say nothing about a steady state
constexpr double kMinWindowS = 0.4;           // a shorter window measures the machine's noise
constexpr double kMaxWindowS = 4.0;           // longer ones buy little precision
constexpr double kFirstGuessOverheadS = 1.0;  // a trial's warm-up before any was timed
constexpr double kGraphGuessOverheadS = 3.0;  // ... in graph mode (compilation, races)
constexpr double kWarmupMargin = 1.5;         // a trial starts when its warm-up fits this often
// A step (or sink) on a busy machine may take this many times the last one.
constexpr double kNextCallMargin = 1.5;
constexpr int64_t kTrialEpochs = 1'000'000;  // trials stop on time, never on epochs
// Sink sizes tried, each cut to what fits kMinTimedSinks times in the trial's window.
constexpr int64_t kSinkSizes[] = {8, 64};
constexpr int64_t kMinTimedSinks = 3;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Times the steps after the warm-up and stops training when the window is over, or before the
// budget's end: when the next step (or sink) would end past it at the pace of the last one. A
// trial's figure is the images over the window's wall time: what training gets, stalls of the
// data pipeline included (a median step would hide the stalls that workers and prefetch depth
// are tried for). The hooks fire once per sink in sink mode, so it counts steps, not calls.
class TrialClock : public train::Callback {
 public:
  TrialClock(double window_s, Clock::time_point deadline)
      : window_s_(window_s), deadline_(deadline) {}
  void on_train_begin(train::RunContext&) override { last_ = Clock::now(); }
  void on_train_step_end(train::RunContext& ctx) override {
    const auto now = Clock::now();
    const auto& p = ctx.original_args();
    const int64_t steps = std::max<int64_t>(p.steps_this_sink, 1);
    const bool warm = steps_ >= kTrialWarmupSteps;
    steps_ += steps;
    if (warm) {
      timed_steps_ += steps;
      images_ += p.batch_size * steps;
    } else if (steps_ >= kTrialWarmupSteps) {
      start_ = now;
    }
    // The last call's pace predicts the next, with a margin for a busy machine's swings; the
    // first call's (which compiles in graph mode) predicts nothing.
    if (calls_++ > 0) next_call_s_ = kNextCallMargin * seconds_between(last_, now);
    last_ = now;
    const auto next_end = now + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(next_call_s_));
    if (next_end >= deadline_) {
      stopped_by_budget_ = true;
      ctx.request_stop();
    } else if (warm && seconds_between(start_, now) >= window_s_) {
      ctx.request_stop();
    }
  }
  int64_t steps() const { return steps_; }
  int64_t timed_steps() const { return timed_steps_; }
  double timed_seconds() const { return timed_steps_ > 0 ? seconds_between(start_, last_) : 0; }
  bool stopped_by_budget() const { return stopped_by_budget_; }
  // Images/s over the window; nullopt when too few steps were timed to say.
  std::optional<double> images_per_sec() const {
    const double seconds = timed_seconds();
    if (timed_steps_ < kMinTimedSteps || seconds <= 0) return std::nullopt;
    return double(images_) / seconds;
  }

 private:
  double window_s_;
  Clock::time_point deadline_, start_, last_;
  int64_t steps_ = 0, timed_steps_ = 0, images_ = 0, calls_ = 0;
  double next_call_s_ = 0;
  bool stopped_by_budget_ = false;
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
    const std::pair<const char*, int> trials_per_option[] = {
        {"mode", 1},
        {"fusion", 1},
        {"amp-level", 2},
        {"workers", int(workers.size())},
        {"prefetch", 2},
        {"micro-batches", 2},
        {"sink-size", int(std::size(kSinkSizes))}};
    planned_ = 1;
    for (const auto& [option, count] : trials_per_option) planned_ += wanted(option) ? count : 0;

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
    if (wanted("sink-size")) try_sink_sizes();
    result_.best = best_;
    result_.best_images_per_sec = best_ips_;
    result_.elapsed_s = seconds_between(begin_, Clock::now());
    return result_;
  }

 private:
  bool wanted(const std::string& option) const {
    return config_.only.empty() ||
           std::find(config_.only.begin(), config_.only.end(), option) != config_.only.end();
  }

  // Dataset sink mode: a sink's steps run back to back, the callbacks once per sink, so a trial
  // can stop only at a sink's end. Each size is cut to what fits kMinTimedSinks times in the
  // trial's window at the best pace so far, which keeps the trial inside its window and the
  // budget whatever the model's step time (64 LeNet steps take a fraction of a second, 64
  // ResNet-20 steps tens of seconds).
  void try_sink_sizes() {
    const double step_s = double(config_.batch_size) / best_ips_;
    const double window = planned_window(best_.mode == "graph");
    const int64_t fits = int64_t(window / step_s) / kMinTimedSinks;
    int64_t tried = 0;
    for (int64_t size : kSinkSizes) {
      const int64_t sink = std::min(size, fits);
      if (sink < 2) {
        char why[160];
        std::snprintf(why, sizeof why,
                      "%lld sinks of 2 steps do not fit in its %.1f s window at %.3f s a step",
                      static_cast<long long>(kMinTimedSinks), window, step_s);
        skip("sink-size", std::to_string(size), why);
      } else if (sink < 2 * tried) {
        skip("sink-size", std::to_string(size),
             "cut to " + std::to_string(sink) + " steps to fit its window, too close to the " +
                 std::to_string(tried) + " tried");
      } else {
        tried = sink;
        try_option("sink-size", std::to_string(sink),
                   [sink](TrainConfig& c) { c.sink_size = sink; });
      }
    }
  }

  // The window of the next trial: the time left shared by the trials still to run; when it is
  // short the later ones are left out rather than every window made too short to measure.
  double planned_window(bool graph) const {
    const int left = std::max(planned_ - int(result_.trials.size()), 1);
    const double remaining = seconds_between(Clock::now(), deadline_);
    const double overhead = graph ? graph_overhead_s_ : eager_overhead_s_;
    return std::clamp((remaining - overhead * left) / double(left), kMinWindowS, kMaxWindowS);
  }

  template <class Change>
  void try_option(const std::string& option, const std::string& value, Change change) {
    if (!wanted(option)) return;
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
    if (!wanted(option)) return;
    result_.trials.push_back({.option = option, .value = value, .note = "not tried: " + why});
    out_ << "  " << option << " " << value << ": not tried (" << why << ")\n";
  }

  // One timed trial of `c`; 0 when it did not fit in the budget or failed (its note says why).
  double trial(const std::string& option, const std::string& value, const TrainConfig& c) {
    const auto start = Clock::now();
    const double remaining = seconds_between(start, deadline_);
    const bool graph = c.mode == "graph";
    const double overhead = graph ? graph_overhead_s_ : eager_overhead_s_;
    const double window = planned_window(graph);
    TuneTrial t{.option = option, .value = value};
    // A first step slower than any seen so far (a recompile on a busy machine) cannot be
    // stopped; the margin keeps it inside the budget.
    if (remaining < kWarmupMargin * overhead + kMinWindowS) {
      t.note = "not tried: the budget is spent";
      result_.trials.push_back(t);
      out_ << "  " << option << " " << value << ": not tried (the budget is spent)\n";
      return 0;
    }
    Measurement m;
    try {
      m = measure(c, window, t.note);
    } catch (const Error& e) {
      t.note = std::string("failed: ") + e.what();
    }
    const double ips = m.images_per_sec;
    t.seconds = seconds_between(start, Clock::now());
    if (ips > 0) {
      // The slowest warm-up seen so far, first guess replaced: a trial starts only when one
      // that slow still leaves it a window.
      double& seen = graph ? graph_overhead_s_ : eager_overhead_s_;
      const double warmup_s = std::max(0.0, t.seconds - m.timed_s);
      seen = (graph ? graph_overheads_measured_ : eager_overheads_measured_)++ == 0
                 ? warmup_s
                 : std::max(seen, warmup_s);
    }
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

  struct Measurement {
    double images_per_sec = 0;  // 0: not measured (the note says why)
    double timed_s = 0;         // the window's wall time
  };

  // Trains `c` for a warm-up and a window of `window_s`.
  Measurement measure(const TrainConfig& c, double window_s, std::string& note) {
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
    train::TrainOptions options;
    options.dataset_sink_mode = c.sink_size != 0;
    options.sink_size = c.sink_size != 0 ? c.sink_size : -1;
    model.train(kTrialEpochs, setup_.train, {clock}, options);
    const std::optional<double> ips = clock->images_per_sec();
    char what[128];
    if (!ips && clock->steps() < kTrialWarmupSteps) {
      std::snprintf(what, sizeof what,
                    "not measured: the budget ended during its warm-up (%lld of %d steps)",
                    static_cast<long long>(clock->steps()), kTrialWarmupSteps);
    } else if (!ips) {
      std::snprintf(what, sizeof what,
                    "not measured: the budget ended after %lld timed steps (%d needed)",
                    static_cast<long long>(clock->timed_steps()), kMinTimedSteps);
    } else {
      std::snprintf(what, sizeof what, "%lld steps in %.2f s",
                    static_cast<long long>(clock->timed_steps()), clock->timed_seconds());
    }
    note = what;
    return ips ? Measurement{*ips, clock->timed_seconds()} : Measurement{};
  }

  const TuneConfig& config_;
  std::ostream& out_;
  Clock::time_point begin_, deadline_;
  TrainingSetup setup_;
  TrainConfig best_;
  double best_ips_ = 0;
  int planned_ = 1;
  double eager_overhead_s_ = kFirstGuessOverheadS, graph_overhead_s_ = kGraphGuessOverheadS;
  int eager_overheads_measured_ = 0, graph_overheads_measured_ = 0;
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
