#pragma once
// A compiled training step run on batch slices side by side: for a model whose kernels are too
// small to split across threads (LeNet at batch 64), each of `slices` threads runs the forward and
// backward of its slice of the batch, every kernel on that thread alone, then one update adds
// the slices' gradients and applies the optimizer once. Equal to the whole-batch step up to the
// order of the gradient sums. One fork/join per step instead of one per kernel.
//
// Each slice has its own compiled graph (compiled for the slice's shape, with its own arena: the
// slices run at the same time); parameters and optimizer state are bound by reference, as in
// CompiledTrainStep, which chooses between this and the whole-batch step by measuring both
// (compiled_step.cpp).
//
// BatchNorm in training normalizes with the statistics of the whole batch, as the whole-batch
// step does: the slices' threads form a ThreadGroup (core/thread_group.h) and every BatchNorm
// meets the other slices' once in its forward (statistics) and once in its backward (the sums in
// its input gradient). Not for every network: dropout draws its mask for the whole batch from
// one generator. batch_split_refusal says why a traced step cannot split.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/amp/level.h"
#include "kiln/core/thread_group.h"
#include "kiln/graph/executor.h"
#include "kiln/nn/cell.h"
#include "kiln/optim/optimizer.h"

namespace kiln::train {

// Why the traced whole-batch training step `g` cannot run as `slices` slices of a batch of
// `batch` samples; empty when it can.
std::string batch_split_refusal(const graph::Graph& g, const nn::LossCell& loss, int64_t batch,
                                int slices);

// Eager mode's batch split: each of `slices` threads runs the forward and backward of its slice
// of the batch (every input and the labels sliced alike) on the tape, every kernel on that thread
// alone; returns the batch's loss and the parameters' gradients, summed over the slices. The
// caller applies them.
std::pair<Tensor, std::vector<Tensor>> eager_split_loss_and_gradients(
    nn::Cell& net, nn::LossCell& loss, const std::vector<Tensor>& params, const amp::AmpConfig& amp,
    const nn::Tensors& inputs, const Tensor& labels, int slices);
// Why eager mode cannot run this network's step on `slices` slices (its forward is traced once to
// see its ops, as batch_split_refusal reads them); empty when it can.
std::string eager_batch_split_refusal(nn::Cell& net, nn::LossCell& loss, const nn::Tensors& inputs,
                                      const Tensor& labels, int slices);
// The same for graph mode's BatchSplitStep, which also splits BatchNorm in training.
std::string graph_batch_split_refusal(nn::Cell& net, nn::LossCell& loss, const nn::Tensors& inputs,
                                      const Tensor& labels, int slices);

class BatchSplitStep {
 public:
  // Compiles the slice graphs and the update for batches shaped as `inputs` (the network's) and
  // `labels`. `options` as for the whole-batch step (fusion, dumps); each slice gets its own
  // arena and one thread per kernel.
  BatchSplitStep(nn::Cell& net, nn::LossCell& loss, optim::Optimizer& opt,
                 const graph::CompileOptions& options, const amp::AmpConfig& amp,
                 const nn::Tensors& inputs, const Tensor& labels, int slices);
  ~BatchSplitStep();

  // One step (forward, loss, backward of every slice in parallel; the update once); returns
  // the batch's loss. The caller calls the optimizer's prepare_step() and advance() around it.
  Tensor run(const nn::Tensors& inputs, const Tensor& labels);

  int slices() const { return int(slice_steps_.size()); }
  // BatchNorms whose statistics the slices combine.
  int shared_statistics() const { return shared_statistics_; }
  bool accepts(const nn::Tensors& inputs, const Tensor& labels) const;
  double compile_ms() const { return compile_ms_; }
  const graph::Executable& update() const { return *update_; }
  const graph::Executable& slice_step(int i) const { return *slice_steps_.at(size_t(i)); }

 private:
  std::unique_ptr<ThreadGroup> group_;  // the slices' threads, while run() runs them
  int shared_statistics_ = 0;
  std::vector<std::unique_ptr<graph::Executable>> slice_steps_;
  std::unique_ptr<graph::Executable> update_;
  std::vector<ops::TensorMeta> batch_;  // the network's inputs, then the labels
  double compile_ms_ = 0;
};

}  // namespace kiln::train
