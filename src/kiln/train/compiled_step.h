#pragma once
// Graph mode's training step: traces net + loss on symbolic inputs, differentiates the graph
// with the eager tape's own gradient rules, appends the optimizer's fused updates, compiles the
// whole step once and then runs it per batch. Parameters, BatchNorm statistics and optimizer
// state are bound by reference, so eager code (eval, checkpoints) sees what graph steps did.
//
//   CompiledTrainStep step(net, loss, opt, options_from_context());
//   for (auto& [x, y] : batches) float l = step.run(x, y).item<float>();
//
// A batch of another shape (the last, partial one) compiles a second graph, once (logged on
// stderr); both share one arena.
//
// With a loss-scale manager (fp16) the backward is seeded with the scale and the gradients are
// unscaled in-graph; an overflowed step must leave weights and optimizer state untouched, so
// the graph is compiled with every update after all other work (not interleaved with backward)
// and an in-graph overflow flag decides, on the host, whether the updates run at all. The scale
// and its inverse live in state scalars written before each step: a changing dynamic scale
// never recompiles.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/amp/level.h"
#include "kiln/amp/loss_scale.h"
#include "kiln/amp/placement.h"
#include "kiln/graph/executor.h"
#include "kiln/graph/tracer.h"
#include "kiln/nn/cell.h"
#include "kiln/optim/optimizer.h"
#include "kiln/parallel/auto_parallel.h"
#include "kiln/train/step_trial.h"

namespace kiln::train {

// Fusion from Context::enable_graph_kernel, dumps to Context::save_graphs_path; the traced graph
// kept while a profiler runs (step_trace.h).
graph::CompileOptions options_from_context();

// What a compiled step binds by reference: the network's parameters and buffers, the optimizer's
// state and its per-step scalars (rewritten on the host each step, so never folded).
std::vector<nn::NamedTensor> traced_step_state(nn::Cell& net, optim::Optimizer& opt);

// The traced network inputs of a step, one per meta: "images" for a network of one input,
// "input0", "input1", ... for one of several (the names graph dumps show).
nn::Tensors trace_network_inputs(graph::Tracer& tracer, const std::vector<ops::TensorMeta>& metas);

// "f32[8, 12], f32[8, 4], i32[8]": a batch's network inputs, then its labels, for logs and errors.
std::string describe_batch(const nn::Tensors& inputs, const Tensor& labels);

class BatchSplitStep;

// How a compiled training step uses the process's threads (core/kernel_threads.h).
enum class ThreadStrategy {
  per_kernel,   // the whole batch; each kernel on the threads its work pays for
  batch_split,  // slices of the batch side by side, each kernel on one thread (batch_split_step.h)
  one_thread,   // the whole batch, every kernel on the calling thread: measured fastest (a busy
                // machine, where every fork/join waits for a time slice)
};

// KILN_THREAD_STRATEGY=per_kernel|batch_split|one_thread fixes the strategy instead of measuring
// it (the same bits run to run, docs/numerics.md; per_kernel also keeps eager mode's batch
// whole); unset or "measure": none. Throws Error naming the variable for any other value.
std::optional<ThreadStrategy> thread_strategy_from_environment();

// Why a batch split is not tried beside a whole-batch step whose arena is `arena_bytes`, with
// `available_bytes` of memory left (available_memory_bytes(); < 0: unknown): its slices' arenas
// add about as much again, and it is not tried where that is over a quarter of what is left.
// Empty when it may be.
std::string split_exceeds_memory(int64_t arena_bytes, int64_t available_bytes);

class CompiledTrainStep {
 public:
  // With amp at O1..O3 the forward pass and loss are traced under amp::AutocastScope, so the
  // casts become graph nodes that the passes (and fusion) see like any other op. `loss_scale`
  // (not owned; null: none) scales the loss and skips overflowed steps as eager Model does; the
  // manager's scale and skipped_steps() follow the compiled steps.
  CompiledTrainStep(nn::Cell& net, nn::LossCell& loss, optim::Optimizer& opt,
                    graph::CompileOptions options = options_from_context(), amp::AmpConfig amp = {},
                    amp::LossScaleManager* loss_scale = nullptr);
  ~CompiledTrainStep();

  // One step (forward, loss, backward, update) on a batch; returns the scalar loss (unscaled).
  // Calls the optimizer's prepare_step() before and advance() after, as Optimizer::step() does
  // (also for a step skipped by loss scaling, as eager does). A network of several inputs
  // (nn::Cell::construct_multi) takes them all; the loss sees its first output.
  Tensor run(const nn::Tensors& inputs, const Tensor& labels);
  Tensor run(const Tensor& images, const Tensor& labels) {
    return run(nn::Tensors{images}, labels);
  }
  // Forward and loss only, for evaluation: the network in its current mode (eval, under
  // Model::eval), no gradients or updates. Compiled once per input shape into the training step's
  // arena, so evaluating in graph mode adds no memory of its own. Returns {logits, loss}, the
  // logits being the network's first output. With micro-batches the forward runs slice by slice
  // as well, so its arena stays the step's size.
  std::pair<Tensor, Tensor> evaluate(const nn::Tensors& inputs, const Tensor& labels);
  std::pair<Tensor, Tensor> evaluate(const Tensor& images, const Tensor& labels) {
    return evaluate(nn::Tensors{images}, labels);
  }

