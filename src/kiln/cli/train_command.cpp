#include "kiln/cli/train_command.h"

#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kiln/amp/loss_scale.h"
#include "kiln/cli/data_spec.h"
#include "kiln/cli/option_checks.h"
#include "kiln/cli/parallel_job.h"
#include "kiln/cli/training_setup.h"
#include "kiln/cli/yaml_config.h"
#include "kiln/comm/communicator.h"
#include "kiln/core/allocator.h"
#include "kiln/core/context.h"
#include "kiln/core/error.h"
#include "kiln/core/random.h"
#include "kiln/core/threads.h"
#include "kiln/data/config.h"
#include "kiln/models/zoo.h"
#include "kiln/nn/loss.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/lr_schedule.h"
#include "kiln/optim/momentum.h"
#include "kiln/optim/sgd.h"
#include "kiln/parallel/data_parallel.h"
#include "kiln/profile/profiler.h"
#include "kiln/profile/step_comparison.h"
#include "kiln/train/callbacks.h"
#include "kiln/train/checkpoint.h"
#include "kiln/train/model.h"

namespace kiln::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Steps left out of the throughput figure (primitive creation, allocator warm-up).
constexpr int64_t kWarmupSteps = 10;
// Upper limits of numeric options: far above any sensible job, low enough that products of them
// (epochs x steps per epoch, threads) cannot overflow or exhaust the machine.
constexpr int64_t kMaxEpochs = 1'000'000;
constexpr int64_t kMaxBatchSize = 1 << 20;
constexpr double kMaxLr = 1000;
constexpr int64_t kMaxContext = 1 << 16;
constexpr int kMaxPrefetchRows = 1 << 16;
constexpr int kDefaultPrefetchRows = 16;  // data/config.h's default, MindSpore's

// Measures steady-state throughput: images of the steps after the first kWarmupSteps (from the
// first sink end past them, in sink mode).
class ThroughputMonitor : public train::Callback {
 public:
  void on_train_step_end(train::RunContext& ctx) override {
    const auto& p = ctx.original_args();
    const int64_t before = steps_;
    steps_ += p.steps_this_sink;
    const int64_t images = p.batch_size * p.steps_this_sink;
    auto now = Clock::now();
    if (before < kWarmupSteps && steps_ >= kWarmupSteps) {
      start_ = now;
      measured_images_ = measured_steps_ = 0;
      comm::reset_stats();  // data parallel: communication of the measured steps only
    } else if (before >= kWarmupSteps) {
      measured_images_ += images;
      measured_steps_ += p.steps_this_sink;
    }
    end_ = now;
    total_images_ += images;
    last_loss_ = p.net_outputs;
  }
  void on_train_begin(train::RunContext&) override { begin_ = Clock::now(); }
  void on_train_epoch_begin(train::RunContext&) override { ++epochs_; }
  int64_t epochs() const { return epochs_; }
  double images_per_sec() const {
    if (measured_steps_ > 0) {
      return double(measured_images_) / std::chrono::duration<double>(end_ - start_).count();
    }
    double s = std::chrono::duration<double>(end_ - begin_).count();
    return s > 0 ? double(total_images_) / s : 0.0;
  }
  int64_t steps() const { return steps_; }
  // The steps that images_per_sec() and the communication statistics cover.
  int64_t measured_steps() const { return measured_steps_ > 0 ? measured_steps_ : steps_; }
  float last_loss() const { return last_loss_; }

 private:
  int64_t steps_ = 0, measured_steps_ = 0, measured_images_ = 0, total_images_ = 0, epochs_ = 0;
  float last_loss_ = 0;
  Clock::time_point begin_, start_, end_;
};

