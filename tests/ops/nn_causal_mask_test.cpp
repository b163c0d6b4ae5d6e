#include <limits>

#include "kiln/ops/cpu_support.h"
#include "nn_reference.h"
#include "testing/cpu_features.h"

namespace kiln::testing::nn_causal_mask_test {
namespace {

// The mask as a naive loop over every [T, S] matrix of the flattened input.
Values causal_mask_ref(const Values& x, const Shape& shape, double fill) {
  const int64_t s = shape[shape.rank() - 1], t = shape[shape.rank() - 2];
  Values y = x;
  for (size_t flat = 0; flat < y.size(); ++flat) {
    const int64_t j = int64_t(flat) % s, i = int64_t(flat) / s % t;
    if (j > i + (s - t)) y[flat] = fill;
  }
  return y;
}

// Square (self-attention), more keys than queries (a cached prefix), one query, 2-D and 4-D.
const Shape kShapes[] = {{4, 4}, {2, 3, 5, 5}, {2, 3, 5}, {3, 1, 4}, {1, 1}};

TEST(NnCausalMask, ForwardMatchesReference) {
  for (const Shape& shape : kShapes) {
    for (double fill : {-1e9, -3.5, 0.0}) {
      expect_forward_matches(
          [&](const std::vector<Tensor>& x) { return ops::causal_mask(x[0], fill); },
          [&](const std::vector<Values>& x) { return causal_mask_ref(x[0], shape, fill); },
          {random_tensor(shape, 7)}, 0, 0);
    }
  }
}

TEST(NnCausalMask, MinusInfinityGivesZeroSoftmaxWeightToLaterKeys) {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor x = random_tensor({2, 6, 6}, 3, -4.f, 4.f);
  Values p = values_of(ops::softmax(ops::causal_mask(x, -inf), -1));
  Values xv = values_of(x);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 6; ++i) {
      // Reference: softmax over keys 0..i only, in double.
      double mx = -inf, z = 0;
      for (int64_t j = 0; j <= i; ++j) mx = std::max(mx, xv[size_t((b * 6 + i) * 6 + j)]);
      for (int64_t j = 0; j <= i; ++j) z += std::exp(xv[size_t((b * 6 + i) * 6 + j)] - mx);
      for (int64_t j = 0; j < 6; ++j) {
        const size_t k = size_t((b * 6 + i) * 6 + j);
        const double expected = j <= i ? std::exp(xv[k] - mx) / z : 0.0;
        EXPECT_NEAR(p[k], expected, 1e-6) << "batch " << b << " query " << i << " key " << j;
      }
    }
}

TEST(NnCausalMask, GradientMatchesFiniteDifferences) {
  for (const Shape& shape : kShapes) {
    expect_gradients_match(
        [&](const std::vector<Tensor>& x) { return ops::causal_mask(x[0], -2.0); },
        [&](const std::vector<Values>& x) { return causal_mask_ref(x[0], shape, -2.0); },
        {random_tensor(shape, 11)});
  }
}

TEST(NnCausalMask, StridedInputIsReadInLogicalOrder) {
  Tensor x = random_tensor({3, 4, 4}, 5);
  Tensor xt = ops::transpose(x, {0, 2, 1});  // a view with swapped strides
  Values ref = causal_mask_ref(values_of(xt), {3, 4, 4}, -7.0);
  expect_close(values_of(ops::causal_mask(xt, -7.0)), ref, 0, 0, "transposed view");
}

TEST(NnCausalMask, Bf16KeepsValuesAndFills) {
  Tensor x = random_tensor({2, 5, 5}, 9);
  Tensor xb = ops::cast(x, DType::bf16);
  Tensor y = ops::causal_mask(xb, -std::numeric_limits<double>::infinity());
  EXPECT_EQ(y.dtype(), DType::bf16);
  const Values ref =
      causal_mask_ref(values_of(xb), {2, 5, 5}, -std::numeric_limits<double>::infinity());
  const Values got = values_of(y);
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_EQ(got[i], ref[i]) << "flat index " << i;
}

TEST(NnCausalMask, BadInputsNameOpAndShapes) {
  expect_error_mentions([] { ops::causal_mask(Tensor::zeros({4}), 0.0); },
                        {"causal_mask", "rank >= 2", "f32[4]"});
  expect_error_mentions(
      [] {
        ops::causal_mask(Tensor::zeros({5, 3}), 0.0);
      },
      {"causal_mask", "T=5", "S=3", "f32[5, 3]"});
  expect_error_mentions(
      [] {
        ops::causal_mask(Tensor::zeros({2, 2}, DType::i32), 0.0);
      },
      {"causal_mask", "floating", "i32[2, 2]"});
  expect_error_mentions(
      [] {
        ops::causal_mask(Tensor::zeros({2, 2}), std::numeric_limits<double>::quiet_NaN());
      },
      {"causal_mask", "NaN"});
}

}  // namespace
}  // namespace kiln::testing::nn_causal_mask_test
