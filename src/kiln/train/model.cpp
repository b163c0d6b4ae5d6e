#include "kiln/train/model.h"

#include <algorithm>
#include <iostream>
#include <limits>
#include <optional>

#include "kiln/amp/autocast.h"
#include "kiln/autograd/tape.h"
#include "kiln/core/context.h"
#include "kiln/core/error.h"
#include "kiln/core/threads.h"
#include "kiln/ops/cpu_support.h"
#include "kiln/ops/functional.h"
#include "kiln/parallel/data_parallel.h"
#include "kiln/parallel/semi_auto.h"
#include "kiln/train/batch_split_step.h"
#include "kiln/train/compiled_step.h"
#include "kiln/train/step_trace.h"

namespace kiln::train {
namespace {

// `t` with zero rows appended along dimension 0 up to `rows`.
Tensor pad_rows(const Tensor& t, int64_t rows) {
  std::vector<int64_t> dims = t.shape().dims();
  dims[0] = rows - t.dim(0);
  return ops::concat({t, Tensor::zeros(Shape(dims), t.dtype())}, 0);
}

// Restores the network's train/eval mode on scope exit.
class TrainModeGuard {
 public:
  TrainModeGuard(nn::Cell& cell, bool mode) : cell_(cell), previous_(cell.training()) {
    cell_.set_train(mode);
  }
  ~TrainModeGuard() { cell_.set_train(previous_); }

