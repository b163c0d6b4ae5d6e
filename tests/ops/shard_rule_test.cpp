// The op table's shard rules: every op has one or says why it runs replicated, strategies are
// checked with errors that name the op, the strategy and the shapes, and each rule's form (device
// matrix, tensor maps, partial sums) and propagation agree with what its op computes.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "kiln/core/error.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::ops::shard_rule_test {
namespace {

using Metas = std::vector<TensorMeta>;

TensorMeta f32(std::vector<int64_t> dims) {
  return {Shape(std::move(dims)), DType::f32};
}

std::string error_of(OpKind kind, std::vector<TensorMeta> in, const Attrs& attrs, const Strategy& s,
                     int64_t devices) {
  try {
    shard_form(kind, in, attrs, s, devices);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ShardRules, EveryOpHasARuleOrAReasonToRunReplicated) {
  for (size_t i = 0; i < kNumOps; ++i) {
    const OpDef& def = op_def(OpKind(i));
    EXPECT_TRUE((def.shard != nullptr) != (def.no_shard_reason != nullptr))
        << def.name << ": needs exactly one of .shard and .no_shard_reason";
    if (def.shard) {
      EXPECT_NE(def.shard->form, nullptr) << def.name;
      EXPECT_NE(def.shard->follow, nullptr) << def.name;
      EXPECT_NE(std::string(def.shard->accepts), "") << def.name;
    }
  }
  // The ops the tensor-parallel models need have rules.
  for (OpKind k :
       {OpKind::matmul, OpKind::add, OpKind::mul, OpKind::relu, OpKind::gelu, OpKind::sum,
        OpKind::mean, OpKind::reshape, OpKind::transpose, OpKind::softmax, OpKind::log_softmax,
        OpKind::softmax_cross_entropy, OpKind::layer_norm, OpKind::embedding, OpKind::causal_mask,
        // and the convolution nets (tests/ops/shard_rules_conv_net_test.cpp)
        OpKind::conv2d, OpKind::max_pool2d, OpKind::avg_pool2d, OpKind::batch_norm, OpKind::concat,
        OpKind::slice, OpKind::cast, OpKind::one_hot, OpKind::broadcast_to, OpKind::sum_to_shape}) {
    EXPECT_NE(op_def(k).shard, nullptr) << op_name(k);
  }
}

TEST(ShardRules, InvalidStrategiesNameTheOpTheStrategyAndTheShapes) {
  const std::vector<TensorMeta> in{f32({8, 16}), f32({16, 32})};
  const Attrs mm = MatmulAttrs{};
  // Parts that do not divide a dimension.
  std::string e = error_of(OpKind::matmul, in, mm, {{3, 1}, {1, 1}}, 4);
  EXPECT_NE(e.find("matmul"), std::string::npos) << e;
  EXPECT_NE(e.find("((3, 1), (1, 1))"), std::string::npos) << e;
  EXPECT_NE(e.find("f32[8, 16], f32[16, 32]"), std::string::npos) << e;
  EXPECT_NE(e.find("do not divide input 0's dimension 0 of 8"), std::string::npos) << e;
  // More devices than the job has.
  e = error_of(OpKind::matmul, in, mm, {{4, 2}, {2, 1}}, 4);
  EXPECT_NE(e.find("needs 8 devices"), std::string::npos) << e;
  // The wrong rank, the wrong number of inputs.
  e = error_of(OpKind::matmul, in, mm, {{2}, {1, 1}}, 4);
  EXPECT_NE(e.find("input 0 has 2 dimensions"), std::string::npos) << e;
  e = error_of(OpKind::matmul, in, mm, {{2, 1}}, 4);
  EXPECT_NE(e.find("1 inputs' parts for 2 inputs"), std::string::npos) << e;
  // What the rule itself refuses, with what it accepts.
  e = error_of(OpKind::matmul, in, mm, {{1, 2}, {1, 1}}, 4);
  EXPECT_NE(e.find("contracted dimension"), std::string::npos) << e;
  EXPECT_NE(e.find("the rule accepts"), std::string::npos) << e;
  e = error_of(OpKind::softmax, {f32({4, 8})}, AxisAttrs{.axis = -1}, {{1, 2}}, 4);
  EXPECT_NE(e.find("softmax axis 1 cannot be split"), std::string::npos) << e;
  // An op without a rule takes only the replicated strategy, and says why.
  const Attrs drop = DropoutAttrs{.p = 0.5, .training = true};
  e = error_of(OpKind::dropout, {f32({4, 4})}, drop, {{2, 1}}, 4);
  EXPECT_NE(e.find("no shard rule and runs replicated"), std::string::npos) << e;
  EXPECT_NE(e.find("random mask"), std::string::npos) << e;
  EXPECT_EQ(error_of(OpKind::dropout, {f32({4, 4})}, drop, {{1, 1}}, 4), "");
}

TEST(ShardRules, MatmulContractedSplitMakesPartialSumsRowSplitNone) {
  const std::vector<TensorMeta> in{f32({8, 16}), f32({32, 16})};
  const Attrs mm = MatmulAttrs{.transpose_b = true};  // Dense: x · Wᵀ, W [out, in]
  // Rows of x: the output's rows split, nothing to reduce.
  ShardedForm rows = shard_form(OpKind::matmul, in, mm, {{2, 1}, {1, 1}}, 2);
  EXPECT_EQ(rows.device_matrix, std::vector<int64_t>({2}));
  EXPECT_EQ(rows.output_maps[0], std::vector<int>({0, kNotSplit}));
  EXPECT_TRUE(rows.output_partial[0].empty());
  EXPECT_EQ(rows.communication, "");
  // The contracted dimension (x's columns, W's columns as stored): partial sums.
  ShardedForm k = shard_form(OpKind::matmul, in, mm, {{1, 2}, {1, 2}}, 2);
  EXPECT_EQ(k.input_maps[1], std::vector<int>({kNotSplit, 0}));
  EXPECT_EQ(k.output_partial[0], std::vector<int>({0}));
  EXPECT_NE(k.communication, "");
  // Per-rank cost: the whole op's divided by the shards.
  const Cost whole =
      sharded_cost(OpKind::matmul, in, mm, shard_form(OpKind::matmul, in, mm, {{1, 1}, {1, 1}}, 2));
  const Cost half = sharded_cost(OpKind::matmul, in, mm, k);
  EXPECT_DOUBLE_EQ(half.flops * 2, whole.flops);
  EXPECT_GT(whole.flops, 0);
}

TEST(ShardRules, MeanOverASplitAxisScalesEachRanksMean) {
  ShardedForm f =
      shard_form(OpKind::mean, Metas{f32({8, 4})}, ReduceAttrs{.axes = {}}, {{4, 1}}, 4);
  EXPECT_EQ(f.output_partial[0], std::vector<int>({0}));
  EXPECT_DOUBLE_EQ(f.output_scale, 0.25);
  ShardedForm s =
      shard_form(OpKind::sum, Metas{f32({8, 4})}, ReduceAttrs{.axes = {1}}, {{4, 1}}, 4);
  EXPECT_TRUE(s.output_partial[0].empty());
  EXPECT_EQ(s.output_maps[0], std::vector<int>({0}));
}

TEST(ShardRules, PropagationFollowsANeighboursSplit) {
  // A bias add follows the matmul's column split to the bias.
  const std::vector<TensorMeta> add_in{f32({8, 32}), f32({32})};
  std::optional<Strategy> s = op_def(OpKind::add).shard->follow(add_in, NoAttrs{}, 0, {1, 2});
  ASSERT_TRUE(s);
  EXPECT_EQ(*s, Strategy({{1, 2}, {2}}));
  // A Dense matmul fed columns split in 2 splits the weight's input columns alike.
  const std::vector<TensorMeta> mm_in{f32({8, 32}), f32({4, 32})};
  s = op_def(OpKind::matmul).shard->follow(mm_in, MatmulAttrs{.transpose_b = true}, 0, {1, 2});
  ASSERT_TRUE(s);
  EXPECT_EQ(*s, Strategy({{1, 2}, {1, 2}}));
  // A softmax keeps its axis whole whatever it is fed.
  s = op_def(OpKind::softmax).shard->follow(Metas{f32({8, 32})}, AxisAttrs{.axis = -1}, 0, {2, 2});
  EXPECT_EQ(*s, Strategy({{2, 1}}));
  // A reshape keeps a leading split.
  s = op_def(OpKind::reshape)
          .shard->follow(Metas{f32({8, 4, 6})}, ShapeAttrs{.shape = {8, 24}}, 0, {2, 1, 1});
  EXPECT_EQ(*s, Strategy({{2, 1, 1}}));
  ShardedForm r = shard_form(OpKind::reshape, Metas{f32({8, 4, 6})}, ShapeAttrs{.shape = {8, 24}},
                             {{2, 1, 1}}, 2);
  EXPECT_EQ(r.local_attrs.as<ShapeAttrs>().shape, std::vector<int64_t>({4, 24}));
}

TEST(ShardRules, CausalMaskSplitsHeadsButNotPositions) {
  const Metas scores{f32({2, 4, 8, 8})};  // [batch, heads, T, S]
  const Attrs fill = ScalarAttrs{.scalar = -1e9};
  ShardedForm heads = shard_form(OpKind::causal_mask, scores, fill, {{1, 2, 1, 1}}, 2);
  EXPECT_EQ(heads.output_maps[0], std::vector<int>({kNotSplit, 0, kNotSplit, kNotSplit}));
  EXPECT_TRUE(heads.output_partial[0].empty());
  const std::string e = error_of(OpKind::causal_mask, scores, fill, {{1, 1, 2, 1}}, 2);
  EXPECT_NE(e.find("query and key dimensions"), std::string::npos) << e;
  std::optional<Strategy> s =
      op_def(OpKind::causal_mask).shard->follow(scores, fill, 0, {2, 2, 2, 2});
  ASSERT_TRUE(s);
  EXPECT_EQ(*s, Strategy({{2, 2, 1, 1}}));
}

TEST(ShardRules, ScopeSetsTheStrategyForOneKindOnly) {
  EXPECT_EQ(scoped_strategy(OpKind::matmul), nullptr);
  {
    ShardScope scope(OpKind::matmul, {{2, 1}, {1, 1}});
    ASSERT_NE(scoped_strategy(OpKind::matmul), nullptr);
    EXPECT_EQ(*scoped_strategy(OpKind::matmul), Strategy({{2, 1}, {1, 1}}));
    EXPECT_EQ(scoped_strategy(OpKind::cast), nullptr);
  }
  EXPECT_EQ(scoped_strategy(OpKind::matmul), nullptr);
  EXPECT_EQ(strategy_str({{2, 1}, {1, 1}}), "((2, 1), (1, 1))");
  // Scopes ending out of order leave the others intact.
  auto first = std::make_unique<ShardScope>(OpKind::matmul, Strategy{{2, 1}, {1, 1}});
  auto second = std::make_unique<ShardScope>(OpKind::relu, Strategy{{2, 1}});
  first.reset();
  EXPECT_EQ(scoped_strategy(OpKind::matmul), nullptr);
  ASSERT_NE(scoped_strategy(OpKind::relu), nullptr);
  second.reset();
  EXPECT_EQ(scoped_strategy(OpKind::relu), nullptr);
}

}  // namespace
}  // namespace kiln::ops::shard_rule_test
