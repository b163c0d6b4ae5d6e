#include "kiln/ops/cpu_support.h"
#include "nn_reference.h"
#include "testing/cpu_features.h"

namespace kiln::testing::nn_matmul_test {
namespace {

// Reference matmul with NumPy batch broadcasting; shapes as stored (before transposes).
Values matmul_ref(const Values& a, const Shape& sa, bool ta, const Values& b, const Shape& sb,
                  bool tb, Shape* out_shape = nullptr) {
  int ra = sa.rank(), rb = sb.rank();
  int64_t m = ta ? sa[ra - 1] : sa[ra - 2], k = ta ? sa[ra - 2] : sa[ra - 1];
  int64_t n = tb ? sb[rb - 2] : sb[rb - 1];
  Shape ba(std::vector<int64_t>(sa.begin(), sa.end() - 2));
  Shape bb(std::vector<int64_t>(sb.begin(), sb.end() - 2));
  Shape batch = broadcast_shapes(ba, bb, "ref");
  int r = batch.rank();
  int64_t nb = batch.numel();
  auto batch_offset = [&](const Shape& s, int64_t flat) {
    // flat index into `batch` -> flat index into broadcast shape s
    std::vector<int64_t> idx(static_cast<size_t>(r));
    for (int d = r - 1; d >= 0; --d) {
      idx[size_t(d)] = flat % batch[d];
      flat /= batch[d];
    }
    int64_t off = 0;
    for (int d = 0; d < s.rank(); ++d) {
      int64_t i = idx[size_t(r - s.rank() + d)];
      off = off * s[d] + (s[d] == 1 ? 0 : i);
    }
    return off;
  };
  Values y(static_cast<size_t>(nb * m * n), 0.0);
  for (int64_t bi = 0; bi < nb; ++bi) {
    const double* pa = a.data() + batch_offset(ba, bi) * m * k;
    const double* pb = b.data() + batch_offset(bb, bi) * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t q = 0; q < k; ++q) {
          double av = ta ? pa[q * m + i] : pa[i * k + q];
          double bv = tb ? pb[j * k + q] : pb[q * n + j];
          s += av * bv;
        }
        y[size_t((bi * m + i) * n + j)] = s;
      }
  }
  if (out_shape) {
    std::vector<int64_t> d = batch.dims();
    d.push_back(m);
    d.push_back(n);
    *out_shape = Shape(d);
  }
  return y;
}

struct MatmulCase {
  Shape a, b;
  bool ta, tb;
};

const MatmulCase kCases[] = {
    {{3, 4}, {4, 5}, false, false},
    {{4, 3}, {4, 5}, true, false},
    {{3, 4}, {5, 4}, false, true},
    {{4, 3}, {5, 4}, true, true},
    {{2, 3, 4}, {2, 4, 5}, false, false},
    {{2, 1, 3, 4}, {3, 4, 5}, false, false},
    {{2, 3, 4}, {4, 5}, false, false},
    {{3, 4}, {2, 5, 4}, false, true},
    {{2, 4, 3}, {1, 5, 4}, true, true},
    {{1, 7}, {7, 1}, false, false},
    // Attention's shapes: per-head scores q·kᵀ [B, H, T, D] x [B, H, T, D]ᵀ, then weights·v,
    // and the tied output projection [B, T, C] x [V, C]ᵀ.
    {{2, 3, 4, 5}, {2, 3, 4, 5}, false, true},
    {{2, 3, 4, 4}, {2, 3, 4, 5}, false, false},
    {{2, 4, 6}, {7, 6}, false, true},
};

TEST(NnMatmul, ForwardMatchesReferenceForTransposesAndBatching) {
  for (const MatmulCase& c : kCases) {
    Tensor a = random_tensor(c.a, 1), b = random_tensor(c.b, 2);
    Shape expected_shape;
    Values ref = matmul_ref(values_of(a), c.a, c.ta, values_of(b), c.b, c.tb, &expected_shape);
    Tensor y = ops::matmul(a, b, c.ta, c.tb);
    EXPECT_EQ(y.shape(), expected_shape) << c.a.str() << " x " << c.b.str();
    expect_close(values_of(y), ref, 1e-5, 1e-4, "matmul " + c.a.str() + " x " + c.b.str());
  }
}

