#include <cmath>

#include "testing/op_check.h"

namespace kiln::testing::binary_test {
namespace {

struct BinaryCase {
  const char* name;
  Tensor (*kiln)(const Tensor&, const Tensor&);
  double (*ref)(double, double);
  float lo, hi;  // input range (keeps div and pow away from their singularities)
};

const BinaryCase kCases[] = {
    {"add", ops::add, [](double a, double b) { return a + b; }, -1, 1},
    {"sub", ops::sub, [](double a, double b) { return a - b; }, -1, 1},
    {"mul", ops::mul, [](double a, double b) { return a * b; }, -1, 1},
    {"div", ops::div, [](double a, double b) { return a / b; }, 0.5, 2},
    {"maximum", ops::maximum, [](double a, double b) { return a >= b ? a : b; }, -1, 1},
    {"minimum", ops::minimum, [](double a, double b) { return a <= b ? a : b; }, -1, 1},
    {"pow", ops::pow, [](double a, double b) { return std::pow(a, b); }, 0.5, 2},
};

const std::pair<Shape, Shape> kShapes[] = {
    {{3, 4}, {3, 4}}, {{3, 4}, {4}},       {{3, 1}, {1, 4}}, {{2, 3, 4}, {3, 1}},
    {{5}, {}},        {{2, 1, 3}, {4, 1}}, {{1}, {2, 2}},    {{2, 3, 1500}, {2, 3, 1500}},
};

class BinaryOpTest : public ::testing::TestWithParam<BinaryCase> {};

TEST_P(BinaryOpTest, ForwardMatchesReferenceWithBroadcasting) {
  const BinaryCase& c = GetParam();
  for (const auto& [sa, sb] : kShapes) {
    Tensor a = random_tensor(sa, 1, c.lo, c.hi), b = random_tensor(sb, 2, c.lo, c.hi);
    expect_forward_matches(
        [&](const std::vector<Tensor>& x) { return c.kiln(x[0], x[1]); },
        [&](const std::vector<Values>& x) { return broadcast_binary(x[0], sa, x[1], sb, c.ref); },
        {a, b});
  }
}

TEST_P(BinaryOpTest, GradientMatchesFiniteDifferences) {
  const BinaryCase& c = GetParam();
  for (int k = 0; k < 7; ++k) {
    const auto& [sa, sb] = kShapes[k];
    Tensor a = random_tensor(sa, 3, c.lo, c.hi), b = random_tensor(sb, 4, c.lo, c.hi);
    expect_gradients_match(
        [&](const std::vector<Tensor>& x) { return c.kiln(x[0], x[1]); },
        [&](const std::vector<Values>& x) { return broadcast_binary(x[0], sa, x[1], sb, c.ref); },
        {a, b});
  }
}

INSTANTIATE_TEST_SUITE_P(AllBinary, BinaryOpTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(BinaryOp, ShapeMismatchNamesOpAndShapes) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4});
  try {
    ops::add(a, b);
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("add"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[4]"), std::string::npos) << msg;
  }
}

TEST(BinaryOp, ChannelsLastInputKeepsLayoutAndValues) {
  Shape s{2, 3, 4, 5};
  Tensor a = random_tensor(s, 7);
  Tensor cl = Tensor::empty_strided(s, channels_last_strides(s), DType::f32);
  cl.copy_from(a);
  Tensor bias = random_tensor({1, 3, 1, 1}, 8);
  Tensor y = ops::add(cl, bias);
  EXPECT_TRUE(y.is_channels_last());
  expect_close(values_of(y), values_of(ops::add(a, bias)), 0, 0, "channels-last add");
}

TEST(BinaryOp, Bf16InputsComputeInF32AndRound) {
  Tensor a = ops::cast(random_tensor({64}, 9), DType::bf16);
  Tensor b = ops::cast(random_tensor({64}, 10), DType::bf16);
  Tensor y = ops::mul(a, b);
  EXPECT_EQ(y.dtype(), DType::bf16);
  Values av = values_of(a), bv = values_of(b), yv = values_of(y);
  for (size_t i = 0; i < yv.size(); ++i) {
    float expected = bf16_to_float(float_to_bf16(float(av[i] * bv[i])));
    EXPECT_EQ(float(yv[i]), expected);
  }
}

}  // namespace
}  // namespace kiln::testing::binary_test