 private:
  nn::Cell& cell_;
  bool previous_;
};

float scalar_loss(const Tensor& loss) {
  if (loss.numel() != 1) {
    throw ShapeError("Model: the loss is " + describe(loss) +
                     ", not a scalar (use reduction \"mean\" or \"sum\")");
  }
  if (loss.dtype() == DType::f32) return *static_cast<const float*>(loss.raw_data());
  return loss.to_vector<float>()[0];
}

// The iterator's next row, timed as the step's wait for data.
bool next_batch(data::TupleIterator& it, std::vector<Tensor>& row) {
  PhaseScope phase(StepPhase::data_wait);
  return it.next(row);
}

// The columns of a batch (the network's inputs, then the label) hold the same number of samples.
void check_same_samples(const std::vector<Tensor>& columns, const char* what) {
  const int64_t samples = columns[0].rank() > 0 ? columns[0].dim(0) : -1;
  for (size_t i = 1; i < columns.size(); ++i) {
    const int64_t n = columns[i].rank() > 0 ? columns[i].dim(0) : -1;
    if (n != samples) {
      throw ShapeError(std::string("Model.") + what + ": the batch's columns hold different " +
                       "numbers of samples: column 0 is " + describe(columns[0]) + ", column " +
                       std::to_string(i) + " is " + describe(columns[i]));
    }
  }
}

// A row's network inputs (every column but the last) and its label (the last), checked to be
// batches of the same number of samples.
struct Batch {
  nn::Tensors inputs;
  Tensor label;
};

Batch split_row(const std::vector<Tensor>& row, const char* what) {
  if (row.size() < 2) {
    throw Error(std::string("Model.") + what +
                ": each dataset row must be the network's inputs then the label, (data, label) "
                "at least; got " +
                std::to_string(row.size()) + " column(s)");
  }
  Batch batch{{row.begin(), row.end() - 1}, row.back()};
  check_same_samples(row, what);
  return batch;
}

int64_t batch_size_of(const nn::Tensors& inputs) {
  return inputs[0].rank() > 0 ? inputs[0].dim(0) : 1;
}

void check_inputs(const nn::Tensors& inputs, const char* what) {
  if (inputs.empty()) throw Error(std::string("Model.") + what + ": no network inputs given");
}

}  // namespace

Model::Model(std::shared_ptr<nn::Cell> network, std::shared_ptr<nn::LossCell> loss_fn,
             std::shared_ptr<optim::Optimizer> optimizer, ModelOptions options)
    : network_(std::move(network)),
      loss_fn_(std::move(loss_fn)),
      optimizer_(std::move(optimizer)),
      options_(std::move(options)) {
  if (!network_) throw Error("Model: network is null");
  autograd::install_tape();  // eager steps take their gradients from the tape
  amp_.level = amp::parse_level(options_.amp_level);
  amp_.low_dtype = amp::parse_low_dtype(options_.amp_dtype);
  if (amp_.level != amp::AmpLevel::O0 && !ops::arithmetic_available(amp_.low_dtype)) {
    // Autocast would send convolutions and matmuls to kernels this CPU does not have; float32
    // is what O2 would fall back to per op anyway where low precision does not pay.
    std::cerr << "kiln: amp_level " << options_.amp_level << " (" << options_.amp_dtype
              << "): this CPU has no " << options_.amp_dtype
              << " arithmetic (oneDNN runs bf16 from AVX-512 on); training in float32 (O0)\n";
    amp_.level = amp::AmpLevel::O0;
  }
  amp_.keep_batchnorm_fp32 = options_.keep_batchnorm_fp32;
  amp_.strict = options_.amp_strict;
  loss_scale_ = amp::make_loss_scale_manager(options_.loss_scale, amp_);
  for (const std::string& m : options_.metrics) metric_by_name(m);  // validate early
  if (optimizer_) {
    params_ = optimizer_->parameters();
    if (params_.empty()) {
      // A network whose layers were held as members but never registered trains nothing and
      // would "train" silently at a flat loss.
      throw Error("Model: the optimizer has no parameters to train (network '" +
                  network_->cell_name() + "' has " +
                  std::to_string(network_->trainable_params().size()) +
                  " trainable parameters); register each child cell with register_cell(name, "
                  "cell) and each weight with register_parameter, and pass "
                  "net->trainable_params() to the optimizer");
    }
    for (const Tensor& p : params_) {
      if (!p.requires_grad()) {
        throw Error("Model: an optimizer parameter " + describe(p) + " does not require grad");
      }
    }
  }
}

Model::~Model() = default;

void Model::join_data_parallel(const nn::Tensors& inputs) {
  if (joined_) return;
  joined_ = true;
  if (!parallel::data_parallel_active()) return;
  const bool graph = get_context().mode == GRAPH_MODE;
  std::string optimizer = optimizer_->name();
  for (const auto& [name, t] : optimizer_->state_and_names()) {
    optimizer += ";" + name + ":" + t.shape().str();
  }
  const int64_t batch = batch_size_of(inputs);
  const std::vector<nn::NamedTensor> state = network_->state_and_names();
  const int64_t structure = parallel::describe_hash(parallel::describe_parameters(state));
  parallel::check_agreement({
      {"model parameters (names, shapes, dtypes)", structure,
       detail::concat(state.size(), " tensors, hash ", structure % 100000)},
      {"optimizer", parallel::describe_hash(optimizer), optimizer_->name()},
      {"per-rank batch size", batch, std::to_string(batch)},
      {"execution mode", graph ? 1 : 0, graph ? "GRAPH_MODE" : "PYNATIVE_MODE"},
      {"amp level", parallel::describe_hash(options_.amp_level + options_.amp_dtype),
       options_.amp_level + " " + options_.amp_dtype},
  });
  parallel::broadcast_from_rank0(state);
  if (!graph) reducer_ = std::make_unique<parallel::GradientReducer>(params_);
}

int Model::eager_slices(const nn::Tensors& inputs, const Tensor& label) {
  const Tensor& data = inputs[0];
  std::vector<Shape> shapes;
  for (const Tensor& x : inputs) shapes.push_back(x.shape());
  const int threads = num_threads();
  if (eager_split_ && eager_split_->shapes == shapes &&
      eager_split_->training == network_->training() && eager_split_->threads == threads) {
    return eager_split_->slices;
  }
  std::string refusal;
  const std::optional<ThreadStrategy> forced = thread_strategy_from_environment();
  if (forced && forced != ThreadStrategy::batch_split) {
    refusal = "KILN_THREAD_STRATEGY is not batch_split";
  } else if (loss_scale_) {
    refusal = "loss scaling checks every gradient before any update";
  } else if (reducer_) {
    refusal = "data parallelism all-reduces the gradients as the backward makes them";
  } else {
    refusal = eager_batch_split_refusal(*network_, *loss_fn_, inputs, label, threads);
  }
  eager_split_ = EagerSplit{shapes, network_->training(), threads, refusal.empty() ? threads : 1};
  if (options_.compile_log && threads > 1) {
    std::cerr << "kiln eager mode: inputs " << describe(data) << "; threads: "
              << (refusal.empty() ? "batch split into " + std::to_string(threads) + " slices of " +
                                        std::to_string(data.dim(0) / threads)
                                  : "per kernel (no batch split: " + refusal + ")")
              << "\n";
  }
  return eager_split_->slices;
}

float Model::eager_step(const nn::Tensors& inputs, const Tensor& label) {
  if (parallel::semi_auto_active()) {
    throw Error(
        "Model.train: SEMI_AUTO_PARALLEL runs in graph mode; call set_context({.mode = "
        "GRAPH_MODE}) first");
  }
  join_data_parallel(inputs);
  optimizer_->prepare_step();
  if (const int slices = eager_slices(inputs, label); slices > 1) {
    std::pair<Tensor, std::vector<Tensor>> loss_and_grads;
    {
      PhaseScope phase(StepPhase::backward);  // forward and backward, side by side
      loss_and_grads = eager_split_loss_and_gradients(*network_, *loss_fn_, params_, amp_, inputs,
                                                      label, slices);
    }
    PhaseScope phase(StepPhase::update);
    optimizer_->apply(loss_and_grads.second);
    optimizer_->advance();
    return scalar_loss(loss_and_grads.first);
  }
  Tensor loss;
  {
    PhaseScope phase(StepPhase::forward);
    std::optional<amp::AutocastScope> autocast;
    if (amp_.level != amp::AmpLevel::O0) autocast.emplace(amp_);
    loss = loss_fn_->construct(network_->first_output(inputs), label);
    // Eager mode places every step anew (from timings measured once per shape); the first
    // step's choices are the ones every step with these shapes makes.
    if (autocast && !placement_logged_ && options_.compile_log) {
      for (const std::string& line : amp::describe_decisions(autocast->decisions())) {
        std::cerr << "kiln amp placement: " << line << "\n";
      }
      placement_logged_ = true;
    }
  }
  float value = scalar_loss(loss);
  // Data parallel: each gradient goes to its bucket as the backward makes it; finish() returns
  // them reduced over the ranks.
  auto gradients = [&](const Tensor& seed) {
    if (!reducer_) {
      PhaseScope phase(StepPhase::backward);
      return autograd::grad(loss, params_, seed);
    }
    {
      PhaseScope phase(StepPhase::backward);
      autograd::grad(loss, params_, seed, false,
                     [this](size_t i, const Tensor& g) { reducer_->ready(i, g); });
    }
    PhaseScope phase(StepPhase::communication);
    return reducer_->finish();
  };
  if (!loss_scale_) {
    std::vector<Tensor> grads = gradients(Tensor());
    PhaseScope phase(StepPhase::update);
    optimizer_->apply(grads);
    optimizer_->advance();
  } else {
    double scale = loss_scale_->scale();
    std::vector<Tensor> grads = gradients(Tensor::full(loss.shape(), scale, loss.dtype()));
    PhaseScope phase(StepPhase::update);
    if (loss_scale_->update(amp::has_overflow(grads))) {
      NoGradGuard no_grad;
      for (Tensor& g : grads) g = ops::mul_scalar(g, 1.0 / scale);
      optimizer_->apply(grads);
    }
    optimizer_->advance();
  }
  return value;
}

float Model::graph_step(const nn::Tensors& inputs, const Tensor& label) {
  join_data_parallel(inputs);
  if (!compiled_) {
    compiled_ = std::make_unique<CompiledTrainStep>(
        *network_, *loss_fn_, *optimizer_, options_from_context(), amp_, loss_scale_.get());
    // Data parallel: every rank compiles the same graph; rank 0 says so.
    if (!options_.compile_log ||
        ((parallel::data_parallel_active() || parallel::semi_auto_active()) && comm::rank() != 0))
      compiled_->set_verbose(false);
  }
  Tensor loss;
  {
    PhaseScope phase(StepPhase::graph_step);
    loss = compiled_->run(inputs, label);
  }
  StepTraceSink* tracer = step_trace_sink();
  if (tracer && compiled_->compiles() != compiles_traced_) {
    compiles_traced_ = compiled_->compiles();
    tracer->compiled(compiled_->executable(), compiles_traced_,
                     compiles_traced_ == 1 ? "first step"
                                           : "new input shape " + describe(inputs[0]) +
                                                 " (a partial last batch: drop_remainder=True "
                                                 "avoids it)");
  }
  return scalar_loss(loss);
}

int64_t Model::skipped_steps() const {
  return loss_scale_ ? loss_scale_->skipped_steps() : 0;
}

void Model::check_trainable() const {
  if (!loss_fn_ || !optimizer_) {
    throw Error("Model.train: needs a loss function and an optimizer (given: " +
                std::string(loss_fn_ ? "loss" : "no loss") + ", " +
                (optimizer_ ? "optimizer" : "no optimizer") + ")");
  }
}

float Model::train_step(const Tensor& data, const Tensor& label) {
  return train_step(nn::Tensors{data}, label);
}

float Model::train_step(const nn::Tensors& inputs, const Tensor& label) {
  check_trainable();
  check_inputs(inputs, "train_step");
  std::vector<Tensor> columns = inputs;
  columns.push_back(label);
  check_same_samples(columns, "train_step");
  return get_context().mode == GRAPH_MODE ? graph_step(inputs, label) : eager_step(inputs, label);
}

void Model::train(int64_t epochs, const data::Dataset& train_dataset,
                  const std::vector<CallbackPtr>& callbacks, const TrainOptions& options) {
  check_trainable();
  if (epochs <= 0) throw Error("Model.train: epochs must be > 0, got " + std::to_string(epochs));
  if (options.initial_epoch < 0 || options.initial_epoch >= epochs) {
    throw Error("Model.train: initial_epoch " + std::to_string(options.initial_epoch) +
                " is outside [0, " + std::to_string(epochs) + ")");
  }
  if (options.initial_step < 0) throw Error("Model.train: initial_step must be >= 0");
  if (options.sink_size == 0 || options.sink_size < -1) {
    throw Error("Model.train: sink_size must be -1 or > 0, got " +
                std::to_string(options.sink_size));
  }
  TrainModeGuard mode(*network_, true);

  CallbackParams params;
  params.model = this;
  params.train_network = network_.get();
  params.optimizer = optimizer_.get();
  params.epoch_num = epochs;
  params.batch_num = train_dataset.get_dataset_size();
  params.cur_step_num = optimizer_->global_step();
  params.dataset_sink_mode = options.dataset_sink_mode;
  RunContext ctx(&params);
  const bool sink = options.dataset_sink_mode;
  const int64_t sink_size = options.sink_size;
  const bool graph = get_context().mode == GRAPH_MODE;

  auto for_each_callback = [&](void (Callback::*hook)(RunContext&)) {
    if (callbacks.empty()) return;
    PhaseScope phase(StepPhase::callbacks);
    for (const CallbackPtr& cb : callbacks) ((*cb).*hook)(ctx);
  };
  // A profiler sees each step from where the previous one ended, and the pipeline's statistics
  // every few steps.
  StepTraceSink* const tracer = step_trace_sink();
  int64_t step_begin_ns = tracer ? trace_clock_ns() : 0;
  int64_t pipeline_sampled_ns = 0;
  constexpr int64_t kPipelineSampleNs = 20'000'000;

  const bool replay = options.replay_skipped_epochs;
  data::TupleIterator it = train_dataset.create_tuple_iterator(
      {.num_epochs = replay ? epochs : epochs - options.initial_epoch});
  std::vector<Tensor> row;
  for (int64_t e = 0; replay && e < options.initial_epoch; ++e) {
    while (it.next(row)) {
    }
  }
  for_each_callback(&Callback::on_train_begin);
  // Steps per sink: without sink mode every step is a sink of its own, so the hooks fire per step.
  const int64_t steps_per_sink = !sink           ? 1
                                 : sink_size > 0 ? sink_size
                                                 : std::numeric_limits<int64_t>::max();
  int64_t steps_run = 0;
  bool stop = false;
  for (int64_t epoch = options.initial_epoch; epoch < epochs && !stop; ++epoch) {
    params.cur_epoch_num = epoch + 1;
    params.cur_step_in_epoch = 0;
    for_each_callback(&Callback::on_train_epoch_begin);
    int64_t skip = epoch == options.initial_epoch ? options.initial_step : 0;
    int64_t in_sink = 0;
    bool more = next_batch(it, row);
    for (; more && skip > 0; --skip) {
      ++params.cur_step_in_epoch;
      more = it.next(row);
    }
    while (more) {
      const Batch batch = split_row(row, "train");
      if (in_sink == 0) {
        params.step_losses.clear();
        for_each_callback(&Callback::on_train_step_begin);
      }
      // Within a sink nothing but the steps runs: the batch the pipeline made is the step's
      // input as it is (graph mode reads it in place), the loss is kept for the sink's end.
      params.net_outputs =
          graph ? graph_step(batch.inputs, batch.label) : eager_step(batch.inputs, batch.label);
      params.step_losses.push_back(params.net_outputs);
      params.batch_size = batch_size_of(batch.inputs);
      ++params.cur_step_in_epoch;
      params.cur_step_num = optimizer_->global_step();
      ++steps_run;
      ++in_sink;
      stop = ctx.get_stop_requested() || (options.max_steps >= 0 && steps_run >= options.max_steps);
      more = !stop && next_batch(it, row);
      if (!more || in_sink >= steps_per_sink) {
        params.steps_this_sink = in_sink;
        in_sink = 0;
        for_each_callback(&Callback::on_train_step_end);
        stop = stop || ctx.get_stop_requested();
        if (stop && more) more = false;
      }
      if (tracer) {
        const int64_t now = trace_clock_ns();
        tracer->step(optimizer_->global_step(), params.batch_size, step_begin_ns, now);
        step_begin_ns = now;
        if (now - pipeline_sampled_ns >= kPipelineSampleNs || !more) {
          tracer->pipeline(it.stats(), now);
          pipeline_sampled_ns = now;
        }
      }
    }
    if (params.batch_num < 0) params.batch_num = params.cur_step_in_epoch;
    for_each_callback(&Callback::on_train_epoch_end);
    stop = stop || ctx.get_stop_requested();
  }
  if (stop) it.stop();
  for_each_callback(&Callback::on_train_end);
}

std::map<std::string, double> Model::eval(const data::Dataset& dataset,
                                          const std::vector<std::string>& metrics) {
  std::vector<std::string> names = metrics;
  if (names.empty()) names = options_.metrics;
  if (names.empty()) names = {"accuracy", "loss"};
  std::vector<std::pair<std::string, MetricPtr>> ms;
  bool need_loss = false;
  for (const std::string& n : names) {
    ms.emplace_back(n, metric_by_name(n));
    need_loss = need_loss || dynamic_cast<Loss*>(ms.back().second.get()) != nullptr;
  }
  if (need_loss && !loss_fn_) throw Error("Model.eval: the loss metric needs a loss function");
  TrainModeGuard mode(*network_, false);
  NoGradGuard no_grad;
  // In graph mode, once a training step is compiled, evaluation runs compiled forwards in the
  // step's arena (no eager allocations next to the plan).
  const bool graph = get_context().mode == GRAPH_MODE && compiled_;
  data::TupleIterator it = dataset.create_tuple_iterator({.num_epochs = 1});
  std::vector<Tensor> row;
  int64_t full_rows = 0;  // graph mode: the first batch's rows, which shorter batches pad to
  while (it.next(row)) {
    const Batch batch = split_row(row, "eval");
    Tensor logits;
    float loss = 0.f;
    const int64_t rows = batch.inputs[0].rank() > 0 ? batch.inputs[0].dim(0) : 0;
    if (graph && full_rows == 0) full_rows = rows;
    if (graph && rows > 0 && rows < full_rows) {
      // A short last batch runs the forward already compiled for the full batch, padded with
      // zero rows (a second compile would cost more than the rows it saves); only its own rows
      // count, and its loss is theirs.
      nn::Tensors padded;
      for (const Tensor& x : batch.inputs) padded.push_back(pad_rows(x, full_rows));
      logits = ops::contiguous(ops::slice(
          compiled_->evaluate(padded, pad_rows(batch.label, full_rows)).first, 0, 0, rows));
      if (need_loss) loss = scalar_loss(loss_fn_->construct(logits, batch.label));
    } else if (graph) {
      auto [graph_logits, graph_loss] = compiled_->evaluate(batch.inputs, batch.label);
      logits = graph_logits;
      loss = scalar_loss(graph_loss);
    } else {
      logits = network_->first_output(batch.inputs);
      if (need_loss) loss = scalar_loss(loss_fn_->construct(logits, batch.label));
    }
    for (auto& [n, m] : ms) m->update(logits, batch.label, loss);
  }
  if (parallel::data_parallel_active()) {
    // Each rank evaluated its shard: add up the metrics' sums over the ranks.
    for (auto& [n, m] : ms) {
      std::vector<double> sums = m->sums();
      std::vector<float> wire(sums.begin(), sums.end());
      comm::all_reduce(wire.data(), int64_t(wire.size()), DType::f32);
      m->set_sums(std::vector<double>(wire.begin(), wire.end()));
    }
  }
  std::map<std::string, double> result;
  for (auto& [n, m] : ms) result[n] = m->eval();
  return result;
}

Tensor Model::predict(const Tensor& data) {
  TrainModeGuard mode(*network_, false);
  NoGradGuard no_grad;
  return network_->construct(data);
}

nn::Tensors Model::predict(const nn::Tensors& inputs) {
  check_inputs(inputs, "predict");
  TrainModeGuard mode(*network_, false);
  NoGradGuard no_grad;
  return network_->construct_multi(inputs);
}

}  // namespace kiln::train