  // Whether the last run's update was skipped because its scaled gradients overflowed.
  bool last_step_skipped() const { return last_skipped_; }

  // The report of the graph the last run used (compile time, plan peak, fusion counts).
  const graph::CompileReport& report() const;
  // How many graphs were compiled so far (1 + recompiles for new input shapes).
  int compiles() const { return compiles_; }
  // How many evaluation forwards were compiled so far (one per input shape).
  int evaluation_compiles() const { return eval_compiles_; }
  // The graph the last run used, after its passes.
  const graph::Executable& executable() const;

  // Where the last compiled graph runs each op autocast weighed (amp/placement.h), in trace
  // order; empty at O0, O3 and with AmpConfig::strict.
  const std::vector<amp::PlacementDecision>& placement() const { return placement_; }
  // Whether the first training graph with bf16 in it lost to the same step in fp32 on this CPU,
  // so that every graph since is compiled in fp32 (never with AmpConfig::strict).
  bool amp_fell_back_to_fp32() const { return amp_fell_back_; }
  // SEMI_AUTO_PARALLEL: the plan of the last compiled graph (ShardingPlan::str, as this rank
  // runs it), printed in the compile log on rank 0; empty in other modes.
  const std::string& parallel_plan() const { return parallel_plan_; }
  // AUTO_PARALLEL: the last compiled training step's predicted time and memory per rank.
  const std::optional<parallel::StepPrediction>& predicted_step() const { return predicted_; }

  // Silences the one-line compile messages on stderr (tests, benchmarks).
  void set_verbose(bool on) { verbose_ = on; }

  // How the last training step ran, and why (the compile log says it too).
  ThreadStrategy thread_strategy() const;
  // Forces a strategy instead of measuring both when a step compiles (tests, benchmarks);
  // batch_split still falls back where the step cannot split. Unset: measured.
  void force_thread_strategy(std::optional<ThreadStrategy> strategy) { forced_ = strategy; }
  // Tests: every candidate goes on to the trial on training steps (not only those the
  // compile-time measurement could not tell apart), and the trial reads its times from `clock`.
  void try_every_strategy_on_training_steps(std::function<StepTrial::Clock::time_point()> clock) {
    trial_clock_ = std::move(clock);
  }
  // Whether the strategy of the graph the last training step ran is still being tried.
  bool thread_trial_running() const { return current_.trial != nullptr; }
  // The batch-split step the last training step ran; null when it ran the whole batch.
  const BatchSplitStep* batch_split_step() const { return current_.split; }

 private:
  graph::Executable& compile(const nn::Tensors& inputs, const Tensor& labels, bool evaluation);
  // One traced and compiled step, with what choosing its threads needs.
  struct TracedStep {
    std::unique_ptr<graph::Executable> exe;
    int slices = 1;  // micro-batches
    graph::CompileOptions options;
    std::string batch_split_refusal;  // why it cannot run as batch slices; "" when it can
    graph::Graph one_thread_graph;    // the same graph, when a one-thread candidate is timed
  };
  // Traces one step (or evaluation forward) under `amp` and compiles it; sets placement_.
  TracedStep trace_and_compile(const nn::Tensors& inputs, const Tensor& labels, bool evaluation,
                               const amp::AmpConfig& amp);
  // The AMP configuration steps compile with: O0 once the race below found fp32 faster.
  amp::AmpConfig effective_amp() const {
    amp::AmpConfig amp = amp_;
    if (amp_fell_back_) amp.level = amp::AmpLevel::O0;
    return amp;
  }
  // Mixed precision that weighs costs: the first training graph with bf16 in it races the same
  // step compiled in fp32 (a few steps each, on this batch, the state restored after) and the
  // faster one is kept, so O1/O2 are never slower than O0 (what the per-op costs cannot see:
  // fusions that only fp32 gets). Returns the graph to keep.
  TracedStep faster_than_fp32(TracedStep mixed, const nn::Tensors& inputs, const Tensor& labels);
  // One step of `exe` on the graph inputs `batch` (the network's inputs, then the labels) in
  // milliseconds of the process's CPU time; its effects stay (the caller restores the state).
  double trial_step_ms(graph::Executable& exe, const std::vector<Tensor>& batch);
  // The compiled graph of this kind for the graph inputs `batch` (the network's inputs, then the
  // labels) and the network's mode, compiling it once.
  graph::Executable& select(const std::vector<Tensor>& batch, bool evaluation);
  // Slice i of `slices` equal slices of the traced batch through the network and the loss, under
  // the step's autocast: {logits, scalar loss}, the loss weighted so that the slices' losses add
  // up to the batch's.
  std::pair<Tensor, Tensor> trace_slice(const nn::Tensors& xs, const Tensor& y, int i, int slices);
  // CompileOptions::micro_batches for this batch: 1 where it does not split evenly.
  int micro_batches_for(const Tensor& images) const;
  // The batch's loss and the parameters' gradients (seeded with the loss scale, if any), traced
  // as `slices` micro-batches.
  std::pair<Tensor, std::vector<Tensor>> trace_loss_and_gradients(graph::Tracer& tracer,
                                                                  const nn::Tensors& xs,
                                                                  const Tensor& y, int slices);
  // Throws if some op of the trace mixes the samples of the batch (BatchNorm in training).
  static void check_samples_independent(const graph::Graph& g, int slices);
  // Loss scaling: the overflow flag, the unscaled gradients' updates, and the outputs.
  void trace_scaled_update(graph::Tracer& tracer, const Tensor& loss,
                           const std::vector<Tensor>& grads);

