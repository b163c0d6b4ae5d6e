#include "kiln/core/random.h"
#include "nn_reference.h"

namespace kiln::testing::nn_dropout_test {
namespace {

TEST(NnDropout, TrainingMasksWithScaledKeepsAtRateP) {
  const double p = 0.3;
  const int64_t n = 20000;
  Tensor x = random_tensor({n}, 1, 0.5f, 1.5f);
  std::vector<Tensor> out = ops::dropout(x, p, true);
  Values xv = values_of(x), yv = values_of(out[0]), mv = values_of(out[1]);
  int64_t dropped = 0;
  const double keep = 1.0 / (1.0 - p);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(mv[size_t(i)] == 0.0 || std::abs(mv[size_t(i)] - keep) < 1e-6) << mv[size_t(i)];
    ASSERT_NEAR(yv[size_t(i)], xv[size_t(i)] * mv[size_t(i)], 1e-6);
    dropped += mv[size_t(i)] == 0.0;
  }
  double rate = double(dropped) / double(n), sigma = std::sqrt(p * (1 - p) / double(n));
  EXPECT_NEAR(rate, p, 5 * sigma);
}

TEST(NnDropout, EvalIsIdentityAndSeedsReproduce) {
  Tensor x = random_tensor({100}, 2);
  expect_close(values_of(ops::dropout(x, 0.5, false)[0]), values_of(x), 0, 0, "eval");
  set_seed(42);
  Values a = values_of(ops::dropout(x, 0.5, true)[1]);
  Values b = values_of(ops::dropout(x, 0.5, true)[1]);
  set_seed(42);
  Values c = values_of(ops::dropout(x, 0.5, true)[1]);
  EXPECT_EQ(a, c);
  EXPECT_NE(a, b);
}

TEST(NnDropout, GradientIsGradTimesMask) {
  autograd::install_tape();
  Tensor x = random_tensor({6, 7}, 3).detach();
  x.set_requires_grad(true);
  std::vector<Tensor> out = ops::dropout(x, 0.4, true);
  Tensor w = random_tensor({6, 7}, 4);
  Tensor g = autograd::grad(ops::sum(ops::mul(out[0], w)), {x})[0];
  Values gv = values_of(g), wv = values_of(w), mv = values_of(out[1]);
  for (size_t i = 0; i < gv.size(); ++i) ASSERT_NEAR(gv[i], wv[i] * mv[i], 1e-6);
}

TEST(NnDropout, BadProbabilityNamesOp) {
  expect_error_mentions([] { ops::dropout(Tensor::zeros({3}), 1.5, true); },
                        {"dropout", "p must be in [0, 1]", "f32[3]"});
  expect_error_mentions([] { ops::dropout(Tensor::zeros({3}, DType::i64), 0.5, true); },
                        {"dropout", "i64[3]"});
}

}  // namespace
}  // namespace kiln::testing::nn_dropout_test
