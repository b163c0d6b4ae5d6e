#include "kiln/train/compiled_step.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <string_view>

#include "kiln/amp/autocast.h"
#include "kiln/amp/placement.h"
#include "kiln/comm/communicator.h"
#include "kiln/core/allocator.h"
#include "kiln/core/context.h"
#include "kiln/core/error.h"
#include "kiln/core/threads.h"
#include "kiln/graph/autodiff.h"
#include "kiln/graph/tracer.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/functional.h"
#include "kiln/parallel/data_parallel.h"
#include "kiln/parallel/semi_auto.h"
#include "kiln/train/batch_split_step.h"
#include "kiln/train/machine_model_file.h"
#include "kiln/train/step_trace.h"

namespace kiln::train {
namespace {

// Keeps the number of live graphs (and their launch lists) bounded if shapes keep changing.
constexpr size_t kMaxGraphs = 6;

// The compiled step's inputs: the network's, then the labels.
std::vector<Tensor> graph_batch(const nn::Tensors& inputs, const Tensor& labels) {
  std::vector<Tensor> batch = inputs;
  batch.push_back(labels);
  return batch;
}

// The process's CPU time: the race of faster_than_fp32 compares work, which a machine shared
// with other jobs leaves intact, where wall time on it swings by 2x from one step to the next.
double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

// A strategy's name in logs; `split` names the batch split.
std::string strategy_name(ThreadStrategy s, const std::string& split) {
  switch (s) {
    case ThreadStrategy::per_kernel:
      return "per kernel";
    case ThreadStrategy::one_thread:
      return "one thread";
    case ThreadStrategy::batch_split:
      return split;
  }
  return "?";
}

// The batch split must win by 1%: it costs memory (an arena per slice), so a tie keeps the
// whole batch. (Timed on training steps, graph LeNet's split wins by 0-18%; a margin of 3% gave
// per kernel 4 of 12 trials.)
double thread_strategy_handicap(ThreadStrategy s) {
  return s == ThreadStrategy::batch_split ? 1.01 : 1.0;
}

}  // namespace

std::string split_exceeds_memory(int64_t arena_bytes, int64_t available_bytes) {
  if (available_bytes < 0 || arena_bytes <= available_bytes / 4) return {};
  auto mib = [](int64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20); };
  return "its slices' arenas would add about " + mib(arena_bytes) + " MiB, over a quarter of the " +
         mib(available_bytes) + " MiB available";
}

graph::CompileOptions options_from_context() {
  const Context& c = get_context();
  graph::CompileOptions o;
  o.fusion = c.enable_graph_kernel;
  o.dump_dir = c.save_graphs_path;
  o.dump_name = "train_step";
  o.micro_batches = c.micro_batches;
  o.keep_traced_graph = step_trace_sink() != nullptr;  // a profiler shows it
  return o;
}

std::vector<nn::NamedTensor> traced_step_state(nn::Cell& net, optim::Optimizer& opt) {
  std::vector<nn::NamedTensor> state = net.state_and_names();
  for (auto& [name, t] : opt.state_and_names()) {
    if (name != "global_step") state.emplace_back("optimizer." + name, t);
  }
  // The per-step scalars (lr, Adam's step size, the loss scale) are rewritten on the host
  // every step: anything computed from them must be recomputed, never baked in at trace time.
  std::vector<Tensor> scalars = opt.step_scalars();
  for (size_t i = 0; i < scalars.size(); ++i) {
    state.emplace_back("optimizer.step_scalar." + std::to_string(i), scalars[i]);
  }
  return state;
}

nn::Tensors trace_network_inputs(graph::Tracer& tracer, const std::vector<ops::TensorMeta>& metas) {
  nn::Tensors inputs;
  for (size_t i = 0; i < metas.size(); ++i) {
    inputs.push_back(
        tracer.input(metas[i], metas.size() == 1 ? "images" : "input" + std::to_string(i)));
  }
  return inputs;
}

std::string describe_batch(const nn::Tensors& inputs, const Tensor& labels) {
  std::string out;
  for (const Tensor& x : inputs) out += describe(x) + ", ";
  return out + describe(labels);
}

