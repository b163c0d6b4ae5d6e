#include "kiln/ops/cpu_support.h"
#include "kiln/ops/kernels/max_pool_grad.h"
#include "nn_reference.h"
#include "testing/cpu_features.h"

namespace kiln::testing::nn_pool_test {
namespace {

struct PoolCase {
  const char* name;
  Shape x;
  ops::Pool2dOptions opt;
};

const PoolCase kCases[] = {
    {"k2s2", {2, 3, 4, 6}, {.kernel = {2, 2}, .stride = {2, 2}}},
    {"k3s2_pad1", {1, 2, 5, 5}, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}},
    {"k3s1_rect", {1, 2, 4, 5}, {.kernel = {3, 2}, .stride = {1, 1}, .padding = {1, 0}}},
    {"odd_input_k2s2", {1, 1, 5, 7}, {.kernel = {2, 2}, .stride = {2, 2}}},
};

// Max or average (padding counted in the divisor, as PyTorch's default) pooling.
Values pool_ref(const Values& x, const Shape& s, const ops::Pool2dOptions& o, bool max) {
  int64_t n = s[0], c = s[1], h = s[2], w = s[3];
  int64_t oh = (h + 2 * o.padding[0] - o.kernel[0]) / o.stride[0] + 1;
  int64_t ow = (w + 2 * o.padding[1] - o.kernel[1]) / o.stride[1] + 1;
  Values y;
  for (int64_t p = 0; p < n * c; ++p)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        double acc = max ? -std::numeric_limits<double>::infinity() : 0.0;
        for (int64_t a = 0; a < o.kernel[0]; ++a)
          for (int64_t b = 0; b < o.kernel[1]; ++b) {
            int64_t iy = i * o.stride[0] - o.padding[0] + a,
                    ix = j * o.stride[1] - o.padding[1] + b;
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            double v = x[size_t((p * h + iy) * w + ix)];
            acc = max ? std::max(acc, v) : acc + v;
          }
        y.push_back(max ? acc : acc / double(o.kernel[0] * o.kernel[1]));
      }
  return y;
}

