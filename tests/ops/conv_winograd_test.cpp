// The Winograd F(4x4, 3x3) kernel (kernels/conv_winograd.h) against the double-precision
// reference, called directly in both layouts and through the conv2d ops that dispatch to it.
#include "kiln/ops/kernels/conv_winograd.h"

#include "kiln/ops/kernels/batch_norm_rows.h"

#include "conv_kernel_cases.h"

namespace kiln::testing::conv_winograd_test {
namespace {

using Case = ConvKernelCase;

ConvRef wino(int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, int64_t pad) {
  return {.n = n, .c = c, .h = h, .w = w, .o = o, .kh = 3, .kw = 3, .pad = {pad, pad}};
}

const Case kCases[] = {
    // Enough output pixels for the ops to use the kernel (winograd_3x3_pays); the rest not.
    {"resnet_16_28x28_pad1", wino(3, 16, 28, 28, 16, 1)},
    {"resnet_32_14x14_pad1", wino(11, 32, 14, 14, 32, 1)},
    {"16_to_32_odd_7x9_pad0", wino(3, 16, 7, 9, 32, 0)},
    {"32_to_16_5x6_pad2", wino(2, 32, 5, 6, 16, 2)},
    // 8 tiles of 4x4 in one row of tiles: a product of 7 tiles and one of 1.
    {"wide_row_16_4x30_pad1", wino(1, 16, 4, 30, 16, 1)},
    {"one_output_pixel_3x3_pad0", wino(2, 16, 3, 3, 16, 0)},
    {"one_pixel_input_pad1", wino(2, 32, 1, 1, 32, 1)},
};

// The values of an [N, C, H, W] tensor (row-major) written into a dense tensor's memory in
// oneDNN's nChw16c order, as graph mode's blocked layout keeps them; and back.
Tensor to_nchw16c(const Tensor& t) {
  const Values v = values_of(t);
  const int64_t n = t.dim(0), c = t.dim(1), h = t.dim(2), w = t.dim(3);
  Tensor out = channels_last_empty(t.shape());
  float* d = out.data<float>();
  for (int64_t i = 0; i < n * c * h * w; ++i) {
    const int64_t x = i % w, y = i / w % h, ch = i / (w * h) % c, b = i / (w * h * c);
    d[(((b * (c / 16) + ch / 16) * h + y) * w + x) * 16 + ch % 16] = float(v[size_t(i)]);
  }
  return out;
}
Values from_nchw16c(const Tensor& t) {
  const int64_t n = t.dim(0), c = t.dim(1), h = t.dim(2), w = t.dim(3);
  const float* d = t.data<float>();
  Values v(size_t(n * c * h * w));
  for (int64_t i = 0; i < n * c * h * w; ++i) {
    const int64_t x = i % w, y = i / w % h, ch = i / (w * h) % c, b = i / (w * h * c);
    v[size_t(i)] = d[(((b * (c / 16) + ch / 16) * h + y) * w + x) * 16 + ch % 16];
  }
  return v;
}

// F(4x4, 3x3) rounds more than a direct convolution (see conv_winograd.h): its error follows
// the scale of the sums, not each entry (one may cancel to near 0). With inputs and weights
// uniform in [-1, 1] and 16 to 32 channels (outputs up to ~15) it stays below 1e-5 of the
// largest output here; a wrong tap or transform coefficient is off by a good fraction of it.
double scaled_tolerance(const Values& ref, double relative = 2e-5) {
  double largest = 0;
  for (double v : ref) largest = std::max(largest, std::abs(v));
  return relative * largest + 1e-6;
}

class WinogradConv : public ::testing::TestWithParam<Case> {};

TEST_P(WinogradConv, ForwardMatchesReferenceInEveryLayout) {
  if (!avx512_kernels_run()) GTEST_SKIP() << kNoAvx512Kernels;
  const Case& c = GetParam();
  const ops::ConvAttrs a = window(c.g.pad);
  Tensor x = channels_last_copy(random_tensor(c.g.x_shape(), 1));
  Tensor w = random_tensor(c.g.w_shape(), 2), b = random_tensor({c.g.o}, 3);
  const Values xv = values_of(x), wv = values_of(w), bv = values_of(b);
  const Tensor x_blocked = to_nchw16c(x);
  for (bool bias : {false, true}) {
    const Values ref = c.g.forward(xv, wv, bias ? &bv : nullptr);
    for (bool in_blocked : {false, true}) {
      for (bool out_blocked : {false, true}) {
        const std::string what = std::string(c.name) + (bias ? " bias" : "") +
                                 (in_blocked ? " x nChw16c" : "") +
                                 (out_blocked ? " y nChw16c" : "");
        const Tensor& in = in_blocked ? x_blocked : x;
        Tensor y = channels_last_empty(c.g.y_shape());
        ASSERT_TRUE(ops::can_run_winograd_3x3(in, in_blocked, w.shape(), a, y, out_blocked))
            << what;
        ops::winograd_3x3_forward(in, in_blocked, w, bias ? &b : nullptr, a, y, out_blocked);
        expect_close(out_blocked ? from_nchw16c(y) : values_of(y), ref, scaled_tolerance(ref), 0,
                     what);
      }
    }
  }
}

// The weight gradient sums over all N·H·W output pixels: the same rule, tighter.

TEST_P(WinogradConv, BackwardWeightsMatchReferenceInEveryLayout) {
  if (!avx512_kernels_run()) GTEST_SKIP() << kNoAvx512Kernels;
  const Case& c = GetParam();
  const ops::ConvAttrs a = window(c.g.pad);
  Tensor x = channels_last_copy(random_tensor(c.g.x_shape(), 11));
  Tensor dy = channels_last_copy(random_tensor(c.g.y_shape(), 12));
  const Values ref = c.g.backward_weights(values_of(dy), values_of(x));
  const Tensor x_blocked = to_nchw16c(x), dy_blocked = to_nchw16c(dy);
  for (bool x_in_blocks : {false, true}) {
    for (bool dy_in_blocks : {false, true}) {
      Tensor dw = Tensor::full(c.g.w_shape(), 7.0);
      ops::winograd_3x3_backward_weights(dy_in_blocks ? dy_blocked : dy, dy_in_blocks,
                                         x_in_blocks ? x_blocked : x, x_in_blocks, a, dw);
      expect_close(values_of(dw), ref, scaled_tolerance(ref, 1e-5), 0,
                   std::string(c.name) + (x_in_blocks ? " x nChw16c" : "") +
                       (dy_in_blocks ? " dy nChw16c" : ""));
    }
  }
}

// Where it pays, conv2d dispatches to the kernel (the same bits as calling it),
// conv2d_backward_data runs it on the flipped weights, and conv2d_backward_weights runs its
// backward (with the bias gradient summed apart); everywhere, all three match the reference.
TEST_P(WinogradConv, OpsUseTheKernel) {
  if (!avx512_kernels_run()) GTEST_SKIP() << kNoAvx512Kernels;
  const Case& c = GetParam();
  Tensor x = random_tensor(c.g.x_shape(), 4), w = random_tensor(c.g.w_shape(), 5);
  Tensor b = random_tensor({c.g.o}, 6);
  Tensor y = ops::conv2d(x, w, b, c.g.options());
  Tensor direct = channels_last_empty(c.g.y_shape());
  ops::winograd_3x3_forward(channels_last_copy(x), false, w, &b, window(c.g.pad), direct, false);
  const bool pays = ops::winograd_3x3_pays(c.g.x_shape(), window(c.g.pad));
  if (pays) EXPECT_EQ(y.to_vector<float>(), direct.to_vector<float>());
  const Values bv = values_of(b);
  const Values ref_y = c.g.forward(values_of(x), values_of(w), &bv);
  expect_close(values_of(y), ref_y, scaled_tolerance(ref_y), 0, "conv2d");

  Tensor dy = random_tensor(c.g.y_shape(), 7);
  Tensor dx = ops::conv2d_backward_data(dy, w, c.g.x_shape(), c.g.options());
  const Values ref_dx = c.g.backward_data(values_of(dy), values_of(w));
  expect_close(values_of(dx), ref_dx, scaled_tolerance(ref_dx), 0, "dx");

  std::vector<Tensor> grads =
      ops::conv2d_backward_weights(dy, x, c.g.w_shape(), true, c.g.options());
  Tensor dw = Tensor::empty(c.g.w_shape());
  ops::winograd_3x3_backward_weights(channels_last_copy(dy), false, channels_last_copy(x), false,
                                     window(c.g.pad), dw);
  if (pays) EXPECT_EQ(grads[0].to_vector<float>(), dw.to_vector<float>());
  const Values dyv = values_of(dy);
  const Values ref_dw = c.g.backward_weights(dyv, values_of(x));
  expect_close(values_of(grads[0]), ref_dw, scaled_tolerance(ref_dw, 1e-5), 0, "dw");
  Values db(size_t(c.g.o), 0.0);
  const int64_t plane = c.g.oh() * c.g.ow();
  for (size_t i = 0; i < dyv.size(); ++i) db[size_t(int64_t(i) / plane % c.g.o)] += dyv[i];
  expect_close(values_of(grads[1]), db, 1e-4, 1e-4, "db");
}

// Reading x through a batch norm + relu (graph mode's bn_relu_conv) gives the same bits as
// convolving the batch-norm kernel's own relu output, forward and weight gradient, in both
// layouts.
TEST_P(WinogradConv, BatchNormReluOnTheInputMatchesItsOutput) {
  if (!avx512_kernels_run()) GTEST_SKIP() << kNoAvx512Kernels;
  const Case& c = GetParam();
  const ops::ConvAttrs a = window(c.g.pad);
  const int64_t channels = c.g.c;
  Tensor x = channels_last_copy(random_tensor(c.g.x_shape(), 13, -2.f, 3.f));
  Tensor gamma = random_tensor({channels}, 14, 0.5f, 1.5f), beta = random_tensor({channels}, 15);
  Tensor rm = Tensor::zeros({channels}), rv = Tensor::ones({channels});
  Tensor mean = Tensor::empty({channels}), inv_std = Tensor::empty({channels});
  Tensor r = channels_last_empty(c.g.x_shape());
  ops::batch_norm_rows_forward(x, gamma, beta, rm, rv, nullptr, {.relu = true}, r, mean, inv_std);
  std::vector<float> scale(static_cast<size_t>(channels));
  for (int64_t i = 0; i < channels; ++i) {
    scale[size_t(i)] = ops::batch_norm_scale(gamma.data<float>()[i], inv_std.data<float>()[i]);
  }
  const ops::BnReluInput bn{mean.data<float>(), scale.data(), beta.data<float>()};
  Tensor w = random_tensor(c.g.w_shape(), 16),
         dy = channels_last_copy(random_tensor(c.g.y_shape(), 17));
  for (bool blocked : {false, true}) {
    const Tensor xin = blocked ? to_nchw16c(x) : x, rin = blocked ? to_nchw16c(r) : r;
    Tensor want = channels_last_empty(c.g.y_shape()), got = channels_last_empty(c.g.y_shape());
    ops::winograd_3x3_forward(rin, blocked, w, nullptr, a, want, false);
    ops::winograd_3x3_forward(xin, blocked, w, nullptr, a, got, false, &bn);
    EXPECT_EQ(got.to_vector<float>(), want.to_vector<float>()) << c.name << " forward";
    Tensor dw_want = Tensor::empty(c.g.w_shape()), dw_got = Tensor::empty(c.g.w_shape());
    ops::winograd_3x3_backward_weights(dy, false, rin, blocked, a, dw_want);
    ops::winograd_3x3_backward_weights(dy, false, xin, blocked, a, dw_got, &bn);
    EXPECT_EQ(dw_got.to_vector<float>(), dw_want.to_vector<float>()) << c.name << " dw";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, WinogradConv, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// The conv op's gradient through the tape against finite differences, at a size the reference
// can perturb element by element (below winograd_3x3_pays, so oneDNN runs it); the kernel's own
// backward ops are held to the reference's exact Jacobian products above (backward-data is
// Jᵀ·dy, backward-weights the weights' share), at sizes where the ops use it.
TEST(WinogradConvGradient, MatchesFiniteDifferences) {
  const ConvRef g = wino(1, 16, 4, 5, 16, 1);
  std::vector<Tensor> inputs{random_tensor(g.x_shape(), 8), random_tensor(g.w_shape(), 9),
                             random_tensor({g.o}, 10)};
  expect_gradients_match(
      [&](const std::vector<Tensor>& t) { return ops::conv2d(t[0], t[1], t[2], g.options()); },
      [&](const std::vector<Values>& v) { return g.forward(v[0], v[1], &v[2]); }, inputs);
}

TEST(WinogradConvDispatch, CanRunOnlyWhereTheKernelApplies) {
  if (!avx512_kernels_run()) GTEST_SKIP() << kNoAvx512Kernels;
  const ops::ConvAttrs pad1 = window({1, 1});
  Tensor x = channels_last_copy(random_tensor({2, 16, 8, 8}, 11));
  Tensor y = channels_last_empty({2, 16, 8, 8});
  EXPECT_TRUE(ops::can_run_winograd_3x3(x, false, {16, 16, 3, 3}, pad1, y, false));
  // The ops use it from 2,048 output pixels on.
  EXPECT_TRUE(ops::winograd_3x3_pays({3, 16, 28, 28}, pad1));
  EXPECT_FALSE(ops::winograd_3x3_pays({2, 16, 28, 28}, pad1));
  EXPECT_TRUE(ops::winograd_3x3_pays({1, 32, 56, 56}, pad1));
  EXPECT_FALSE(ops::winograd_3x3_pays({1, 32, 14, 14}, pad1));
  EXPECT_TRUE(ops::can_run_winograd_3x3(x, false, {32, 16, 3, 3}, pad1,
                                        channels_last_empty({2, 32, 8, 8}), false));
  // Channel counts outside 16 and 32 (64 runs oneDNN's F(4x4, 3x3), faster there).
  EXPECT_FALSE(ops::can_run_winograd_3x3(x, false, {48, 16, 3, 3}, pad1,
                                         channels_last_empty({2, 48, 8, 8}), false));
  Tensor x64 = channels_last_copy(random_tensor({2, 64, 4, 4}, 12));
  EXPECT_FALSE(ops::can_run_winograd_3x3(x64, false, {64, 64, 3, 3}, pad1,
                                         channels_last_empty({2, 64, 4, 4}), false));
  Tensor x8 = channels_last_copy(random_tensor({2, 8, 8, 8}, 13));
  EXPECT_FALSE(ops::can_run_winograd_3x3(x8, false, {16, 8, 3, 3}, pad1, y, false));
  // Other windows.
  EXPECT_FALSE(ops::can_run_winograd_3x3(x, false, {16, 16, 5, 5}, window({2, 2}), y, false));
  EXPECT_FALSE(ops::can_run_winograd_3x3(x, false, {16, 16, 3, 3}, window({1, 1}, {2, 2}),
                                         channels_last_empty({2, 16, 4, 4}), false));
  EXPECT_FALSE(ops::can_run_winograd_3x3(x, false, {16, 16, 3, 3}, window({2, 2}, {1, 1}, {2, 2}),
                                         y, false));
  EXPECT_FALSE(ops::can_run_winograd_3x3(x, false, {16, 16, 3, 3}, window({3, 3}),
                                         channels_last_empty({2, 16, 12, 12}), false));
  ops::ConvAttrs grouped = pad1;
  grouped.groups = 2;
  EXPECT_FALSE(ops::can_run_winograd_3x3(x, false, {16, 8, 3, 3}, grouped, y, false));
  // Other layouts and dtypes: row-major activations, bf16.
  Tensor row_major = random_tensor({2, 16, 8, 8}, 14);
  EXPECT_FALSE(ops::can_run_winograd_3x3(row_major, false, {16, 16, 3, 3}, pad1, y, false));
  EXPECT_FALSE(ops::can_run_winograd_3x3(x, false, {16, 16, 3, 3}, pad1,
                                         Tensor::empty({2, 16, 8, 8}), false));
  EXPECT_FALSE(ops::can_run_winograd_3x3(to_bf16(x), false, {16, 16, 3, 3}, pad1, y, false));
}

TEST(WinogradConvErrors, RejectsTensorsOutsideItsRule) {
  if (!avx512_kernels_run()) GTEST_SKIP() << kNoAvx512Kernels;
  Tensor x = random_tensor({1, 16, 6, 6}, 15);  // row-major
  Tensor w = random_tensor({16, 16, 3, 3}, 16);
  Tensor y = channels_last_empty({1, 16, 6, 6});
  expect_error_mentions(
      [&] {
        ops::winograd_3x3_forward(x, false, w, nullptr, window({1, 1}), y, false);
      },
      {"winograd_3x3_forward", "f32[1, 16, 6, 6]"});
  Tensor wrong_out = channels_last_empty({1, 16, 5, 5});
  expect_error_mentions(
      [&] {
        ops::winograd_3x3_forward(channels_last_copy(x), false, w, nullptr, window({1, 1}),
                                  wrong_out, false);
      },
      {"winograd_3x3_forward", "does not match"});
}

}  // namespace
}  // namespace kiln::testing::conv_winograd_test
