// Data parallelism against the single process: 2 ranks × batch 32 must train exactly what one
// process trains with batch 64 (up to summation order), in eager and in graph mode.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/comm/communicator.h"
#include "kiln/core/context.h"
#include "kiln/core/parallel_context.h"
#include "kiln/core/random.h"
#include "kiln/data/dataset.h"
#include "kiln/models/zoo.h"
#include "kiln/nn/activation.h"
#include "kiln/nn/basic.h"
#include "kiln/nn/container.h"
#include "kiln/nn/conv.h"
#include "kiln/nn/dense.h"
#include "kiln/nn/loss.h"
#include "kiln/nn/normalization.h"
#include "kiln/ops/functional.h"
#include "kiln/optim/momentum.h"
#include "kiln/parallel/data_parallel.h"
#include "kiln/train/callbacks.h"
#include "kiln/train/checkpoint.h"
#include "kiln/train/model.h"

namespace kiln {
namespace {

constexpr int64_t kPerRank = 32;
constexpr int kSteps = 20;

// Step s's global batch: 32 × ranks rows of [1, 28, 28] images and labels that depend on them.
std::pair<Tensor, Tensor> global_batch(int64_t rows, int step) {
  Generator gen(1000 + uint64_t(step));
  Tensor x = Tensor::empty({rows, 1, 28, 28});
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = gen.uniform(-1.f, 1.f);
  std::vector<int32_t> y(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) y[size_t(r)] = p[r * 784 + 100] > 0 ? 3 : 7;
  return {x, Tensor::from_vector(y, Shape{rows})};
}

// The rows a rank's shard holds: r, r + ranks, ... (how sources shard).
std::pair<Tensor, Tensor> shard(const std::pair<Tensor, Tensor>& batch, int r, int ranks) {
  const int64_t n = batch.first.dim(0) / ranks;
  Tensor x = Tensor::empty({n, 1, 28, 28});
  std::vector<int32_t> y(static_cast<size_t>(n));
  std::vector<int32_t> all = batch.second.to_vector<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(batch.first.data<float>() + (r + i * ranks) * 784, 784, x.data<float>() + i * 784);
    y[size_t(i)] = all[size_t(r + i * ranks)];
  }
  return {x, Tensor::from_vector(y, Shape{n})};
}

// A zoo model, or "conv_sync_bn": a convolution, SyncBatchNorm in training, relu and a dense
// layer, whose statistics under DATA_PARALLEL are the whole job's batch.
std::shared_ptr<nn::Cell> make_net(const std::string& name) {
  if (name != "conv_sync_bn") return models::create(name);
  return std::make_shared<nn::SequentialCell>(std::vector<std::shared_ptr<nn::Cell>>{
      std::make_shared<nn::Conv2d>(1, 4, 3), std::make_shared<nn::SyncBatchNorm>(4),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Dense>(4 * 28 * 28, 10)});
}

struct Trained {
  std::vector<std::vector<float>> params;
  std::vector<float> losses;
};

Trained train(const std::string& model_name, ExecutionMode mode, bool data_parallel) {
  set_context({.mode = mode, .enable_graph_kernel = mode == GRAPH_MODE});
  if (data_parallel) {
    set_auto_parallel_context({.parallel_mode = ParallelMode::DATA_PARALLEL,
                               .gradients_mean = true,
                               .device_num = comm::size(),
                               .first_bucket_cap_mb = 0.05});  // several buckets, even for LeNet
  } else {
    reset_auto_parallel_context();
  }
  // Rank-dependent seeds: the broadcast at the start must make the weights equal.
  set_seed(data_parallel ? 7 + uint64_t(comm::rank()) : 7);
  auto net = make_net(model_name);
  auto loss = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean");
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), optim::constant_lr(0.05),
                                               optim::MomentumOptions{.momentum = 0.9});
  train::Model model(net, loss, opt);
  Trained out;
  const int ranks = comm::size();
  for (int s = 0; s < kSteps; ++s) {
    auto batch = global_batch(kPerRank * ranks, s);
    auto [x, y] = data_parallel ? shard(batch, comm::rank(), ranks) : batch;
    out.losses.push_back(model.train_step(x, y));
  }
  // The parameters and the buffers (BatchNorm's running statistics).
  for (const auto& [name, t] : net->state_and_names()) out.params.push_back(t.to_vector<float>());
  reset_auto_parallel_context();
  return out;
}

