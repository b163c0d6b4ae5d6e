#include "kiln/nn/initializer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kiln/core/error.h"
#include "kiln/core/random.h"

namespace kiln::nn::initializer_test {
namespace {

struct Moments {
  double mean = 0, var = 0, min = 1e30, max = -1e30;
};

Moments moments(const Tensor& t) {
  std::vector<float> v = t.to_vector<float>();
  Moments m;
  for (float x : v) {
    m.mean += x;
    m.min = std::min(m.min, double(x));
    m.max = std::max(m.max, double(x));
  }
  m.mean /= double(v.size());
  for (float x : v) m.var += (x - m.mean) * (x - m.mean);
  m.var /= double(v.size());
  return m;
}

TEST(Initializer, Fans) {
  EXPECT_EQ(fan_in(Shape{16, 8, 3, 3}), 72);
  EXPECT_EQ(fan_out(Shape{16, 8, 3, 3}), 144);
  EXPECT_EQ(fan_in(Shape{10, 784}), 784);
  EXPECT_EQ(fan_out(Shape{10, 784}), 10);
  EXPECT_EQ(fan_in(Shape{7}), 7);
}

TEST(Initializer, HeUniformBoundAndVariance) {
  set_seed(1);
  Shape s{256, 50, 3, 3};                            // fan_in 450
  Moments m = moments(initializer(HeUniform(), s));  // gain sqrt(2): bound sqrt(6/450)
  double bound = std::sqrt(6.0 / 450.0);
  EXPECT_LE(m.max, bound);
  EXPECT_GE(m.min, -bound);
  EXPECT_GT(m.max, 0.99 * bound);
  EXPECT_NEAR(m.mean, 0.0, 0.01 * bound);
  EXPECT_NEAR(m.var, bound * bound / 3.0, 0.02 * bound * bound / 3.0);
  // MindSpore's Dense/Conv default: negative_slope sqrt(5) gives bound 1/sqrt(fan_in).
  Moments d = moments(initializer(HeUniform(std::sqrt(5.0)), s));
  EXPECT_LE(d.max, 1.0 / std::sqrt(450.0));
  EXPECT_GT(d.max, 0.99 / std::sqrt(450.0));
}

TEST(Initializer, HeNormalFanOut) {
  set_seed(2);
  Moments m = moments(initializer(HeNormal(0.0, FanMode::fan_out, "relu"), {128, 64, 3, 3}));
  double var = 2.0 / (128 * 9);
  EXPECT_NEAR(m.var, var, 0.03 * var);
  EXPECT_NEAR(m.mean, 0, 0.01 * std::sqrt(var));
}

TEST(Initializer, NormalUniformXavierConstants) {
  set_seed(3);
  Moments n = moments(initializer(Normal(0.5, 2.0), {100000}));
  EXPECT_NEAR(n.mean, 2.0, 0.01);
  EXPECT_NEAR(std::sqrt(n.var), 0.5, 0.01);
  Moments u = moments(initializer(Uniform(0.07), {100000}));
  EXPECT_LE(u.max, 0.07);
  EXPECT_GE(u.min, -0.07);
  EXPECT_NEAR(u.var, 0.07 * 0.07 / 3, 1e-4);
  Moments x = moments(initializer(XavierUniform(), {300, 100}));
  double b = std::sqrt(6.0 / 400.0);
  EXPECT_LE(x.max, b);
  EXPECT_GT(x.max, 0.99 * b);
  EXPECT_EQ(initializer(Zero(), {3}).to_vector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(initializer(One(), {2}).to_vector<float>(), (std::vector<float>{1, 1}));
  EXPECT_EQ(initializer(Constant(2.5), {1}).to_vector<float>(), (std::vector<float>{2.5f}));
}

TEST(Initializer, TruncatedNormalStaysWithinTwoSigma) {
  set_seed(4);
  Moments m = moments(initializer(TruncatedNormal(0.02), {100000}));
  EXPECT_LE(m.max, 0.04 + 1e-7);
  EXPECT_GE(m.min, -0.04 - 1e-7);
  // Variance of N(0,1) truncated to ±2: 0.7737.
  EXPECT_NEAR(m.var, 0.7737 * 0.0004, 0.02 * 0.7737 * 0.0004);
}

TEST(Initializer, SeedMakesItReproducible) {
  set_seed(42);
  Tensor a = initializer(HeUniform(), {10, 10});
  set_seed(42);
  Tensor b = initializer(HeUniform(), {10, 10});
  Tensor c = initializer(HeUniform(), {10, 10});
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  EXPECT_NE(b.to_vector<float>(), c.to_vector<float>());
}

TEST(Initializer, ByNameAndErrors) {
  EXPECT_EQ(initializer_by_name("HeUniform")->name(), "HeUniform");
  EXPECT_EQ(initializer_by_name("xavier_uniform")->name(), "XavierUniform");
  EXPECT_EQ(initializer_by_name("zeros")->name(), "Zero");
  EXPECT_EQ(initializer_by_name("truncated_normal")->name(), "TruncatedNormal");
  try {
    initializer_by_name("glorot");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'glorot'"), std::string::npos);
  }
  EXPECT_THROW(HeUniform(0.0, FanMode::fan_in, "swish"), Error);
}

}  // namespace
}  // namespace kiln::nn::initializer_test