std::optional<ThreadStrategy> thread_strategy_from_environment() {
  const char* value = std::getenv("KILN_THREAD_STRATEGY");
  if (value == nullptr || std::string_view(value).empty() || std::string_view(value) == "measure") {
    return std::nullopt;
  }
  const std::string_view v(value);
  if (v == "per_kernel") return ThreadStrategy::per_kernel;
  if (v == "batch_split") return ThreadStrategy::batch_split;
  if (v == "one_thread") return ThreadStrategy::one_thread;
  throw Error("KILN_THREAD_STRATEGY=" + std::string(v) +
              ": expected measure, per_kernel, batch_split or one_thread");
}

CompiledTrainStep::CompiledTrainStep(nn::Cell& net, nn::LossCell& loss, optim::Optimizer& opt,
                                     graph::CompileOptions options, amp::AmpConfig amp,
                                     amp::LossScaleManager* loss_scale)
    : net_(net),
      loss_(loss),
      opt_(opt),
      options_(std::move(options)),
      amp_(amp),
      loss_scale_(loss_scale),
      forced_(thread_strategy_from_environment()) {
  if (!options_.arena) options_.arena = std::make_shared<graph::Arena>();
  if (loss_scale_) {
    scale_ = Tensor::scalar(1.0);
    inverse_scale_ = Tensor::scalar(1.0);
  }
}

CompiledTrainStep::~CompiledTrainStep() = default;

CompiledTrainStep::TracedStep CompiledTrainStep::trace_and_compile(const nn::Tensors& inputs,
                                                                   const Tensor& labels,
                                                                   bool evaluation,
                                                                   const amp::AmpConfig& amp) {
  if (inputs.empty()) throw Error("graph mode: the step was given no network inputs");
  const Tensor& images = inputs[0];
  auto t0 = std::chrono::steady_clock::now();
  graph::Graph g;
  TracedStep traced;
  int& slices = traced.slices;
  placement_.clear();
  tracing_amp_ = amp;
  // SEMI_AUTO_PARALLEL: the whole-shape graph is traced and planned first (which splits the
  // parameters), then replayed below as this rank's part.
  std::unique_ptr<parallel::LogicalStep> logical;
  if (parallel::semi_auto_active()) {
    if (loss_scale_) {
      throw Error("graph mode: SEMI_AUTO_PARALLEL with loss scaling is not supported yet");
    }
    if (options_.micro_batches > 1) {
      throw Error("graph mode: SEMI_AUTO_PARALLEL with micro_batches = " +
                  std::to_string(options_.micro_batches) + " is not supported yet");
    }
    if (inputs.size() != 1) {
      throw Error("graph mode: SEMI_AUTO_PARALLEL plans networks of one input; this one takes " +
                  std::to_string(inputs.size()));
    }
    const parallel::MachineModel machine =
        parallel::auto_parallel_active()
            ? planning_machine_model(get_auto_parallel_context().op_times == "measured")
            : parallel::MachineModel{};
    logical = parallel::plan_step(
        ops::meta_of(images), ops::meta_of(labels),
        [&](const Tensor& x, const Tensor& y) { return trace_slice({x}, y, 0, 1); },
        net_.state_and_names(), opt_.state_and_names(), opt_.parameters(), machine);
    parallel_plan_ = logical->auto_text + logical->plan_text;
    if (!evaluation) predicted_ = logical->predicted;
  }
  {
    graph::Tracer tracer(g);
    std::vector<nn::NamedTensor> state = traced_step_state(net_, opt_);
    if (loss_scale_) {
      state.emplace_back("loss_scale", scale_);
      state.emplace_back("loss_scale.inverse", inverse_scale_);
    }
    tracer.bind_state(state);
    std::vector<ops::TensorMeta> metas;
    for (const Tensor& x : inputs) metas.push_back(ops::meta_of(x));
    const nn::Tensors xs = trace_network_inputs(tracer, metas);
    Tensor y = tracer.input(ops::meta_of(labels), "labels");
    slices = logical ? 1 : micro_batches_for(images);
    if (logical) {
      auto [logits, loss] = parallel::trace_local_step(tracer, *logical, xs[0], y, evaluation);
      if (evaluation) {
        tracer.add_output(logits);
      } else {
        const std::vector<Tensor> params = opt_.parameters();
        std::vector<Tensor> grads =
            graph::gradients(tracer, loss, params, parallel::backward_seed(loss));
        opt_.apply(parallel::reduce_replicated_gradients(grads, params));
      }
      tracer.add_output(loss);
    } else if (evaluation) {
      std::vector<Tensor> logits;
      Tensor loss;
      for (int i = 0; i < slices; ++i) {
        auto [slice_logits, slice_loss] = trace_slice(xs, y, i, slices);
        logits.push_back(slice_logits);
        loss = i == 0 ? slice_loss : ops::add(loss, slice_loss);
      }
      if (slices > 1) check_samples_independent(tracer.graph(), slices);
      tracer.add_output(slices == 1 ? logits[0] : ops::concat(logits, 0));
      tracer.add_output(loss);
    } else {
      auto [loss, grads] = trace_loss_and_gradients(tracer, xs, y, slices);
      // Data parallel: bucketed all-reduces, started as each bucket's last gradient is made
      // (passes::schedule_collectives) and awaited just before its updates.
      if (parallel::data_parallel_active()) grads = parallel::trace_gradient_all_reduce(grads);
      if (!loss_scale_) {
        opt_.apply(grads);
        tracer.add_output(loss);
      } else {
        trace_scaled_update(tracer, loss, grads);
      }
    }
    tracer.finish();
  }
  double trace_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  graph::CompileOptions& o = traced.options;
  o = options_;
  if (evaluation) {
    o.dump_name = "eval_" + std::to_string(eval_compiles_);
  } else if (compiles_ > 0) {
    o.dump_name += "_" + std::to_string(compiles_);
  }
  o.updates_last = loss_scale_ != nullptr && !evaluation;
  // Whether this step could run as batch slices side by side (batch_split_step.h).
  std::string& refusal = traced.batch_split_refusal;
  if (!evaluation) {
    if (loss_scale_) {
      refusal = "loss scaling checks every gradient before any update";
    } else if (parallel::data_parallel_active()) {
      refusal = "data parallelism all-reduces the gradients inside the step";
    } else if (logical) {
      refusal = "SEMI_AUTO_PARALLEL splits the step across ranks";
    } else if (slices > 1) {
      refusal = "the step runs in micro-batches";
    } else {
      refusal = batch_split_refusal(g, loss_, images.rank() > 0 ? images.dim(0) : 0, num_threads());
    }
  }
  // The same graph for a one-thread candidate, when the strategy is measured.
  // (Under MPI the strategy is not timed: see choose_thread_strategy.)
  const bool timed = !parallel::data_parallel_active() && !logical;
  if (!evaluation && num_threads() > 1 &&
      (forced_ == ThreadStrategy::one_thread || (!forced_ && timed))) {
    traced.one_thread_graph = g;
  }
  traced.exe = std::make_unique<graph::Executable>(std::move(g), o);
  traced.exe->report().trace_ms = trace_ms;
  return traced;
}