// A CLI11 check that runs `parse` on the value; CLI11 puts the flag in front of the message, so
// the parser's own "flag: " prefix is dropped.
std::function<std::string(const std::string&)> parsed_by(
    std::function<void(const std::string&)> parse, std::string flag) {
  return [parse = std::move(parse), flag = std::move(flag)](const std::string& value) {
    try {
      parse(value);
      return std::string();
    } catch (const Error& e) {
      std::string message = e.what();
      if (message.rfind(flag + ": ", 0) == 0) message.erase(0, flag.size() + 2);
      return message;
    }
  };
}

void validate(const TrainConfig& c) {
  auto positive = [](const char* flag, int64_t v) {
    if (v <= 0)
      throw Error(std::string("kiln train: ") + flag + " must be > 0, got " + std::to_string(v));
  };
  positive("--epochs", c.epochs);
  positive("--batch-size", c.batch_size);
  if (c.steps != -1) positive("--steps", c.steps);
  if (c.epochs > kMaxEpochs || c.batch_size > kMaxBatchSize) {
    throw Error("kiln train: --epochs " + std::to_string(c.epochs) + " or --batch-size " +
                std::to_string(c.batch_size) + " is above its limit (" +
                std::to_string(kMaxEpochs) + ", " + std::to_string(kMaxBatchSize) + ")");
  }
  // -1 is TrainConfig's "the optimizer's default"; anything else must be a usable rate.
  if (c.lr != -1 && !(std::isfinite(c.lr) && c.lr > 0 && c.lr <= kMaxLr)) {
    std::ostringstream v;
    v << c.lr;
    throw Error("kiln train: --lr must be a finite number > 0 and <= " +
                std::to_string(int(kMaxLr)) + ", got " + v.str());
  }
  if (c.threads < 0 || c.threads > kMaxThreads) {
    throw Error("kiln train: --threads must be from 0 to " + std::to_string(kMaxThreads) +
                ", got " + std::to_string(c.threads));
  }
  if (c.print_every < 0) {
    throw Error("kiln train: --print-every must be >= 0, got " + std::to_string(c.print_every));
  }
  if (c.sink_size < -1) {
    throw Error(
        "kiln train: --sink-size must be -1 (a sink per epoch), 0 (off) or a step count, "
        "got " +
        std::to_string(c.sink_size));
  }
  if (c.conv_algorithm != "auto" && c.conv_algorithm != "direct" &&
      c.conv_algorithm != "winograd") {
    throw Error("kiln train: --conv-algorithm must be auto, direct or winograd, got '" +
                c.conv_algorithm + "'");
  }
  if (c.mode != "eager" && c.mode != "graph") {
    throw Error("kiln train: --mode must be eager or graph, got '" + c.mode + "'");
  }
  if (c.micro_batches != 1 && (c.mode != "graph" || c.micro_batches < 1)) {
    throw Error("kiln train: --micro-batches " + std::to_string(c.micro_batches) +
                " needs --mode graph and a count of at least 1");
  }
  std::error_code ec;
  if (!c.resume.empty() && std::filesystem::is_directory(c.resume, ec)) {
    throw FileError("kiln train: --resume " + c.resume +
                    " is a folder; give a checkpoint file in it "
                    "(<model>-<epoch>_<step>.safetensors)");
  }
  if (!c.dump_graph.empty() && c.mode != "graph") {
    throw Error("kiln train: --dump-graph writes the compiled graph; it needs --mode graph");
  }
  if (c.context < 1 || c.context > kMaxContext) {
    throw Error("kiln train: --context must be from 1 to " + std::to_string(kMaxContext) +
                ", got " + std::to_string(c.context));
  }
  // Validates the name without building the network (resnet50 has 25M parameters): create
  // throws the error that lists the known models.
  const std::vector<std::string> names = models::model_names();
  if (std::find(names.begin(), names.end(), c.model) == names.end()) {
    models::create(c.model, {.context_length = 1});
  }
}

}  // namespace

