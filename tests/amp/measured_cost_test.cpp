// The cost model AMP's placement times kernels with (amp/measured_cost.h), on any CPU: larger
// ops and casts cost more, each query is timed once, and ops it must not time (they write their
// inputs, or read integers) are unknown rather than guessed.
#include "kiln/amp/measured_cost.h"

#include <gtest/gtest.h>

#include <vector>

#include "kiln/ops/attrs.h"

namespace kiln::amp::measured_cost_test {
namespace {

std::vector<ops::TensorMeta> matmul_inputs(int64_t n) {
  return {{Shape({n, n}), DType::f32}, {Shape({n, n}), DType::f32}};
}

TEST(MeasuredCost, ALargerMatmulCostsMoreAndIsTimedOnce) {
  // The fastest of five timings: beside other tests on 2 cores, both of two timings of the small
  // matmul were once preempted (0.20 ms against the large one's 0.196).
  MeasuredCostModel model(5);
  const ops::Attrs attrs = ops::MatmulAttrs{};
  const auto small_inputs = matmul_inputs(96), large_inputs = matmul_inputs(192);
  const std::optional<double> small = model.op_ms({ops::OpKind::matmul, small_inputs, attrs});
  const std::optional<double> large = model.op_ms({ops::OpKind::matmul, large_inputs, attrs});
  ASSERT_TRUE(small && large);
  EXPECT_GT(*large, 2.5 * *small) << "8x the FLOPs";
  // The cache answers the same query with the same figure.
  EXPECT_EQ(model.op_ms({ops::OpKind::matmul, small_inputs, attrs}), small);
}

TEST(MeasuredCost, OpsThatWriteTheirInputsOrReadIntegersAreUnknown) {
  MeasuredCostModel model(1);
  const std::vector<ops::TensorMeta> update = {{Shape({64}), DType::f32},
                                               {Shape({64}), DType::f32}};
  EXPECT_FALSE(model.op_ms({ops::OpKind::sgd_update, update, ops::Attrs{}}).has_value());
  const std::vector<ops::TensorMeta> loss = {{Shape({8, 10}), DType::f32},
                                             {Shape({8}), DType::i32}};
  EXPECT_FALSE(model.op_ms({ops::OpKind::softmax_cross_entropy, loss, ops::CrossEntropyAttrs{}})
                   .has_value());
}

TEST(MeasuredCost, ALongerCastCostsMore) {
  MeasuredCostModel model(3);
  const double small = model.cast_ms(1 << 14, DType::f32, DType::f16);
  const double large = model.cast_ms(1 << 20, DType::f32, DType::f16);
  EXPECT_GT(small, 0);
  EXPECT_GT(large, 8 * small) << "64x the elements";
}

}  // namespace
}  // namespace kiln::amp::measured_cost_test