double CompiledTrainStep::trial_step_ms(graph::Executable& exe, const std::vector<Tensor>& batch) {
  const double t0 = process_cpu_ms();
  if (loss_scale_) {
    exe.run_until_updates(batch);
    exe.run_updates();
  } else {
    exe.run(batch);
  }
  return process_cpu_ms() - t0;
}

CompiledTrainStep::TracedStep CompiledTrainStep::faster_than_fp32(TracedStep mixed,
                                                                  const nn::Tensors& inputs,
                                                                  const Tensor& labels) {
  amp_raced_ = true;
  const std::vector<amp::PlacementDecision> mixed_placement = placement_;
  amp::AmpConfig fp32 = amp_;
  fp32.level = amp::AmpLevel::O0;
  TracedStep plain = trace_and_compile(inputs, labels, false, fp32);
  const std::vector<Tensor> batch = graph_batch(inputs, labels);
  // The trial steps write parameters, optimizer state and BatchNorm statistics: keep a copy and
  // put it back, so training starts from where it was.
  std::vector<std::pair<Tensor, Tensor>> saved;
  for (const auto& [name, t] : net_.state_and_names()) saved.emplace_back(t, t.clone());
  for (const auto& [name, t] : opt_.state_and_names()) saved.emplace_back(t, t.clone());
  double mixed_ms = 1e300, plain_ms = 1e300;
  trial_step_ms(*mixed.exe, batch);  // first runs fault the arena in
  trial_step_ms(*plain.exe, batch);
  for (int i = 0; i < 3; ++i) {  // alternating, so both see the same machine load
    mixed_ms = std::min(mixed_ms, trial_step_ms(*mixed.exe, batch));
    plain_ms = std::min(plain_ms, trial_step_ms(*plain.exe, batch));
  }
  for (auto& [t, copy] : saved) t.copy_from(copy);
  amp_fell_back_ = plain_ms < mixed_ms;
  if (StepTraceSink* sink = step_trace_sink()) sink->amp_race(mixed_ms, plain_ms);
  if (verbose_) {
    std::fprintf(stderr,
                 "kiln amp placement: the step with bf16 where it pays takes %.2f CPU ms, in "
                 "fp32 %.2f: training %s\n",
                 mixed_ms, plain_ms,
                 amp_fell_back_ ? "in fp32 (amp_strict keeps MindSpore's placement)"
                                : "with the bf16 placement");
  }
  if (amp_fell_back_) {
    placement_.clear();
    return plain;
  }
  placement_ = mixed_placement;
  return mixed;
}

