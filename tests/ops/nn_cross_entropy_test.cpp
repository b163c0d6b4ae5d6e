#include "nn_reference.h"

namespace kiln::testing::nn_cross_entropy_test {
namespace {

Values ce_ref(const Values& logits, int64_t n, int64_t c, const std::vector<int64_t>& labels,
              int64_t reduction) {
  Values loss;
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    double m = -std::numeric_limits<double>::infinity(), s = 0;
    for (int64_t j = 0; j < c; ++j) m = std::max(m, logits[size_t(i * c + j)]);
    for (int64_t j = 0; j < c; ++j) s += std::exp(logits[size_t(i * c + j)] - m);
    double l = m + std::log(s) - logits[size_t(i * c + labels[size_t(i)])];
    loss.push_back(l);
    total += l;
  }
  if (reduction == 2) return loss;
  return {reduction == 0 ? total / double(n) : total};
}

const std::vector<int64_t> kLabels{2, 0, 4, 4, 1};

Tensor labels_tensor(DType dtype) {
  if (dtype == DType::i64) return Tensor::from_vector(kLabels, {5});
  std::vector<int32_t> v(kLabels.begin(), kLabels.end());
  return Tensor::from_vector(v, {5});
}

TEST(NnCrossEntropy, ForwardMatchesReferenceForEveryReductionAndLabelDtype) {
  Tensor logits = random_tensor({5, 6}, 1, -3, 3);
  for (DType ldt : {DType::i32, DType::i64}) {
    for (int64_t red : {0, 1, 2}) {
      Tensor loss = ops::softmax_cross_entropy(logits, labels_tensor(ldt), red);
      EXPECT_EQ(loss.shape(), red == 2 ? Shape{5} : Shape{});
      expect_close(values_of(loss), ce_ref(values_of(logits), 5, 6, kLabels, red), 1e-5, 1e-5,
                   "reduction " + std::to_string(red));
    }
  }
}

TEST(NnCrossEntropy, LargeLogitsAreStable) {
  Tensor logits =
      Tensor::from_vector(std::vector<float>{1000.f, -1000.f, 500.f, 80.f, 90.f, 100.f}, {2, 3});
  Tensor labels = Tensor::from_vector(std::vector<int64_t>{2, 0}, {2});
  Values got = values_of(ops::softmax_cross_entropy(logits, labels, 2));
  expect_close(got, ce_ref(values_of(logits), 2, 3, {2, 0}, 2), 1e-3, 1e-6, "large logits");
  for (double v : got) EXPECT_TRUE(std::isfinite(v));
}

TEST(NnCrossEntropy, GradientMatchesFiniteDifferences) {
  for (int64_t red : {0, 1, 2}) {
    expect_gradients_match(
        [&](const std::vector<Tensor>& t) { return ops::softmax_cross_entropy(t[0], t[1], red); },
        [&](const std::vector<Values>& t) { return ce_ref(t[0], 5, 6, kLabels, red); },
        {random_tensor({5, 6}, 2, -2, 2), labels_tensor(DType::i64)}, {0});
  }
}

TEST(NnCrossEntropy, BadInputsNameOpAndShapes) {
  expect_error_mentions(
      [] {
        ops::softmax_cross_entropy(Tensor::zeros({4, 3}), Tensor::zeros({4}));
      },
      {"softmax_cross_entropy", "i32 or i64", "f32[4, 3]", "f32[4]"});
  expect_error_mentions(
      [] {
        ops::softmax_cross_entropy(Tensor::zeros({4, 3}), Tensor::zeros({5}, DType::i64));
      },
      {"softmax_cross_entropy", "[4, 3]", "[5]"});
  expect_error_mentions(
      [] { ops::softmax_cross_entropy(Tensor::zeros({4}), Tensor::zeros({4}, DType::i64)); },
      {"softmax_cross_entropy", "[N, C]", "[4]"});
  expect_error_mentions(
      [] {
        ops::softmax_cross_entropy(Tensor::zeros({2, 3}),
                                   Tensor::from_vector(std::vector<int64_t>{1, 3}, {2}));
      },
      {"softmax_cross_entropy", "label 3", "3 classes"});
  expect_error_mentions(
      [] {
        ops::softmax_cross_entropy(Tensor::zeros({2, 3}), Tensor::zeros({2}, DType::i64), 5);
      },
      {"softmax_cross_entropy", "reduction"});
}

}  // namespace
}  // namespace kiln::testing::nn_cross_entropy_test
