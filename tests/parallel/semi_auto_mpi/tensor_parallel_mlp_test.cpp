// A 2-layer MLP with a hidden size of 4,096 trained 10 steps under SEMI_AUTO_PARALLEL (strategies
// given by hand: Megatron's column/row split, the batch split, and both at once on 4 ranks)
// equals the same MLP trained by this process alone: every step's loss and the gathered
// parameters at the end, within 1e-5 relative (fp32).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/comm/communicator.h"
#include "kiln/core/context.h"
#include "kiln/core/parallel_context.h"
#include "kiln/core/random.h"
#include "kiln/nn/dense.h"
#include "kiln/nn/loss.h"
#include "kiln/ops/functional.h"
#include "kiln/optim/momentum.h"
#include "kiln/parallel/semi_auto.h"
#include "kiln/train/checkpoint.h"
#include "kiln/train/compiled_step.h"
#include "parallel/semi_auto_mpi/agreement.h"

namespace kiln {
namespace {

using testing::expect_same_training;
using testing::TrainedRun;

constexpr int64_t kBatch = 8, kIn = 8, kHidden = 4096, kClasses = 4;
constexpr int kSteps = 10;

class Mlp : public nn::Cell {
 public:
  Mlp() : Cell("Mlp") {
    fc1 = register_cell("fc1", std::make_shared<nn::Dense>(kIn, kHidden));
    fc2 = register_cell("fc2", std::make_shared<nn::Dense>(kHidden, kClasses));
  }
  Tensor construct(const Tensor& x) override { return (*fc2)(ops::relu((*fc1)(x))); }
  std::shared_ptr<nn::Dense> fc1, fc2;
};

std::pair<Tensor, Tensor> batch(int step) {
  Generator gen(500 + uint64_t(step));
  Tensor x = Tensor::empty({kBatch, kIn});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = gen.uniform(-1.f, 1.f);
  std::vector<int32_t> y(static_cast<size_t>(kBatch));
  for (int64_t r = 0; r < kBatch; ++r) {
    y[size_t(r)] = int32_t(r % kClasses) ^ (x.data<float>()[r * kIn] > 0 ? 1 : 0);
  }
  return {x, Tensor::from_vector(y, Shape{kBatch})};
}

using SetStrategies = std::function<void(Mlp&)>;

// With `strategies`: SEMI_AUTO_PARALLEL with them, or with `search`: AUTO_PARALLEL with that
// search mode (and the user's strategies, if any, for sharding_propagation) and that memory limit
// per rank. Neither: one process.
// `op_times`: AUTO_PARALLEL's; estimated by default, so that the plans the tests expect do not
// hang on the machine's timings.
TrainedRun train(const SetStrategies& strategies, const std::string& search = "",
                 double memory_limit_mb = 0, const std::string& op_times = "estimated") {
  set_context({.mode = GRAPH_MODE});
  const bool sharded = strategies != nullptr || !search.empty();
  if (!search.empty()) {
    set_auto_parallel_context({.parallel_mode = ParallelMode::AUTO_PARALLEL,
                               .device_num = comm::size(),
                               .search_mode = search,
                               .memory_limit_mb = memory_limit_mb,
                               .op_times = op_times});
  } else if (sharded) {
    set_auto_parallel_context(
        {.parallel_mode = ParallelMode::SEMI_AUTO_PARALLEL, .device_num = comm::size()});
  } else {
    reset_auto_parallel_context();
  }
  // Rank-dependent seeds when sharded: the run must start from rank 0's whole values.
  set_seed(sharded ? 11 + uint64_t(comm::rank()) : 11);
  Mlp net;
  if (strategies) strategies(net);
  nn::SoftmaxCrossEntropyWithLogits loss(true, "mean");
  optim::Momentum opt(net.trainable_params(), optim::constant_lr(0.05),
                      optim::MomentumOptions{.momentum = 0.9});
  train::CompiledTrainStep step(net, loss, opt, graph::CompileOptions{});
  step.set_verbose(false);
  TrainedRun out;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch(s);
    out.losses.push_back(step.run(x, y).item<float>());
  }
  out.plan = step.parallel_plan();
  testing::finish_run(out, net, step, batch(0).first, batch(0).second, sharded,
                      "kiln_semi_auto_mlp_" + std::to_string(comm::size()));
  parallel::forget_sharded_parameters();
  reset_auto_parallel_context();
  return out;
}

const TrainedRun& single_process() {
  static const TrainedRun t = train(nullptr);
  return t;
}

TEST(TensorParallelMlp, MegatronColumnThenRowSplitEqualsSingleProcess) {
  const int64_t n = comm::size();
  const TrainedRun got = train([n](Mlp& m) {
    m.fc1->matmul().shard({{1, 1}, {n, 1}});  // weight [4096, 8]: output columns
    m.fc2->matmul().shard({{1, n}, {1, n}});  // contracted dimension: partial sums
  });
  expect_same_training(got, single_process());
  EXPECT_NE(got.plan.find("parameter fc1.weight [4096, 8]: split [" + std::to_string(n)),
            std::string::npos)
      << got.plan;
  EXPECT_NE(got.plan.find("all_reduce"), std::string::npos) << got.plan;
}

TEST(TensorParallelMlp, BatchSplitEqualsSingleProcess) {
  const int64_t n = comm::size();
  const TrainedRun got = train([n](Mlp& m) { m.fc1->matmul().shard({{n, 1}, {1, 1}}); });
  expect_same_training(got, single_process());
}

TEST(TensorParallelMlp, BatchAndModelSplitTogetherEqualsSingleProcess) {
  if (comm::size() != 4) GTEST_SKIP() << "a [2, 2] device matrix needs 4 ranks";
  const TrainedRun got = train([](Mlp& m) {
    m.fc1->matmul().shard({{2, 1}, {2, 1}});
    m.fc2->matmul().shard({{2, 2}, {1, 2}});
  });
  expect_same_training(got, single_process());
}

// AUTO_PARALLEL: whatever each search chooses, the run must be the single process's.
TEST(TensorParallelMlp, AutoParallelDynamicProgrammingEqualsSingleProcess) {
  const TrainedRun got = train(nullptr, "dynamic_programming", 0, "measured");
  expect_same_training(got, single_process());
  EXPECT_NE(got.plan.find("AUTO_PARALLEL plan for " + std::to_string(comm::size()) +
                          " devices (search dynamic_programming, optimal"),
            std::string::npos)
      << got.plan;
  EXPECT_NE(got.plan.find("forward and backward timed"), std::string::npos) << got.plan;
}

// Data parallelism holds every weight whole: 0.61 MiB of parameters, gradients and momentum per
// rank besides the activations, over a limit of 0.55 MiB on 2 or 4 ranks. The search must split
// a weight and run its matmul model parallel (a batch split alone cannot fit).
TEST(TensorParallelMlp, AutoParallelUnderATightMemoryLimitSplitsAWeightAndEqualsSingleProcess) {
  const TrainedRun got = train(nullptr, "dynamic_programming", 0.55);
  expect_same_training(got, single_process());
  EXPECT_NE(got.plan.find("memory limit per rank: 0.55 MiB"), std::string::npos) << got.plan;
  EXPECT_NE(got.plan.find("data parallelism does not fit the memory limit"), std::string::npos)
      << got.plan;
  EXPECT_EQ(got.plan.find("this plan does not fit"), std::string::npos) << got.plan;
  bool model_parallel = false;
  for (const char* weight : {"fc1.weight", "fc2.weight"}) {
    model_parallel = model_parallel || (testing::holds_split(got.plan, weight) &&
                                        testing::runs_model_parallel(got.plan, weight));
  }
  EXPECT_TRUE(model_parallel) << "no weight is split and run model parallel:\n" << got.plan;
}

TEST(TensorParallelMlp, AutoParallelRecursiveProgrammingEqualsSingleProcess) {
  const TrainedRun got = train(nullptr, "recursive_programming");
  expect_same_training(got, single_process());
}

TEST(TensorParallelMlp, AutoParallelShardingPropagationFromTheUsersStrategyEqualsSingleProcess) {
  const int64_t n = comm::size();
  const TrainedRun got = train(
      [n](Mlp& m) {
        m.fc1->matmul().shard({{1, 1}, {n, 1}});
      },
      "sharding_propagation");
  expect_same_training(got, single_process());
  EXPECT_NE(got.plan.find("parameter fc1.weight [4096, 8]: split [" + std::to_string(n)),
            std::string::npos)
      << got.plan;
}

TEST(TensorParallelMlp, AStrategyThatDoesNotFitIsAClearError) {
  set_context({.mode = GRAPH_MODE});
  set_auto_parallel_context(
      {.parallel_mode = ParallelMode::SEMI_AUTO_PARALLEL, .device_num = comm::size()});
  Mlp net;
  net.fc1->matmul().shard({{1, 1}, {2 * comm::size(), 1}});
  nn::SoftmaxCrossEntropyWithLogits loss(true, "mean");
  optim::Momentum opt(net.trainable_params(), optim::constant_lr(0.05), {});
  train::CompiledTrainStep step(net, loss, opt, graph::CompileOptions{});
  step.set_verbose(false);
  auto [x, y] = batch(0);
  try {
    step.run(x, y);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("matmul: strategy ((1, 1), (" + std::to_string(2 * comm::size()) + ", 1))"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("f32[8, 8], f32[4096, 8]"), std::string::npos) << what;
    EXPECT_NE(what.find("devices"), std::string::npos) << what;
  }
  parallel::forget_sharded_parameters();
  reset_auto_parallel_context();
}

}  // namespace
}  // namespace kiln