// Distinct values, so max pooling has no ties for finite differences to straddle.
Tensor distinct_tensor(const Shape& s, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(s.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.01f * float(i);
  std::mt19937_64 gen(seed);
  std::shuffle(v.begin(), v.end(), gen);
  return Tensor::from_vector(v, s);
}

class NnPool : public ::testing::TestWithParam<PoolCase> {};

TEST_P(NnPool, ForwardMatchesReferenceInBothLayouts) {
  const PoolCase& c = GetParam();
  Tensor x = random_tensor(c.x, 1);
  for (bool max : {true, false}) {
    Values ref = pool_ref(values_of(x), c.x, c.opt, max);
    for (bool cl : {false, true}) {
      Tensor xin = cl ? channels_last_copy(x) : x;
      Tensor y = max ? ops::max_pool2d(xin, c.opt) : ops::avg_pool2d(xin, c.opt);
      if (cl && c.x[1] > 1) {
        EXPECT_TRUE(y.is_channels_last());
      }
      expect_close(values_of(y), ref, 1e-6, 1e-5, std::string(c.name) + (max ? " max" : " avg"));
    }
  }
}

TEST_P(NnPool, GradientMatchesFiniteDifferences) {
  const PoolCase& c = GetParam();
  for (bool max : {true, false}) {
    for (bool cl : {false, true}) {
      Tensor x = distinct_tensor(c.x, 2);
      if (cl) x = channels_last_copy(x);
      expect_gradients_match(
          [&](const std::vector<Tensor>& t) {
            return max ? ops::max_pool2d(t[0], c.opt) : ops::avg_pool2d(t[0], c.opt);
          },
          [&](const std::vector<Values>& t) { return pool_ref(t[0], c.x, c.opt, max); }, {x}, {},
          1e-3, 1e-2, 1e-4);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, NnPool, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(NnPoolErrors, BadInputsNameOpAndShapes) {
  expect_error_mentions(
      [] {
        ops::max_pool2d(Tensor::zeros({3, 4, 4}), {});
      },
      {"max_pool2d", "[3, 4, 4]"});
  expect_error_mentions(
      [] {
        ops::avg_pool2d(Tensor::zeros({1, 1, 2, 2}), {.kernel = {3, 3}, .stride = {1, 1}});
      },
      {"avg_pool2d", "does not fit", "[1, 1, 2, 2]"});
  expect_error_mentions(
      [] {
        ops::max_pool2d(Tensor::zeros({1, 1, 4, 4}),
                        {.kernel = {2, 2}, .stride = {1, 1}, .padding = {2, 2}});
      },
      {"max_pool2d", "padding"});
}

}  // namespace
}  // namespace kiln::testing::nn_pool_test

namespace kiln::testing::nn_pool_test {
namespace {

TEST(NnPoolBf16, MaxIsExactAndAvgWithinBf16Tolerance) {
  if (!ops::arithmetic_available(DType::bf16)) GTEST_SKIP() << kiln::testing::kNoBf16Arithmetic;
  Shape s{2, 16, 6, 6};
  Tensor x = channels_last_copy(to_bf16(random_tensor(s, 3)));
  ops::Pool2dOptions opt{.kernel = {2, 2}, .stride = {2, 2}};
  Tensor ym = ops::max_pool2d(x, opt), ya = ops::avg_pool2d(x, opt);
  EXPECT_EQ(ym.dtype(), DType::bf16);
  expect_close(values_of(ym), pool_ref(values_of(x), s, opt, true), 0, 0, "bf16 max");
  expect_close(values_of(ya), pool_ref(values_of(x), s, opt, false), 1e-2, 1e-2, "bf16 avg");
}

}  // namespace
}  // namespace kiln::testing::nn_pool_test

namespace kiln::testing::nn_pool_test {
namespace {

// The gradient a max pool with non-overlapping windows passes back: each window's gradient to
// its first maximum in window order (row by row), as oneDNN does; zero elsewhere.
std::vector<double> max_grad_ref(const std::vector<double>& x, const Shape& s,
                                 const std::vector<double>& g, int64_t k) {
  const int64_t N = s[0], C = s[1], H = s[2], W = s[3], OH = H / k, OW = W / k;
  std::vector<double> dx(x.size(), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          int64_t best = ((n * C + c) * H + i * k) * W + j * k;
          for (int64_t a = 0; a < k; ++a)
            for (int64_t b = 0; b < k; ++b) {
              int64_t at = ((n * C + c) * H + i * k + a) * W + j * k + b;
              if (x[size_t(at)] > x[size_t(best)]) best = at;
            }
          dx[size_t(best)] = g[size_t(((n * C + c) * OH + i) * OW + j)];
        }
  return dx;
}

// Non-overlapping windows run Kiln's one-pass kernel: ties must go to the first maximum (bits
// equal to oneDNN's choice) in both layouts, for 2x2 and other window sizes, with uncovered edge
// rows/columns getting zero.
TEST(NnPoolMaxGrad, NonOverlappingWindowsPickFirstMaximum) {
  for (int64_t k : {2, 3}) {
    for (bool cl : {false, true}) {
      Shape s{2, 5, 7, 8};
      std::vector<double> xv = values_of(random_tensor(s, 11));
      for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::round(xv[i] * 2.0) / 2.0;  // many ties
      std::vector<float> xf(xv.begin(), xv.end());
      Tensor x = Tensor::from_vector(xf, s);
      if (cl) x = channels_last_copy(x);
      ops::Pool2dOptions opt{.kernel = {k, k}, .stride = {k, k}};
      Tensor y = ops::max_pool2d(x, opt);
      Tensor g = random_tensor(y.shape(), 12);
      ops::Attrs a = ops::PoolAttrs{.kernel = opt.kernel, .stride = opt.stride};
      Tensor dx = ops::call_one_output(ops::OpKind::max_pool2d_grad, {g, x}, a);
      EXPECT_EQ(dx.strides(), x.strides());
      expect_close(values_of(dx), max_grad_ref(xv, s, values_of(g), k), 0, 0,
                   cl ? "channels-last" : "contiguous");
    }
  }
}

// LeNet-sized channel counts (whole 16-lane blocks, a partial one, blocks straddling windows, 6
// and 12 for the 8-lane row path), an odd width, rows long enough for whole 8-lane chunks
// between the ends (W = 37), x channels-last or row-major, a gradient laid out unlike x (the
// row-major one a flatten's reshape sends back), bf16, and the relu mask graph mode fuses in: the
// one-pass kernel must match the reference exactly. With the mask, a window whose maximum is
// <= 0 passes nothing.
TEST(NnPoolMaxGrad, OnePassMatchesReferenceForManyChannelCounts) {
  for (int64_t C : {1, 6, 12, 16, 17, 40}) {
    for (int64_t W : {9, 37}) {
      for (bool x_channels_last : {true, false}) {
        for (bool bf16 : {false, true}) {
          for (bool relu_mask : {false, true}) {
            for (bool gradient_channels_last : {false, true}) {
              Shape s{3, C, 6, W};
              std::vector<double> xv = values_of(random_tensor(s, 20 + uint64_t(C)));
              for (double& v : xv) v = std::round(v * 2.0) / 2.0;  // ties, zeros and negatives
              std::vector<float> xf(xv.begin(), xv.end());
              Tensor x = Tensor::from_vector(xf, s);
              Tensor g = random_tensor({3, C, 3, W / 2}, 30 + uint64_t(C));
              if (bf16) {
                x = to_bf16(x);
                g = to_bf16(g);
              }
              if (x_channels_last) x = channels_last_copy(x);
              if (gradient_channels_last) g = channels_last_copy(g);
              Tensor dx = Tensor::empty_like(x);
              ASSERT_TRUE(ops::can_run_max_pool_grad_one_pass(g, x, dx, {2, 2}, {2, 2}, {0, 0}));
              ops::max_pool_grad_one_pass(g, x, dx, {2, 2}, relu_mask);
              std::vector<double> gv = values_of(g);
              if (relu_mask) {
                // Zero the gradient of every window whose maximum is <= 0.
                Values y = pool_ref(values_of(x), s, {.kernel = {2, 2}, .stride = {2, 2}}, true);
                for (size_t i = 0; i < gv.size(); ++i) gv[i] = y[i] > 0 ? gv[i] : 0.0;
              }
              expect_close(values_of(dx), max_grad_ref(values_of(x), s, gv, 2), 0, 0,
                           "C=" + std::to_string(C) + " W=" + std::to_string(W) +
                               (x_channels_last ? " channels-last x" : " row-major x") +
                               (bf16 ? " bf16" : " f32") + (relu_mask ? " relu mask" : "") +
                               (gradient_channels_last ? "" : " row-major gradient"));
            }
          }
        }
      }
    }
  }
}

// Non-overlapping windows run Kiln's own forward (kernels/max_pool_rows.h): every layout, window
// size and channel count, with a width and height the windows do not tile, f32 and bf16, equal
// the reference exactly.
TEST(NnPoolMaxForward, RowsKernelMatchesReferenceExactly) {
  for (int64_t k : {2, 3}) {
    for (int64_t C : {1, 6, 12, 16}) {
      for (bool cl : {false, true}) {
        for (bool bf16 : {false, true}) {
          const Shape s{2, C, 9, 37};
          Tensor x = random_tensor(s, 40 + uint64_t(C));
          if (bf16) x = to_bf16(x);
          if (cl) x = channels_last_copy(x);
          const ops::Pool2dOptions opt{.kernel = {k, k}, .stride = {k, k}};
          const Tensor y = ops::max_pool2d(x, opt);
          if (C > 1) {  // one channel's two layouts are the same memory
            EXPECT_EQ(y.is_channels_last(), cl);
          }
          EXPECT_EQ(y.dtype(), x.dtype());
          expect_close(values_of(y), pool_ref(values_of(x), s, opt, true), 0, 0,
                       "k=" + std::to_string(k) + " C=" + std::to_string(C) +
                           (cl ? " channels-last" : " row-major") + (bf16 ? " bf16" : ""));
        }
      }
    }
  }
}

// The forward's value is the backward's winner's: a NaN as a window's first element is the
// result, a NaN later in the window is passed over (strict > compares, in window order).
TEST(NnPoolMaxForward, NanFirstInAWindowIsTheResultLaterIsPassedOver) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t C : {1, 6}) {
    for (bool cl : {false, true}) {
      // Per channel: window 0 [nan 1; 2 3] -> nan; window 1 [1 nan; 5 2] -> 5;
      // window 2 [4 0; nan 1] -> 4; window 3 [0 1; 2 nan] -> 2.
      const float row0[8] = {nan, 1, 1, nan, 4, 0, 0, 1};
      const float row1[8] = {2, 3, 5, 2, nan, 1, 2, nan};
      std::vector<float> v;
      for (int64_t c = 0; c < C; ++c) {
        v.insert(v.end(), row0, row0 + 8);
        v.insert(v.end(), row1, row1 + 8);
      }
      Tensor x = Tensor::from_vector(v, Shape({1, C, 2, 8}));
      if (cl) x = channels_last_copy(x);
      const std::vector<double> y =
          values_of(ops::max_pool2d(x, {.kernel = {2, 2}, .stride = {2, 2}}));
      ASSERT_EQ(y.size(), size_t(4 * C));
      for (int64_t c = 0; c < C; ++c) {
        const std::string where = "C=" + std::to_string(C) + " channel " + std::to_string(c) +
                                  (cl ? " channels-last" : " row-major");
        EXPECT_TRUE(std::isnan(y[size_t(4 * c)])) << where;
        EXPECT_EQ(y[size_t(4 * c + 1)], 5) << where;
        EXPECT_EQ(y[size_t(4 * c + 2)], 4) << where;
        EXPECT_EQ(y[size_t(4 * c + 3)], 2) << where;
      }
    }
  }
}

}  // namespace
}  // namespace kiln::testing::nn_pool_test