graph::Executable& CompiledTrainStep::compile(const nn::Tensors& inputs, const Tensor& labels,
                                              bool evaluation) {
  TracedStep traced = trace_and_compile(inputs, labels, evaluation, effective_amp());
  bool any_bf16 = false;
  for (const amp::PlacementDecision& d : placement_) any_bf16 = any_bf16 || d.chosen != DType::f32;
  // Data parallel ranks must compile the same step, which separate races could not promise.
  if (!evaluation && !amp_raced_ && any_bf16 && !parallel::data_parallel_active() &&
      !parallel::semi_auto_active()) {
    traced = faster_than_fp32(std::move(traced), inputs, labels);
  }
  const int slices = traced.slices;
  std::unique_ptr<graph::Executable> exe = std::move(traced.exe);
  // Threads are chosen after the precision: the candidates time the graph that will train.
  std::string strategy_log;
  std::unique_ptr<BatchSplitStep> split;
  ThreadStrategy strategy = ThreadStrategy::per_kernel;
  std::unique_ptr<ThreadTrial> trial;
  if (!evaluation) {
    split = choose_thread_strategy(exe, std::move(traced.one_thread_graph), traced.options,
                                   traced.batch_split_refusal, inputs, labels, strategy_log,
                                   strategy, trial);
  }
  if (verbose_) {
    const char* what = evaluation       ? "compiled the evaluation forward"
                       : compiles_ == 0 ? "compiled the training step"
                                        : "input shapes changed, recompiled";
    const std::string slices_str =
        slices > 1 ? " in " + std::to_string(slices) + " micro-batches" : std::string();
    if (parallel::semi_auto_active() && comm::rank() == 0) {
      std::fprintf(stderr, "%s", parallel_plan_.c_str());
    }
    std::fprintf(
        stderr, "kiln graph mode: %s%s%s for inputs %s: %s%s\n", what, slices_str.c_str(),
        loss_scale_ && !evaluation ? " (loss scaled, updates after the overflow check)" : "",
        describe_batch(inputs, labels).c_str(), exe->report().str().c_str(), strategy_log.c_str());
    for (const std::string& line : amp::describe_decisions(placement_)) {
      std::fprintf(stderr, "kiln amp placement: %s\n", line.c_str());
    }
  }
  ++(evaluation ? eval_compiles_ : compiles_);
  if (compiled_.size() >= kMaxGraphs) {
    for (Current* c : {&current_, &current_eval_}) {
      if (c->exe == compiled_.front().exe.get()) *c = Current{};
    }
    compiled_.erase(compiled_.begin());
  }
  compiled_.push_back(
      {net_.training(), evaluation, std::move(exe), std::move(split), strategy, std::move(trial)});
  return *compiled_.back().exe;
}

