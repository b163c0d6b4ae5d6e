// Each shard rule on the job's ranks, forward and backward, against the unsharded op run eagerly
// in this process (sharded_op_check.h). Cases chaining two strategies check the redistributions
// inserted between them.
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

TEST(ShardRulesOnRanks, Matmul) {
  const Tensor x = random_f32(Shape({8, 16}), 1), w = random_f32(Shape({12, 16}), 2);
  const OpFn dense = [](const std::vector<Tensor>& in) {
    return ops::matmul(in[0], in[1], false, true);
  };
  check_sharded({x, w}, dense, {{OpKind::matmul, {{N(), 1}, {1, 1}}}}, "rows of x");
  check_sharded({x, w}, dense, {{OpKind::matmul, {{1, 1}, {N(), 1}}}}, "columns of the output");
  check_sharded({x, w}, dense, {{OpKind::matmul, {{1, N()}, {1, N()}}}},
                "contracted dimension: partial sums all-reduced");
  check_sharded({x, w}, dense, {{OpKind::matmul, {{2, 1}, {N() / 2, 1}}}},
                "rows and columns together");
  const Tensor a = random_f32(Shape({16, 8}), 3), b = random_f32(Shape({16, 12}), 4);
  check_sharded(
      {a, b}, [](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1], true); },
      {{OpKind::matmul, {{N(), 1}, {N(), 1}}}}, "transposed A, contracted split");
}

TEST(ShardRulesOnRanks, ElementwiseWithBroadcasting) {
  const Tensor x = random_f32(Shape({8, 12}), 5), b = random_f32(Shape({12}), 6),
               z = random_f32(Shape({8, 12}), 7);
  check_sharded(
      {x, b}, [](const std::vector<Tensor>& in) { return ops::add(in[0], in[1]); },
      {{OpKind::add, {{1, N()}, {N()}}}}, "bias add, columns");
  check_sharded(
      {x, b}, [](const std::vector<Tensor>& in) { return ops::add(in[0], in[1]); },
      {{OpKind::add, {{N(), 1}, {1}}}}, "bias add, rows (bias gradient all-reduced)");
  check_sharded(
      {x, z}, [](const std::vector<Tensor>& in) { return ops::mul(in[0], in[1]); },
      {{OpKind::mul, {{N(), 1}, {N(), 1}}}}, "mul");
  check_sharded(
      {x}, [](const std::vector<Tensor>& in) { return ops::gelu(in[0]); },
      {{OpKind::gelu, {{1, N()}}}}, "gelu");
  check_sharded(
      {x}, [](const std::vector<Tensor>& in) { return ops::relu(in[0]); },
      {{OpKind::relu, {{N(), 1}}}}, "relu");
}

TEST(ShardRulesOnRanks, Reductions) {
  const Tensor x = random_f32(Shape({8, 12}), 8);
  check_sharded(
      {x}, [](const std::vector<Tensor>& in) { return ops::sum(in[0], {1}); },
      {{OpKind::sum, {{1, N()}}}}, "sum over a split axis: partial sums");
  check_sharded(
      {x}, [](const std::vector<Tensor>& in) { return ops::sum(in[0], {1}); },
      {{OpKind::sum, {{N(), 1}}}}, "sum over a whole axis");
  check_sharded(
      {x}, [](const std::vector<Tensor>& in) { return ops::mean(in[0]); },
      {{OpKind::mean, {{N(), 1}}}}, "mean of all, rows split");
}

TEST(ShardRulesOnRanks, ReshapeAndTranspose) {
  const Tensor x = random_f32(Shape({8, 4, 6}), 9);
  check_sharded(
      {x},
      [](const std::vector<Tensor>& in) {
        return ops::reshape(in[0], Shape({8, 24}));
      },
      {{OpKind::reshape, {{N(), 1, 1}}}}, "reshape keeping the leading split");
  const Tensor y = random_f32(Shape({8, 12}), 10);
  check_sharded(
      {y},
      [](const std::vector<Tensor>& in) {
        return ops::transpose(in[0], {1, 0});
      },
      {{OpKind::transpose, {{N(), 1}}}}, "transpose");
}

TEST(ShardRulesOnRanks, SoftmaxCrossEntropyLayerNormEmbedding) {
  const Tensor x = random_f32(Shape({8, 12}), 11);
  check_sharded(
      {x}, [](const std::vector<Tensor>& in) { return ops::softmax(in[0], -1); },
      {{OpKind::softmax, {{N(), 1}}}}, "softmax");
  check_sharded(
      {x}, [](const std::vector<Tensor>& in) { return ops::log_softmax(in[0], -1); },
      {{OpKind::log_softmax, {{N(), 1}}}}, "log_softmax");
  const Tensor labels = indices(8, 12, 12);
  check_sharded(
      {x, labels},
      [](const std::vector<Tensor>& in) { return ops::softmax_cross_entropy(in[0], in[1], 0); },
      {{OpKind::softmax_cross_entropy, {{N(), 1}, {N()}}}}, "cross entropy, batch");
  const Tensor gamma = random_f32(Shape({12}), 13), beta = random_f32(Shape({12}), 14);
  check_sharded(
      {x, gamma, beta},
      [](const std::vector<Tensor>& in) { return ops::layer_norm(in[0], in[1], in[2], 1e-5)[0]; },
      {{OpKind::layer_norm, {{N(), 1}, {1}, {1}}}}, "layer norm, rows");
  const Tensor table = random_f32(Shape({10, 8}), 15);
  const Tensor ids = indices(8, 10, 16);
  const OpFn lookup = [](const std::vector<Tensor>& in) { return ops::embedding(in[0], in[1]); };
  check_sharded({table, ids}, lookup, {{OpKind::embedding, {{1, N()}, {1}}}},
                "embedding, columns of the table");
  check_sharded({table, ids}, lookup, {{OpKind::embedding, {{1, 1}, {N()}}}},
                "embedding, indices split");
}

TEST(ShardRulesOnRanks, RedistributionsBetweenStrategies) {
  const Tensor x = random_f32(Shape({8, 16}), 17), w = random_f32(Shape({12, 16}), 18);
  const OpFn dense_relu = [](const std::vector<Tensor>& in) {
    return ops::relu(ops::matmul(in[0], in[1], false, true));
  };
  // Partial sums wanted split by rows: a reduce_scatter.
  check_sharded({x, w}, dense_relu,
                {{OpKind::matmul, {{1, N()}, {1, N()}}}, {OpKind::relu, {{N(), 1}}}},
                "partial sums to rows");
  // Columns wanted as rows: one all_to_all moves the split (all_to_all_on_ranks_test.cpp).
  const std::string plan = check_sharded(
      {x, w}, dense_relu, {{OpKind::matmul, {{1, 1}, {N(), 1}}}, {OpKind::relu, {{N(), 1}}}},
      "columns to rows");
  EXPECT_NE(plan.find("all_to_all from dim 1 to dim 0"), std::string::npos) << plan;
  // A [2, N/2] grid wanted as columns only.
  check_sharded({x, w}, dense_relu,
                {{OpKind::matmul, {{2, 1}, {N() / 2, 1}}}, {OpKind::relu, {{1, 2}}}},
                "grid to columns");
}

}  // namespace
}  // namespace kiln
