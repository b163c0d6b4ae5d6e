#include "kiln/nn/normalization.h"

#include "kiln/core/error.h"
#include "kiln/core/parallel_context.h"
#include "kiln/ops/functional.h"

namespace kiln::nn {

BatchNorm2d::BatchNorm2d(int64_t num_features, BatchNorm2dOptions options)
    : BatchNorm2d("BatchNorm2d", num_features, std::move(options), false) {}

BatchNorm2d::BatchNorm2d(const std::string& name, int64_t num_features, BatchNorm2dOptions options,
                         bool sync_ranks)
    : Cell(name),
      num_features_(num_features),
      options_(std::move(options)),
      sync_ranks_(sync_ranks) {
  if (num_features <= 0) {
    throw Error(name + ": num_features must be > 0, got " + std::to_string(num_features));
  }
  if (!(options_.momentum >= 0 && options_.momentum <= 1)) {
    throw Error(name + ": momentum must lie in [0, 1], got " + std::to_string(options_.momentum));
  }
  Shape c{num_features};
  Tensor gamma = initializer(options_.gamma_init ? options_.gamma_init : One(), c);
  Tensor beta = initializer(options_.beta_init ? options_.beta_init : Zero(), c);
  if (options_.affine) {
    gamma_ = register_parameter("gamma", gamma);
    beta_ = register_parameter("beta", beta);
  } else {
    gamma_ = register_buffer("gamma", gamma);
    beta_ = register_buffer("beta", beta);
  }
  moving_mean_ = register_buffer("moving_mean", Tensor::zeros(c));
  moving_variance_ = register_buffer("moving_variance", Tensor::ones(c));
}

Tensor BatchNorm2d::construct(const Tensor& x) {
  if (x.rank() != 4 || x.dim(1) != num_features_) {
    throw ShapeError(cell_name() + ": input " + describe(x) + " is not [N, " +
                     std::to_string(num_features_) + ", H, W]");
  }
  const bool sync = sync_ranks_ && training() &&
                    get_auto_parallel_context().parallel_mode == ParallelMode::DATA_PARALLEL;
  return batch_norm_.run([&] {
    return ops::batch_norm(x, gamma_, beta_, moving_mean_, moving_variance_, training(),
                           options_.momentum, options_.eps, sync)[0];
  });
}

SyncBatchNorm::SyncBatchNorm(int64_t num_features, BatchNorm2dOptions options)
    : BatchNorm2d("SyncBatchNorm", num_features, std::move(options), true) {}

LayerNorm::LayerNorm(std::vector<int64_t> normalized_shape, LayerNormOptions options)
    : Cell("LayerNorm"), normalized_shape_(std::move(normalized_shape)), options_(options) {
  if (normalized_shape_.rank() == 0 || normalized_shape_.numel() <= 0) {
    throw Error("LayerNorm: normalized_shape " + normalized_shape_.str() + " is empty");
  }
  gamma_ = register_parameter(
      "gamma", initializer(options_.gamma_init ? options_.gamma_init : One(), normalized_shape_));
  beta_ = register_parameter(
      "beta", initializer(options_.beta_init ? options_.beta_init : Zero(), normalized_shape_));
}

Tensor LayerNorm::construct(const Tensor& x) {
  int r = normalized_shape_.rank();
  bool ok = x.rank() >= r;
  for (int i = 0; ok && i < r; ++i) ok = x.dim(x.rank() - r + i) == normalized_shape_[i];
  if (!ok) {
    throw ShapeError("LayerNorm: input " + describe(x) + " does not end in normalized_shape " +
                     normalized_shape_.str());
  }
  return ops::layer_norm(x, gamma_, beta_, options_.eps)[0];
}

}  // namespace kiln::nn