std::unique_ptr<BatchSplitStep> CompiledTrainStep::choose_thread_strategy(
    std::unique_ptr<graph::Executable>& whole, graph::Graph one_thread_graph,
    const graph::CompileOptions& options, const std::string& refusal, const nn::Tensors& inputs,
    const Tensor& labels, std::string& log, ThreadStrategy& chosen,
    std::unique_ptr<ThreadTrial>& trial) {
  chosen = ThreadStrategy::per_kernel;
  const int threads = num_threads();
  if (threads < 2) return nullptr;
  const std::string no_split = refusal.empty() ? "" : " (no batch split: " + refusal + ")";
  if (forced_ == ThreadStrategy::one_thread) {
    graph::CompileOptions one_options = options;
    one_options.kernel_threads = 1;
    whole = std::make_unique<graph::Executable>(std::move(one_thread_graph), one_options);
    log = "; threads: one thread (as set)";
    chosen = ThreadStrategy::one_thread;
    return nullptr;
  }
  if (forced_ == ThreadStrategy::per_kernel || (forced_ && !refusal.empty())) {
    log = "; threads: per kernel" + (no_split.empty() ? std::string(" (as set)") : no_split);
    return nullptr;
  }
  auto make_split = [&]() -> std::unique_ptr<BatchSplitStep> {
    if (!refusal.empty()) return nullptr;
    return std::make_unique<BatchSplitStep>(net_, loss_, opt_, options_, effective_amp(), inputs,
                                            labels, threads);
  };
  // "batch split into 2 slices of 32", and where BatchNorms meet across the slices, how many.
  auto describe_split = [&](const BatchSplitStep* split) {
    std::string d = "batch split into " + std::to_string(threads) + " slices of " +
                    std::to_string(inputs[0].dim(0) / threads);
    if (split != nullptr && split->shared_statistics() > 0) {
      d += ", " + std::to_string(split->shared_statistics()) +
           " BatchNorms combining the slices' statistics";
    }
    return d;
  };
  if (forced_ == ThreadStrategy::batch_split) {
    std::unique_ptr<BatchSplitStep> split = make_split();
    log = "; threads: " + describe_split(split.get()) + " (as set)";
    chosen = ThreadStrategy::batch_split;
    return split;
  }
  // Ranks would time their candidates differently and so run different numbers of trial steps,
  // each with collectives every rank must join: under MPI the choice must not be measured.
  if (parallel::data_parallel_active() || parallel::semi_auto_active()) {
    log = "; threads: per kernel (not measured: every rank must choose alike)";
    return nullptr;
  }
  // Timing the split keeps its slices' arenas (about the whole batch's again) beside the whole
  // batch's, and both stay if it wins: not where that would take over a quarter of the memory
  // still available (a ResNet-50 at 224² on a small machine).
  const std::string too_big =
      split_exceeds_memory(whole->report().arena_bytes, available_memory_bytes());
  std::unique_ptr<BatchSplitStep> split = too_big.empty() ? make_split() : nullptr;
  const std::string split_str = describe_split(split.get());
  graph::CompileOptions one_options = options;
  one_options.kernel_threads = 1;
  auto one = std::make_unique<graph::Executable>(std::move(one_thread_graph), one_options);
  // The candidates run real steps on this batch, in turn, and the state they change
  // (parameters, optimizer state) is put back afterwards: the measurement trains nothing.
  ops::NoGradGuard no_grad;
  std::vector<std::pair<Tensor, Tensor>> saved;
  for (auto& [name, t] : traced_step_state(net_, opt_)) saved.emplace_back(t, t.clone());
  opt_.prepare_step();
  const std::vector<Tensor> batch = graph_batch(inputs, labels);
  struct Candidate {
    ThreadStrategy strategy;
    std::function<void()> step;
    std::vector<double> seconds;
  };
  std::vector<Candidate> candidates;
  candidates.push_back({ThreadStrategy::per_kernel, [&] { whole->run(batch); }, {}});
  candidates.push_back({ThreadStrategy::one_thread, [&] { one->run(batch); }, {}});
  if (split) {
    candidates.push_back({ThreadStrategy::batch_split, [&] { split->run(inputs, labels); }, {}});
  }
  auto seconds = [](const std::function<void()>& step) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // The first run of each faults its arena in and builds its primitives; the second says what a
  // round of steady steps costs. About 0.2 s of rounds follow: at LeNet's 2-3 ms steps the
  // candidates are 5-15% apart, within what a few samples of a shared machine spread.
  for (Candidate& c : candidates) seconds(c.step);
  double round = 0;
  for (Candidate& c : candidates) {
    c.seconds.push_back(seconds(c.step));
    round += c.seconds.back();
  }
  const int repeats = std::clamp(int(0.2 / std::max(round, 1e-6)), 2, 30);
  for (int r = 0; r < repeats; ++r) {
    for (size_t k = 0; k < candidates.size(); ++k) {
      // Each round in another order, so no candidate always runs first.
      Candidate& c = candidates[(k + size_t(r)) % candidates.size()];
      c.seconds.push_back(seconds(c.step));
    }
  }
  for (auto& [t, copy] : saved) t.copy_from(copy);
  auto median_ms = [](const std::vector<double>& seconds) { return median(seconds) * 1e3; };
  auto score = [&](const Candidate& c) {
    return median_ms(c.seconds) * thread_strategy_handicap(c.strategy);
  };
  const Candidate* best = &candidates[0];
  for (const Candidate& c : candidates) {
    if (score(c) < score(*best)) best = &c;
  }
  chosen = best->strategy;
  // Within 15% of the best, this measurement cannot rank them for training (step_trial.h): at
  // LeNet's 2 ms steps it has put the batch split 8% behind per kernel and 20% ahead on one
  // machine within the hour. Those go on to a trial on training steps, the best here first.
  std::vector<const Candidate*> close{best};
  for (const Candidate& c : candidates) {
    if (&c != best && (trial_clock_ || score(c) <= score(*best) * 1.15)) close.push_back(&c);
  }
  log = "; threads: " + strategy_name(chosen, split_str) + " (measured ms/step:";
  for (const Candidate& c : candidates) {
    char ms[48];
    std::snprintf(ms, sizeof(ms), " %.3f", median_ms(c.seconds));
    log += " " + strategy_name(c.strategy, "batch split") + ms;
  }
  log += ")" + no_split + (too_big.empty() ? "" : " (no batch split: " + too_big + ")");
  if (close.size() > 1) {
    std::vector<double> handicaps;
    std::vector<ThreadStrategy> strategies;
    for (const Candidate* c : close) {
      handicaps.push_back(thread_strategy_handicap(c->strategy));
      strategies.push_back(c->strategy);
    }
    trial = std::make_unique<ThreadTrial>(
        ThreadTrial{StepTrial(std::move(handicaps), median_ms(best->seconds) * 1e-3),
                    std::move(strategies), nullptr, ThreadStrategy::one_thread, split_str});
    log += "; tried on training steps next:";
    for (ThreadStrategy s : trial->strategies) log += " " + strategy_name(s, "batch split") + ",";
    log.pop_back();
  }
  auto in_trial = [&](ThreadStrategy s) {
    return trial && std::find(trial->strategies.begin(), trial->strategies.end(), s) !=
                        trial->strategies.end();
  };
  if (chosen == ThreadStrategy::one_thread) {
    std::swap(whole, one);
    if (in_trial(ThreadStrategy::per_kernel)) {
      trial->extra = std::move(one);
      trial->extra_strategy = ThreadStrategy::per_kernel;
    }
  } else if (in_trial(ThreadStrategy::one_thread)) {
    trial->extra = std::move(one);
  }
  if (chosen != ThreadStrategy::batch_split && !in_trial(ThreadStrategy::batch_split)) {
    split.reset();
  }
  return split;
}