void expect_same_training(const std::string& model_name, ExecutionMode mode) {
  SCOPED_TRACE(model_name + (mode == GRAPH_MODE ? " graph" : " eager"));
  const Trained single = train(model_name, mode, false);
  const Trained parallel = train(model_name, mode, true);
  ASSERT_EQ(single.params.size(), parallel.params.size());
  double worst = 0;
  for (size_t i = 0; i < single.params.size(); ++i) {
    ASSERT_EQ(single.params[i].size(), parallel.params[i].size());
    double scale = 0;
    for (float v : single.params[i]) scale = std::max(scale, double(std::abs(v)));
    for (size_t k = 0; k < single.params[i].size(); ++k) {
      worst = std::max(
          worst, std::abs(double(single.params[i][k]) - parallel.params[i][k]) / (scale + 1e-12));
    }
  }
  EXPECT_LT(worst, 1e-5) << "largest difference relative to each parameter's magnitude";
  // The ranks' mean loss is the single process's loss.
  for (int s = 0; s < kSteps; ++s) {
    float mean = parallel.losses[size_t(s)] / float(comm::size());
    comm::all_reduce(&mean, 1, DType::f32);
    EXPECT_NEAR(mean, single.losses[size_t(s)], 1e-4) << "step " << s;
  }
  // Every rank ends with the same weights.
  std::vector<float> first = parallel.params[0];
  std::vector<float> root = first;
  comm::broadcast(root.data(), int64_t(root.size()), DType::f32, 0);
  EXPECT_EQ(first, root);
}

TEST(DataParallel, MlpEagerEqualsSingleProcess) {
  expect_same_training("mlp", PYNATIVE_MODE);
}
TEST(DataParallel, MlpGraphEqualsSingleProcess) {
  expect_same_training("mlp", GRAPH_MODE);
}
TEST(DataParallel, LenetEagerEqualsSingleProcess) {
  expect_same_training("lenet", PYNATIVE_MODE);
}
TEST(DataParallel, LenetGraphEqualsSingleProcess) {
  expect_same_training("lenet", GRAPH_MODE);
}

// SyncBatchNorm: each rank normalizes its shard with the whole batch's statistics, so the job
// trains what one process trains on the whole batch, running statistics included.
TEST(DataParallel, SyncBatchNormEagerEqualsSingleProcess) {
  expect_same_training("conv_sync_bn", PYNATIVE_MODE);
}
TEST(DataParallel, SyncBatchNormGraphEqualsSingleProcess) {
  expect_same_training("conv_sync_bn", GRAPH_MODE);
}

TEST(DataParallel, ResNet20Trains) {
  set_context({.mode = GRAPH_MODE, .enable_graph_kernel = true});
  set_auto_parallel_context({.parallel_mode = ParallelMode::DATA_PARALLEL,
                             .gradients_mean = true,
                             .device_num = comm::size()});
  set_seed(3);
  auto net = models::create("resnet20");
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), optim::constant_lr(0.05),
                                               optim::MomentumOptions{.momentum = 0.9});
  train::Model model(net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"), opt);
  auto [x, y] = shard(global_batch(8 * comm::size(), 0), comm::rank(), comm::size());
  std::vector<float> losses;
  for (int s = 0; s < 12; ++s) {
    float l = model.train_step(x, y) / float(comm::size());
    comm::all_reduce(&l, 1, DType::f32);
    losses.push_back(l);
  }
  EXPECT_LT(losses.back(), 0.5f * losses.front()) << "the job's loss on a repeated batch falls";
  reset_auto_parallel_context();
}

