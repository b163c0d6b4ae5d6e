// SEMI_AUTO_PARALLEL's planning, in one process (pure computation, any rank count): the user's
// strategies recorded by the tracer, sharding propagation to the ops left unset, the layouts and
// the redistributions between them, and the errors for strategies that do not fit.
#include <gtest/gtest.h>

#include <string>

#include "kiln/core/error.h"
#include "kiln/graph/tracer.h"
#include "kiln/nn/conv.h"
#include "kiln/nn/dense.h"
#include "kiln/nn/normalization.h"
#include "kiln/ops/functional.h"
#include "kiln/parallel/sharding_plan.h"

namespace kiln::parallel::sharding_plan_test {
namespace {

using ops::Strategy;

// x [8, 16] -> Dense(16, 64) -> relu -> Dense(64, 4) -> cross entropy with labels [8].
struct Mlp {
  nn::Dense fc1{16, 64}, fc2{64, 4};
  graph::Graph g;

  void trace() {
    graph::Tracer tracer(g);
    tracer.bind_state({{"fc1.weight", fc1.weight()},
                       {"fc1.bias", fc1.bias()},
                       {"fc2.weight", fc2.weight()},
                       {"fc2.bias", fc2.bias()}});
    Tensor x = tracer.input({Shape({8, 16}), DType::f32}, "images");
    Tensor y = tracer.input({Shape({8}), DType::i32}, "labels");
    Tensor loss = ops::softmax_cross_entropy(fc2(ops::relu(fc1(x))), y);
    tracer.add_output(loss);
    tracer.finish();
  }
  // The plan of the first live node running `kind` (the n-th one).
  const OpPlan& op(const ShardingPlan& plan, ops::OpKind kind, int nth = 0) const {
    for (graph::NodeId id : g.schedule()) {
      if (g.node(id).op == kind && nth-- == 0) return *plan.ops[size_t(id)];
    }
    throw Error("no such node");
  }
};

TEST(ShardingPropagation, MegatronColumnSplitPropagatesToTheRowSplit) {
  Mlp m;
  m.fc1.matmul().shard({{1, 1}, {2, 1}});  // weight [64, 16]: its output columns split
  m.trace();
  const ShardingPlan plan = plan_sharding(m.g, 2);
  EXPECT_EQ(m.op(plan, ops::OpKind::matmul).source, OpPlan::Source::user);
  // The bias add and the relu follow the column split; the second matmul then splits its
  // contracted dimension (Megatron's row-parallel layer) and makes partial sums.
  EXPECT_EQ(m.op(plan, ops::OpKind::add).strategy, Strategy({{1, 2}, {2}}));
  EXPECT_EQ(m.op(plan, ops::OpKind::relu).strategy, Strategy({{1, 2}}));
  const OpPlan& fc2 = m.op(plan, ops::OpKind::matmul, 1);
  EXPECT_EQ(fc2.source, OpPlan::Source::propagated);
  EXPECT_EQ(fc2.strategy, Strategy({{1, 2}, {1, 2}}));
  EXPECT_TRUE(fc2.outputs[0].is_partial());
  // What follows the partial sums cannot take them: it runs whole, after an all-reduce.
  EXPECT_EQ(m.op(plan, ops::OpKind::add, 1).strategy, Strategy({{1, 1}, {1}}));
  EXPECT_EQ(m.op(plan, ops::OpKind::softmax_cross_entropy).strategy, Strategy({{1, 1}, {1}}));
  // The parameters are held as their first consumer wants them.
  const std::string text = plan.str(m.g);
  EXPECT_NE(text.find("parameter fc1.weight [64, 16]: split [2, 1]"), std::string::npos) << text;
  EXPECT_NE(text.find("parameter fc2.weight [4, 64]: split [1, 2]"), std::string::npos) << text;
  EXPECT_NE(text.find("all_reduce over ranks [0, 1]"), std::string::npos) << text;
  EXPECT_NE(text.find("your strategy"), std::string::npos) << text;
}

TEST(ShardingPropagation, ABatchSplitReachesTheLoss) {
  Mlp m;
  m.fc1.matmul().shard({{4, 1}, {1, 1}});
  m.trace();
  const ShardingPlan plan = plan_sharding(m.g, 4);
  EXPECT_EQ(m.op(plan, ops::OpKind::relu).strategy, Strategy({{4, 1}}));
  EXPECT_EQ(m.op(plan, ops::OpKind::matmul, 1).strategy, Strategy({{4, 1}, {1, 1}}));
  EXPECT_EQ(m.op(plan, ops::OpKind::add, 1).strategy, Strategy({{4, 1}, {1}}));
  const OpPlan& loss = m.op(plan, ops::OpKind::softmax_cross_entropy);
  EXPECT_EQ(loss.strategy, Strategy({{4, 1}, {4}}));
  EXPECT_TRUE(loss.outputs[0].is_partial());
  EXPECT_DOUBLE_EQ(loss.form.output_scale, 0.25);  // each rank's mean is a quarter of the loss
}

TEST(ShardingPropagation, OpsNothingReachesRunReplicatedAndSaySo) {
  Mlp m;
  m.trace();
  const ShardingPlan plan = plan_sharding(m.g, 2);
  for (graph::NodeId id : m.g.schedule()) {
    const OpPlan& p = *plan.ops[size_t(id)];
    EXPECT_TRUE(ops::is_replicated(p.strategy));
    EXPECT_EQ(p.source, OpPlan::Source::unreached);
  }
  EXPECT_NE(plan.str(m.g).find("no split reaches it"), std::string::npos);
}

TEST(ShardingPropagation, AStrategyThatDoesNotFitNamesOpStrategyAndShapes) {
  Mlp m;
  m.fc1.matmul().shard({{3, 1}, {1, 1}});
  m.trace();
  try {
    plan_sharding(m.g, 4);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("matmul: strategy ((3, 1), (1, 1)) for inputs f32[8, 16], f32[64, 16]"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("do not divide"), std::string::npos) << what;
  }
  Mlp too_many;
  too_many.fc1.matmul().shard({{2, 1}, {4, 1}});
  too_many.trace();
  EXPECT_THROW(plan_sharding(too_many.g, 4), Error);
}

// x [4, 3, 8, 8] -> Conv2d(3, 8, 3) -> BatchNorm2d (training) -> relu -> loss on the mean.
TEST(ShardingPropagation, ABatchNormInTrainingKeepsTheChannelSplitAndSaysWhyNotTheBatch) {
  nn::Conv2d conv(3, 8, 3, {.pad_mode = "pad", .padding = {1, 1}});
  nn::BatchNorm2d bn(8);
  conv.conv2d().shard({{2, 1, 1, 1}, {2, 1, 1, 1}});  // batch and output channels
  graph::Graph g;
  {
    graph::Tracer tracer(g);
    tracer.bind_state({{"conv.weight", conv.weight()},
                       {"bn.gamma", bn.gamma()},
                       {"bn.beta", bn.beta()},
                       {"bn.moving_mean", bn.moving_mean()},
                       {"bn.moving_variance", bn.moving_variance()}});
    Tensor x = tracer.input({Shape({4, 3, 8, 8}), DType::f32}, "images");
    tracer.add_output(ops::mean(ops::relu(bn(conv(x)))));
    tracer.finish();
  }
  const ShardingPlan plan = plan_sharding(g, 4);
  for (graph::NodeId id : g.schedule()) {
    if (g.node(id).op != ops::OpKind::batch_norm) continue;
    const OpPlan& p = *plan.ops[size_t(id)];
    EXPECT_EQ(p.strategy, Strategy({{1, 2, 1, 1}, {2}, {2}, {2}, {2}}));
    EXPECT_NE(p.why.find("follows the split of conv2d"), std::string::npos) << p.why;
    EXPECT_NE(p.why.find("where it can (batch_norm accepts"), std::string::npos) << p.why;
    EXPECT_NE(p.why.find("SyncBatchNorm"), std::string::npos) << p.why;
  }
  EXPECT_NE(plan.str(g).find("all_gather dim 0"), std::string::npos) << plan.str(g);
}

TEST(Redistribution, ChoosesTheCheapestSequence) {
  const Shape shape({8, 6});
  const ops::ShardedForm partial{.device_matrix = {2},
                                 .input_maps = {},
                                 .output_maps = {{ops::kNotSplit, ops::kNotSplit}},
                                 .output_partial = {{0}}};
  const TensorLayout sums = TensorLayout::of_form(partial, true, 0, shape, 2);
  const ops::ShardedForm rows{.device_matrix = {2}, .input_maps = {{0, ops::kNotSplit}}};
  const TensorLayout split_rows = TensorLayout::of_form(rows, false, 0, shape, 2);
  const TensorLayout whole = TensorLayout::replicated(shape, 2);
  // Partial sums wanted split by rows: one reduce_scatter, cheaper than all_reduce + slice.
  Redistribution r = plan_redistribution(sums, split_rows, 1, DType::f32);
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_EQ(r.steps[0].kind, RedistributionStep::Kind::reduce_scatter);
  const CommCostModel model;
  EXPECT_LT(r.seconds, model.all_reduce(8 * 6 * 4, 2));
  // Partial sums wanted whole: all_reduce. Split wanted whole: all_gather. Whole wanted split:
  // a local slice, no communication.
  r = plan_redistribution(sums, whole, 0, DType::f32);
  EXPECT_EQ(r.str(), "all_reduce over ranks [0, 1]");
  r = plan_redistribution(split_rows, whole, 0, DType::f32);
  EXPECT_EQ(r.str(), "all_gather dim 0 over ranks [0, 1]");
  r = plan_redistribution(whole, split_rows, 1, DType::f32);
  EXPECT_EQ(r.str(), "split dim 0 in 2 (keep block 1)");
  EXPECT_EQ(r.seconds, 0);
  // On 4 ranks: blocks of a [2, 2] device matrix to rows split along the last axis of
  // [repeat 2, 2] (ranks 0 and 2 hold rows block 0): the rows gathered in their groups, then the
  // columns' split moved to the rows by an all_to_all (gathering the columns too and slicing the
  // rows would send twice the bytes).
  const ops::ShardedForm grid{.device_matrix = {2, 2}, .input_maps = {{0, 1}}};
  const TensorLayout blocks = TensorLayout::of_form(grid, false, 0, Shape({8, 8}), 4);
  const ops::ShardedForm rows4{.device_matrix = {2}, .input_maps = {{0, ops::kNotSplit}}};
  const TensorLayout rows_only = TensorLayout::of_form(rows4, false, 0, Shape({8, 8}), 4);
  EXPECT_EQ(rows_only.device_matrix, std::vector<int64_t>({2, 2}));  // a repeat axis in front
  r = plan_redistribution(blocks, rows_only, 2, DType::f32);
  EXPECT_EQ(r.str(),
            "all_gather dim 0 over ranks [0, 2], then all_to_all from dim 1 to dim 0 over ranks "
            "[2, 3]");
  const double gather_gather = model.all_gather(8 * 4 * 4, 2) + model.all_gather(8 * 8 * 4, 2);
  EXPECT_NEAR(r.seconds, model.all_gather(8 * 4 * 4, 2) + model.all_to_all(8 * 4 * 4, 2), 1e-15);
  EXPECT_LT(r.seconds, gather_gather);
}

// A split moved from one dimension to another of the same size group is one all_to_all: each
// rank sends (n - 1) / n of its block, where gathering then slicing sends (n - 1) blocks. The
// planner compares the two sequences' α-β costs and keeps the cheaper.
TEST(Redistribution, MovesASplitBetweenDimensionsWithOneAllToAll) {
  const Shape shape({8, 12, 4});
  for (const int64_t n : {2, 4}) {
    SCOPED_TRACE(n);
    const ops::ShardedForm rows{.device_matrix = {n}, .input_maps = {{0, -1, -1}}};
    const ops::ShardedForm cols{.device_matrix = {n}, .input_maps = {{-1, 0, -1}}};
    const TensorLayout by_rows = TensorLayout::of_form(rows, false, 0, shape, n);
    const TensorLayout by_cols = TensorLayout::of_form(cols, false, 0, shape, n);
    const CommCostModel model{.alpha_s = 5e-6, .beta_s_per_byte = 1e-9};
    const double local = double(shape.numel() / n * 4);
    for (int64_t rank = 0; rank < n; ++rank) {
      const Redistribution r = plan_redistribution(by_rows, by_cols, rank, DType::f32, model);
      ASSERT_EQ(r.steps.size(), 1u) << r.str();
      EXPECT_EQ(r.steps[0].kind, RedistributionStep::Kind::all_to_all);
      EXPECT_EQ(r.steps[0].dim, 1);
      EXPECT_EQ(r.steps[0].from_dim, 0);
      EXPECT_EQ(r.steps[0].group.size(), size_t(n));
      EXPECT_DOUBLE_EQ(r.seconds, model.all_to_all(local, n));
      // Gather the rows whole, then slice the columns: n times the bytes on the wire.
      EXPECT_LT(r.seconds, model.all_gather(local * double(n), n));
    }
    // And back, by the all_to_all the other way.
    const Redistribution back = plan_redistribution(by_cols, by_rows, 0, DType::f32, model);
    EXPECT_EQ(back.brief(), "all_to_all from dim 1 to dim 0 over " + std::to_string(n) + " ranks");
  }
  // Where the target splits the new dimension along another axis of the device matrix (rank r
  // holds rows block r / 2 but wants columns block r % 2), no all_to_all can do it.
  const TensorLayout other_axis = TensorLayout::of_form(
      ops::ShardedForm{.device_matrix = {2, 2}, .input_maps = {{-1, 1, -1}}}, false, 0, shape, 4);
  const TensorLayout by_rows = TensorLayout::of_form(
      ops::ShardedForm{.device_matrix = {2, 2}, .input_maps = {{0, -1, -1}}}, false, 0, shape, 4);
  const Redistribution r = plan_redistribution(by_rows, other_axis, 1, DType::f32);
  for (const RedistributionStep& s : r.steps) {
    EXPECT_NE(s.kind, RedistributionStep::Kind::all_to_all) << r.str();
  }
}

}  // namespace
}  // namespace kiln::parallel::sharding_plan_test