CompiledTrainStep::Compiled& CompiledTrainStep::compiled_entry(const ThreadTrial& trial) {
  for (Compiled& c : compiled_) {
    if (c.trial.get() == &trial) return c;
  }
  throw Error("CompiledTrainStep: a thread trial outlived its graph");
}

ThreadStrategy CompiledTrainStep::next_trial_strategy() {
  ThreadTrial& t = *current_.trial;
  const int k = t.trial.next(trial_clock_ ? trial_clock_() : StepTrial::Clock::now());
  current_.strategy = t.strategies[size_t(k)];
  if (!t.trial.decided()) return current_.strategy;
  // Decided: the winner's graphs replace the trial's.
  Compiled& c = compiled_entry(t);
  const ThreadStrategy winner = current_.strategy;
  if (t.extra && winner == t.extra_strategy) c.exe = std::move(t.extra);
  if (winner != ThreadStrategy::batch_split) c.split.reset();
  c.strategy = winner;
  if (verbose_) {
    std::string line = "kiln graph mode: threads: " + strategy_name(winner, t.split_description) +
                       ", timed on " + std::to_string(t.trial.counted_steps()) + " training steps" +
                       (t.trial.decided_early() ? ", a clear lead" : "") + " (median ms/step:";
    const std::vector<double> ms = t.trial.median_ms();
    for (size_t i = 0; i < ms.size(); ++i) {
      char v[32];
      std::snprintf(v, sizeof(v), " %.3f", ms[i]);
      line += " " + strategy_name(t.strategies[i], "batch split") + v;
    }
    std::fprintf(stderr, "%s)\n", line.c_str());
  }
  current_.exe = c.exe.get();
  current_.split = c.split.get();
  current_.trial = nullptr;
  c.trial.reset();
  return winner;
}

