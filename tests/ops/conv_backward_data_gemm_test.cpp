// conv2d backward-data as a GEMM plus col2im (kernels/conv_col2im.h) against the
// double-precision reference, called directly and through conv2d_backward_data: the AVX-512
// variant where the CPU runs it, else the baseline's AVX2 one.
#include "kiln/ops/detail/conv_col2im.h"

#include "conv_kernel_cases.h"
#include "kiln/core/threads.h"

namespace kiln::testing::conv_backward_data_gemm_test {
namespace {

using Case = ConvKernelCase;

ConvRef conv(int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, int64_t kh, int64_t kw,
             int64_t ph, int64_t pw) {
  return {.n = n, .c = c, .h = h, .w = w, .o = o, .kh = kh, .kw = kw, .pad = {ph, pw}};
}

const Case kCases[] = {
    {"lenet_conv2_c6_o16_5x5", conv(2, 6, 14, 14, 16, 5, 5, 0, 0)},
    {"c3_o16_3x3_pad1", conv(3, 3, 12, 11, 16, 3, 3, 1, 1)},
    {"c8_o17_3x5_pad1x2", conv(2, 8, 7, 9, 17, 3, 5, 1, 2)},
    {"c1_o5_3x3_pad2", conv(1, 1, 8, 7, 5, 3, 3, 2, 2)},
    {"c6_o1_1x1", conv(3, 6, 5, 6, 1, 1, 1, 0, 0)},
    {"c8_o16_1x1_pad1", conv(2, 8, 5, 7, 16, 1, 1, 1, 1)},
    {"c3_o5_5x5_pad2_odd", conv(1, 3, 9, 10, 5, 5, 5, 2, 2)},
    {"c6_o17_5x5_one_column", conv(3, 6, 7, 5, 17, 5, 5, 0, 0)},
    {"c3_o16_5x3_pad2x0", conv(2, 3, 8, 9, 16, 5, 3, 2, 0)},
    {"c8_o5_3x3_pad0x1_wide", conv(1, 8, 4, 30, 5, 3, 3, 0, 1)},
    {"kernel_over_input_c3_o16", conv(2, 3, 3, 3, 16, 5, 5, 2, 2)},
    {"c6_o16_3x3_pad1_five_images", conv(5, 6, 28, 28, 16, 3, 3, 1, 1)},
    {"c1_o16_3x3_pad1", conv(2, 1, 9, 8, 16, 3, 3, 1, 1)},
    {"c4_o6_3x5_pad1", conv(3, 4, 6, 7, 6, 3, 5, 1, 1)},
};

// The rule in kernels/conv_col2im.h.
bool in_rule(const ConvRef& g) {
  return (g.c <= 4 && g.o >= 6) || (g.c <= 8 && g.o >= 16);
}

// The kernel runs in the AVX-512 variant, and in a baseline built for AVX2 (the default).
bool kernel_runs() {
#if defined(__AVX2__)
  return true;
#else
  return avx512_kernels_run();
#endif
}
constexpr const char* kNoKernel = "neither AVX-512 nor an AVX2 baseline";

class GemmBackwardData : public ::testing::TestWithParam<Case> {};

TEST_P(GemmBackwardData, MatchesReference) {
  if (!kernel_runs()) GTEST_SKIP() << kNoKernel;
  const Case& c = GetParam();
  Tensor dy = channels_last_copy(random_tensor(c.g.y_shape(), 1));
  Tensor w = random_tensor(c.g.w_shape(), 2);
  Tensor dx = channels_last_empty(c.g.x_shape());
  // Poison dx: the kernel must write every element.
  dx.copy_from(Tensor::full(c.g.x_shape(), std::nan("")));
  ops::gemm_backward_data(dy, w, dx);
  expect_close(values_of(dx), c.g.backward_data(values_of(dy), values_of(w)), 1e-5, 1e-4, c.name);
}

// conv2d_backward_data dispatches to the kernel wherever can_run holds (same bits as calling it
// directly) and gives the reference's values either way, also for a row-major gradient, which
// the op converts to channels-last first.
TEST_P(GemmBackwardData, OpUsesTheKernel) {
  if (!kernel_runs()) GTEST_SKIP() << kNoKernel;
  const Case& c = GetParam();
  // The op picks its team from its cost, a direct call runs on the caller's, and the bits
  // depend on the team: one thread for both, so the op's bits equal the direct call's.
  const ScopedThreadBudget one_thread(1);
  Tensor dy_rows = random_tensor(c.g.y_shape(), 3), w = random_tensor(c.g.w_shape(), 4);
  Tensor dy = channels_last_copy(dy_rows);
  Values ref = c.g.backward_data(values_of(dy), values_of(w));
  Tensor dx = ops::conv2d_backward_data(dy, w, c.g.x_shape(), c.g.options());
  expect_close(values_of(dx), ref, 1e-5, 1e-4, std::string(c.name) + " op");
  Tensor from_rows = ops::conv2d_backward_data(dy_rows, w, c.g.x_shape(), c.g.options());
  expect_close(values_of(from_rows), ref, 1e-5, 1e-4, std::string(c.name) + " row-major dy");

  const bool applies = in_rule(c.g);
  ASSERT_EQ(ops::can_run_gemm_backward_data(dy, c.g.w_shape(), c.g.x_shape(), window(c.g.pad)),
            applies);
  EXPECT_FALSE(
      ops::can_run_gemm_backward_data(dy_rows, c.g.w_shape(), c.g.x_shape(), window(c.g.pad)));
  if (!applies) return;
  Tensor direct = channels_last_empty(c.g.x_shape());
  ops::gemm_backward_data(dy, w, direct);
  EXPECT_EQ(dx.to_vector<float>(), direct.to_vector<float>());
  EXPECT_EQ(from_rows.to_vector<float>(), direct.to_vector<float>());
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmBackwardData, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(GemmBackwardDataDispatch, CanRunOnlyWhereTheKernelApplies) {
  if (!kernel_runs()) GTEST_SKIP() << kNoKernel;
  const Shape x{2, 6, 14, 14}, w{16, 6, 5, 5};
  Tensor dy = channels_last_copy(random_tensor({2, 16, 10, 10}, 5));
  EXPECT_TRUE(ops::can_run_gemm_backward_data(dy, w, x, window({0, 0})));
  // Not channels-last: the op converts such a gradient first.
  EXPECT_FALSE(ops::can_run_gemm_backward_data(dy.contiguous(), w, x, window({0, 0})));
  EXPECT_FALSE(ops::can_run_gemm_backward_data(to_bf16(dy), w, x, window({0, 0})));
  // Shape mismatch between dy and the implied output.
  EXPECT_FALSE(ops::can_run_gemm_backward_data(dy, w, x, window({1, 1})));
  EXPECT_FALSE(ops::can_run_gemm_backward_data(dy, w, x, window({0, 0}, {2, 2})));
  EXPECT_FALSE(ops::can_run_gemm_backward_data(dy, w, x, window({0, 0}, {1, 1}, {2, 2})));
  ops::ConvAttrs grouped = window({0, 0});
  grouped.groups = 2;
  EXPECT_FALSE(ops::can_run_gemm_backward_data(dy, {16, 3, 5, 5}, x, grouped));
  // The measured rule: C <= 4 with O >= 6, or C <= 8 with O >= 16.
  auto can_run = [](int64_t c, int64_t o) {
    Tensor g = channels_last_copy(random_tensor({2, o, 8, 8}, 6));
    return ops::can_run_gemm_backward_data(g, {o, c, 3, 3}, {2, c, 8, 8}, window({1, 1}));
  };
  EXPECT_TRUE(can_run(1, 16));
  EXPECT_TRUE(can_run(4, 6));
  EXPECT_TRUE(can_run(8, 16));
  EXPECT_FALSE(can_run(1, 5));
  EXPECT_FALSE(can_run(4, 4));
  EXPECT_FALSE(can_run(8, 8));
  EXPECT_FALSE(can_run(16, 16));
}

TEST(GemmBackwardDataErrors, RejectsRowMajorTensors) {
  if (!kernel_runs()) GTEST_SKIP() << kNoKernel;
  ConvRef g = conv(2, 3, 6, 6, 4, 3, 3, 1, 1);
  Tensor dy = random_tensor(g.y_shape(), 7), w = random_tensor(g.w_shape(), 8);
  Tensor dx = channels_last_empty(g.x_shape());
  expect_error_mentions([&] { ops::gemm_backward_data(dy, w, dx); },
                        {"gemm_backward_data", "channels-last"});
  Tensor dx_rows = Tensor::empty(g.x_shape());
  expect_error_mentions([&] { ops::gemm_backward_data(channels_last_copy(dy), w, dx_rows); },
                        {"gemm_backward_data", "channels-last"});
}

}  // namespace
}  // namespace kiln::testing::conv_backward_data_gemm_test
