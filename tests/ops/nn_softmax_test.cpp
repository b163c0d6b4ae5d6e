#include "kiln/ops/cpu_support.h"
#include "nn_reference.h"
#include "testing/cpu_features.h"

namespace kiln::testing::nn_softmax_test {
namespace {

// (log-)softmax of row-major x along `axis`.
Values softmax_ref(const Values& x, const Shape& s, int axis, bool log) {
  int64_t outer = 1, inner = 1, n = s[axis];
  for (int d = 0; d < axis; ++d) outer *= s[d];
  for (int d = axis + 1; d < s.rank(); ++d) inner *= s[d];
  Values y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return size_t((o * n + k) * inner + i); };
      double m = -std::numeric_limits<double>::infinity(), sum = 0;
      for (int64_t k = 0; k < n; ++k) m = std::max(m, x[at(k)]);
      for (int64_t k = 0; k < n; ++k) sum += std::exp(x[at(k)] - m);
      for (int64_t k = 0; k < n; ++k) {
        y[at(k)] = log ? x[at(k)] - m - std::log(sum) : std::exp(x[at(k)] - m) / sum;
      }
    }
  return y;
}

struct SoftmaxCase {
  Shape shape;
  int axis;
};
const SoftmaxCase kCases[] = {{{4, 7}, 1}, {{4, 7}, 0}, {{2, 3, 5}, 1}, {{2, 3, 5}, 2}, {{6}, 0}};

TEST(NnSoftmax, ForwardMatchesReference) {
  for (bool log : {false, true}) {
    for (const SoftmaxCase& c : kCases) {
      Tensor x = random_tensor(c.shape, 1, -3, 3);
      Tensor y = log ? ops::log_softmax(x, c.axis) : ops::softmax(x, c.axis);
      expect_close(values_of(y), softmax_ref(values_of(x), c.shape, c.axis, log), 1e-6, 1e-5,
                   (log ? "log_softmax " : "softmax ") + c.shape.str());
    }
  }
}

TEST(NnSoftmax, NegativeAxisAndLargeLogitsAreStable) {
  Tensor x = Tensor::from_vector(std::vector<float>{1000.f, 1001.f, 999.f, -1000.f}, {1, 4});
  Values ref = softmax_ref(values_of(x), {1, 4}, 1, false);
  expect_close(values_of(ops::softmax(x, -1)), ref, 1e-6, 1e-5, "softmax large");
  Values lref = softmax_ref(values_of(x), {1, 4}, 1, true);
  expect_close(values_of(ops::log_softmax(x, -1)), lref, 1e-4, 1e-5, "log_softmax large");
}

TEST(NnSoftmax, GradientMatchesFiniteDifferences) {
  for (bool log : {false, true}) {
    for (const SoftmaxCase& c : kCases) {
      expect_gradients_match(
          [&](const std::vector<Tensor>& t) {
            return log ? ops::log_softmax(t[0], c.axis) : ops::softmax(t[0], c.axis);
          },
          [&](const std::vector<Values>& t) { return softmax_ref(t[0], c.shape, c.axis, log); },
          {random_tensor(c.shape, 2, -2, 2)});
    }
  }
}

TEST(NnSoftmax, Bf16WithinBf16Tolerance) {
  if (!ops::arithmetic_available(DType::bf16)) GTEST_SKIP() << kiln::testing::kNoBf16Arithmetic;
  Tensor x = to_bf16(random_tensor({8, 33}, 3, -3, 3));
  for (bool log : {false, true}) {
    Tensor y = log ? ops::log_softmax(x, -1) : ops::softmax(x, -1);
    EXPECT_EQ(y.dtype(), DType::bf16);
    expect_close(values_of(y), softmax_ref(values_of(x), {8, 33}, 1, log), 2e-3, 1e-2,
                 log ? "bf16 log_softmax" : "bf16 softmax");
  }
}

TEST(NnSoftmax, BadInputsNameOpAndShapes) {
  expect_error_mentions(
      [] {
        ops::softmax(Tensor::zeros({2, 3}), 2);
      },
      {"softmax", "axis 2", "[2, 3]"});
  expect_error_mentions(
      [] {
        ops::log_softmax(Tensor::zeros({2, 3}, DType::i32), 1);
      },
      {"log_softmax", "i32[2, 3]"});
  expect_error_mentions(
      [] {
        ops::softmax_grad(Tensor::zeros({2, 3}), Tensor::zeros({3, 2}), 1);
      },
      {"softmax_grad", "[2, 3]", "[3, 2]"});
}

}  // namespace
}  // namespace kiln::testing::nn_softmax_test