ThreadStrategy CompiledTrainStep::thread_strategy() const {
  if (!current_.exe) throw Error("CompiledTrainStep: no step has run yet");
  return current_.strategy;
}

Tensor CompiledTrainStep::run(const nn::Tensors& inputs, const Tensor& labels) {
  const std::vector<Tensor> batch = graph_batch(inputs, labels);
  graph::Executable* whole = &select(batch, false);
  BatchSplitStep* split = current_.split;
  if (current_.trial) {
    ThreadTrial& trial = *current_.trial;
    const ThreadStrategy strategy = next_trial_strategy();
    if (current_.trial) {
      split = strategy == ThreadStrategy::batch_split ? compiled_entry(trial).split.get() : nullptr;
      if (trial.extra && strategy == trial.extra_strategy) whole = trial.extra.get();
    } else {
      whole = current_.exe;
      split = current_.split;
    }
  }
  graph::Executable& exe = *whole;
  opt_.prepare_step();
  if (split) {
    Tensor loss = split->run(inputs, labels);
    opt_.advance();
    return loss;
  }
  if (!loss_scale_) {
    std::vector<Tensor> out = exe.run(batch);
    opt_.advance();
    return out[0];
  }
  const double scale = loss_scale_->scale();
  // As eager: the seed is the scale rounded to f32, the unscaling multiplies by float(1/scale).
  *scale_.data<float>() = float(scale);
  *inverse_scale_.data<float>() = float(1.0 / scale);
  std::vector<Tensor> out = exe.run_until_updates(batch);
  const bool overflow = !std::isfinite(*out[1].data<float>());
  last_skipped_ = !loss_scale_->update(overflow);
  if (!last_skipped_) exe.run_updates();
  opt_.advance();
  return out[0];
}

std::pair<Tensor, Tensor> CompiledTrainStep::evaluate(const nn::Tensors& inputs,
                                                      const Tensor& labels) {
  const std::vector<Tensor> batch = graph_batch(inputs, labels);
  std::vector<Tensor> out = select(batch, true).run(batch);
  return {out[0], out[1]};
}

graph::Executable& CompiledTrainStep::select(const std::vector<Tensor>& batch, bool evaluation) {
  Current& current = evaluation ? current_eval_ : current_;
  if (current.exe && current.exe->accepts(batch) && current.training == net_.training()) {
    return *current.exe;
  }
  current = Current{};
  for (auto& c : compiled_) {
    if (c.evaluation == evaluation && c.training == net_.training() && c.exe->accepts(batch)) {
      current.exe = c.exe.get();
      current.split = c.trial ? nullptr : c.split.get();
      current.strategy = c.strategy;
      current.trial = c.trial.get();
    }
  }
  if (!current.exe) {
    compile({batch.begin(), batch.end() - 1}, batch.back(), evaluation);
    const Compiled& c = compiled_.back();
    current.exe = c.exe.get();
    current.split = c.trial ? nullptr : c.split.get();
    current.strategy = c.strategy;
    current.trial = c.trial.get();
  }
  current.training = net_.training();
  return *current.exe;
}

std::pair<Tensor, Tensor> CompiledTrainStep::trace_slice(const nn::Tensors& xs, const Tensor& y,
                                                         int i, int slices) {
  const int64_t size = slices == 1 ? 0 : y.dim(0) / slices;
  auto slice = [&](const Tensor& t) {
    return slices == 1 ? t : ops::slice(t, 0, i * size, (i + 1) * size);
  };
  nn::Tensors xis;
  for (const Tensor& x : xs) xis.push_back(slice(x));
  const Tensor yi = slice(y);
  Tensor logits, loss;
  {
    amp::AutocastScope autocast(tracing_amp_);
    logits = net_.first_output(xis);
    loss = loss_(logits, yi);
    placement_.insert(placement_.end(), autocast.decisions().begin(), autocast.decisions().end());
  }
  if (!loss.is_traced()) {
    throw Error("graph mode: the loss does not depend on the input batch");
  }
  if (loss.numel() != 1) {
    throw Error("graph mode: the loss is " + describe(loss) +
                ", not a scalar (use a loss with reduction \"mean\" or \"sum\")");
  }
  if (slices > 1 && loss_.batch_reduction() == nn::Reduction::mean) {
    loss = ops::mul_scalar(loss, 1.0 / slices);
  }
  return {logits, loss};
}

