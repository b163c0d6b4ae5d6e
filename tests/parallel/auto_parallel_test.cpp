// AUTO_PARALLEL's planning in one process (pure computation, any device count): on a real traced
// graph the search finds brute force's optimum; the memory limit moves the plan from data
// parallelism to split weights; plans are explained; bad settings are clear errors.
#include <gtest/gtest.h>

#include <string>

#include "kiln/core/error.h"
#include "kiln/ops/functional.h"
#include "kiln/parallel/auto_parallel.h"
#include "kiln/parallel/auto_problem.h"
#include "traced_mlp.h"

namespace kiln::parallel::auto_parallel_test {
namespace {

using traced::Mlp;

// Fixed figures, so that the choices below do not depend on the machine the test runs on.
AutoParallelOptions fixed_options() {
  AutoParallelOptions o;
  o.machine.flops_per_s = 50e9;
  o.machine.bytes_per_s = 30e9;
  o.machine.comm = {.alpha_s = 10e-6, .beta_s_per_byte = 0.2e-9};
  return o;
}

TEST(AutoParallel, OnATracedMlpTheSearchFindsBruteForcesOptimum) {
  for (int64_t devices : {2, 4}) {
    Mlp mlp(8, {16, 64, 4});
    const AutoProblem problem(mlp.g, mlp.loss, devices, fixed_options(), {});
    double combinations = 1;
    for (const CostGraph::Node& n : problem.time_graph.nodes) combinations *= double(n.cost.size());
    ASSERT_LE(combinations, 5e7) << devices;
    ASSERT_GE(combinations, 100) << "too few strategies to mean anything";
    const SearchResult dp = search_dynamic_programming(problem.time_graph);
    const SearchResult brute = search_exhaustive(problem.time_graph);
    EXPECT_TRUE(dp.exact);
    EXPECT_NEAR(dp.cost, brute.cost, 1e-12 + 1e-9 * brute.cost) << devices << " devices";
  }
}

// Three layers of 256 at a batch of 8,192: splitting a layer's features (Megatron) would move
// [8192, 256] activations between layers, far more than all-reducing a [256, 256] gradient.
TEST(AutoParallel, WithoutAMemoryLimitABigBatchTrainsDataParallel) {
  Mlp mlp(8192, {256, 256, 256, 256, 10});
  const AutoPlan plan = plan_auto_parallel(mlp.g, mlp.loss, 4, fixed_options());
  for (const auto& [v, layout] : plan.parameters) {
    EXPECT_TRUE(layout.is_replicated()) << mlp.g.value(v).name << " " << layout.str();
  }
  for (const auto& [id, choice] : plan.ops) {
    const std::string& what = choice.what;
    const bool batch = what.find("data parallel") != std::string::npos;
    const bool whole = what.find("runs whole") != std::string::npos;
    EXPECT_TRUE(batch || whole) << ops::op_name(mlp.g.node(id).op) << ": " << what << "\n"
                                << plan.str(mlp.g);
  }
  EXPECT_NEAR(plan.predicted.seconds(), plan.data_parallel.seconds(),
              0.05 * plan.data_parallel.seconds());
  EXPECT_DOUBLE_EQ(plan.lambda, 0);
}

TEST(AutoParallel, ATightMemoryLimitSplitsTheWeights) {
  Mlp mlp(8192, {256, 256, 256, 256, 10});
  AutoParallelOptions o = fixed_options();
  const AutoPlan loose = plan_auto_parallel(mlp.g, mlp.loss, 4, o);
  ASSERT_EQ(loose.parameters.size(), 8u);
  ASSERT_TRUE(mlp.layout_of(loose, "fc2.weight").is_replicated()) << loose.str(mlp.g);
  // Room for the activations and half of data parallelism's parameters and optimizer state.
  o.memory_limit_bytes =
      loose.data_parallel.activation_bytes + 0.5 * loose.data_parallel.parameter_bytes;
  const AutoPlan tight = plan_auto_parallel(mlp.g, mlp.loss, 4, o);
  EXPECT_TRUE(tight.fits);
  EXPECT_LE(tight.predicted.memory_bytes(), o.memory_limit_bytes);
  EXPECT_GT(tight.lambda, 0);
  int split = 0;
  for (const char* name : {"fc1.weight", "fc2.weight", "fc3.weight"}) {
    split += mlp.layout_of(tight, name).is_replicated() ? 0 : 1;
  }
  EXPECT_GE(split, 2) << tight.str(mlp.g);
  EXPECT_GE(tight.predicted.seconds(), loose.predicted.seconds());
  const std::string text = tight.str(mlp.g);
  EXPECT_NE(text.find("memory limit per rank"), std::string::npos) << text;
  EXPECT_NE(text.find("it binds"), std::string::npos) << text;
  EXPECT_NE(text.find("data parallelism does not fit the memory limit"), std::string::npos) << text;
}

// Weights of [1024, 1024]: even without a limit the search keeps the batch split but shards
// each weight and its optimizer state (as ZeRO does): gathering a weight forward and
// reduce-scattering its gradient move what an all-reduce would, and each rank then updates a
// quarter of it.
TEST(AutoParallel, BigWeightsAreShardedWithTheirOptimizerState) {
  Mlp mlp(8192, {1024, 1024, 1024, 1024, 10});
  const AutoPlan plan = plan_auto_parallel(mlp.g, mlp.loss, 4, fixed_options());
  for (const char* name : {"fc1.weight", "fc2.weight", "fc3.weight"}) {
    EXPECT_FALSE(mlp.layout_of(plan, name).is_replicated()) << name << "\n" << plan.str(mlp.g);
  }
  for (const auto& [id, choice] : plan.ops) {
    EXPECT_NE(choice.what.find("data parallel"), std::string::npos) << choice.what;
  }
  EXPECT_LT(plan.predicted.seconds(), plan.data_parallel.seconds());
  EXPECT_LT(plan.predicted.parameter_bytes, 0.3 * plan.data_parallel.parameter_bytes);
}

TEST(AutoParallel, ALimitNoPlanFitsIsAClearError) {
  Mlp mlp(64, {64, 1024, 10});
  AutoParallelOptions o = fixed_options();
  o.memory_limit_bytes = 1024;
  try {
    plan_auto_parallel(mlp.g, mlp.loss, 2, o);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("fits the memory limit of 0.000976562 MiB"), std::string::npos) << what;
    EXPECT_NE(what.find("the least memory a plan needs is"), std::string::npos) << what;
  }
}

TEST(AutoParallel, EverySearchModeGivesAPlanTheCostModelPrices) {
  Mlp mlp(8, {16, 4096, 4});
  for (const char* mode :
       {"dynamic_programming", "recursive_programming", "sharding_propagation"}) {
    AutoParallelOptions o = fixed_options();
    o.search = parse_search_mode(mode);
    const AutoPlan plan = plan_auto_parallel(mlp.g, mlp.loss, 2, o);
    EXPECT_EQ(plan.ops.size(), mlp.g.num_live_nodes()) << mode;
    EXPECT_GT(plan.predicted.seconds(), 0) << mode;
    EXPECT_NE(plan.str(mlp.g).find(std::string("search ") + mode), std::string::npos) << mode;
  }
  // The optimum is no worse than the other modes' plans, and at this batch of 8 the hidden
  // layer's 4,096 columns are split (its gradients would cost more to all-reduce than the
  // activations do).
  AutoParallelOptions o = fixed_options();
  const AutoPlan best = plan_auto_parallel(mlp.g, mlp.loss, 2, o);
  o.search = SearchMode::recursive_programming;
  const AutoPlan greedy = plan_auto_parallel(mlp.g, mlp.loss, 2, o);
  EXPECT_LE(best.predicted.seconds(), greedy.predicted.seconds() * (1 + 1e-12));
  EXPECT_LT(best.predicted.seconds(), best.data_parallel.seconds());
  EXPECT_FALSE(mlp.layout_of(best, "fc1.weight").is_replicated());
  EXPECT_THROW(parse_search_mode("simulated_annealing"), Error);
}

}  // namespace
}  // namespace kiln::parallel::auto_parallel_test
