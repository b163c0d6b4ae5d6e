// A small convolution net (conv-BN-ReLU, max pool, depthwise conv-BN-ReLU, pointwise conv-BN-ReLU,
// global average pool, dense) trained 4 steps under SEMI_AUTO_PARALLEL with channel-split
// strategies given by hand equals the same net trained by this process alone: every step's
// loss, the gathered parameters and running statistics, and the evaluation logits, within 1e-5
// relative (fp32).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kiln/comm/communicator.h"
#include "kiln/core/context.h"
#include "kiln/core/parallel_context.h"
#include "kiln/core/random.h"
#include "kiln/nn/nn.h"
#include "kiln/ops/functional.h"
#include "kiln/optim/momentum.h"
#include "kiln/parallel/semi_auto.h"
#include "kiln/train/compiled_step.h"

namespace kiln {
namespace {

constexpr int64_t kBatch = 8, kChannels = 3, kSize = 8, kClasses = 4;
constexpr int kSteps = 4;

std::shared_ptr<nn::Conv2d> conv(int64_t in, int64_t out, int64_t kernel, int64_t group = 1) {
  return std::make_shared<nn::Conv2d>(
      in, out, kernel,
      nn::Conv2dOptions{.pad_mode = "pad", .padding = {kernel / 2, kernel / 2}, .group = group});
}

class ConvNet : public nn::Cell {
 public:
  ConvNet() : Cell("ConvNet") {
    conv1 = register_cell("conv1", conv(kChannels, 8, 3));
    bn1 = register_cell("bn1", std::make_shared<nn::BatchNorm2d>(8));
    pool = register_cell("pool", std::make_shared<nn::MaxPool2d>(2));
    depthwise = register_cell("depthwise", conv(8, 8, 3, 8));
    bn2 = register_cell("bn2", std::make_shared<nn::BatchNorm2d>(8));
    pointwise = register_cell("pointwise", conv(8, 16, 1));
    bn3 = register_cell("bn3", std::make_shared<nn::BatchNorm2d>(16));
    fc = register_cell("fc", std::make_shared<nn::Dense>(16, kClasses));
  }
  Tensor construct(const Tensor& x) override {
    Tensor y = pool->construct(ops::relu(bn1->construct(conv1->construct(x))));
    y = ops::relu(bn2->construct(depthwise->construct(y)));
    y = ops::relu(bn3->construct(pointwise->construct(y)));
    return fc->construct(ops::mean(y, {2, 3}));
  }
  std::shared_ptr<nn::Conv2d> conv1, depthwise, pointwise;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2, bn3;
  std::shared_ptr<nn::MaxPool2d> pool;
  std::shared_ptr<nn::Dense> fc;
};

std::pair<Tensor, Tensor> batch(int step) {
  Generator gen(700 + uint64_t(step));
  Tensor x = Tensor::empty({kBatch, kChannels, kSize, kSize});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = gen.uniform(-1.f, 1.f);
  std::vector<int32_t> y(static_cast<size_t>(kBatch));
  for (int64_t r = 0; r < kBatch; ++r) y[size_t(r)] = int32_t(r % kClasses);
  return {x, Tensor::from_vector(y, Shape{kBatch})};
}

struct Trained {
  std::vector<float> losses;
  std::vector<nn::NamedTensor> state;  // parameters and running statistics, gathered
  Tensor eval_logits;
  std::string plan;
};

Trained train(const std::function<void(ConvNet&)>& strategies) {
  set_context({.mode = GRAPH_MODE});
  const bool sharded = strategies != nullptr;
  if (sharded) {
    set_auto_parallel_context(
        {.parallel_mode = ParallelMode::SEMI_AUTO_PARALLEL, .device_num = comm::size()});
  } else {
    reset_auto_parallel_context();
  }
  set_seed(sharded ? 31 + uint64_t(comm::rank()) : 31);  // sharded runs start from rank 0's
  ConvNet net;
  if (sharded) strategies(net);
  nn::SoftmaxCrossEntropyWithLogits loss(true, "mean");
  optim::Momentum opt(net.trainable_params(), optim::constant_lr(0.05),
                      optim::MomentumOptions{.momentum = 0.9});
  train::CompiledTrainStep step(net, loss, opt, graph::CompileOptions{});
  step.set_verbose(false);
  Trained out;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch(s);
    out.losses.push_back(step.run(x, y).item<float>());
  }
  out.state = parallel::gather_whole(net.state_and_names());
  out.plan = step.parallel_plan();
  net.set_train(false);
  out.eval_logits = step.evaluate(batch(0).first, batch(0).second).first;
  parallel::forget_sharded_parameters();
  reset_auto_parallel_context();
  return out;
}

void expect_same_training(const Trained& got, const Trained& want) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < want.losses.size(); ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], 1e-5 * std::fabs(want.losses[s]))
        << "step " << s << " on rank " << comm::rank();
  }
  std::vector<nn::NamedTensor> a = got.state, b = want.state;
  a.emplace_back("eval logits", got.eval_logits);
  b.emplace_back("eval logits", want.eval_logits);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    const std::vector<float> g = a[i].second.to_vector<float>(), w = b[i].second.to_vector<float>();
    ASSERT_EQ(g.size(), w.size()) << b[i].first;
    double scale = 0, worst = 0;
    for (size_t j = 0; j < w.size(); ++j) {
      scale = std::max(scale, double(std::fabs(w[j])));
      worst = std::max(worst, double(std::fabs(g[j] - w[j])));
    }
    EXPECT_LE(worst, 1e-5 * scale) << b[i].first << " on rank " << comm::rank();
  }
}

const Trained& single_process() {
  static const Trained t = train(nullptr);
  return t;
}

TEST(ConvNetChannelSplit, OutputThenInputChannelsEqualsSingleProcess) {
  const int64_t n = comm::size();
  const Trained got = train([n](ConvNet& m) {
    // The first conv's output channels: the batch norms, the pool and the depthwise conv follow
    // the channel split; the pointwise conv then splits its input channels (partial sums).
    m.conv1->conv2d().shard({{1, 1, 1, 1}, {n, 1, 1, 1}});
    m.pointwise->conv2d().shard({{1, n, 1, 1}, {1, n, 1, 1}});
    m.bn3->batch_norm().shard({{1, n, 1, 1}, {n}, {n}, {n}, {n}});
  });
  expect_same_training(got, single_process());
  EXPECT_NE(got.plan.find("parameter depthwise.weight [8, 1, 3, 3]: split [" + std::to_string(n)),
            std::string::npos)
      << got.plan;
  EXPECT_NE(got.plan.find("reduce_scatter"), std::string::npos) << got.plan;
}

TEST(ConvNetChannelSplit, BatchSplitBeforeABatchNormIsGatheredAndThePlanSaysWhy) {
  if (comm::size() != 4) GTEST_SKIP() << "a [2, 2] device matrix needs 4 ranks";
  const Trained got = train([](ConvNet& m) {
    m.conv1->conv2d().shard({{2, 1, 1, 1}, {2, 1, 1, 1}});  // batch and output channels
  });
  expect_same_training(got, single_process());
  // bn1 keeps the channel split and gathers the batch: its plan line says why.
  EXPECT_NE(got.plan.find("where it can (batch_norm accepts"), std::string::npos) << got.plan;
  EXPECT_NE(got.plan.find("SyncBatchNorm"), std::string::npos) << got.plan;
  EXPECT_NE(got.plan.find("all_gather dim 0"), std::string::npos) << got.plan;
}

}  // namespace
}  // namespace kiln