std::shared_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, std::vector<Tensor> params,
                                                 int64_t total_steps) {
  double lr = c.lr == -1 ? default_lr(c.optimizer) : c.lr;
  optim::LearningRate schedule;
  if (c.schedule == "constant") {
    schedule = optim::constant_lr(lr);
  } else if (c.schedule == "cosine") {
    int64_t warmup = std::min<int64_t>(200, std::max<int64_t>(total_steps / 10, 1));
    schedule = optim::linear_warmup(
        optim::cosine_decay_lr(0.0, lr, std::max<int64_t>(total_steps - warmup, 1)), warmup, 0.1);
  } else {
    throw Error("kiln train: --schedule must be cosine or constant, got '" + c.schedule + "'");
  }
  if (c.optimizer == "momentum") {
    return std::make_shared<optim::Momentum>(std::move(params), schedule,
                                             optim::MomentumOptions{.momentum = 0.9});
  }
  if (c.optimizer == "sgd") return std::make_shared<optim::SGD>(std::move(params), schedule);
  if (c.optimizer == "adam") return std::make_shared<optim::Adam>(std::move(params), schedule);
  if (c.optimizer == "adamw") return std::make_shared<optim::AdamW>(std::move(params), schedule);
  throw Error("kiln train: --optimizer must be momentum, sgd, adam or adamw, got '" + c.optimizer +
              "'");
}

double default_lr(const std::string& optimizer) {
  if (optimizer == "adam" || optimizer == "adamw") return 1e-3;
  if (optimizer == "sgd") return 0.1;
  return 0.05;  // momentum 0.9
}

