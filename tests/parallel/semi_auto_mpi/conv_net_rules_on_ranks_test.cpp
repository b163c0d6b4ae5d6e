// The convolution-net ops' shard rules on the job's ranks, forward and backward, against the
// unsharded op run eagerly in this process (sharded_op_check.h); and the redistributions
// between two strategies of these ops.
#include <gtest/gtest.h>

#include "sharded_op_check.h"

namespace kiln {
namespace {

using ops::OpKind;
using semi_auto_testing::check_sharded;
using semi_auto_testing::indices;
using semi_auto_testing::N;
using semi_auto_testing::OpFn;
using semi_auto_testing::random_f32;

TEST(ConvNetRulesOnRanks, Conv2d) {
  const Tensor x = random_f32(Shape({4, 4, 6, 6}), 21), w = random_f32(Shape({8, 4, 3, 3}), 22);
  const OpFn conv = [](const std::vector<Tensor>& in) {
    return ops::conv2d(in[0], in[1], Tensor(), {.stride = {2, 2}, .padding = {1, 1}});
  };
  check_sharded({x, w}, conv, {{OpKind::conv2d, {{N(), 1, 1, 1}, {1, 1, 1, 1}}}}, "batch");
  check_sharded({x, w}, conv, {{OpKind::conv2d, {{1, 1, 1, 1}, {N(), 1, 1, 1}}}},
                "output channels");
  check_sharded({x, w}, conv, {{OpKind::conv2d, {{1, N(), 1, 1}, {1, N(), 1, 1}}}},
                "input channels: partial sums all-reduced");
  check_sharded({x, w}, conv, {{OpKind::conv2d, {{2, N() / 2, 1, 1}, {1, N() / 2, 1, 1}}}},
                "batch and input channels");
  check_sharded({x, w}, conv, {{OpKind::conv2d, {{1, 2, 1, 1}, {N() / 2, 2, 1, 1}}}},
                "input and output channels");
  const Tensor b = random_f32(Shape({8}), 23);
  check_sharded(
      {x, w, b},
      [](const std::vector<Tensor>& in) {
        return ops::conv2d(in[0], in[1], in[2], {.padding = {1, 1}});
      },
      {{OpKind::conv2d, {{1, 1, 1, 1}, {N(), 1, 1, 1}, {N()}}}}, "output channels with a bias");
}

TEST(ConvNetRulesOnRanks, DepthwiseConv2d) {
  const Tensor x = random_f32(Shape({2, 8, 5, 5}), 24), w = random_f32(Shape({8, 1, 3, 3}), 25);
  check_sharded(
      {x, w},
      [](const std::vector<Tensor>& in) {
        return ops::conv2d(in[0], in[1], Tensor(), {.padding = {1, 1}, .groups = 8});
      },
      {{OpKind::conv2d, {{1, N(), 1, 1}, {N(), 1, 1, 1}}}}, "channels, groups whole per rank");
}

TEST(ConvNetRulesOnRanks, Pools) {
  const Tensor x = random_f32(Shape({4, 4, 6, 6}), 26);
  const ops::Pool2dOptions window{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  const OpFn max_pool = [&](const std::vector<Tensor>& in) {
    return ops::max_pool2d(in[0], window);
  };
  const OpFn avg_pool = [&](const std::vector<Tensor>& in) {
    return ops::avg_pool2d(in[0], window);
  };
  check_sharded({x}, max_pool, {{OpKind::max_pool2d, {{N(), 1, 1, 1}}}}, "max pool, batch");
  check_sharded({x}, max_pool, {{OpKind::max_pool2d, {{1, N(), 1, 1}}}}, "max pool, channels");
  check_sharded({x}, avg_pool, {{OpKind::avg_pool2d, {{2, N() / 2, 1, 1}}}},
                "average pool, batch and channels");
}

TEST(ConvNetRulesOnRanks, BatchNormInTrainingSplitsTheChannels) {
  const Tensor x = random_f32(Shape({4, 8, 3, 3}), 27);
  const Tensor gamma = random_f32(Shape({8}), 28), beta = random_f32(Shape({8}), 29);
  const Tensor mean = random_f32(Shape({8}), 30), var = Tensor::full(Shape({8}), 1.5);
  const OpFn bn = [](const std::vector<Tensor>& in) {
    return ops::batch_norm(in[0], in[1], in[2], in[3], in[4], true, 0.9, 1e-5)[0];
  };
  // The running statistics are updated in place and compared after the step.
  check_sharded({x, gamma, beta, mean, var}, bn,
                {{OpKind::batch_norm, {{1, N(), 1, 1}, {N()}, {N()}, {N()}, {N()}}}},
                "channels, each rank's own statistics", {3, 4});
}

TEST(ConvNetRulesOnRanks, ShapeOps) {
  const Tensor a = random_f32(Shape({4, 2, 6}), 31), b = random_f32(Shape({4, 3, 6}), 32);
  check_sharded(
      {a, b},
      [](const std::vector<Tensor>& in) {
        return ops::concat({in[0], in[1]}, 1);
      },
      {{OpKind::concat, {{N(), 1, 1}, {N(), 1, 1}}}}, "concat");
  const Tensor x = random_f32(Shape({4, 9, 4}), 33);
  check_sharded(
      {x}, [](const std::vector<Tensor>& in) { return ops::slice(in[0], 1, 1, 8, 2); },
      {{OpKind::slice, {{2, 1, N() / 2}}}}, "slice");
  const Tensor row = random_f32(Shape({4, 1, 6}), 34);
  check_sharded(
      {row},
      [](const std::vector<Tensor>& in) {
        return ops::broadcast_to(in[0], Shape({2, 4, 3, 6}));
      },
      {{OpKind::broadcast_to, {{N(), 1, 1}}}}, "broadcast_to");
  const Tensor big = random_f32(Shape({4, 4, 6}), 35);
  check_sharded(
      {big},
      [](const std::vector<Tensor>& in) {
        return ops::sum_to_shape(in[0], Shape({4, 1}));
      },
      {{OpKind::sum_to_shape, {{1, N(), 1}}}}, "sum_to_shape, kept dimension split");
  check_sharded(
      {big},
      [](const std::vector<Tensor>& in) {
        return ops::sum_to_shape(in[0], Shape({4, 1}));
      },
      {{OpKind::sum_to_shape, {{N(), 1, 1}}}}, "sum_to_shape, summed dimension: partial sums");
  const Tensor labels = indices(8, 5, 36);
  check_sharded(
      {labels, random_f32(Shape({8, 5}), 37)},
      [](const std::vector<Tensor>& in) { return ops::mul(ops::one_hot(in[0], 5), in[1]); },
      {{OpKind::one_hot, {{N()}}}}, "one_hot");
}

TEST(ConvNetRulesOnRanks, RedistributionsBetweenConvNetStrategies) {
  const Tensor x = random_f32(Shape({4, 4, 6, 6}), 38), w = random_f32(Shape({8, 4, 3, 3}), 39);
  const Tensor gamma = random_f32(Shape({8}), 40), beta = random_f32(Shape({8}), 41);
  const Tensor mean = Tensor::zeros(Shape({8})), var = Tensor::ones(Shape({8}));
  const OpFn conv_bn = [](const std::vector<Tensor>& in) {
    Tensor y = ops::conv2d(in[0], in[1], Tensor(), {.padding = {1, 1}});
    return ops::relu(ops::batch_norm(y, in[2], in[3], in[4], in[5], true, 0.9, 1e-5)[0]);
  };
  const ops::Strategy bn_channels{{1, N(), 1, 1}, {N()}, {N()}, {N()}, {N()}};
  // Output channels into the batch norm's channel split: nothing to move.
  check_sharded(
      {x, w, gamma, beta, mean, var}, conv_bn,
      {{OpKind::conv2d, {{1, 1, 1, 1}, {N(), 1, 1, 1}}}, {OpKind::batch_norm, bn_channels}},
      "output channels to channels", {4, 5});
  // Partial sums over input channels wanted split by channels: a reduce_scatter.
  check_sharded(
      {x, w, gamma, beta, mean, var}, conv_bn,
      {{OpKind::conv2d, {{1, N(), 1, 1}, {1, N(), 1, 1}}}, {OpKind::batch_norm, bn_channels}},
      "partial sums to channels", {4, 5});
  // A batch split the batch norm cannot take (training): gathered for it, then split again.
  check_sharded({x, w, gamma, beta, mean, var}, conv_bn,
                {{OpKind::conv2d, {{N(), 1, 1, 1}, {1, 1, 1, 1}}},
                 {OpKind::batch_norm, bn_channels},
                 {OpKind::relu, {{N(), 1, 1, 1}}}},
                "batch to channels to batch", {4, 5});
  const OpFn conv_pool = [](const std::vector<Tensor>& in) {
    return ops::max_pool2d(ops::conv2d(in[0], in[1], Tensor(), {.padding = {1, 1}}),
                           {.kernel = {2, 2}, .stride = {2, 2}});
  };
  check_sharded(
      {x, w}, conv_pool,
      {{OpKind::conv2d, {{1, 1, 1, 1}, {N(), 1, 1, 1}}}, {OpKind::max_pool2d, {{N(), 1, 1, 1}}}},
      "channels to batch");
}

}  // namespace
}  // namespace kiln
