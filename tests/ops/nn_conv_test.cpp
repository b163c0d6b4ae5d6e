#include <oneapi/dnnl/dnnl.hpp>

#include "kiln/ops/cpu_support.h"
#include "nn_reference.h"
#include "testing/cpu_features.h"
#include "testing/dnnl_verbose.h"

namespace kiln::testing::nn_conv_test {
namespace {

struct ConvCase {
  const char* name;
  ConvRef g;
  bool bias;
};

const ConvCase kCases[] = {
    {"basic_3x3_pad1",
     {.n = 2, .c = 3, .h = 5, .w = 5, .o = 4, .kh = 3, .kw = 3, .pad = {1, 1}},
     true},
    {"stride2",
     {.n = 1, .c = 2, .h = 7, .w = 6, .o = 3, .kh = 3, .kw = 3, .stride = {2, 2}, .pad = {1, 1}},
     true},
    {"dilation2", {.n = 1, .c = 2, .h = 7, .w = 7, .o = 2, .kh = 3, .kw = 3, .dil = {2, 2}}, false},
    {"groups2",
     {.n = 2, .c = 4, .h = 5, .w = 4, .o = 6, .kh = 3, .kw = 3, .pad = {1, 1}, .groups = 2},
     true},
    {"depthwise",
     {.n = 1, .c = 3, .h = 4, .w = 4, .o = 3, .kh = 3, .kw = 3, .pad = {1, 1}, .groups = 3},
     false},
    {"rect_kernel_mixed",
     {.n = 1,
      .c = 2,
      .h = 6,
      .w = 5,
      .o = 2,
      .kh = 2,
      .kw = 3,
      .stride = {1, 2},
      .pad = {1, 0},
      .dil = {2, 1}},
     true},
    {"1x1", {.n = 2, .c = 4, .h = 3, .w = 3, .o = 5, .kh = 1, .kw = 1}, true},
};

class NnConv : public ::testing::TestWithParam<ConvCase> {};

TEST_P(NnConv, ForwardMatchesReferenceAndIsChannelsLast) {
  const ConvCase& c = GetParam();
  Tensor x = random_tensor(c.g.x_shape(), 1), w = random_tensor(c.g.w_shape(), 2);
  Tensor b = random_tensor({c.g.o}, 3);
  Values bv = values_of(b);
  Values ref = c.g.forward(values_of(x), values_of(w), c.bias ? &bv : nullptr);
  for (bool cl_input : {false, true}) {
    Tensor xin = cl_input ? channels_last_copy(x) : x;
    Tensor y = ops::conv2d(xin, w, c.bias ? b : Tensor(), c.g.options());
    EXPECT_EQ(y.shape(), c.g.y_shape());
    EXPECT_TRUE(y.is_channels_last() || y.dim(1) == 1);
    expect_close(values_of(y), ref, 1e-5, 1e-4, std::string(c.name) + (cl_input ? " cl" : ""));
  }
}

TEST_P(NnConv, GradientMatchesFiniteDifferences) {
  const ConvCase& c = GetParam();
  std::vector<Tensor> inputs{random_tensor(c.g.x_shape(), 4), random_tensor(c.g.w_shape(), 5)};
  if (c.bias) inputs.push_back(random_tensor({c.g.o}, 6));
  expect_gradients_match(
      [&](const std::vector<Tensor>& x) {
        return ops::conv2d(x[0], x[1], c.bias ? x[2] : Tensor(), c.g.options());
      },
      [&](const std::vector<Values>& x) {
        return c.g.forward(x[0], x[1], c.bias ? &x[2] : nullptr);
      },
      inputs);
}

// The backward ops are ops too: their values and their own gradient rules.
TEST_P(NnConv, BackwardOpsMatchReferenceAndDifferentiate) {
  const ConvCase& c = GetParam();
  Tensor g = random_tensor(c.g.y_shape(), 7), w = random_tensor(c.g.w_shape(), 8);
  Tensor x = random_tensor(c.g.x_shape(), 9);
  ops::Conv2dOptions opt = c.g.options();
  expect_gradients_match(
      [&](const std::vector<Tensor>& t) {
        return ops::conv2d_backward_data(t[0], t[1], c.g.x_shape(), opt);
      },
      [&](const std::vector<Values>& t) { return c.g.backward_data(t[0], t[1]); }, {g, w});
  expect_gradients_match(
      [&](const std::vector<Tensor>& t) {
        return ops::conv2d_backward_weights(t[0], t[1], c.g.w_shape(), false, opt)[0];
      },
      [&](const std::vector<Values>& t) { return c.g.backward_weights(t[0], t[1]); }, {g, x});
  std::vector<Tensor> gw = ops::conv2d_backward_weights(g, x, c.g.w_shape(), true, opt);
  ASSERT_TRUE(gw[1].defined());
  Values gv = values_of(g), db(static_cast<size_t>(c.g.o), 0.0);
  int64_t plane = c.g.oh() * c.g.ow();
  for (size_t i = 0; i < gv.size(); ++i) db[size_t(int64_t(i) / plane % c.g.o)] += gv[i];
  expect_close(values_of(gw[1]), db, 1e-5, 1e-4, "bias gradient");
  EXPECT_FALSE(ops::conv2d_backward_weights(g, x, c.g.w_shape(), false, opt)[1].defined());
}

INSTANTIATE_TEST_SUITE_P(Cases, NnConv, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(NnConvBf16, MatchesF32WithinBf16Tolerance) {
  if (!ops::arithmetic_available(DType::bf16)) GTEST_SKIP() << kiln::testing::kNoBf16Arithmetic;
  ConvRef g{.n = 2, .c = 16, .h = 6, .w = 6, .o = 16, .kh = 3, .kw = 3, .pad = {1, 1}};
  Tensor x = to_bf16(random_tensor(g.x_shape(), 10)), w = to_bf16(random_tensor(g.w_shape(), 11));
  Tensor y = ops::conv2d(x, w, Tensor(), g.options());
  EXPECT_EQ(y.dtype(), DType::bf16);
  Values ref = g.forward(values_of(x), values_of(w), nullptr), got = values_of(y);
  double max_abs = 0;
  for (double v : ref) max_abs = std::max(max_abs, std::abs(v));
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_NEAR(got[i], ref[i], 1e-2 * std::abs(ref[i]) + 4e-3 * max_abs) << i;
  }
}

// The bias gradient comes from a separate channel sum while the output gradient is small (a few
// MiB) and from oneDNN's backward-weights kernel above that (ops/nn/conv.cpp): both must be the
// channel sums, for gradients arriving contiguous or channels-last.
TEST(NnConvBiasGradient, IsTheChannelSumOnBothPaths) {
  for (ConvRef g : {ConvRef{.n = 4, .c = 3, .h = 12, .w = 12, .o = 6, .kh = 5, .kw = 5},
                    ConvRef{.n = 8, .c = 2, .h = 50, .w = 50, .o = 64, .kh = 3, .kw = 3}}) {
    for (bool channels_last : {false, true}) {
      Tensor dy = random_tensor(g.y_shape(), 45), x = random_tensor(g.x_shape(), 46);
      Values dyv = values_of(dy), db(static_cast<size_t>(g.o), 0.0);
      const int64_t plane = g.oh() * g.ow();
      for (size_t i = 0; i < dyv.size(); ++i) db[size_t(int64_t(i) / plane % g.o)] += dyv[i];
      if (channels_last) dy = channels_last_copy(dy);
      std::vector<Tensor> grads =
          ops::conv2d_backward_weights(dy, x, g.w_shape(), true, g.options());
      std::string name = g.y_shape().str() + (channels_last ? " channels-last" : " contiguous");
      expect_close(values_of(grads[1]), db, 1e-4, 1e-4, name + " bias gradient");
      expect_close(values_of(grads[0]), g.backward_weights(dyv, values_of(x)), 1e-4, 1e-3,
                   name + " weight gradient");
    }
  }
}

// 3x3 stride-1 convolutions with >= 64 channels run Winograd on activations staged through
// oneDNN's blocked layout (ops/nn/conv.cpp): forward and both backward ops, with and without
// padding, must match the plain reference like the direct kernel does.
TEST(NnConvWinograd, ForwardAndBackwardOpsMatchReference) {
  for (ConvRef g :
       {ConvRef{.n = 2, .c = 64, .h = 7, .w = 9, .o = 80, .kh = 3, .kw = 3, .pad = {1, 1}},
        ConvRef{.n = 1, .c = 64, .h = 6, .w = 6, .o = 64, .kh = 3, .kw = 3}}) {
    Tensor x = random_tensor(g.x_shape(), 40), w = random_tensor(g.w_shape(), 41);
    Tensor dy = random_tensor(g.y_shape(), 42);
    Values xv = values_of(x), wv = values_of(w), dyv = values_of(dy);
    std::string name = "winograd " + g.x_shape().str() + " -> " + g.y_shape().str();
    expect_close(values_of(ops::conv2d(x, w, Tensor(), g.options())), g.forward(xv, wv, nullptr),
                 1e-4, 1e-3, name + " forward");
    expect_close(values_of(ops::conv2d_backward_data(dy, w, g.x_shape(), g.options())),
                 g.backward_data(dyv, wv), 1e-4, 1e-3, name + " backward data");
    expect_close(values_of(ops::conv2d_backward_weights(dy, x, g.w_shape(), false, g.options())[0]),
                 g.backward_weights(dyv, xv), 1e-4, 1e-3, name + " backward weights");
  }
}

// Stride-1 3x3 convolutions of 16 to 63 channels compute backward-data as a forward convolution
// with the weights transposed and flipped (ops/nn/conv.cpp): any padding up to 2 per side, square
// or not, must match the plain reference.
TEST(NnConvFlippedForward, BackwardDataMatchesReference) {
  for (ConvRef g :
       {ConvRef{.n = 2, .c = 16, .h = 6, .w = 7, .o = 24, .kh = 3, .kw = 3, .pad = {1, 1}},
        ConvRef{.n = 1, .c = 32, .h = 5, .w = 5, .o = 16, .kh = 3, .kw = 3},
        ConvRef{.n = 2, .c = 16, .h = 4, .w = 6, .o = 16, .kh = 3, .kw = 3, .pad = {2, 0}}}) {
    Tensor w = random_tensor(g.w_shape(), 43), dy = random_tensor(g.y_shape(), 44);
    Tensor dx = ops::conv2d_backward_data(channels_last_copy(dy), w, g.x_shape(), g.options());
    EXPECT_TRUE(dx.is_channels_last());
    expect_close(values_of(dx), g.backward_data(values_of(dy), values_of(w)), 1e-5, 1e-4,
                 "flipped forward " + g.x_shape().str() + " -> " + g.y_shape().str());
  }
}

// The rule above really selects Winograd where oneDNN has it (AVX-512 CPUs): its verbose log
// names the kernel that ran.
TEST(NnConvWinograd, IsTheKernelThatRunsOnAvx512) {
  if (dnnl::get_effective_cpu_isa() < dnnl::cpu_isa::avx512_core) {
    GTEST_SKIP() << "oneDNN's Winograd kernel needs AVX-512";
  }
  ConvRef g{.n = 1, .c = 64, .h = 5, .w = 5, .o = 64, .kh = 3, .kw = 3, .pad = {1, 1}};
  Tensor x = random_tensor(g.x_shape(), 43), w = random_tensor(g.w_shape(), 44);
  std::string log = dnnl_verbose_output([&] { ops::conv2d(x, w, Tensor(), g.options()); });
  EXPECT_NE(log.find("wino"), std::string::npos) << log;
}

TEST(NnConvErrors, BadInputsNameOpAndShapes) {
  expect_error_mentions(
      [] {
        ops::conv2d(Tensor::zeros({1, 3, 5, 5}), Tensor::zeros({4, 2, 3, 3}), Tensor());
      },
      {"conv2d", "3 channels", "[1, 3, 5, 5]", "[4, 2, 3, 3]"});
  expect_error_mentions(
      [] {
        ops::conv2d(Tensor::zeros({3, 5, 5}), Tensor::zeros({4, 3, 3, 3}), Tensor());
      },
      {"conv2d", "[3, 5, 5]"});
  expect_error_mentions(
      [] {
        ops::conv2d(Tensor::zeros({1, 3, 2, 2}), Tensor::zeros({4, 3, 3, 3}), Tensor());
      },
      {"conv2d", "does not fit", "[1, 3, 2, 2]"});
  expect_error_mentions(
      [] {
        ops::conv2d(Tensor::zeros({1, 3, 5, 5}), Tensor::zeros({4, 3, 3, 3}), Tensor::zeros({3}));
      },
      {"conv2d", "bias", "[3]"});
  expect_error_mentions(
      [] {
        ops::conv2d(Tensor::zeros({1, 4, 5, 5}), Tensor::zeros({3, 2, 3, 3}), Tensor(),
                    {.groups = 2});
      },
      {"conv2d", "groups"});
  expect_error_mentions(
      [] {
        ops::conv2d_backward_data(Tensor::zeros({1, 4, 4, 4}), Tensor::zeros({4, 3, 3, 3}),
                                  Shape{1, 3, 5, 5}, {});
      },
      {"conv2d_backward_data", "[1, 4, 4, 4]", "[1, 4, 3, 3]"});
}

TEST(NnConvCache, RepeatedCallsWithNewDataStayCorrect) {
  ConvRef g{.n = 1, .c = 2, .h = 4, .w = 4, .o = 2, .kh = 3, .kw = 3, .pad = {1, 1}};
  for (int seed = 0; seed < 3; ++seed) {
    Tensor x = random_tensor(g.x_shape(), 20 + seed), w = random_tensor(g.w_shape(), 30 + seed);
    expect_close(values_of(ops::conv2d(x, w, Tensor(), g.options())),
                 g.forward(values_of(x), values_of(w), nullptr), 1e-5, 1e-4, "cached conv");
  }
}

}  // namespace
}  // namespace kiln::testing::nn_conv_test