  struct ThreadTrial;  // below, with the compiled graphs
  struct Compiled;
  // A training step's strategy for these inputs, measured: `whole` (per kernel), the same graph
  // on one thread (compiled from `one_thread_graph`, replacing `whole` when it wins) and, where
  // `refusal` is empty, the batch-split step (returned when it wins). All run real steps on this
  // batch and the state they change is restored after. `log` gets a line for the compile log.
  // Candidates the measurement cannot tell apart (within 15%) go on to a trial on training steps
  // (step_trial.h), returned in `trial`; `chosen` is then the one the trial starts with.
  std::unique_ptr<BatchSplitStep> choose_thread_strategy(
      std::unique_ptr<graph::Executable>& whole, graph::Graph one_thread_graph,
      const graph::CompileOptions& options, const std::string& refusal, const nn::Tensors& inputs,
      const Tensor& labels, std::string& log, ThreadStrategy& chosen,
      std::unique_ptr<ThreadTrial>& trial);
  // The strategy this training step runs with while current_'s trial lasts; when the trial
  // decides, only the winner's graphs are kept and the choice is logged.
  ThreadStrategy next_trial_strategy();
  Compiled& compiled_entry(const ThreadTrial& trial);  // the graph `trial` chooses threads for

  nn::Cell& net_;
  nn::LossCell& loss_;
  optim::Optimizer& opt_;
  graph::CompileOptions options_;
  amp::AmpConfig amp_;
  std::vector<amp::PlacementDecision> placement_;  // of the graph being (or last) compiled
  amp::AmpConfig tracing_amp_;                     // the config of the trace under way
  bool amp_raced_ = false;                         // the race of faster_than_fp32 was run
  bool amp_fell_back_ = false;  // ... and fp32 won: graphs are traced at O0 since
  // Thread strategies still being tried on training steps, with the graphs only they run.
  struct ThreadTrial {
    StepTrial trial;
    std::vector<ThreadStrategy> strategies;  // trial candidate k runs strategies[k]
    // When per kernel and one thread are both candidates: the whole-batch graph that
    // Compiled::exe is not, and which of the two it is.
    std::unique_ptr<graph::Executable> extra;
    ThreadStrategy extra_strategy = ThreadStrategy::one_thread;
    std::string split_description;  // "batch split into 2 slices of 32"
  };
  struct Compiled {
    bool training;    // the network's mode when traced (BatchNorm, dropout behave differently)
    bool evaluation;  // forward and loss only (evaluate), not a training step
    std::unique_ptr<graph::Executable> exe;
    std::unique_ptr<BatchSplitStep> split;  // training steps the batch-split strategy runs
    ThreadStrategy strategy = ThreadStrategy::per_kernel;
    std::unique_ptr<ThreadTrial> trial;  // while the strategy is tried on training steps
  };
  std::vector<Compiled> compiled_;  // one per input shape (and mode) seen
  // The graph each kind (training step, evaluation) last ran, and the network's mode then.
  struct Current {
    graph::Executable* exe = nullptr;
    BatchSplitStep* split = nullptr;  // runs the step instead of exe when set
    ThreadStrategy strategy = ThreadStrategy::per_kernel;
    ThreadTrial* trial = nullptr;  // set: each step's strategy comes from the trial
    bool training = false;
  };
  Current current_, current_eval_;
  int compiles_ = 0;       // training graphs
  int eval_compiles_ = 0;  // evaluation graphs
  bool verbose_ = true;
  amp::LossScaleManager* loss_scale_;
  Tensor scale_, inverse_scale_;  // f32 scalars rewritten before each loss-scaled step
  std::string parallel_plan_;
  std::optional<parallel::StepPrediction> predicted_;
  bool last_skipped_ = false;
  std::optional<ThreadStrategy> forced_;
  std::function<StepTrial::Clock::time_point()> trial_clock_;  // tests; unset: the steady clock
};

}  // namespace kiln::train
