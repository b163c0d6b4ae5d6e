// Context::conv_algorithm: what each choice runs and how far each lands from float64.
//
// For each shape class (16 or 32 channels in and out, 3x3, stride 1, padding 1, at 8x8 and 32x32,
// batch 2) the forward, the data gradient and the weight gradient of the conv2d ops are compared
// with a float64 convolution of the same values (nn_reference.h's ConvRef). The error is the
// largest difference relative to the largest reference value. "direct" must stay within
// kDirectBound; "winograd" and "auto" within kWinogradFactor times direct's own error (plus a
// floor for shapes where direct is exact to the last bit). docs/numerics.md gives the bounds
// and the measured errors (this test prints them).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "conv_kernel_cases.h"
#include "kiln/core/context.h"
#include "kiln/core/error.h"
#include "kiln/ops/kernels/conv_winograd.h"

namespace kiln::testing::conv_algorithm_numerics_test {
namespace {

// Direct convolution against float64: sums of up to 2,048 float products.
constexpr double kDirectBound = 4e-6;
// Winograd F(4x4, 3x3)'s transforms multiply by up to 8 and round the transformed weights.
constexpr double kWinogradFactor = 20;
constexpr double kWinogradFloor = 1e-6;

struct Errors {
  double forward, data_gradient, weight_gradient;
};

struct Results {
  std::vector<float> y, dx, dw;
};

double relative_error(const std::vector<float>& got, const Values& ref) {
  double largest = 0, worst = 0;
  for (double v : ref) largest = std::max(largest, std::abs(v));
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::abs(got[i] - ref[i]));
  return worst / largest;
}

class ConvAlgorithmNumerics : public ::testing::TestWithParam<std::tuple<int64_t, int64_t>> {
 protected:
  void SetUp() override {
    const auto [channels, side] = GetParam();
    g_ = {.n = 2,
          .c = channels,
          .h = side,
          .w = side,
          .o = channels,
          .kh = 3,
          .kw = 3,
          .pad = {1, 1}};
    x_ = random_tensor(g_.x_shape(), 11);
    w_ = random_tensor(g_.w_shape(), 12);
    dy_ = random_tensor(g_.y_shape(), 13);
  }
  void TearDown() override { set_context(saved_); }

  Results run(const std::string& algorithm) {
    Context c = saved_;
    c.conv_algorithm = algorithm;
    set_context(c);
    Results r;
    r.y = ops::conv2d(x_, w_, Tensor(), g_.options()).to_vector<float>();
    r.dx = ops::conv2d_backward_data(dy_, w_, g_.x_shape(), g_.options()).to_vector<float>();
    r.dw = ops::conv2d_backward_weights(dy_, x_, g_.w_shape(), false, g_.options())[0]
               .to_vector<float>();
    return r;
  }
  void compute_references() {
    ref_y_ = g_.forward(values_of(x_), values_of(w_), nullptr);
    ref_dx_ = g_.backward_data(values_of(dy_), values_of(w_));
    ref_dw_ = g_.backward_weights(values_of(dy_), values_of(x_));
  }
  Errors errors(const Results& r) const {
    return {relative_error(r.y, ref_y_), relative_error(r.dx, ref_dx_),
            relative_error(r.dw, ref_dw_)};
  }
  std::string name() const {
    return std::to_string(g_.c) + "ch " + std::to_string(g_.h) + "x" + std::to_string(g_.w);
  }

  ConvRef g_{};
  Tensor x_, w_, dy_;
  Values ref_y_, ref_dx_, ref_dw_;
  Context saved_ = get_context();
};

TEST_P(ConvAlgorithmNumerics, EachAlgorithmStaysWithinItsBoundOfFloat64) {
  compute_references();
  const Errors direct = errors(run("direct"));
  const Errors winograd = errors(run("winograd"));
  const Errors automatic = errors(run("auto"));
  std::printf(
      "%s relative error vs float64 (forward / data grad / weight grad): direct "
      "%.2e / %.2e / %.2e, winograd %.2e / %.2e / %.2e, auto %.2e / %.2e / %.2e\n",
      name().c_str(), direct.forward, direct.data_gradient, direct.weight_gradient,
      winograd.forward, winograd.data_gradient, winograd.weight_gradient, automatic.forward,
      automatic.data_gradient, automatic.weight_gradient);
  for (const auto& [what, d, w, a] :
       {std::tuple{"forward", direct.forward, winograd.forward, automatic.forward},
        std::tuple{"data gradient", direct.data_gradient, winograd.data_gradient,
                   automatic.data_gradient},
        std::tuple{"weight gradient", direct.weight_gradient, winograd.weight_gradient,
                   automatic.weight_gradient}}) {
    SCOPED_TRACE(name() + " " + what);
    EXPECT_LE(d, kDirectBound);
    EXPECT_LE(w, kWinogradFactor * d + kWinogradFloor);
    EXPECT_LE(a, kWinogradFactor * d + kWinogradFloor);
  }
}

// "auto" is "winograd" where Kiln's kernel pays (2,048 output pixels: 2 x 32 x 32) and "direct"
// below; "winograd" and "direct" give different bits on every shape here.
TEST_P(ConvAlgorithmNumerics, AutoPicksWinogradWhereItPaysAndDirectBelow) {
  if (!avx512_kernels_run()) GTEST_SKIP() << kNoAvx512Kernels;
  const Results direct = run("direct"), winograd = run("winograd"), automatic = run("auto");
  EXPECT_NE(winograd.y, direct.y);
  EXPECT_NE(winograd.dx, direct.dx);
  EXPECT_NE(winograd.dw, direct.dw);
  const Results& expected =
      ops::winograd_3x3_pays(g_.x_shape(), window(g_.pad)) ? winograd : direct;
  EXPECT_EQ(automatic.y, expected.y);
  EXPECT_EQ(automatic.dx, expected.dx);
  EXPECT_EQ(automatic.dw, expected.dw);
}

INSTANTIATE_TEST_SUITE_P(ShapeClasses, ConvAlgorithmNumerics,
                         ::testing::Combine(::testing::Values(16, 32), ::testing::Values(8, 32)),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ch_" +
                                  std::to_string(std::get<1>(info.param)) + "x" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(ConvAlgorithmContext, UnknownAlgorithmIsAnErrorNamingIt) {
  Context c = get_context();
  c.conv_algorithm = "fft";
  try {
    set_context(c);
    FAIL() << "fft was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv_algorithm 'fft'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(get_context().conv_algorithm, "auto");
}

}  // namespace
}  // namespace kiln::testing::conv_algorithm_numerics_test
