#pragma once
// Model: MindSpore's high-level training API.
//
//   train::Model model(net, loss, optimizer, {.metrics = {"accuracy"}});
//   model.train(5, train_ds, {std::make_shared<train::LossMonitor>(100)});
//   auto result = model.eval(test_ds);   // {"accuracy": 0.89}
//
// Eager mode (the default) runs forward, autograd::grad(loss, params) and one fused update op
// per parameter each step. In GRAPH_MODE (kiln::set_context) the whole step is compiled once.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/amp/level.h"
#include "kiln/amp/loss_scale.h"
#include "kiln/data/dataset.h"
#include "kiln/nn/cell.h"
#include "kiln/optim/optimizer.h"
#include "kiln/train/callback.h"
#include "kiln/train/metrics.h"

namespace kiln::train {

struct ModelOptions {
  // "O0".."O3" (amp/level.h). Eager mode runs forward and loss under amp::AutocastScope.
  std::string amp_level = "O0";
  bool keep_batchnorm_fp32 = true;
  std::string amp_dtype = "bf16";  // low-precision dtype: bf16 or fp16
  // bf16 at O1/O2 goes only where it pays on this CPU (amp/placement.h); amp_strict keeps
  // MindSpore's placement op for op.
  bool amp_strict = false;
  // "dynamic", "fixed:N", "none" or "" (MindSpore's default for the level: dynamic for fp16
  // at O2/O3). Overflowed steps are skipped, the optimizer's global step still advances.
  std::string loss_scale;
  std::vector<std::string> metrics;  // names for eval(), e.g. {"accuracy", "loss"}
  bool compile_log = true;           // graph mode: one stderr line per compilation (false: silent)
};

struct TrainOptions {
  // Dataset sink mode: each sink runs sink_size steps back to back, fed straight from the
  // pipeline, with no callback between them (-1: one sink per epoch; an epoch that sink_size
  // does not divide ends with a shorter sink). Callbacks' step hooks fire once per sink and see
  // every step's loss in CallbackParams::step_losses. Epochs stay passes over the data (in
  // MindSpore, sink_size > 0 makes each epoch sink_size steps instead).
  bool dataset_sink_mode = false;
  int64_t sink_size = -1;
  int64_t initial_epoch = 0;  // epochs already done (resume): training runs epochs initial..N-1
  int64_t initial_step = 0;   // batches of the first epoch already done (resume mid-epoch)
  int64_t max_steps = -1;     // stop after this many steps in this call (-1: no limit)
  // On resume, draw (and discard) the batches of the initial epochs too, so a shuffled data set
  // continues with exactly the order an uninterrupted run would have seen. Costs one pass over
  // the data per skipped epoch (cheap for in-memory sets, a full decode for image folders).
  bool replay_skipped_epochs = false;
};

class CompiledTrainStep;  // graph mode (train/compiled_step.h)
}  // namespace kiln::train
namespace kiln::parallel {
class GradientReducer;  // eager data parallelism (parallel/data_parallel.h)
}  // namespace kiln::parallel
namespace kiln::train {

class Model {
 public:
  Model(std::shared_ptr<nn::Cell> network, std::shared_ptr<nn::LossCell> loss_fn,
        std::shared_ptr<optim::Optimizer> optimizer, ModelOptions options = {});
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Trains until `epochs` epochs are done. Each row of the dataset is the network's inputs
  // followed by the label: (data, label) for a network of one input, (a, b, label) for one of
  // two (nn::Cell::construct_multi). The loss and the metrics see the network's first output.
  void train(int64_t epochs, const data::Dataset& train_dataset,
             const std::vector<CallbackPtr>& callbacks = {}, const TrainOptions& options = {});
  // One training step on a batch; returns the loss.
  float train_step(const Tensor& data, const Tensor& label);
  float train_step(const nn::Tensors& inputs, const Tensor& label);

  // Runs the network in evaluation mode over one epoch of the dataset; metric names default to
  // ModelOptions::metrics (or {"accuracy", "loss"} when none were given).
  std::map<std::string, double> eval(const data::Dataset& dataset,
                                     const std::vector<std::string>& metrics = {});
  // The network's output in evaluation mode, without gradients.
  Tensor predict(const Tensor& data);
  // Every output of a network of several inputs or outputs.
  nn::Tensors predict(const nn::Tensors& inputs);

  nn::Cell& network() { return *network_; }
  nn::LossCell& loss_fn() { return *loss_fn_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  // Steps trained so far (the optimizer's global step).
  int64_t global_step() const { return optimizer_->global_step(); }
  // Steps whose update was skipped because the loss-scaled gradients overflowed.
  int64_t skipped_steps() const;
  // The loss-scale manager (its scale() is the one the next step uses); null without scaling.
  const amp::LossScaleManager* loss_scale_manager() const { return loss_scale_.get(); }
  // Graph mode: the compiled training step (null before the first graph-mode step).
  const CompiledTrainStep* compiled_step() const { return compiled_.get(); }

 private:
  void check_trainable() const;
  // Under DATA_PARALLEL, once before the first step: rank 0's parameters and state copied to
  // every rank, and the ranks checked to train the same thing (an Error on every rank if not).
  void join_data_parallel(const nn::Tensors& inputs);
  float eager_step(const nn::Tensors& inputs, const Tensor& label);
  // Eager mode on batch slices side by side (train/batch_split_step.h): how many slices a batch
  // shaped as `inputs` runs as, 1 for the whole batch; decided once per shape and mode.
  int eager_slices(const nn::Tensors& inputs, const Tensor& label);
  float graph_step(const nn::Tensors& inputs, const Tensor& label);

  std::shared_ptr<nn::Cell> network_;
  std::shared_ptr<nn::LossCell> loss_fn_;
  std::shared_ptr<optim::Optimizer> optimizer_;
  ModelOptions options_;
  std::vector<Tensor> params_;
  amp::AmpConfig amp_;
  std::unique_ptr<amp::LossScaleManager> loss_scale_;
  std::unique_ptr<CompiledTrainStep> compiled_;         // created on the first graph-mode step
  std::unique_ptr<parallel::GradientReducer> reducer_;  // eager data parallelism
  bool joined_ = false;                                 // join_data_parallel ran
  bool placement_logged_ = false;  // eager: the first step's AMP placement was printed
  int compiles_traced_ = 0;        // compiled graphs a profiler (step_trace.h) was told of
  struct EagerSplit {
    std::vector<Shape> shapes;  // of the network's inputs
    bool training = false;
    int threads = 0;
    int slices = 1;
  };
  std::optional<EagerSplit> eager_split_;  // the last eager_slices() decision
};

}  // namespace kiln::train
