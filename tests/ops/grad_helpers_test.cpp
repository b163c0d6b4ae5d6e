#include <cmath>

#include "testing/op_check.h"

namespace kiln::testing::grad_helpers_test {
namespace {

double phi(double x) {
  return 0.5 * std::erfc(-x / std::sqrt(2.0));
}
double pdf(double x) {
  return std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}

TEST(ReluGrad, ForwardWithBroadcastingAndGradient) {
  for (const auto& [sg, sy] :
       std::vector<std::pair<Shape, Shape>>{{{3, 4}, {3, 4}}, {{3, 4}, {4}}, {{2, 1, 3}, {4, 1}}}) {
    Tensor g = random_tensor(sg, 1), y = random_tensor(sy, 2);
    RefFn ref = [&](const std::vector<Values>& x) {
      return broadcast_binary(x[0], sg, x[1], sy, [](double a, double b) { return b > 0 ? a : 0; });
    };
    KilnFn fn = [](const std::vector<Tensor>& x) { return ops::relu_grad(x[0], x[1]); };
    expect_forward_matches(fn, ref, {g, y});
    expect_gradients_match(fn, ref, {g, y}, {0});
  }
}

TEST(GeluGrad, ForwardAndSecondDerivative) {
  for (const auto& [sg, sx] : std::vector<std::pair<Shape, Shape>>{
           {{3, 4}, {3, 4}}, {{2, 3}, {3}}, {{4, 9000}, {4, 9000}}}) {
    Tensor g = random_tensor(sg, 3), x = random_tensor(sx, 4, -4, 4);
    RefFn ref = [&](const std::vector<Values>& v) {
      return broadcast_binary(v[0], sg, v[1], sx,
                              [](double a, double b) { return a * (phi(b) + b * pdf(b)); });
    };
    KilnFn fn = [](const std::vector<Tensor>& v) { return ops::gelu_grad(v[0], v[1]); };
    expect_forward_matches(fn, ref, {g, x}, 1e-6, 2e-6);
    if (sg.numel() < 100) expect_gradients_match(fn, ref, {g, x});
  }
}

TEST(GeluGrad, MatchesTapeGradientOfGelu) {
  autograd::install_tape();
  Tensor x = random_tensor({50}, 5, -3, 3).detach();
  x.set_requires_grad(true);
  Tensor dx = autograd::grad(ops::sum(ops::gelu(x)), {x})[0];
  Values xv = values_of(x), dv = values_of(dx);
  for (size_t i = 0; i < xv.size(); ++i) {
    EXPECT_NEAR(dv[i], phi(xv[i]) + xv[i] * pdf(xv[i]), 1e-6);
  }
}

TEST(WherePositive, ForwardBroadcastAndGradientToBothBranches) {
  Shape sc{3, 1}, sa{3, 4}, sb{4};
  Tensor c = random_tensor(sc, 6), a = random_tensor(sa, 7), b = random_tensor(sb, 8);
  RefFn ref = [&](const std::vector<Values>& v) {
    Values ca = broadcast_binary(v[0], sc, v[1], sa, [](double c, double) { return c; });
    Values aa = broadcast_binary(v[0], sc, v[1], sa, [](double, double a) { return a; });
    Values bb = broadcast_binary(aa, sa, v[2], sb, [](double, double b) { return b; });
    Values y(ca.size());
    for (size_t i = 0; i < y.size(); ++i) y[i] = ca[i] > 0 ? aa[i] : bb[i];
    return y;
  };
  KilnFn fn = [](const std::vector<Tensor>& v) { return ops::where_positive(v[0], v[1], v[2]); };
  expect_forward_matches(fn, ref, {c, a, b});
  expect_gradients_match(fn, ref, {c, a, b}, {1, 2});
}

TEST(CompareEqual, OnesWhereEqualAndNoGradient) {
  Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2});
  Tensor b = Tensor::from_vector(std::vector<float>{1, 5}, {2});
  EXPECT_EQ(ops::compare_equal(a, b).to_vector<float>(), (std::vector<float>{1, 0, 0, 0}));
  const ops::OpDef& def = ops::op_def(ops::OpKind::compare_equal);
  EXPECT_EQ(def.grad, nullptr);
  EXPECT_NE(def.no_grad_reason, nullptr);
}

TEST(GradHelpers, ShapeMismatchNamesOpAndShapes) {
  try {
    ops::where_positive(Tensor::zeros({2, 3}), Tensor::zeros({2, 3}), Tensor::zeros({5}));
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("where_positive"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[5]"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace kiln::testing::grad_helpers_test
