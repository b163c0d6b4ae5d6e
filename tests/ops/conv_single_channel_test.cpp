// The one-input-channel conv kernels (kernels/conv_single_channel.h) against the double-precision
// reference, called directly and through the conv2d ops that dispatch to them.
#include "kiln/ops/kernels/conv_single_channel.h"

#include "conv_kernel_cases.h"
#include "kiln/core/threads.h"

namespace kiln::testing::conv_single_channel_test {
namespace {

using Case = ConvKernelCase;

const Case kCases[] = {
    {"lenet_like_5x5_pad2_o6", single(2, 28, 28, 6, 5, 5, 2, 2)},
    {"resnet_like_3x3_pad1_o16", single(3, 12, 11, 16, 3, 3, 1, 1)},
    {"odd_7x9_3x3_pad0_o1", single(1, 7, 9, 1, 3, 3, 0, 0)},
    {"rect_3x5_pad1x2_o17", single(2, 7, 9, 17, 3, 5, 1, 2)},
    {"5x5_pad0_o40", single(3, 9, 10, 40, 5, 5, 0, 0)},
    {"3x3_pad2_o6", single(1, 8, 7, 6, 3, 3, 2, 2)},
    {"kernel_7x9_pad3x4_o5", single(2, 7, 9, 5, 7, 9, 3, 4)},
    {"1x1_o64", single(2, 5, 6, 64, 1, 1, 0, 0)},
    {"one_image_split_rows_o6", single(1, 28, 28, 6, 5, 5, 2, 2)},
    {"one_image_20_rows_3x3_o16", single(1, 20, 13, 16, 3, 3, 1, 1)},
    // An expanded row of 202*64 floats: items are cut to 8 rows to keep the buffers small.
    {"wide_rows_o64", single(1, 20, 200, 64, 3, 3, 1, 1)},
};

class SingleChannelConv : public ::testing::TestWithParam<Case> {};

TEST_P(SingleChannelConv, ForwardMatchesReference) {
  if (!avx512_kernels_run()) GTEST_SKIP() << kNoAvx512Kernels;
  const Case& c = GetParam();
  Tensor x = random_tensor(c.g.x_shape(), 1), w = random_tensor(c.g.w_shape(), 2);
  Tensor b = random_tensor({c.g.o}, 3);
  ASSERT_TRUE(ops::can_run_single_channel_conv(x, w.shape(), window(c.g.pad)));
  Values xv = values_of(x), wv = values_of(w), bv = values_of(b);
  for (bool bias : {false, true}) {
    Values ref = c.g.forward(xv, wv, bias ? &bv : nullptr);
    for (bool relu : {false, true}) {
      Tensor y = channels_last_empty(c.g.y_shape());
      ops::single_channel_conv_forward(x, w, bias ? &b : nullptr, relu, y);
      expect_close(values_of(y), relu ? relu_of(ref) : ref, 1e-5, 1e-4,
                   std::string(c.name) + (bias ? " bias" : "") + (relu ? " relu" : ""));
    }
  }
}

// The fused conv + relu + 2×2/2 max pool (graph mode's conv_relu_pool) against the kernel's own
// relu forward pooled by a plain loop: the same maxima bit for bit, and the winner bytes (first
// maximum in window order; bit 2 when the maximum is <= 0).
TEST_P(SingleChannelConv, ReluPoolForwardMatchesForwardThenPool) {
  if (!avx512_kernels_run()) GTEST_SKIP() << kNoAvx512Kernels;
  const Case& c = GetParam();
  const Shape ys = c.g.y_shape();
  if (ys[2] < 2 || ys[3] < 2) GTEST_SKIP() << "output smaller than one window";
  Tensor x = random_tensor(c.g.x_shape(), 4), w = random_tensor(c.g.w_shape(), 5);
  Tensor b = random_tensor({c.g.o}, 6);
  Tensor y = channels_last_empty(ys);
  ops::single_channel_conv_forward(x, w, &b, /*relu=*/true, y);
  const Shape ps{ys[0], ys[1], ys[2] / 2, ys[3] / 2};
  Tensor pooled = channels_last_empty(ps);
  Tensor winners = Tensor::empty_strided(ps, channels_last_strides(ps), DType::u8);
  ops::single_channel_conv_relu_pool_forward(x, w, &b, window(c.g.pad).padding, pooled, winners);
  const std::vector<float> yv = y.contiguous().to_vector<float>();
  const std::vector<float> pv = pooled.contiguous().to_vector<float>();
  const std::vector<uint8_t> wv = winners.contiguous().to_vector<uint8_t>();
  int64_t mismatches = 0;
  for (int64_t n = 0; n < ps[0]; ++n)
    for (int64_t o = 0; o < ps[1]; ++o)
      for (int64_t py = 0; py < ps[2]; ++py)
        for (int64_t px = 0; px < ps[3]; ++px) {
          float best = 0;
          int won = 0;
          for (int k = 0; k < 4; ++k) {
            const int64_t at = ((n * ys[1] + o) * ys[2] + 2 * py + k / 2) * ys[3] + 2 * px + k % 2;
            if (k == 0 || yv[size_t(at)] > best) {
              best = yv[size_t(at)];
              won = k;
            }
          }
          const size_t i = size_t(((n * ps[1] + o) * ps[2] + py) * ps[3] + px);
          const int code = won | (best > 0 ? 0 : 4);
          if (pv[i] != best || wv[i] != code) ++mismatches;
        }
  EXPECT_EQ(mismatches, 0) << c.name;
}

TEST_P(SingleChannelConv, BackwardWeightsAndBiasMatchReference) {
  if (!avx512_kernels_run()) GTEST_SKIP() << kNoAvx512Kernels;
  const Case& c = GetParam();
  Tensor x = random_tensor(c.g.x_shape(), 4);
  Tensor dy = channels_last_copy(random_tensor(c.g.y_shape(), 5));
  Values dyv = values_of(dy);
  Values ref_dw = c.g.backward_weights(dyv, values_of(x));
  for (bool bias : {false, true}) {
    Tensor dw = Tensor::full(c.g.w_shape(), 7.0), db = Tensor::full({c.g.o}, 7.0);
    ops::single_channel_conv_backward_weights(dy, x, dw, bias ? &db : nullptr);
    expect_close(values_of(dw), ref_dw, 1e-4, 1e-4, std::string(c.name) + " dw");
    if (bias) expect_close(values_of(db), bias_gradient(c.g, dyv), 1e-4, 1e-4, "db");
  }
}

// conv2d and conv2d_backward_weights dispatch to the kernels: same bits as calling them directly
// (both are deterministic for a fixed thread count), and the reference's values.
TEST_P(SingleChannelConv, OpsUseTheKernels) {
  if (!avx512_kernels_run()) GTEST_SKIP() << kNoAvx512Kernels;
  const Case& c = GetParam();
  // The op picks its team from its cost, a direct call runs on the caller's, and the bits
  // depend on the team: one thread for both, so the op's bits equal the direct call's.
  const ScopedThreadBudget one_thread(1);
  Tensor x = random_tensor(c.g.x_shape(), 6), w = random_tensor(c.g.w_shape(), 7);
  Tensor b = random_tensor({c.g.o}, 8);
  Tensor y = ops::conv2d(x, w, b, c.g.options());
  Tensor direct = channels_last_empty(c.g.y_shape());
  ops::single_channel_conv_forward(x, w, &b, false, direct);
  Values bv = values_of(b);
  expect_close(values_of(y), c.g.forward(values_of(x), values_of(w), &bv), 1e-5, 1e-4, "conv2d");
  EXPECT_EQ(y.to_vector<float>(), direct.to_vector<float>());

  Tensor dy = random_tensor(c.g.y_shape(), 9);  // row-major: the op converts it
  std::vector<Tensor> grads =
      ops::conv2d_backward_weights(dy, x, c.g.w_shape(), true, c.g.options());
  Values dyv = values_of(dy);
  expect_close(values_of(grads[0]), c.g.backward_weights(dyv, values_of(x)), 1e-4, 1e-4, "dw");
  expect_close(values_of(grads[1]), bias_gradient(c.g, dyv), 1e-4, 1e-4, "db");
  if (!ops::can_run_single_channel_conv(x, c.g.w_shape(), window(c.g.pad), true)) return;
  Tensor dw = Tensor::empty(c.g.w_shape()), db = Tensor::empty({c.g.o});
  ops::single_channel_conv_backward_weights(channels_last_copy(dy), x, dw, &db);
  EXPECT_EQ(grads[0].to_vector<float>(), dw.to_vector<float>());
  EXPECT_EQ(grads[1].to_vector<float>(), db.to_vector<float>());
}

INSTANTIATE_TEST_SUITE_P(Shapes, SingleChannelConv, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(SingleChannelConvGradient, MatchesFiniteDifferences) {
  ConvRef g = single(2, 6, 5, 3, 3, 3, 1, 1);
  std::vector<Tensor> inputs{random_tensor(g.x_shape(), 10), random_tensor(g.w_shape(), 11),
                             random_tensor({g.o}, 12)};
  expect_gradients_match(
      [&](const std::vector<Tensor>& t) { return ops::conv2d(t[0], t[1], t[2], g.options()); },
      [&](const std::vector<Values>& v) { return g.forward(v[0], v[1], &v[2]); }, inputs);
}

TEST(SingleChannelConvDispatch, CanRunOnlyWhereTheKernelsApply) {
  if (!avx512_kernels_run()) GTEST_SKIP() << kNoAvx512Kernels;
  Tensor x = random_tensor({2, 1, 8, 8}, 13);
  ops::ConvAttrs pad1 = window({1, 1});
  EXPECT_TRUE(ops::can_run_single_channel_conv(x, {16, 1, 3, 3}, pad1));
  EXPECT_TRUE(ops::can_run_single_channel_conv(channels_last_copy(x), {6, 1, 5, 5}, pad1));
  EXPECT_FALSE(ops::can_run_single_channel_conv(x, {65, 1, 3, 3}, pad1));
  // Backward-weights: O % 16 == 0 stays on oneDNN (measured faster there).
  EXPECT_TRUE(ops::can_run_single_channel_conv(x, {6, 1, 5, 5}, pad1, true));
  EXPECT_FALSE(ops::can_run_single_channel_conv(x, {16, 1, 3, 3}, pad1, true));
  EXPECT_FALSE(
      ops::can_run_single_channel_conv(random_tensor({2, 3, 8, 8}, 14), {4, 3, 3, 3}, pad1));
  EXPECT_FALSE(ops::can_run_single_channel_conv(to_bf16(x), {4, 1, 3, 3}, pad1));
  EXPECT_FALSE(ops::can_run_single_channel_conv(x, {4, 1, 3, 3}, window({0, 0}, {2, 2})));
  EXPECT_FALSE(ops::can_run_single_channel_conv(x, {4, 1, 3, 3}, window({0, 0}, {1, 1}, {2, 1})));
  EXPECT_FALSE(
      ops::can_run_single_channel_conv(x, {4, 1, 9, 9}, window({0, 0})));  // output would be empty
  // Every other column: not a dense N x H x W.
  Tensor strided = x.view_as({2, 1, 8, 4}, {64, 64, 8, 2}, 0);
  EXPECT_FALSE(ops::can_run_single_channel_conv(strided, {4, 1, 3, 3}, pad1));
}

TEST(SingleChannelConvErrors, RejectsRowMajorGradient) {
  if (!avx512_kernels_run()) GTEST_SKIP() << kNoAvx512Kernels;
  ConvRef g = single(2, 6, 6, 4, 3, 3, 1, 1);
  Tensor x = random_tensor(g.x_shape(), 15), dy = random_tensor(g.y_shape(), 16);
  Tensor dw = Tensor::empty(g.w_shape());
  expect_error_mentions([&] { ops::single_channel_conv_backward_weights(dy, x, dw, nullptr); },
                        {"single_channel_conv_backward_weights", "channels-last"});
}

}  // namespace
}  // namespace kiln::testing::conv_single_channel_test
