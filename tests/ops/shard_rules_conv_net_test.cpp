// The shard rules of conv2d, the pools and batch_norm: what each accepts (device matrix, tensor
// maps, partial sums, local groups), what each refuses and why, what sharding propagation
// derives from a neighbour's split, and every accepted form run rank by rank in this process
// against the whole op (shard_simulation.h).
#include <gtest/gtest.h>

#include <string>

#include "kiln/core/error.h"
#include "kiln/ops/shard_rule.h"
#include "shard_simulation.h"

namespace kiln::ops::shard_rules_conv_net_test {
namespace {

using shard_simulation::expect_form_computes_the_op;
using shard_simulation::uniform_tensor;
using Map = std::vector<int>;
using Metas = std::vector<TensorMeta>;

TensorMeta f32(std::vector<int64_t> dims) {
  return {Shape(std::move(dims)), DType::f32};
}

std::string error_of(OpKind kind, const std::vector<TensorMeta>& in, const Attrs& attrs,
                     const Strategy& s) {
  try {
    shard_form(kind, in, attrs, s, 8);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

constexpr int X = kNotSplit;

TEST(ConvShardRule, BatchAndOutputChannelsSplitWithoutCommunication) {
  const std::vector<TensorMeta> in{f32({4, 6, 8, 8}), f32({8, 6, 3, 3})};
  const Attrs conv = ConvAttrs{.padding = {1, 1}};
  const ShardedForm f = shard_form(OpKind::conv2d, in, conv, {{2, 1, 1, 1}, {4, 1, 1, 1}}, 8);
  EXPECT_EQ(f.device_matrix, std::vector<int64_t>({2, 4}));
  EXPECT_EQ(f.input_maps[0], Map({0, X, X, X}));
  EXPECT_EQ(f.input_maps[1], Map({1, X, X, X}));
  EXPECT_EQ(f.output_maps[0], Map({0, 1, X, X}));
  EXPECT_TRUE(f.output_partial[0].empty());
  EXPECT_EQ(f.communication, "");
  EXPECT_EQ(f.local_attrs, conv);
}

TEST(ConvShardRule, InputChannelSplitMakesPartialSums) {
  const std::vector<TensorMeta> in{f32({4, 6, 8, 8}), f32({8, 6, 3, 3})};
  const Attrs conv = ConvAttrs{.padding = {1, 1}};
  const ShardedForm f = shard_form(OpKind::conv2d, in, conv, {{2, 3, 1, 1}, {1, 3, 1, 1}}, 6);
  EXPECT_EQ(f.device_matrix, std::vector<int64_t>({2, 3}));
  EXPECT_EQ(f.input_maps[0], Map({0, 1, X, X}));
  EXPECT_EQ(f.input_maps[1], Map({X, 1, X, X}));
  EXPECT_EQ(f.output_maps[0], Map({0, X, X, X}));
  EXPECT_EQ(f.output_partial[0], Map({1}));
  EXPECT_NE(f.communication.find("partial sum"), std::string::npos);
  // Each rank does a sixth of the work.
  const Cost whole =
      sharded_cost(OpKind::conv2d, in, conv,
                   shard_form(OpKind::conv2d, in, conv, {{1, 1, 1, 1}, {1, 1, 1, 1}}, 6));
  EXPECT_DOUBLE_EQ(sharded_cost(OpKind::conv2d, in, conv, f).flops * 6, whole.flops);
}

TEST(ConvShardRule, EveryAcceptedSplitComputesTheConvolution) {
  const Tensor x = uniform_tensor({4, 4, 6, 6}, 1), w = uniform_tensor({6, 4, 3, 3}, 2),
               b = uniform_tensor({6}, 3);
  const Attrs conv = ConvAttrs{.stride = {2, 1}, .padding = {1, 1}};
  for (const Strategy& s :
       {Strategy{{2, 1, 1, 1}, {1, 1, 1, 1}}, Strategy{{1, 1, 1, 1}, {3, 1, 1, 1}},
        Strategy{{1, 4, 1, 1}, {1, 4, 1, 1}}, Strategy{{2, 2, 1, 1}, {3, 2, 1, 1}}}) {
    expect_form_computes_the_op(OpKind::conv2d, {x, w}, conv, s);
  }
  // With a bias: the batch and the output channels.
  expect_form_computes_the_op(OpKind::conv2d, {x, w, b}, conv, {{2, 1, 1, 1}, {3, 1, 1, 1}, {3}});
}

TEST(ConvShardRule, RefusesSpatialSplitsAndSaysWhy) {
  const std::vector<TensorMeta> in{f32({4, 6, 8, 8}), f32({8, 6, 3, 3})};
  const Attrs conv = ConvAttrs{.padding = {1, 1}};
  std::string e = error_of(OpKind::conv2d, in, conv, {{1, 1, 2, 1}, {1, 1, 1, 1}});
  EXPECT_NE(e.find("conv2d: strategy ((1, 1, 2, 1), (1, 1, 1, 1))"), std::string::npos) << e;
  EXPECT_NE(e.find("halo exchange"), std::string::npos) << e;
  EXPECT_NE(e.find("the rule accepts"), std::string::npos) << e;
  e = error_of(OpKind::conv2d, in, conv, {{1, 1, 1, 1}, {1, 1, 3, 1}});
  EXPECT_NE(e.find("kernel's height and width"), std::string::npos) << e;
  e = error_of(OpKind::conv2d, in, conv, {{1, 2, 1, 1}, {1, 1, 1, 1}});
  EXPECT_NE(e.find("must agree"), std::string::npos) << e;
}

TEST(ConvShardRule, WithABiasTheInputChannelsStayWhole) {
  const std::vector<TensorMeta> in{f32({4, 6, 8, 8}), f32({8, 6, 3, 3}), f32({8})};
  const Attrs conv = ConvAttrs{};
  std::string e = error_of(OpKind::conv2d, in, conv, {{1, 2, 1, 1}, {1, 2, 1, 1}, {1}});
  EXPECT_NE(e.find("with a bias the input channels cannot be split"), std::string::npos) << e;
  e = error_of(OpKind::conv2d, in, conv, {{1, 1, 1, 1}, {2, 1, 1, 1}, {1}});
  EXPECT_NE(e.find("the bias splits in 1 parts"), std::string::npos) << e;
  const ShardedForm f = shard_form(OpKind::conv2d, in, conv, {{1, 1, 1, 1}, {2, 1, 1, 1}, {2}}, 2);
  EXPECT_EQ(f.input_maps[2], Map({0}));
}

TEST(ConvShardRule, GroupedAndDepthwiseKeepGroupsWholePerRank) {
  // Depthwise: 8 groups of one channel; 4 parts give each rank 2 groups.
  const Tensor x = uniform_tensor({2, 8, 5, 5}, 4), dw = uniform_tensor({8, 1, 3, 3}, 5);
  const Attrs depthwise = ConvAttrs{.padding = {1, 1}, .groups = 8};
  const std::vector<TensorMeta> in{meta_of(x), meta_of(dw)};
  const ShardedForm f = shard_form(OpKind::conv2d, in, depthwise, {{2, 4, 1, 1}, {4, 1, 1, 1}}, 8);
  EXPECT_EQ(f.device_matrix, std::vector<int64_t>({2, 4}));
  EXPECT_EQ(f.input_maps[0], Map({0, 1, X, X}));
  EXPECT_EQ(f.input_maps[1], Map({1, X, X, X}));
  EXPECT_EQ(f.output_maps[0], Map({0, 1, X, X}));
  EXPECT_TRUE(f.output_partial[0].empty());
  EXPECT_EQ(f.local_attrs.as<ConvAttrs>().groups, 2);
  expect_form_computes_the_op(OpKind::conv2d, {x, dw}, depthwise, {{2, 4, 1, 1}, {4, 1, 1, 1}});
  // 2 groups of 4 channels: 2 parts keep them whole, 4 would cut each in two.
  const Tensor w2 = uniform_tensor({6, 4, 3, 3}, 6);
  const Attrs grouped = ConvAttrs{.padding = {1, 1}, .groups = 2};
  expect_form_computes_the_op(OpKind::conv2d, {x, w2}, grouped, {{1, 2, 1, 1}, {2, 1, 1, 1}});
  std::string e = error_of(OpKind::conv2d, {f32({2, 8, 5, 5}), f32({8, 4, 3, 3})}, grouped,
                           {{1, 4, 1, 1}, {4, 1, 1, 1}});
  EXPECT_NE(e.find("keep groups whole"), std::string::npos) << e;
  e = error_of(OpKind::conv2d, in, depthwise, {{1, 2, 1, 1}, {1, 1, 1, 1}});
  EXPECT_NE(e.find("split alike"), std::string::npos) << e;
}

TEST(ConvShardRule, PropagationDerivesStrategiesFromANeighbour) {
  const ShardRule& rule = *op_def(OpKind::conv2d).shard;
  const std::vector<TensorMeta> in{f32({4, 6, 8, 8}), f32({8, 6, 3, 3})};
  const Attrs conv = ConvAttrs{};
  // Fed a batch and channel split (the height split is dropped: it is gathered).
  EXPECT_EQ(*rule.follow(in, conv, 0, {2, 2, 2, 1}), Strategy({{2, 2, 1, 1}, {1, 2, 1, 1}}));
  // Its output wanted split by batch and channels: the weight's output channels split.
  EXPECT_EQ(*rule.follow(in, conv, -1, {2, 4, 1, 1}), Strategy({{2, 1, 1, 1}, {4, 1, 1, 1}}));
  EXPECT_EQ(*rule.follow(in, conv, 1, {4, 1, 1, 1}), Strategy({{1, 1, 1, 1}, {4, 1, 1, 1}}));
  // With a bias, an input-channel split is not taken.
  const std::vector<TensorMeta> biased{f32({4, 6, 8, 8}), f32({8, 6, 3, 3}), f32({8})};
  EXPECT_EQ(*rule.follow(biased, conv, 0, {2, 2, 1, 1}),
            Strategy({{2, 1, 1, 1}, {1, 1, 1, 1}, {1}}));
  EXPECT_EQ(*rule.follow(biased, conv, 2, {2}), Strategy({{1, 1, 1, 1}, {2, 1, 1, 1}, {2}}));
  // Depthwise: the channels in and out together, or not at all when groups would be cut.
  const std::vector<TensorMeta> dw{f32({4, 8, 8, 8}), f32({8, 1, 3, 3})};
  const Attrs depthwise = ConvAttrs{.groups = 8};
  EXPECT_EQ(*rule.follow(dw, depthwise, 0, {1, 4, 1, 1}), Strategy({{1, 4, 1, 1}, {4, 1, 1, 1}}));
  EXPECT_EQ(*rule.follow(dw, depthwise, -1, {2, 2, 1, 1}), Strategy({{2, 2, 1, 1}, {2, 1, 1, 1}}));
  const Attrs grouped = ConvAttrs{.groups = 2};
  const std::vector<TensorMeta> g{f32({4, 8, 8, 8}), f32({8, 4, 3, 3})};
  EXPECT_EQ(*rule.follow(g, grouped, 0, {1, 4, 1, 1}), Strategy({{1, 1, 1, 1}, {1, 1, 1, 1}}));
  // Every derived strategy is one the rule accepts.
  EXPECT_NO_THROW(shard_form(OpKind::conv2d, in, conv, *rule.follow(in, conv, 0, {2, 2, 2, 1}), 8));
  EXPECT_NO_THROW(
      shard_form(OpKind::conv2d, biased, conv, *rule.follow(biased, conv, 0, {2, 2, 1, 1}), 8));
  EXPECT_NO_THROW(
      shard_form(OpKind::conv2d, dw, depthwise, *rule.follow(dw, depthwise, -1, {2, 2, 1, 1}), 8));
}

TEST(PoolShardRule, BatchAndChannelsSplitSpatialDoNot) {
  const Tensor x = uniform_tensor({4, 6, 8, 8}, 7);
  const Attrs pool = PoolAttrs{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  for (OpKind kind : {OpKind::max_pool2d, OpKind::avg_pool2d}) {
    const ShardedForm f = shard_form(kind, Metas{meta_of(x)}, pool, {{2, 3, 1, 1}}, 6);
    EXPECT_EQ(f.output_maps[0], Map({0, 1, X, X}));
    expect_form_computes_the_op(kind, {x}, pool, {{2, 3, 1, 1}});
    const std::string e = error_of(kind, {meta_of(x)}, pool, {{1, 1, 1, 2}});
    EXPECT_NE(e.find("halo exchange"), std::string::npos) << e;
    EXPECT_EQ(*op_def(kind).shard->follow(Metas{meta_of(x)}, pool, 0, {2, 2, 2, 2}),
              Strategy({{2, 2, 1, 1}}));
    EXPECT_EQ(*op_def(kind).shard->follow(Metas{meta_of(x)}, pool, -1, {1, 2, 1, 1}),
              Strategy({{1, 2, 1, 1}}));
  }
}

// The zoo's global average pool is mean over (2, 3) (ResNets, MobileNetV2); LeNet flattens.
TEST(PoolShardRule, GlobalAveragePoolAndFlattenKeepTheBatchAndChannelSplit) {
  const Tensor x = uniform_tensor({4, 6, 3, 3}, 13);
  const Attrs spatial_mean = ReduceAttrs{.axes = {2, 3}};
  EXPECT_EQ(*op_def(OpKind::mean).shard->follow(Metas{meta_of(x)}, spatial_mean, 0, {2, 3, 1, 1}),
            Strategy({{2, 3, 1, 1}}));
  EXPECT_EQ(*op_def(OpKind::mean).shard->follow(Metas{meta_of(x)}, spatial_mean, -1, {2, 3}),
            Strategy({{2, 3, 1, 1}}));
  expect_form_computes_the_op(OpKind::mean, {x}, spatial_mean, {{2, 3, 1, 1}});
  const Attrs flatten = ShapeAttrs{.shape = {4, 54}};
  EXPECT_EQ(*op_def(OpKind::reshape).shard->follow(Metas{meta_of(x)}, flatten, 0, {2, 1, 1, 1}),
            Strategy({{2, 1, 1, 1}}));
  expect_form_computes_the_op(OpKind::reshape, {x}, flatten, {{2, 1, 1, 1}});
}

std::vector<Tensor> bn_inputs(int64_t c) {
  return {uniform_tensor({4, c, 3, 3}, 8), uniform_tensor({c}, 9, 0.5f, 1.5f),
          uniform_tensor({c}, 10), uniform_tensor({c}, 11), uniform_tensor({c}, 12, 0.5f, 2.f)};
}

std::vector<TensorMeta> metas_of(const std::vector<Tensor>& ts) {
  std::vector<TensorMeta> m;
  for (const Tensor& t : ts) m.push_back(meta_of(t));
  return m;
}

TEST(BatchNormShardRule, TrainingSplitsTheChannelsWithTheirOwnStatistics) {
  const std::vector<Tensor> in = bn_inputs(6);
  const Attrs training = BatchNormAttrs{.training = true, .momentum = 0.9, .eps = 1e-5};
  const ShardedForm f =
      shard_form(OpKind::batch_norm, metas_of(in), training, {{1, 3, 1, 1}, {3}, {3}, {3}, {3}}, 3);
  EXPECT_EQ(f.input_maps[0], Map({X, 0, X, X}));
  EXPECT_EQ(f.input_maps[3], Map({0}));
  EXPECT_EQ(f.output_maps[0], Map({X, 0, X, X}));
  EXPECT_EQ(f.output_maps[1], Map({0}));
  EXPECT_EQ(f.output_maps[2], Map({0}));
  EXPECT_TRUE(f.output_partial[0].empty());
  expect_form_computes_the_op(OpKind::batch_norm, in, training, {{1, 3, 1, 1}, {3}, {3}, {3}, {3}});
}

TEST(BatchNormShardRule, TrainingRefusesTheBatchSplitAndSaysWhy) {
  const std::vector<TensorMeta> in = metas_of(bn_inputs(6));
  const Attrs training = BatchNormAttrs{.training = true, .momentum = 0.9, .eps = 1e-5};
  std::string e = error_of(OpKind::batch_norm, in, training, {{2, 1, 1, 1}, {1}, {1}, {1}, {1}});
  EXPECT_NE(e.find("batch_norm: strategy ((2, 1, 1, 1), (1,), (1,), (1,), (1,))"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("SyncBatchNorm"), std::string::npos) << e;
  e = error_of(OpKind::batch_norm, in, training, {{1, 1, 3, 1}, {1}, {1}, {1}, {1}});
  EXPECT_NE(e.find("only the channels"), std::string::npos) << e;
  e = error_of(OpKind::batch_norm, in, training, {{1, 2, 1, 1}, {2}, {1}, {2}, {2}});
  EXPECT_NE(e.find("split like the channels"), std::string::npos) << e;
  // Propagation keeps a neighbour's channel split and drops its batch split.
  const ShardRule& rule = *op_def(OpKind::batch_norm).shard;
  EXPECT_EQ(*rule.follow(in, training, 0, {2, 2, 1, 1}),
            Strategy({{1, 2, 1, 1}, {2}, {2}, {2}, {2}}));
  EXPECT_EQ(*rule.follow(in, training, 3, {3}), Strategy({{1, 3, 1, 1}, {3}, {3}, {3}, {3}}));
}

TEST(BatchNormShardRule, EvaluationTakesAnySplit) {
  const std::vector<Tensor> in = bn_inputs(6);
  const Attrs eval = BatchNormAttrs{.training = false, .momentum = 0.9, .eps = 1e-5};
  const Strategy s{{2, 3, 1, 1}, {3}, {3}, {3}, {3}};
  const ShardedForm f = shard_form(OpKind::batch_norm, metas_of(in), eval, s, 6);
  EXPECT_EQ(f.output_maps[0], Map({0, 1, X, X}));
  expect_form_computes_the_op(OpKind::batch_norm, in, eval, s);
  EXPECT_EQ(*op_def(OpKind::batch_norm).shard->follow(metas_of(in), eval, 0, {2, 1, 3, 1}),
            Strategy({{2, 1, 3, 1}, {1}, {1}, {1}, {1}}));
}

}  // namespace
}  // namespace kiln::ops::shard_rules_conv_net_test
