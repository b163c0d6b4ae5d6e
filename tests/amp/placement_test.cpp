#include "kiln/amp/placement.h"

#include <gtest/gtest.h>

#include <map>

#include "kiln/amp/autocast.h"
#include "kiln/ops/cpu_support.h"
#include "kiln/ops/functional.h"
#include "testing/cpu_features.h"

namespace kiln::amp::placement_test {
namespace {

using ops::OpKind;

// Fixed costs: per op kind, its time in each dtype; casts cost `cast_ns_per_element`. Counts the
// questions it was asked, so a test can check that strict placement never asks.
class FixedCostModel : public CostModel {
 public:
  struct Times {
    double f32_ms;
    double low_ms;
  };
  std::map<OpKind, Times> ops;
  double cast_ns_per_element = 1.0;
  int questions = 0;

  std::optional<double> op_ms(const OpQuery& q) override {
    ++questions;
    auto it = ops.find(q.kind);
    if (it == ops.end()) return std::nullopt;
    const bool low = is_low_precision(q.inputs[0].dtype);
    return low ? it->second.low_ms : it->second.f32_ms;
  }
  double cast_ms(int64_t numel, DType, DType) override {
    return double(numel) * cast_ns_per_element * 1e-6;
  }
};

std::vector<ops::TensorMeta> metas(std::initializer_list<std::pair<Shape, DType>> list) {
  std::vector<ops::TensorMeta> out;
  for (const auto& [shape, dtype] : list) out.push_back({shape, dtype});
  return out;
}

TEST(Placement, ChoosesLowPrecisionWhenItWinsWithItsCasts) {
  FixedCostModel model;
  model.ops[OpKind::matmul] = {.f32_ms = 10.0, .low_ms = 5.0};
  // Casting 1000 + 1000 elements forward and backward: 4000 ns = 0.004 ms.
  const auto in = metas({{Shape{10, 100}, DType::f32}, {Shape{100, 10}, DType::f32}});
  std::vector<PlacementDecision> log;
  EXPECT_EQ(choose_dtype(model, OpKind::matmul, in, ops::NoAttrs{}, 2, DType::bf16, &log),
            DType::bf16);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].chosen, DType::bf16);
  EXPECT_DOUBLE_EQ(log[0].f32_ms, 10.0);
  EXPECT_DOUBLE_EQ(log[0].low_ms, 5.0 + 4 * 1000 * 1e-6);
  EXPECT_NE(log[0].str().find("matmul f32[10, 100], f32[100, 10]: bf16"), std::string::npos)
      << log[0].str();
}

TEST(Placement, KeepsFp32WhenTheCastsEatTheGain) {
  FixedCostModel model;
  model.ops[OpKind::matmul] = {.f32_ms = 1.0, .low_ms = 0.5};
  model.cast_ns_per_element = 200.0;  // 2 * 2000 elements * 200 ns = 0.8 ms of casts
  const auto in = metas({{Shape{10, 100}, DType::f32}, {Shape{100, 10}, DType::f32}});
  EXPECT_EQ(choose_dtype(model, OpKind::matmul, in, ops::NoAttrs{}, 2, DType::bf16, nullptr),
            DType::f32);
  // An input already in bf16 is a cast the fp32 choice pays instead.
  const auto mixed = metas({{Shape{10, 100}, DType::bf16}, {Shape{100, 10}, DType::bf16}});
  EXPECT_EQ(choose_dtype(model, OpKind::matmul, mixed, ops::NoAttrs{}, 2, DType::bf16, nullptr),
            DType::bf16);
}

TEST(Placement, ATieOrASmallSavingKeepsFp32) {
  FixedCostModel model;
  model.cast_ns_per_element = 0.0;
  const auto in = metas({{Shape{4, 4}, DType::f32}, {Shape{4, 4}, DType::f32}});
  model.ops[OpKind::matmul] = {.f32_ms = 1.0, .low_ms = 0.95};  // within the margin
  EXPECT_EQ(choose_dtype(model, OpKind::matmul, in, ops::NoAttrs{}, 2, DType::bf16, nullptr),
            DType::f32);
  model.ops[OpKind::matmul] = {.f32_ms = 1.0, .low_ms = 0.85};
  EXPECT_EQ(choose_dtype(model, OpKind::matmul, in, ops::NoAttrs{}, 2, DType::bf16, nullptr),
            DType::bf16);
  // Twice as fast, but saving less than kMinLowPrecisionSavingMs: fp32.
  model.ops[OpKind::matmul] = {.f32_ms = 0.04, .low_ms = 0.02};
  EXPECT_EQ(choose_dtype(model, OpKind::matmul, in, ops::NoAttrs{}, 2, DType::bf16, nullptr),
            DType::f32);
}

