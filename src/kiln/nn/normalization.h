#pragma once
#include <string>
#include <vector>

#include "kiln/nn/cell.h"
#include "kiln/nn/initializer.h"
#include "kiln/nn/primitive.h"

namespace kiln::nn {

struct BatchNorm2dOptions {
  double eps = 1e-5;
  // MindSpore's convention: moving = momentum * moving + (1 - momentum) * batch.
  double momentum = 0.9;
  bool affine = true;         // false: gamma/beta fixed at 1/0 and not trained
  InitializerPtr gamma_init;  // null: ones
  InitializerPtr beta_init;   // null: zeros
};

// Batch normalization over the channel dim of NCHW input. Parameters "gamma", "beta"; buffers
// "moving_mean", "moving_variance" (MindSpore's names), updated in place while training.
class BatchNorm2d : public Cell {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNorm2dOptions options = {});
  Tensor construct(const Tensor& x) override;

  Tensor gamma() const { return gamma_; }
  Tensor beta() const { return beta_; }
  Tensor moving_mean() const { return moving_mean_; }
  Tensor moving_variance() const { return moving_variance_; }
  // The layer's op, for SEMI_AUTO_PARALLEL strategies: batch_norm(x, gamma, beta, moving_mean,
  // moving_variance).
  Primitive& batch_norm() { return batch_norm_; }

 protected:
  // SyncBatchNorm's: the same layer under another name, its statistics across the ranks.
  BatchNorm2d(const std::string& name, int64_t num_features, BatchNorm2dOptions options,
              bool sync_ranks);

 private:
  int64_t num_features_;
  BatchNorm2dOptions options_;
  bool sync_ranks_ = false;
  Tensor gamma_, beta_;
  Tensor moving_mean_;
  Tensor moving_variance_;
  Primitive batch_norm_{ops::OpKind::batch_norm};
};

// MindSpore's nn.SyncBatchNorm: BatchNorm2d whose training statistics, under DATA_PARALLEL, are
// those of the job's whole batch (every rank's shard), not of the rank's own shard, so a
// data-parallel job normalizes exactly as one process with the whole batch would. Each rank
// keeps the same running statistics. In other parallel modes and alone it is BatchNorm2d.
class SyncBatchNorm : public BatchNorm2d {
 public:
  explicit SyncBatchNorm(int64_t num_features, BatchNorm2dOptions options = {});
};

struct LayerNormOptions {
  double eps = 1e-7;          // MindSpore's default
  InitializerPtr gamma_init;  // null: ones
  InitializerPtr beta_init;   // null: zeros
};

// Normalizes over the trailing dims given by normalized_shape; "gamma" and "beta" have that shape.
class LayerNorm : public Cell {
 public:
  explicit LayerNorm(std::vector<int64_t> normalized_shape, LayerNormOptions options = {});
  Tensor construct(const Tensor& x) override;

 private:
  Shape normalized_shape_;
  LayerNormOptions options_;
  Tensor gamma_;
  Tensor beta_;
};

}  // namespace kiln::nn
