#include <cmath>
#include <functional>
#include <limits>

#include "testing/op_check.h"

namespace kiln::testing::unary_test {
namespace {

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> kiln;
  std::function<double(double)> ref;
  float lo, hi;  // input range (keeps log, sqrt, … in their domain)
  bool differentiable = true;
};

// erfc, not 1 + erf: the latter cancels catastrophically in the left tail, even in double.
double gelu_ref(double x) {
  return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
}

const UnaryCase kCases[] = {
    {"neg", ops::neg, [](double x) { return -x; }, -1, 1},
    {"exp", ops::exp, [](double x) { return std::exp(x); }, -3, 3},
    {"log", ops::log, [](double x) { return std::log(x); }, 0.1f, 3},
    {"sqrt", ops::sqrt, [](double x) { return std::sqrt(x); }, 0.1f, 3},
    {"rsqrt", ops::rsqrt, [](double x) { return 1 / std::sqrt(x); }, 0.2f, 3},
    {"abs", ops::abs, [](double x) { return std::abs(x); }, -1, 1},
    {"relu", ops::relu, [](double x) { return x > 0 ? x : 0; }, -1, 1},
    {"gelu", ops::gelu, gelu_ref, -4, 4},
    {"sigmoid", ops::sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, -6, 6},
    {"tanh", ops::tanh, [](double x) { return std::tanh(x); }, -4, 4},
    {"square", ops::square, [](double x) { return x * x; }, -1, 1},
    {"add_scalar", [](const Tensor& x) { return ops::add_scalar(x, 0.75); },
     [](double x) { return x + 0.75; }, -1, 1},
    {"mul_scalar", [](const Tensor& x) { return ops::mul_scalar(x, -1.25); },
     [](double x) { return x * -1.25; }, -1, 1},
    {"pow_scalar_2", [](const Tensor& x) { return ops::pow_scalar(x, 2.0); },
     [](double x) { return x * x; }, -1, 1},
    {"pow_scalar_3", [](const Tensor& x) { return ops::pow_scalar(x, 3.0); },
     [](double x) { return x * x * x; }, -1, 1},
    {"pow_scalar_half", [](const Tensor& x) { return ops::pow_scalar(x, 0.5); },
     [](double x) { return std::sqrt(x); }, 0.2f, 2},
    {"pow_scalar_minus_half", [](const Tensor& x) { return ops::pow_scalar(x, -0.5); },
     [](double x) { return 1 / std::sqrt(x); }, 0.2f, 2},
    {"pow_scalar_minus_1", [](const Tensor& x) { return ops::pow_scalar(x, -1.0); },
     [](double x) { return 1 / x; }, 0.5f, 2},
    {"pow_scalar_1_7", [](const Tensor& x) { return ops::pow_scalar(x, 1.7); },
     [](double x) { return std::pow(x, 1.7); }, 0.5f, 2},
    {"sign", ops::sign, [](double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }, -1, 1, false},
};

RefFn elementwise(const std::function<double(double)>& f) {
  return [f](const std::vector<Values>& x) {
    Values y(x[0].size());
    for (size_t i = 0; i < y.size(); ++i) y[i] = f(x[0][i]);
    return y;
  };
}

Tensor channels_last_copy(const Tensor& t) {
  Tensor cl = Tensor::empty_strided(t.shape(), channels_last_strides(t.shape()), t.dtype());
  cl.copy_from(t);
  return cl;
}

class UnaryOpTest : public ::testing::TestWithParam<UnaryCase> {};

TEST_P(UnaryOpTest, ForwardMatchesReference) {
  const UnaryCase& c = GetParam();
  // The last shape is big enough for the engine's OpenMP path.
  for (const Shape& s : {Shape{}, Shape{7}, Shape{3, 4}, Shape{2, 3, 5}, Shape{4, 9000}}) {
    Tensor x = random_tensor(s, 11, c.lo, c.hi);
    expect_forward_matches([&](const std::vector<Tensor>& in) { return c.kiln(in[0]); },
                           elementwise(c.ref), {x}, 1e-6, 2e-6);
  }
}

TEST_P(UnaryOpTest, NonContiguousInputs) {
  const UnaryCase& c = GetParam();
  Tensor t = ops::transpose(random_tensor({5, 6}, 12, c.lo, c.hi), 0, 1);
  ASSERT_FALSE(t.is_contiguous());
  Tensor sliced = ops::slice(random_tensor({4, 10}, 13, c.lo, c.hi), 1, 1, 9, 2);
  Tensor cl = channels_last_copy(random_tensor({2, 3, 4, 5}, 14, c.lo, c.hi));
  for (const Tensor& x : {t, sliced, cl}) {
    expect_forward_matches([&](const std::vector<Tensor>& in) { return c.kiln(in[0]); },
                           elementwise(c.ref), {x}, 1e-6, 2e-6);
  }
  EXPECT_TRUE(c.kiln(cl).is_channels_last()) << "channels-last input keeps its layout";
}

TEST_P(UnaryOpTest, GradientMatchesFiniteDifferences) {
  const UnaryCase& c = GetParam();
  if (!c.differentiable) {
    EXPECT_NE(ops::op_def(ops::op_by_name(c.name)).no_grad_reason, nullptr);
    return;
  }
  Tensor x = random_tensor({3, 4}, 15, c.lo, c.hi);
  Tensor t = ops::transpose(random_tensor({4, 3}, 16, c.lo, c.hi), 0, 1);
  for (const Tensor& in : {x, t}) {
    expect_gradients_match([&](const std::vector<Tensor>& v) { return c.kiln(v[0]); },
                           elementwise(c.ref), {in});
  }
}

INSTANTIATE_TEST_SUITE_P(AllUnary, UnaryOpTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// The vectorized approximations against double-precision libm over wide ranges.
TEST(UnaryAccuracy, TranscendentalsWithinAFewUlp) {
  struct Sweep {
    Tensor (*fn)(const Tensor&);
    double (*ref)(double);
    double lo, hi;
    double rtol;
  } sweeps[] = {
      {ops::exp, [](double x) { return std::exp(x); }, -87, 88, 2e-7},
      {ops::log, [](double x) { return std::log(x); }, 1e-3, 1e3, 2e-7},
      {ops::tanh, [](double x) { return std::tanh(x); }, -10, 10, 4e-7},
      {ops::sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, -30, 30, 4e-7},
      // Deep in the left tail (gelu(-8) ≈ 5e-15) FMA contraction of p - z² can cost a few ulp.
      {ops::gelu, gelu_ref, -8, 8, 5e-6},
  };
  const int n = 20001;
  for (const Sweep& s : sweeps) {
    std::vector<float> xs(n);
    for (int i = 0; i < n; ++i) xs[size_t(i)] = float(s.lo + (s.hi - s.lo) * i / (n - 1));
    std::vector<float> ys = s.fn(Tensor::from_vector(xs, {n})).to_vector<float>();
    for (int i = 0; i < n; ++i) {
      double expected = s.ref(double(xs[size_t(i)]));
      double tol = s.rtol * std::abs(expected) + 1e-30;
      ASSERT_NEAR(ys[size_t(i)], expected, tol) << "x = " << xs[size_t(i)];
    }
  }
  // log across the whole exponent range, denormals included.
  for (float x : {1e-44f, 1e-40f, 1e-30f, 1e-10f, 0.7f, 1.0f, 1.5f, 1e10f, 3e38f}) {
    float y = ops::log(Tensor::from_vector(std::vector<float>{x}, {1})).item<float>();
    EXPECT_NEAR(y, std::log(double(x)), 2e-7 * std::abs(std::log(double(x))) + 1e-7) << x;
  }
}

TEST(UnaryAccuracy, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto run = [](Tensor (*fn)(const Tensor&), std::vector<float> x) {
    return fn(Tensor::from_vector(x, {int64_t(x.size())})).to_vector<float>();
  };
  auto e = run(ops::exp, {-inf, -200.f, 0.f, 89.f, inf, nan});
  EXPECT_EQ(e[0], 0.f);
  EXPECT_EQ(e[1], 0.f);
  EXPECT_EQ(e[2], 1.f);
  EXPECT_EQ(e[3], inf);
  EXPECT_EQ(e[4], inf);
  EXPECT_TRUE(std::isnan(e[5]));
  auto l = run(ops::log, {0.f, -1.f, inf, nan, 1.f});
  EXPECT_EQ(l[0], -inf);
  EXPECT_TRUE(std::isnan(l[1]));
  EXPECT_EQ(l[2], inf);
  EXPECT_TRUE(std::isnan(l[3]));
  EXPECT_EQ(l[4], 0.f);
  auto t = run(ops::tanh, {-inf, -100.f, 100.f, inf, nan, 0.f});
  EXPECT_EQ(t[0], -1.f);
  EXPECT_EQ(t[1], -1.f);
  EXPECT_EQ(t[2], 1.f);
  EXPECT_EQ(t[3], 1.f);
  EXPECT_TRUE(std::isnan(t[4]));
  EXPECT_EQ(t[5], 0.f);
  auto s = run(ops::sigmoid, {-inf, inf, -200.f, 200.f});
  EXPECT_EQ(s[0], 0.f);
  EXPECT_EQ(s[1], 1.f);
  EXPECT_EQ(s[2], 0.f);
  EXPECT_EQ(s[3], 1.f);
  auto r = run(ops::relu, {nan, -1.f, 2.f});
  EXPECT_TRUE(std::isnan(r[0]));
  EXPECT_EQ(r[1], 0.f);
  EXPECT_EQ(r[2], 2.f);
  auto g = run(ops::gelu, {-inf, inf, -30.f});
  EXPECT_EQ(g[1], inf);
  EXPECT_EQ(g[2], 0.f);
}

TEST(UnaryOp, Bf16InputComputesInF32) {
  Tensor x = ops::cast(random_tensor({100}, 17, -2, 2), DType::bf16);
  Tensor y = ops::exp(x);
  EXPECT_EQ(y.dtype(), DType::bf16);
  Values xv = values_of(x), yv = values_of(y);
  for (size_t i = 0; i < xv.size(); ++i) {
    EXPECT_NEAR(yv[i], std::exp(xv[i]), std::exp(xv[i]) * 4e-3);
  }
}

TEST(UnaryOp, FloatOnlyOpsRejectIntegersNamingOpAndShape) {
  Tensor i = Tensor::zeros({2, 3}, DType::i32);
  for (auto fn : {ops::exp, ops::log, ops::sqrt, ops::gelu, ops::tanh}) {
    try {
      fn(i);
      FAIL() << "expected a ShapeError";
    } catch (const ShapeError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("i32[2, 3]"), std::string::npos) << msg;
    }
  }
  try {
    ops::log(i);
  } catch (const ShapeError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("log:", 0), 0u) << e.what();
  }
}

TEST(UnaryOp, IntegerNegAndAbsKeepDtype) {
  Tensor i = Tensor::from_vector(std::vector<int32_t>{-3, 0, 5}, {3});
  EXPECT_EQ(ops::neg(i).to_vector<int32_t>(), (std::vector<int32_t>{3, 0, -5}));
  EXPECT_EQ(ops::abs(i).to_vector<int32_t>(), (std::vector<int32_t>{3, 0, 5}));
  EXPECT_EQ(ops::abs(i).dtype(), DType::i32);
}

}  // namespace
}  // namespace kiln::testing::unary_test