TEST(Placement, UnknownCostLeavesTheChoiceToTheLevel) {
  FixedCostModel model;
  const auto in = metas({{Shape{4, 4}, DType::f32}, {Shape{4, 4}, DType::f32}});
  std::vector<PlacementDecision> log;
  EXPECT_FALSE(choose_dtype(model, OpKind::matmul, in, ops::NoAttrs{}, 2, DType::bf16, &log));
  EXPECT_TRUE(log.empty());
}

TEST(Placement, DescribeDecisionsCountsRepeats) {
  const PlacementDecision a{OpKind::conv2d, "f32[1, 2]", DType::f32, 2.0, 1.0};
  const PlacementDecision b{OpKind::matmul, "f32[3, 4]", DType::bf16, 1.0, 2.0};
  const std::vector<std::string> lines = describe_decisions(std::vector{a, b, a});
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], a.str() + " x2");
  EXPECT_EQ(lines[1], b.str());
}

// Through autocast: a matmul whose bf16 kernel is slow here stays fp32 and so does the relu
// after it; a fast one goes to bf16 and the relu follows it with no cast in between.
TEST(Placement, AutocastFollowsTheCostModel) {
  if (!ops::arithmetic_available(DType::bf16)) GTEST_SKIP() << kiln::testing::kNoBf16Arithmetic;
  const Tensor x = Tensor::full({8, 16}, 0.5);
  const Tensor w = Tensor::full({16, 4}, 0.25);
  auto model = std::make_shared<FixedCostModel>();
  model->cast_ns_per_element = 0.0;
  AmpConfig config{.level = AmpLevel::O2, .cost_model = model};

  model->ops[OpKind::matmul] = {.f32_ms = 1.0, .low_ms = 3.0};
  {
    AutocastScope scope(config);
    const Tensor y = ops::relu(ops::matmul(x, w));
    EXPECT_EQ(y.dtype(), DType::f32);
    ASSERT_EQ(scope.decisions().size(), 1u);
    EXPECT_EQ(scope.decisions()[0].chosen, DType::f32);
  }
  model->ops[OpKind::matmul] = {.f32_ms = 3.0, .low_ms = 1.0};
  {
    AutocastScope scope(config);
    const Tensor h = ops::matmul(x, w);
    EXPECT_EQ(h.dtype(), DType::bf16);
    EXPECT_EQ(ops::relu(h).dtype(), DType::bf16);
    // A bias follows the larger activations it is added to.
    EXPECT_EQ(ops::add(h, Tensor::full({4}, 1.0)).dtype(), DType::bf16);
    // An fp32 elementwise op on fp32 data is not pulled into bf16.
    EXPECT_EQ(ops::relu(x).dtype(), DType::f32);
  }
}

// amp_strict: MindSpore's placement (compute_dtype), without asking the cost model.
TEST(Placement, StrictKeepsMindSporePlacement) {
  if (!ops::arithmetic_available(DType::bf16)) GTEST_SKIP() << kiln::testing::kNoBf16Arithmetic;
  auto model = std::make_shared<FixedCostModel>();
  model->ops[OpKind::matmul] = {.f32_ms = 1.0, .low_ms = 100.0};
  const Tensor x = Tensor::full({8, 16}, 0.5);
  const Tensor w = Tensor::full({16, 4}, 0.25);
  for (AmpLevel level : {AmpLevel::O1, AmpLevel::O2}) {
    AmpConfig config{.level = level, .strict = true, .cost_model = model};
    const std::vector<DType> f32s{DType::f32, DType::f32};
    AutocastScope scope(config);
    const Tensor h = ops::matmul(x, w);
    EXPECT_EQ(h.dtype(), compute_dtype(OpKind::matmul, f32s, config));
    const std::vector<DType> relu_in{DType::f32};
    EXPECT_EQ(ops::relu(x).dtype(),
              compute_dtype(OpKind::relu, relu_in, config).value_or(DType::f32));
    EXPECT_TRUE(scope.decisions().empty());
  }
  EXPECT_EQ(model->questions, 0);
}

}  // namespace
}  // namespace kiln::amp::placement_test