TEST(DataParallel, ShardsCoverTheDataOnceAcrossRanks) {
  set_auto_parallel_context({.parallel_mode = ParallelMode::DATA_PARALLEL,
                             .gradients_mean = true,
                             .device_num = comm::size()});
  const int64_t rows = 50 * comm::size();
  std::vector<int32_t> ids(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) ids[size_t(i)] = int32_t(i);
  data::Dataset ds =
      data::NumpySlicesDataset({Tensor::from_vector(ids, Shape{rows})}, {"id"}, {.shuffle = true});
  EXPECT_EQ(ds.get_dataset_size(), rows / comm::size());
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int32_t> mine;
    data::TupleIterator it = ds.create_tuple_iterator({.num_epochs = 1});
    std::vector<Tensor> row;
    while (it.next(row)) mine.push_back(row[0].to_vector<int32_t>()[0]);
    ASSERT_EQ(int64_t(mine.size()), rows / comm::size());
    std::vector<int32_t> all(static_cast<size_t>(rows));
    comm::all_gather(mine.data(), all.data(), int64_t(mine.size()), DType::i32);
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, ids) << "every row exactly once, epoch " << epoch;
  }
  reset_auto_parallel_context();
}

TEST(DataParallel, EvalAddsUpEveryRanksShard) {
  set_context({.mode = PYNATIVE_MODE});
  set_seed(5);
  auto net = models::create("mlp");
  auto loss = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean");
  train::Model model(net, loss, nullptr, {.metrics = {"accuracy"}});
  auto [x, y] = global_batch(64 * comm::size(), 99);
  auto make = [&] {
    return data::NumpySlicesDataset({x, y}, {"data", "label"}, {.shuffle = false}).batch(16);
  };
  const double single = model.eval(make())["accuracy"];
  set_auto_parallel_context({.parallel_mode = ParallelMode::DATA_PARALLEL,
                             .gradients_mean = true,
                             .device_num = comm::size()});
  const double parallel = model.eval(make())["accuracy"];
  EXPECT_DOUBLE_EQ(parallel, single);
  reset_auto_parallel_context();
}

TEST(DataParallel, RanksThatDisagreeAllGetTheError) {
  set_context({.mode = PYNATIVE_MODE});
  set_auto_parallel_context({.parallel_mode = ParallelMode::DATA_PARALLEL,
                             .gradients_mean = true,
                             .device_num = comm::size()});
  auto net = models::create("mlp");
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), optim::constant_lr(0.05));
  train::Model model(net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"), opt);
  // Rank 1 uses another per-rank batch size.
  auto [x, y] = global_batch(comm::rank() == 1 ? 16 : 32, 0);
  try {
    model.train_step(x, y);
    ADD_FAILURE() << "expected the ranks' disagreement to be an error";
  } catch (const comm::CollectiveError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("per-rank batch size"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 1 has 16"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 0 has 32"), std::string::npos) << m;
  }
  reset_auto_parallel_context();
}

TEST(DataParallel, OnlyRankZeroWritesCheckpoints) {
  set_context({.mode = PYNATIVE_MODE});
  set_auto_parallel_context({.parallel_mode = ParallelMode::DATA_PARALLEL,
                             .gradients_mean = true,
                             .device_num = comm::size()});
  const std::string dir =
      (std::filesystem::temp_directory_path() /
       ("kiln_dp_ckpt_" + std::to_string(comm::rank()) + "_" + std::to_string(::getpid())))
          .string();
  auto net = models::create("mlp");
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), optim::constant_lr(0.05));
  train::Model model(net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"), opt);
  auto [x, y] = shard(global_batch(32 * comm::size(), 0), comm::rank(), comm::size());
  data::Dataset ds =
      data::NumpySlicesDataset({x, y}, {"data", "label"}, {.shuffle = false}).batch(32);
  auto ckpt = std::make_shared<train::ModelCheckpoint>("mlp", dir);
  model.train(1, ds, {ckpt});
  const bool wrote = std::filesystem::exists(dir) && !std::filesystem::is_empty(dir);
  EXPECT_EQ(wrote, comm::rank() == 0);
  std::filesystem::remove_all(dir);
  reset_auto_parallel_context();
}

}  // namespace
}  // namespace kiln
