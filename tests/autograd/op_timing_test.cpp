// autograd::time_op_ms, which AMP's placement and AUTO_PARALLEL's search time ops with: more work
// takes longer, the backward counts only for differentiable inputs, integer inputs are valid,
// the model's generator is left alone, and an op that cannot run is nullopt, not an error.
#include "kiln/autograd/op_timing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "kiln/core/random.h"
#include "kiln/ops/attrs.h"

namespace kiln::autograd::op_timing_test {
namespace {

OpTimingQuery matmul(int64_t m, int64_t k, int64_t n, uint32_t differentiable = ~0u) {
  return {.kind = ops::OpKind::matmul,
          .inputs = {{Shape({m, k}), DType::f32}, {Shape({k, n}), DType::f32}},
          .attrs = ops::MatmulAttrs{},
          .differentiable = differentiable};
}

// The fastest of five timings of each query, taken in turn: a test that compares timings runs
// beside other tests, and one slow sample of either side would decide the comparison.
std::vector<double> fastest_of_five(const std::vector<OpTimingQuery>& queries) {
  std::vector<double> best(queries.size(), std::numeric_limits<double>::infinity());
  for (int round = 0; round < 5; ++round) {
    for (size_t q = 0; q < queries.size(); ++q) {
      best[q] = std::min(best[q], time_op_ms(queries[q], 3).value());
    }
  }
  return best;
}

TEST(OpTiming, EightTimesTheWorkTakesLonger) {
  ASSERT_TRUE(time_op_ms(matmul(128, 128, 128), 1).has_value());
  const std::vector<double> ms = fastest_of_five({matmul(128, 128, 128), matmul(256, 256, 256)});
  const double small = ms[0], large = ms[1];
  EXPECT_GT(small, 0);
  EXPECT_GT(large, 2.5 * small) << "8x the FLOPs";
}

TEST(OpTiming, TheBackwardRunsForDifferentiableInputsOnly) {
  const std::vector<double> ms = fastest_of_five(
      {matmul(256, 256, 256, 0), matmul(256, 256, 256, 0b10), matmul(256, 256, 256)});
  const double forward = ms[0], one = ms[1], both = ms[2];
  // Each input's gradient is one more matmul of the forward's size.
  EXPECT_GT(one, 1.5 * forward);
  EXPECT_GT(both, 1.25 * one);
}

TEST(OpTiming, IntegerInputsAreValidAndTheModelsGeneratorDoesNotAdvance) {
  set_seed(7);
  const OpTimingQuery loss{.kind = ops::OpKind::softmax_cross_entropy,
                           .inputs = {{Shape({64, 10}), DType::f32}, {Shape({64}), DType::i32}},
                           .attrs = ops::CrossEntropyAttrs{}};
  EXPECT_TRUE(time_op_ms(loss, 1).has_value());
  const uint64_t after_timing = default_generator().next_u64();
  set_seed(7);
  EXPECT_EQ(after_timing, default_generator().next_u64());
}

TEST(OpTiming, AnOpThatCannotRunIsNullopt) {
  // Inner dimensions 3 and 4 do not match.
  const OpTimingQuery bad{.kind = ops::OpKind::matmul,
                          .inputs = {{Shape({2, 3}), DType::f32}, {Shape({4, 5}), DType::f32}},
                          .attrs = ops::MatmulAttrs{}};
  EXPECT_FALSE(time_op_ms(bad, 1).has_value());
}

TEST(OpTiming, TheKeyTellsApartWhatChangesTheTime) {
  const std::string base = timing_key(matmul(8, 8, 8));
  EXPECT_EQ(base, timing_key(matmul(8, 8, 8)));
  EXPECT_NE(base, timing_key(matmul(8, 8, 16)));
  EXPECT_NE(base, timing_key(matmul(8, 8, 8, 0b10)));
  OpTimingQuery transposed = matmul(8, 8, 8);
  transposed.attrs = ops::MatmulAttrs{.transpose_b = true};
  EXPECT_NE(base, timing_key(transposed));
  OpTimingQuery f16 = matmul(8, 8, 8);
  f16.inputs[0].dtype = DType::f16;
  EXPECT_NE(base, timing_key(f16));
  OpTimingQuery nhwc{.kind = ops::OpKind::relu, .inputs = {{Shape({2, 3, 4, 5}), DType::f32}}};
  const std::string plain = timing_key(nhwc);
  nhwc.inputs[0].layout = ops::Layout::channels_last;
  EXPECT_NE(plain, timing_key(nhwc));
}

}  // namespace
}  // namespace kiln::autograd::op_timing_test
