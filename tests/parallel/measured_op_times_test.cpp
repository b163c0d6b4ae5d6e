// AUTO_PARALLEL with measured op times (parallel/measured_op_times.h): each query is timed once
// per process, an op that cannot be timed keeps the estimate, and the cost graph prices each op
// at exactly the time measured for its local shapes and its differentiable inputs.
#include "kiln/parallel/measured_op_times.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kiln/ops/attrs.h"
#include "kiln/ops/dispatch.h"
#include "kiln/parallel/auto_parallel.h"
#include "kiln/parallel/auto_problem.h"
#include "traced_mlp.h"

namespace kiln::parallel::measured_op_times_test {
namespace {

autograd::OpTimingQuery relu(int64_t n) {
  return {.kind = ops::OpKind::relu, .inputs = {{Shape({n}), DType::f32}}};
}

TEST(MeasuredOpTimes, EachQueryIsTimedOncePerInstance) {
  MeasuredOpTimes times;
  const std::vector<double> first = times.seconds({relu(4096), relu(8192), relu(4096)});
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(times.timed(), 2) << "the repeated query is served from the cache";
  EXPECT_GT(first[0], 0);
  EXPECT_EQ(first[0], first[2]);
  const std::vector<double> again = times.seconds({relu(8192)});
  EXPECT_EQ(times.timed(), 2);
  EXPECT_EQ(again[0], first[1]);
  EXPECT_GT(times.timing_seconds(), 0);
}

TEST(MeasuredOpTimes, AnOpThatCannotBeTimedIsNaN) {
  MeasuredOpTimes times;
  const autograd::OpTimingQuery bad{
      .kind = ops::OpKind::matmul,
      .inputs = {{Shape({2, 3}), DType::f32}, {Shape({4, 5}), DType::f32}},
      .attrs = ops::MatmulAttrs{}};
  EXPECT_TRUE(std::isnan(times.seconds({bad})[0]));
}

TEST(MeasuredOpTimes, TheCostGraphPricesEachOpAtItsMeasuredTime) {
  const traced::Mlp mlp(8, {16, 32, 4});
  AutoParallelOptions options;
  options.machine.op_times = std::make_shared<MeasuredOpTimes>();
  const AutoProblem problem(mlp.g, mlp.loss, 1, options, {});
  const int64_t timed = options.machine.op_times->timed();
  EXPECT_GT(timed, 0);

  // The first matmul reads the images (no gradient) and fc1's weight (a gradient): the planner
  // asked for exactly that query, so asking again times nothing and gives the op's node cost.
  int node = 0;
  bool found = false;
  for (graph::NodeId id : mlp.g.schedule()) {
    const graph::Node& n = mlp.g.node(id);
    if (n.type != graph::NodeType::op) continue;
    if (n.op == ops::OpKind::matmul) {
      autograd::OpTimingQuery q{.kind = n.op, .attrs = n.attrs, .differentiable = 0b10};
      for (graph::ValueId v : n.inputs) q.inputs.push_back(mlp.g.value(v).meta);
      const double measured = options.machine.op_times->seconds({q})[0];
      EXPECT_EQ(options.machine.op_times->timed(), timed);
      ASSERT_EQ(problem.time_graph.nodes[size_t(node)].cost.size(), 1u);
      EXPECT_DOUBLE_EQ(problem.time_graph.nodes[size_t(node)].cost[0], measured);
      found = true;
      break;
    }
    ++node;
  }
  EXPECT_TRUE(found);

  // The plan says where its op times came from.
  const AutoPlan plan = plan_auto_parallel(mlp.g, mlp.loss, 2, options);
  EXPECT_NE(plan.machine.find("forward and backward timed"), std::string::npos) << plan.machine;
  const AutoPlan estimated = plan_auto_parallel(mlp.g, mlp.loss, 2, AutoParallelOptions{});
  EXPECT_EQ(estimated.machine.find("timed"), std::string::npos) << estimated.machine;
}

}  // namespace
}  // namespace kiln::parallel::measured_op_times_test
