// The one-input-channel convolution for CPUs without AVX-512 (kernels/conv_single_channel_avx2.h),
// forward (with and without the fused relu) and backward-weights, against the double-precision
// reference, called directly and through the conv2d ops that dispatch to them, and where they do
// not apply.
#include "kiln/ops/kernels/conv_single_channel_avx2.h"

#include "conv_kernel_cases.h"
#include "kiln/core/kernel_threads.h"
#include "kiln/core/threads.h"
#include "kiln/ops/kernels/conv_single_channel.h"

namespace kiln::testing::conv_single_channel_avx2_test {
namespace {

using Case = ConvKernelCase;

// Output widths that fill 8 lanes and leave a partial group; 1 to 16 channels (one group of 8
// and a partial one); kernels from 1x1 to 11x11.
const Case kCases[] = {
    {"lenet_5x5_pad2_o6", single(3, 28, 28, 6, 5, 5, 2, 2)},
    {"3x3_pad1_o16", single(2, 12, 11, 16, 3, 3, 1, 1)},
    {"3x3_pad0_o1_width7", single(1, 7, 9, 1, 3, 3, 0, 0)},
    {"rect_3x5_pad1x2_o11", single(2, 7, 9, 11, 3, 5, 1, 2)},
    {"1x1_o8", single(2, 5, 6, 8, 1, 1, 0, 0)},
    {"11x11_pad5_o3", single(1, 13, 17, 3, 11, 11, 5, 5)},
    {"pad_wider_than_half_kernel_o5", single(2, 6, 6, 5, 3, 3, 2, 2)},
};

bool kernel_built() {
#if defined(__AVX2__) && defined(__FMA__)
  return true;
#else
  return false;
#endif
}

class SingleChannelConvAvx2 : public ::testing::TestWithParam<Case> {};

TEST_P(SingleChannelConvAvx2, ForwardMatchesReference) {
  if (!kernel_built()) GTEST_SKIP() << "a build without AVX2";
  const Case& c = GetParam();
  Tensor x = random_tensor(c.g.x_shape(), 1), w = random_tensor(c.g.w_shape(), 2);
  Tensor b = random_tensor({c.g.o}, 3);
  Tensor y = channels_last_empty(c.g.y_shape());
  ASSERT_TRUE(ops::can_run_single_channel_conv_avx2(x, w.shape(), window(c.g.pad), y));
  Values xv = values_of(x), wv = values_of(w), bv = values_of(b);
  for (bool bias : {false, true}) {
    for (bool relu : {false, true}) {
      ops::single_channel_conv_forward_avx2(x, w, bias ? &b : nullptr, window(c.g.pad), relu, y);
      const Values ref = c.g.forward(xv, wv, bias ? &bv : nullptr);
      expect_close(values_of(y), relu ? relu_of(ref) : ref, 1e-5, 1e-4,
                   std::string(c.name) + (bias ? " bias" : "") + (relu ? " relu" : ""));
    }
  }
}

TEST_P(SingleChannelConvAvx2, BackwardWeightsAndBiasMatchReference) {
  if (!kernel_built()) GTEST_SKIP() << "a build without AVX2";
  const Case& c = GetParam();
  Tensor x = random_tensor(c.g.x_shape(), 7);
  Tensor dy = channels_last_copy(random_tensor(c.g.y_shape(), 8));
  ASSERT_TRUE(ops::can_run_single_channel_conv_backward_weights_avx2(dy, x, c.g.w_shape(),
                                                                     window(c.g.pad)));
  Values dyv = values_of(dy);
  const Values ref_dw = c.g.backward_weights(dyv, values_of(x));
  for (int threads : {1, 2}) {
    for (bool bias : {false, true}) {
      // Filled with 7: every element must be written, not added to.
      Tensor dw = Tensor::full(c.g.w_shape(), 7.0), db = Tensor::full({c.g.o}, 7.0);
      {
        KernelThreads team(threads);
        ops::single_channel_conv_backward_weights_avx2(dy, x, window(c.g.pad), dw,
                                                       bias ? &db : nullptr);
      }
      const std::string what = std::string(c.name) + ", " + std::to_string(threads) + " threads";
      expect_close(values_of(dw), ref_dw, 1e-4, 1e-4, what + " dw");
      if (bias) expect_close(values_of(db), bias_gradient(c.g, dyv), 1e-4, 1e-4, what + " db");
    }
  }
}

// conv2d runs the kernel where the AVX-512 one does not: the same bits as a direct call on one
// thread, and the reference's values.
TEST_P(SingleChannelConvAvx2, TheOpUsesTheKernel) {
  if (!kernel_built()) GTEST_SKIP() << "a build without AVX2";
  const Case& c = GetParam();
  // The op picks its team from its cost, a direct call runs on the caller's, and the bits
  // depend on the team: one thread for both, so the op's bits equal the direct call's.
  const ScopedThreadBudget one_thread(1);
  Tensor x = random_tensor(c.g.x_shape(), 4), w = random_tensor(c.g.w_shape(), 5);
  Tensor b = random_tensor({c.g.o}, 6);
  Tensor y = ops::conv2d(x, w, b, c.g.options());
  Values bv = values_of(b);
  expect_close(values_of(y), c.g.forward(values_of(x), values_of(w), &bv), 1e-5, 1e-4, "conv2d");
  Tensor dy = random_tensor(c.g.y_shape(), 9);  // row-major: the op converts it
  std::vector<Tensor> grads =
      ops::conv2d_backward_weights(dy, x, c.g.w_shape(), true, c.g.options());
  Values dyv = values_of(dy);
  expect_close(values_of(grads[0]), c.g.backward_weights(dyv, values_of(x)), 1e-4, 1e-4,
               "conv2d_backward_weights dw");
  expect_close(values_of(grads[1]), bias_gradient(c.g, dyv), 1e-4, 1e-4,
               "conv2d_backward_weights db");
  if (ops::can_run_single_channel_conv(x, w.shape(), window(c.g.pad))) return;  // AVX-512's
  Tensor direct = channels_last_empty(c.g.y_shape());
  ops::single_channel_conv_forward_avx2(x, w, &b, window(c.g.pad), /*relu=*/false, direct);
  EXPECT_EQ(y.to_vector<float>(), direct.to_vector<float>());
  Tensor dw = Tensor::empty(c.g.w_shape()), db = Tensor::empty({c.g.o});
  ops::single_channel_conv_backward_weights_avx2(channels_last_copy(dy), x, window(c.g.pad), dw,
                                                 &db);
  EXPECT_EQ(grads[0].to_vector<float>(), dw.to_vector<float>());
  EXPECT_EQ(grads[1].to_vector<float>(), db.to_vector<float>());
}

INSTANTIATE_TEST_SUITE_P(Shapes, SingleChannelConvAvx2, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(SingleChannelConvAvx2Dispatch, CanRunOnlyWhereTheKernelApplies) {
  if (!kernel_built()) GTEST_SKIP() << "a build without AVX2";
  Tensor x = random_tensor({2, 1, 8, 8}, 13);
  const ops::ConvAttrs pad1 = window({1, 1});
  const Tensor y16 = channels_last_empty({2, 16, 8, 8});
  EXPECT_TRUE(ops::can_run_single_channel_conv_avx2(x, {16, 1, 3, 3}, pad1, y16));
  EXPECT_FALSE(ops::can_run_single_channel_conv_avx2(x, {17, 1, 3, 3}, pad1,
                                                     channels_last_empty({2, 17, 8, 8})));
  // A row-major output, an output of the wrong extent, several input channels, bf16.
  EXPECT_FALSE(
      ops::can_run_single_channel_conv_avx2(x, {16, 1, 3, 3}, pad1, Tensor::empty({2, 16, 8, 8})));
  EXPECT_FALSE(ops::can_run_single_channel_conv_avx2(x, {16, 1, 3, 3}, window({0, 0}), y16));
  EXPECT_FALSE(ops::can_run_single_channel_conv_avx2(random_tensor({2, 3, 8, 8}, 14), {16, 3, 3, 3},
                                                     pad1, y16));
  EXPECT_FALSE(ops::can_run_single_channel_conv_avx2(to_bf16(x), {16, 1, 3, 3}, pad1, y16));
  // Strides and dilations other than 1.
  EXPECT_FALSE(ops::can_run_single_channel_conv_avx2(x, {16, 1, 3, 3}, window({1, 1}, {2, 2}),
                                                     channels_last_empty({2, 16, 4, 4})));
  EXPECT_FALSE(
      ops::can_run_single_channel_conv_avx2(x, {16, 1, 3, 3}, window({2, 2}, {1, 1}, {2, 2}), y16));
  // Every other column: not a dense N x H x W.
  Tensor strided = x.view_as({2, 1, 8, 4}, {64, 64, 8, 2}, 0);
  EXPECT_FALSE(ops::can_run_single_channel_conv_avx2(strided, {16, 1, 3, 1}, pad1,
                                                     channels_last_empty({2, 16, 8, 4})));
  // Backward-weights: the forward's rules on dy, and at most 11 kernel columns.
  EXPECT_TRUE(ops::can_run_single_channel_conv_backward_weights_avx2(y16, x, {16, 1, 3, 3}, pad1));
  EXPECT_FALSE(ops::can_run_single_channel_conv_backward_weights_avx2(Tensor::empty({2, 16, 8, 8}),
                                                                      x, {16, 1, 3, 3}, pad1));
  EXPECT_TRUE(ops::can_run_single_channel_conv_backward_weights_avx2(
      channels_last_empty({2, 4, 8, 8}), x, {4, 1, 1, 11}, window({0, 5})));
  EXPECT_FALSE(ops::can_run_single_channel_conv_backward_weights_avx2(
      channels_last_empty({2, 4, 8, 8}), x, {4, 1, 1, 13}, window({0, 6})));
  Tensor dw = Tensor::empty({16, 1, 3, 3});
  expect_error_mentions(
      [&] {
        ops::single_channel_conv_backward_weights_avx2(Tensor::empty({2, 16, 8, 8}), x, pad1, dw,
                                                       nullptr);
      },
      {"single_channel_conv_backward_weights_avx2", "channels-last"});
}

}  // namespace
}  // namespace kiln::testing::conv_single_channel_avx2_test