TrainReport run_train(const TrainConfig& c, std::ostream& rank0_out) {
  auto wall_start = Clock::now();
  validate(c);
  // Data parallel: every rank trains; rank 0 alone prints the monitor lines and the result.
  if ((c.parallel_mode == "auto_parallel" || c.parallel_mode == "auto") && c.mode != "graph") {
    throw Error("kiln train: --parallel-mode " + c.parallel_mode +
                " splits the compiled step across the ranks: add --mode graph");
  }
  const ParallelJob job = join_parallel_job({.parallel_mode = c.parallel_mode,
                                             .threads = c.threads,
                                             .bucket_cap_mb = c.bucket_cap_mb,
                                             .search_mode = c.search_mode,
                                             .memory_limit_mb = c.memory_limit_mb,
                                             .op_times = c.op_times},
                                            rank0_out);
  std::ostringstream other_ranks_out;
  std::ostream& out = job.rank == 0 ? rank0_out : other_ranks_out;
  if (c.threads > available_cores()) {
    std::cerr << "kiln train: warning: --threads " << c.threads << " is more than the "
              << available_cores()
              << " cores this process may run on; the kernel threads will take turns and the run "
                 "will be slower\n";
  }
  if (c.threads > 0) set_num_threads(c.threads);
  set_seed(c.seed);
  data::config::set_seed(c.seed);
  data::config::set_num_parallel_workers(c.workers);  // 0: one per core
  data::config::set_prefetch_size(c.prefetch > 0 ? c.prefetch : kDefaultPrefetchRows);
  set_context({.mode = c.mode == "graph" ? GRAPH_MODE : PYNATIVE_MODE,
               .enable_graph_kernel = c.graph_kernel,
               .save_graphs_path = c.dump_graph,
               .micro_batches = c.micro_batches,
               .conv_algorithm = c.conv_algorithm});

  TrainingSetup setup = open_training_setup(c);
  data::Dataset train_ds = setup.train;
  data::Dataset test_ds = setup.eval;
  if (job.data_parallel) {
    out << "data parallel: " << job.ranks << " ranks, " << num_threads()
        << " kernel thread(s) each; every rank reads its shard (1/" << job.ranks
        << ") of the data; batch " << c.batch_size << " per rank, " << c.batch_size * job.ranks
        << " global; gradients averaged over the ranks in buckets of up to " << c.bucket_cap_mb
        << " MiB\n";
  }
  if (job.auto_parallel) {
    out << "auto parallel: " << job.ranks << " ranks, " << num_threads()
        << " kernel thread(s) each; every rank reads the whole batch of " << c.batch_size
        << " and runs its part of each op as the " << c.search_mode << " search plans it"
        << (c.memory_limit_mb > 0 ? " within " + std::to_string(c.memory_limit_mb) + " MiB per rank"
                                  : std::string())
        << " (the plan is printed when the step compiles)\n";
  }
  const int64_t steps_per_epoch = train_ds.get_dataset_size();
  if (steps_per_epoch <= 0) {
    throw Error("kiln train: --data " + setup.data_spec + " holds fewer rows than one batch of " +
                "--batch-size " + std::to_string(c.batch_size));
  }
  // The schedule spans all --epochs; --steps only stops early, so a run cut short by --steps
  // and resumed later follows the same learning-rate curve.
  const int64_t epochs = c.epochs;
  const int64_t total_steps = epochs * steps_per_epoch;
  auto net = setup.net;
  out << setup.description << "\n";
  auto loss = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean");
  auto optimizer = make_optimizer(c, net->trainable_params(), total_steps);
  const train::ModelOptions model_options{.amp_level = c.amp_level,
                                          .keep_batchnorm_fp32 = c.keep_batchnorm_fp32,
                                          .amp_dtype = c.amp_dtype,
                                          .amp_strict = c.amp_strict,
                                          .loss_scale = c.loss_scale,
                                          .metrics = setup.metrics,
                                          .compile_log = c.compile_log};
  train::Model model(net, loss, optimizer, model_options);

  train::TrainOptions options;
  if (!c.resume.empty()) {
    train::ResumePoint at = train::resume_from_checkpoint(c.resume, *net, *optimizer);
    options.initial_epoch = at.epoch;
    options.initial_step = at.step_in_epoch;
    options.replay_skipped_epochs = true;  // same order as the interrupted run
    if (at.step_in_epoch >= steps_per_epoch) {
      throw FileError("kiln train: " + c.resume + ": metadata 'step_in_epoch' is " +
                      std::to_string(at.step_in_epoch) + ", but an epoch has " +
                      std::to_string(steps_per_epoch) + " steps at --batch-size " +
                      std::to_string(c.batch_size));
    }
    if (options.initial_epoch >= epochs) {
      throw Error("kiln train: " + c.resume + " already finished epoch " +
                  std::to_string(at.epoch) + " of " + std::to_string(epochs) +
                  "; ask for more --epochs");
    }
    if (job.data_parallel) {
      // Every rank loaded the file itself: they must hold the same weights and position.
      parallel::check_agreement({{"resumed weights (" + c.resume + ")",
                                  parallel::hash_tensor_bytes(net->state_and_names())},
                                 {"resumed global step", at.global_step}});
    }
    out << "resuming from " << c.resume << " at epoch " << at.epoch + 1 << ", step "
        << at.step_in_epoch << " (global step " << at.global_step << ")\n";
  }
  if (c.steps > 0) options.max_steps = c.steps;
  options.dataset_sink_mode = c.sink_size != 0;
  options.sink_size = c.sink_size != 0 ? c.sink_size : -1;

  auto throughput = std::make_shared<ThroughputMonitor>();
  std::vector<train::CallbackPtr> callbacks{
      throughput, std::make_shared<train::LossMonitor>(c.print_every, &out),
      std::make_shared<train::TimeMonitor>(0, &out)};
  if (!c.ckpt_dir.empty()) {
    callbacks.push_back(std::make_shared<train::ModelCheckpoint>(
        c.model, c.ckpt_dir,
        train::CheckpointConfig{.save_checkpoint_steps = 0,
                                .keep_checkpoint_max = 5,
                                .save_at_epoch_end = true,
                                .metadata = setup.checkpoint_metadata}));
  }
  std::unique_ptr<Profiler> profiler;
  if (!c.profile.empty()) {
    profiler = std::make_unique<Profiler>(ProfilerOptions{.output_path = c.profile});
    profiler->annotate(
        "command",
        "kiln train --model " + c.model + " --mode " + c.mode + " --batch-size " +
            std::to_string(c.batch_size) + " --amp-level " + c.amp_level +
            (c.sink_size != 0 ? " --sink-size " + std::to_string(c.sink_size) : std::string()));
    profiler->annotate("kernel threads", std::to_string(num_threads()));
    profiler->annotate("amp level", c.amp_level);
  }
  model.train(epochs, train_ds, callbacks, options);
  if (profiler) {
    profiler->stop();
    if (c.profile_compare && job.ranks == 1) {
      data::TupleIterator first = train_ds.create_tuple_iterator({.num_epochs = 1});
      std::vector<Tensor> batch;
      if (first.next(batch)) {
        out << "profile: timing the same step in the settings the report compares\n";
        profiler->add_step_comparison(profile::compare_step_settings(
            {net, loss, optimizer, model_options}, batch[0], batch[1]));
      }
      first.stop();
    }
    out << "profile written: " << profiler->analyse() << "\n";
  }
  auto result = model.eval(test_ds, setup.metrics);

  TrainReport r;
  r.images_per_sec = throughput->images_per_sec();
  r.ranks = job.ranks;
  if (job.data_parallel) {
    float ips = float(r.images_per_sec);
    comm::all_reduce(&ips, 1, DType::f32);  // the job's images/s: every rank's added up
    r.images_per_sec = ips;
  }
  r.test_accuracy = result["accuracy"];
  r.test_loss = result["loss"];
  if (setup.tokens_per_row > 0) {
    r.perplexity = result["perplexity"];
    // The mean per token (the loss metric averages batch means, and the last batch is short).
    r.test_loss = std::log(r.perplexity);
    r.tokens_per_sec = r.images_per_sec * double(setup.tokens_per_row);
  }
  r.final_loss = throughput->last_loss();
  r.steps = throughput->steps();
  r.epochs = throughput->epochs();  // epochs this run trained in (all or part)
  r.peak_rss_mb = peak_rss_mb();
  r.skipped_steps = model.skipped_steps();
  r.wall_s = std::chrono::duration<double>(Clock::now() - wall_start).count();
  if (setup.tokens_per_row > 0) {
    out << "validation loss: " << std::fixed << std::setprecision(4) << r.test_loss
        << ", perplexity: " << r.perplexity << ", token accuracy: " << r.test_accuracy
        << std::setprecision(0) << ", " << r.tokens_per_sec << " tokens/s" << std::defaultfloat
        << "\n";
  } else {
    out << "test accuracy: " << std::fixed << std::setprecision(4) << r.test_accuracy
        << ", test loss: " << r.test_loss << std::defaultfloat << "\n";
  }
  if (c.json) {
    nlohmann::ordered_json j;
    j["model"] = c.model;
    j["data"] = setup.data_spec;
    j["eval_data"] = setup.eval_data;
    j.update(setup.json);
    j["mode"] = c.mode;
    j["graph_kernel"] = c.graph_kernel;
    j["micro_batches"] = c.micro_batches;
    j["sink_size"] = c.sink_size;
    j["conv_algorithm"] = c.conv_algorithm;
    j["optimizer"] = c.optimizer;
    j["amp_level"] = c.amp_level;
    j["amp_dtype"] = c.amp_dtype;
    j["amp_strict"] = c.amp_strict;
    j["skipped_steps"] = r.skipped_steps;
    j["epochs"] = r.epochs;
    j["steps"] = r.steps;
    j["batch_size"] = c.batch_size;
    j["parallel_mode"] = job.data_parallel   ? "data_parallel"
                         : job.auto_parallel ? "auto_parallel"
                                             : "stand_alone";
    j["ranks"] = job.ranks;
    j["global_batch_size"] = job.data_parallel ? c.batch_size * job.ranks : c.batch_size;
    if (job.auto_parallel) {
      j["search_mode"] = c.search_mode;
      j["memory_limit_mb"] = c.memory_limit_mb;
      j["op_times"] = c.op_times;
    }
    if (job.data_parallel && r.steps > kWarmupSteps) {
      // The all-reduce time per step on the communicator's thread, and the share of it the
      // training thread did not wait for (hidden behind the backward pass).
      const comm::Stats cs = comm::stats();
      j["allreduce_ms_per_step"] = double(cs.busy_ns) / 1e6 / double(throughput->measured_steps());
      // Waiting includes handing a bucket to the thread, so tiny buckets can wait longer than
      // they took: the share is clamped at 0.
      j["allreduce_hidden"] =
          cs.busy_ns > 0 ? std::max(0.0, 1.0 - double(cs.waited_ns) / double(cs.busy_ns)) : 0.0;
    }
    j["threads"] = num_threads();
    j["workers"] = data::config::get_num_parallel_workers();
    j["prefetch"] = data::config::get_prefetch_size();
    j["images_per_sec"] = r.images_per_sec;
    j["test_accuracy"] = r.test_accuracy;
    if (setup.tokens_per_row > 0) {
      j["tokens_per_sec"] = r.tokens_per_sec;
      j["test_loss"] = r.test_loss;
      j["perplexity"] = r.perplexity;
    }
    j["final_loss"] = r.final_loss;
    j["peak_rss_mb"] = r.peak_rss_mb;
    j["wall_s"] = r.wall_s;
    out << j.dump() << std::endl;
  }
  return r;
}