TEST(NnMatmul, GradientMatchesFiniteDifferences) {
  for (const MatmulCase& c : kCases) {
    expect_gradients_match(
        [&](const std::vector<Tensor>& x) { return ops::matmul(x[0], x[1], c.ta, c.tb); },
        [&](const std::vector<Values>& x) { return matmul_ref(x[0], c.a, c.ta, x[1], c.b, c.tb); },
        {random_tensor(c.a, 3), random_tensor(c.b, 4)});
  }
}

TEST(NnMatmul, StridedViewInputsNeedNoCopyAndStayCorrect) {
  Tensor a = random_tensor({5, 3}, 5), b = random_tensor({4, 5}, 6);
  Tensor at = ops::transpose(a, 0, 1);  // [3, 5] view with strides [1, 3]
  Tensor bt = ops::transpose(b, 0, 1);  // [5, 4]
  Values ref = matmul_ref(values_of(a), {5, 3}, true, values_of(b), {4, 5}, true);
  expect_close(values_of(ops::matmul(at, bt)), ref, 1e-5, 1e-4, "strided views");
}

TEST(NnMatmul, SlicedBatchViewIsCopiedAndCorrect) {
  Tensor a = random_tensor({4, 3, 5}, 12), b = random_tensor({2, 5, 2}, 13);
  Tensor a2 = ops::slice(a, 0, 0, 4, 2);  // [2, 3, 5], batch stride 30
  Values ref = matmul_ref(values_of(a2), {2, 3, 5}, false, values_of(b), {2, 5, 2}, false);
  expect_close(values_of(ops::matmul(a2, b)), ref, 1e-5, 1e-4, "sliced batch");
}

TEST(NnMatmul, Bf16MatchesF32WithinBf16Tolerance) {
  if (!ops::arithmetic_available(DType::bf16)) GTEST_SKIP() << kiln::testing::kNoBf16Arithmetic;
  Tensor a = random_tensor({64, 96}, 7), b = random_tensor({96, 48}, 8);
  Tensor a16 = to_bf16(a), b16 = to_bf16(b);
  Tensor y16 = ops::matmul(a16, b16);
  EXPECT_EQ(y16.dtype(), DType::bf16);
  // Reference from the bf16-rounded inputs: only the accumulation/output rounding differs.
  Values ref = matmul_ref(values_of(a16), {64, 96}, false, values_of(b16), {96, 48}, false);
  Values got = values_of(y16);
  double max_abs = 0;
  for (double v : ref) max_abs = std::max(max_abs, std::abs(v));
  // bf16 keeps 8 significant bits: relative error 2^-8 of the result, plus summation error.
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_NEAR(got[i], ref[i], 1e-2 * std::abs(ref[i]) + 4e-3 * max_abs) << "index " << i;
  }
  // And against the f32 matmul of the unrounded inputs, within bf16 input rounding.
  Values f32 = values_of(ops::matmul(a, b));
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_NEAR(got[i], f32[i], 3e-2 * max_abs) << "index " << i;
  }
}

TEST(NnMatmul, BadInputsNameOpAndShapes) {
  expect_error_mentions(
      [] {
        ops::matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 5}));
      },
      {"matmul", "[2, 3]", "[4, 5]"});
  expect_error_mentions(
      [] {
        ops::matmul(Tensor::zeros({3}), Tensor::zeros({3, 5}));
      },
      {"matmul", "rank", "[3]"});
  expect_error_mentions(
      [] {
        ops::matmul(Tensor::zeros({2, 3}), Tensor::zeros({3, 5}, DType::i32));
      },
      {"matmul", "i32[3, 5]"});
  expect_error_mentions(
      [] {
        ops::matmul(Tensor::zeros({2, 2, 3}), Tensor::zeros({3, 3, 5}));
      },
      {"matmul", "[2, 2, 3]", "[3, 3, 5]"});
}

TEST(NnMatmul, ZeroInnerDimensionGivesZeros) {
  Tensor y = ops::matmul(Tensor::zeros({2, 0}), Tensor::zeros({0, 3}));
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  for (double v : values_of(y)) EXPECT_EQ(v, 0.0);
}

}  // namespace
}  // namespace kiln::testing::nn_matmul_test
