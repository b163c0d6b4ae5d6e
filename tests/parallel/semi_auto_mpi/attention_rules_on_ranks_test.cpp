// The shard rules attention needs, on the job's ranks, forward and backward, against the
// unsharded ops run eagerly in this process (sharded_op_check.h): causal_mask and batched (3-D
// and 4-D) matmul split by the batch, by the heads and by both, alone and chained as in a
// transformer's attention.
#include <gtest/gtest.h>

#include <string>

#include "sharded_op_check.h"

namespace kiln {
namespace {

using ops::OpKind;
using semi_auto_testing::check_sharded;
using semi_auto_testing::N;
using semi_auto_testing::OpFn;
using semi_auto_testing::random_f32;

constexpr int64_t kBatch = 4, kHeads = 4, kTokens = 8, kHeadDim = 4;

// [batch, heads, tokens, x]
Shape per_head(int64_t x) {
  return Shape({kBatch, kHeads, kTokens, x});
}

TEST(AttentionRulesOnRanks, CausalMaskByBatchAndByHeads) {
  const Tensor scores = random_f32(per_head(kTokens), 21);
  const OpFn masked_softmax = [](const std::vector<Tensor>& in) {
    return ops::softmax(ops::causal_mask(in[0], -1e9), -1);
  };
  const OpFn mask = [](const std::vector<Tensor>& in) { return ops::causal_mask(in[0], -2.0); };
  check_sharded({scores}, mask, {{OpKind::causal_mask, {{N(), 1, 1, 1}}}}, "batch");
  check_sharded({scores}, mask, {{OpKind::causal_mask, {{1, N(), 1, 1}}}}, "heads");
  check_sharded({scores}, masked_softmax,
                {{OpKind::causal_mask, {{1, N(), 1, 1}}}, {OpKind::softmax, {{1, N(), 1, 1}}}},
                "heads, then softmax");
  check_sharded({scores}, mask, {{OpKind::causal_mask, {{2, N() / 2, 1, 1}}}},
                "batch and heads together");
  // 3-D scores (batch and heads folded together).
  const Tensor folded = random_f32(Shape({kBatch * kHeads, kTokens, kTokens}), 22);
  check_sharded({folded}, mask, {{OpKind::causal_mask, {{N(), 1, 1}}}}, "3-D, leading split");
}

TEST(AttentionRulesOnRanks, CausalMaskRefusesASplitOfQueriesOrKeys) {
  const Tensor scores = random_f32(per_head(kTokens), 23);
  const OpFn mask = [](const std::vector<Tensor>& in) { return ops::causal_mask(in[0], -2.0); };
  for (const ops::Strategy& s : {ops::Strategy{{1, 1, N(), 1}}, ops::Strategy{{1, 1, 1, N()}}}) {
    try {
      check_sharded({scores}, mask, {{OpKind::causal_mask, s}}, "queries or keys split");
      ADD_FAILURE() << "expected an error for " << ops::strategy_str(s);
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("causal_mask: strategy " + ops::strategy_str(s)), std::string::npos)
          << what;
      EXPECT_NE(what.find("the last two (queries, keys) whole"), std::string::npos) << what;
    }
    parallel::forget_sharded_parameters();
    reset_auto_parallel_context();
  }
}

TEST(AttentionRulesOnRanks, BatchedMatmulByBatchAndByHeads) {
  const Tensor q = random_f32(per_head(kHeadDim), 31), k = random_f32(per_head(kHeadDim), 32);
  const OpFn scores = [](const std::vector<Tensor>& in) {
    return ops::matmul(in[0], in[1], false, true);
  };
  check_sharded({q, k}, scores, {{OpKind::matmul, {{N(), 1, 1, 1}, {N(), 1, 1, 1}}}}, "4-D, batch");
  check_sharded({q, k}, scores, {{OpKind::matmul, {{1, N(), 1, 1}, {1, N(), 1, 1}}}}, "4-D, heads");
  check_sharded({q, k}, scores, {{OpKind::matmul, {{2, N() / 2, 1, 1}, {2, N() / 2, 1, 1}}}},
                "4-D, batch and heads together");
  check_sharded({q, k}, scores, {{OpKind::matmul, {{1, N() / 2, 1, 2}, {1, N() / 2, 1, 2}}}},
                "4-D, heads and the contracted head dimension: partial sums");
  // Attention weights times values: [b, h, t, t] x [b, h, t, d].
  const Tensor p = random_f32(per_head(kTokens), 33), v = random_f32(per_head(kHeadDim), 34);
  check_sharded(
      {p, v}, [](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1]); },
      {{OpKind::matmul, {{1, N(), 1, 1}, {1, N(), 1, 1}}}}, "4-D weights times values, heads");
  // 3-D batched operands, and a 3-D A with a 2-D weight (a Dense layer on [batch, tokens, c]).
  const Tensor a = random_f32(Shape({8, kTokens, 4}), 35), b = random_f32(Shape({8, 4, 6}), 36);
  check_sharded(
      {a, b}, [](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1]); },
      {{OpKind::matmul, {{N(), 1, 1}, {N(), 1, 1}}}}, "3-D, batch");
  const Tensor w = random_f32(Shape({12, 4}), 37);
  const OpFn dense = [](const std::vector<Tensor>& in) {
    return ops::matmul(in[0], in[1], false, true);
  };
  check_sharded({a, w}, dense, {{OpKind::matmul, {{N(), 1, 1}, {1, 1}}}},
                "3-D by 2-D weight, batch (the weight's gradient all-reduced)");
  check_sharded({a, w}, dense, {{OpKind::matmul, {{1, 1, 1}, {N(), 1}}}},
                "3-D by 2-D weight, output columns");
  check_sharded({a, w}, dense, {{OpKind::matmul, {{1, 1, N()}, {1, N()}}}},
                "3-D by 2-D weight, contracted: partial sums");
}

// Scores, mask, softmax and values with the heads split throughout: nothing is redistributed
// between them. The mask split by the batch instead: the heads' split moves to the batch by an
// all_to_all and back.
TEST(AttentionRulesOnRanks, AttentionChainedByHeads) {
  const Tensor q = random_f32(per_head(kHeadDim), 41), k = random_f32(per_head(kHeadDim), 42),
               v = random_f32(per_head(kHeadDim), 43);
  const OpFn attention = [](const std::vector<Tensor>& in) {
    const Tensor scores = ops::matmul(in[0], in[1], false, true);
    return ops::matmul(ops::softmax(ops::causal_mask(scores, -1e9), -1), in[2]);
  };
  const ops::Strategy heads{{1, N(), 1, 1}};
  std::string plan = check_sharded({q, k, v}, attention,
                                   {{OpKind::matmul, {{1, N(), 1, 1}, {1, N(), 1, 1}}},
                                    {OpKind::causal_mask, heads},
                                    {OpKind::softmax, heads}},
                                   "heads throughout");
  EXPECT_EQ(plan.find("all_gather"), std::string::npos) << plan;
  EXPECT_EQ(plan.find("all_to_all"), std::string::npos) << plan;
  plan = check_sharded({q, k, v}, attention,
                       {{OpKind::matmul, {{1, N(), 1, 1}, {1, N(), 1, 1}}},
                        {OpKind::causal_mask, {{N(), 1, 1, 1}}},
                        {OpKind::softmax, heads}},
                       "heads, the mask by the batch");
  EXPECT_NE(plan.find("all_to_all from dim 1 to dim 0"), std::string::npos) << plan;
  EXPECT_NE(plan.find("all_to_all from dim 0 to dim 1"), std::string::npos) << plan;
}

}  // namespace
}  // namespace kiln