void add_train_command(CLI::App& app) {
  add_train_command(app, [](const TrainConfig& c) { run_train(c, std::cout); });
}

void add_train_command(CLI::App& app, std::function<void(const TrainConfig&)> action) {
  CLI::App* cmd = app.add_subcommand(
      "train", "Train a model on an image folder, records, (Fashion-)MNIST or text (gpt)");
  auto c = std::make_shared<TrainConfig>();
  auto config_file = std::make_shared<std::string>();
  auto graph_kernel = std::make_shared<std::string>("on");
  auto keep_bn = std::make_shared<std::string>("on");
  auto compile_log = std::make_shared<std::string>("on");
  auto profile_compare = std::make_shared<std::string>("on");
  cmd->add_option("--config", *config_file, "YAML file whose keys are these long flag names");
  cmd->add_option("--model", c->model,
                  "lenet | resnet20 | resnet56 | resnet18 | resnet50 | mobilenetv2 | mlp | gpt (a "
                  "language model: --data text)")
      ->check(CLI::IsMember(models::model_names()));
  cmd->add_option("--context", c->context,
                  "gpt: tokens per training window, the model's context (default 64)")
      ->check(integer_in(1, kMaxContext));
  cmd->add_option("--epochs", c->epochs, "Epochs to train (default 5)")
      ->check(integer_in(1, kMaxEpochs));
  cmd->add_option("--steps", c->steps, "Stop after N steps")
      ->check(integer_in(1, std::numeric_limits<int64_t>::max()));
  cmd->add_option("--batch-size", c->batch_size, "Batch size (default 64)")
      ->check(integer_in(1, kMaxBatchSize));
  cmd->add_option("--mode", c->mode,
                  "graph (default: traced once, compiled, run with fusion) | eager (op by op)")
      ->check(CLI::IsMember({"eager", "graph"}));
  cmd->add_option("--graph-kernel", *graph_kernel,
                  "on | off: graph-kernel fusion in graph mode (default on)")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--micro-batches", c->micro_batches,
                  "Graph mode: run each batch as N slices, forward and backward one after "
                  "another, with one update (less memory; not with BatchNorm; default 1)")
      ->check(integer_in(1, kMaxBatchSize));
  cmd->add_option("--conv-algorithm", c->conv_algorithm,
                  "auto | direct | winograd: how 3x3 stride-1 convolutions run (default auto: "
                  "Winograd where it is faster; direct: closest to float64; docs/numerics.md)")
      ->check(CLI::IsMember({"auto", "direct", "winograd"}));
  cmd->add_option("--lr", c->lr, "Base learning rate (default: 0.05 momentum, 0.1 sgd, 1e-3 adam)")
      ->check(finite_in(0, kMaxLr));
  cmd->add_option("--optimizer", c->optimizer, "momentum | sgd | adam | adamw")
      ->check(CLI::IsMember({"momentum", "sgd", "adam", "adamw"}));
  cmd->add_option("--schedule", c->schedule, "cosine (linear warm-up, then cosine) | constant")
      ->check(CLI::IsMember({"cosine", "constant"}));
  cmd->add_option("--amp-level", c->amp_level, "O0 | O1 | O2 | O3")
      ->check(CLI::IsMember({"O0", "O1", "O2", "O3"}));
  cmd->add_option("--amp-dtype", c->amp_dtype, "bf16 | fp16: the low-precision type (default bf16)")
      ->check(CLI::IsMember({"bf16", "fp16"}));
  cmd->add_flag("--amp-strict", c->amp_strict,
                "O1/O2 with bf16: MindSpore's placement op for op, even where bf16 is slower "
                "than fp32 on this CPU (default: bf16 only where it pays, casts included)");
  cmd->add_option("--keep-batchnorm-fp32", *keep_bn,
                  "on | off: BatchNorm in fp32 at O2 (default on)")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--loss-scale", c->loss_scale,
                  "dynamic | fixed:N | none (default: dynamic for fp16 at O2/O3, else none)")
      ->check([](const std::string& spec) {
        try {
          amp::make_loss_scale_manager(spec, {});
          return std::string();
        } catch (const Error& e) {
          return std::string(e.what());
        }
      });
  cmd->add_option("--threads", c->threads, "Kernel threads (default: all available cores)")
      ->check(integer_in(0, kMaxThreads));
  cmd->add_option("--seed", c->seed, "Seed of initialization and shuffling")
      ->check(unsigned_integer());
  cmd->add_option("--data-dir", c->data_dir, "Folder with the Fashion-MNIST IDX files");
  cmd->add_option("--data", c->data,
                  "Training data: imagefolder:DIR | record:FILES (comma list or glob) | "
                  "fashion-mnist[:DIR] | mnist[:DIR] (default: fashion-mnist); for gpt "
                  "text[:FILE] (default: /usr/share/common-licenses/GPL-3)");
  cmd->add_option("--val", c->val,
                  "Evaluation data, same forms (default: the test split of (fashion-)mnist; "
                  "otherwise the training data)");
  cmd->add_option("--image-size", c->image_size, "Resize images to HxW (or S for SxS)")
      ->check(parsed_by([](const std::string& v) { parse_image_size(v); }, "--image-size"));
  cmd->add_option("--channels", c->channels,
                  "Decode images to 1 (gray) or 3 (RGB) channels (default: 1 when every image of "
                  "--data is grayscale, else 3)")
      ->check(CLI::IsMember({1, 3}));
  cmd->add_option("--transforms", c->transforms,
                  "Comma list: random_crop:S[:P], hflip, vflip (training only), normalize:M:S "
                  "(M, S: one value or one per channel joined by '/')")
      ->check(parsed_by([](const std::string& v) { parse_transforms(v); }, "--transforms"));
  cmd->add_option("--ckpt-dir", c->ckpt_dir, "Write a checkpoint there at each epoch's end");
  cmd->add_option("--resume", c->resume, "Resume from a checkpoint written with --ckpt-dir");
  cmd->add_option("--print-every", c->print_every, "Steps between loss lines (default 100)")
      ->check(integer_in(0, std::numeric_limits<int64_t>::max()));
  cmd->add_option("--sink-size", c->sink_size,
                  "Dataset sink mode: run N steps back to back per sink, fed straight from the "
                  "pipeline, with the callbacks (loss lines, checkpoints) once per sink; -1: one "
                  "sink per epoch (default 0: off)")
      ->check(integer_in(-1, std::numeric_limits<int64_t>::max()));
  cmd->add_flag("--json", c->json, "Print a JSON summary as the last line");
  cmd->add_option("--parallel-mode", c->parallel_mode,
                  "stand_alone | data_parallel (or data): under mpirun or kiln launch, data "
                  "parallelism over the job's ranks, --batch-size per rank | auto_parallel (or "
                  "auto; graph mode): every op split as AUTO_PARALLEL's search plans it, "
                  "--batch-size global")
      ->check(CLI::IsMember({"stand_alone", "data_parallel", "data", "auto_parallel", "auto"}));
  cmd->add_option("--search-mode", c->search_mode,
                  "auto_parallel: dynamic_programming (default) | recursive_programming | "
                  "sharding_propagation")
      ->check(
          CLI::IsMember({"dynamic_programming", "recursive_programming", "sharding_propagation"}));
  cmd->add_option("--memory-limit-mb", c->memory_limit_mb,
                  "auto_parallel: memory per rank for parameters, gradients, optimizer state and "
                  "activations (MiB; 0, the default: no limit)")
      ->check(finite_in(0, 1e9, /*lo_inclusive=*/true));
  cmd->add_option("--op-times", c->op_times,
                  "auto_parallel: how the search knows each op's time: measured (the default: "
                  "rank 0 times each op's forward and backward at the shapes each strategy gives "
                  "it) | estimated (from its FLOPs and bytes at the machine's peaks)")
      ->check(CLI::IsMember({"measured", "estimated"}));
  cmd->add_option("--bucket-cap-mb", c->bucket_cap_mb,
                  "Data parallel: gradients are all-reduced in buckets of up to this many MiB "
                  "(default 25)")
      ->check(finite_in(0.001, 4096.0, /*lo_inclusive=*/true));  // CLI::Range lets NaN through
  cmd->add_option("--dump-graph", c->dump_graph,
                  "Graph mode: write each compiled graph's IR before and after the passes there "
                  "(<name>_0_traced / _1_compiled, .txt and Graphviz .dot)");
  cmd->add_option("--compile-log", *compile_log,
                  "on | off: graph mode's stderr line per compiled graph (default on)")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--workers", c->workers,
                  "Map workers of the data pipeline's row stage (num_parallel_workers; default "
                  "0: one per core this process may use); arrays of the model's size with no "
                  "random transform have no row stage")
      ->check(integer_in(0, kMaxThreads));
  cmd->add_option("--prefetch", c->prefetch,
                  "Rows each data pipeline queue holds (prefetch_size; default 0: 16)")
      ->check(integer_in(0, kMaxPrefetchRows));
  cmd->add_option("--profile", c->profile,
                  "Profile the training into this folder: trace.json (Perfetto), ops.csv, "
                  "steps.csv and report.html (rebuild it with `kiln report DIR`)");
  cmd->add_option("--profile-compare", *profile_compare,
                  "on | off: with --profile, time the same step in graph mode, with fusion, at "
                  "O0 or O2 afterwards, for the report's measured recommendations (default on)")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->callback([cmd, c, config_file, graph_kernel, keep_bn, compile_log, profile_compare, action] {
    if (!config_file->empty()) apply_yaml_config(*cmd, *config_file, "kiln train");
    c->graph_kernel = *graph_kernel == "on";
    c->keep_batchnorm_fp32 = *keep_bn == "on";
    c->compile_log = *compile_log == "on";
    c->profile_compare = *profile_compare == "on";
    action(*c);
  });
}

}  // namespace kiln::cli