int CompiledTrainStep::micro_batches_for(const Tensor& images) const {
  const int k = options_.micro_batches;
  if (k <= 1) return 1;
  const std::optional<nn::Reduction> reduction = loss_.batch_reduction();
  if (reduction != nn::Reduction::mean && reduction != nn::Reduction::sum) {
    throw Error("graph mode: micro_batches = " + std::to_string(k) +
                " needs a loss that is the mean or the sum over the batch's samples, and this "
                "loss cell does not say it is (LossCell::batch_reduction)");
  }
  const int64_t n = images.rank() > 0 ? images.dim(0) : 0;
  if (n < k || n % k != 0) {
    if (verbose_) {
      std::fprintf(stderr,
                   "kiln graph mode: a batch of %lld does not split into %d equal micro-batches; "
                   "it runs whole\n",
                   static_cast<long long>(n), k);
    }
    return 1;
  }
  return k;
}

std::pair<Tensor, std::vector<Tensor>> CompiledTrainStep::trace_loss_and_gradients(
    graph::Tracer& tracer, const nn::Tensors& xs, const Tensor& y, int slices) {
  const std::vector<Tensor> params = opt_.parameters();
  Tensor total;
  std::vector<Tensor> grads;
  // Slice by slice, each one's backward traced right after its forward: the schedule follows
  // the trace, so a slice's activations die before the next slice's forward makes its own.
  for (int i = 0; i < slices; ++i) {
    const Tensor loss = trace_slice(xs, y, i, slices).second;
    Tensor seed;
    if (loss_scale_) {
      // The backward starts from the scale, cast to the loss's dtype as eager seeds it.
      seed = scale_;
      if (seed.dtype() != loss.dtype()) seed = ops::cast(seed, loss.dtype());
      if (seed.shape() != loss.shape()) seed = ops::reshape(seed, loss.shape());
    }
    std::vector<Tensor> slice_grads = graph::gradients(tracer, loss, params, seed);
    if (i == 0) {
      total = loss;
      grads = std::move(slice_grads);
      continue;
    }
    total = ops::add(total, loss);
    for (size_t j = 0; j < grads.size(); ++j) grads[j] = ops::add(grads[j], slice_grads[j]);
  }
  if (slices > 1) check_samples_independent(tracer.graph(), slices);
  return {total, grads};
}

void CompiledTrainStep::check_samples_independent(const graph::Graph& g, int slices) {
  for (size_t n = 0; n < g.num_nodes(); ++n) {
    const graph::Node& node = g.node(graph::NodeId(n));
    if (node.op == ops::OpKind::batch_norm && node.attrs.as<ops::BatchNormAttrs>().training) {
      throw Error("graph mode: micro_batches = " + std::to_string(slices) +
                  " would change what BatchNorm computes in training (statistics of each "
                  "slice, not of the batch); this network needs micro_batches = 1");
    }
  }
}

void CompiledTrainStep::trace_scaled_update(graph::Tracer& tracer, const Tensor& loss,
                                            const std::vector<Tensor>& grads) {
  // The overflow flag: x*0 is 0 for every finite x and NaN for inf or NaN, so the sum is NaN
  // exactly when some scaled gradient element is not finite (what amp::has_overflow checks).
  // Each term is one read of a gradient (a fused reduction with fusion on).
  Tensor flag;
  for (const Tensor& g : grads) {
    Tensor term = ops::sum(ops::mul_scalar(g, 0.0));
    flag = flag.defined() ? ops::add(flag, term) : term;
  }
  std::vector<Tensor> unscaled;
  for (const Tensor& g : grads) unscaled.push_back(ops::mul(g, inverse_scale_));
  opt_.apply(unscaled);
  tracer.add_output(loss);
  tracer.add_output(flag);
}

const graph::CompileReport& CompiledTrainStep::report() const {
  return executable().report();
}

const graph::Executable& CompiledTrainStep::executable() const {
  if (!current_.exe) throw Error("CompiledTrainStep: no step has run yet");
  return *current_.exe;
}

}  // namespace kiln::train
