#include "kiln/nn/loss.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kiln/autograd/tape.h"
#include "kiln/core/error.h"
#include "kiln/ops/functional.h"

namespace kiln::nn::loss_test {
namespace {

// Row 0: logits [1,2,3], label 2: log(e + e² + e³) - 3 = 0.40760596.
// Row 1: logits [1,1,1], label 0: log 3 = 1.09861229.
constexpr float kRow0 = 0.40760596f, kRow1 = 1.09861229f;

Tensor logits() {
  return Tensor::from_vector(std::vector<float>{1, 2, 3, 1, 1, 1}, {2, 3});
}

TEST(SoftmaxCrossEntropyWithLogits, SparseReductions) {
  Tensor labels = Tensor::from_vector(std::vector<int32_t>{2, 0}, {2});
  EXPECT_NEAR(SoftmaxCrossEntropyWithLogits(true, "mean")(logits(), labels).item<float>(),
              (kRow0 + kRow1) / 2, 1e-5);
  EXPECT_NEAR(SoftmaxCrossEntropyWithLogits(true, "sum")(logits(), labels).item<float>(),
              kRow0 + kRow1, 1e-5);
  std::vector<float> none =
      SoftmaxCrossEntropyWithLogits(true, "none")(logits(), labels).to_vector<float>();
  ASSERT_EQ(none.size(), 2u);
  EXPECT_NEAR(none[0], kRow0, 1e-5);
  EXPECT_NEAR(none[1], kRow1, 1e-5);
}

TEST(SoftmaxCrossEntropyWithLogits, DenseLabelsAndGradient) {
  autograd::install_tape();
  Tensor onehot = Tensor::from_vector(std::vector<float>{0, 0, 1, 1, 0, 0}, {2, 3});
  Tensor x = logits();
  x.set_requires_grad(true);
  Tensor loss = SoftmaxCrossEntropyWithLogits(false, "mean")(x, onehot);
  EXPECT_NEAR(loss.item<float>(), (kRow0 + kRow1) / 2, 1e-5);
  // d/dlogits = (softmax - onehot) / N
  std::vector<float> g = autograd::grad(loss, {x})[0].to_vector<float>();
  double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  std::vector<double> expect{std::exp(1.0) / z / 2,
                             std::exp(2.0) / z / 2,
                             (std::exp(3.0) / z - 1) / 2,
                             (1.0 / 3 - 1) / 2,
                             1.0 / 6,
                             1.0 / 6};
  for (size_t i = 0; i < 6; ++i) EXPECT_NEAR(g[i], expect[i], 1e-5) << i;
  // MindSpore's default: dense labels, no reduction.
  EXPECT_EQ(SoftmaxCrossEntropyWithLogits()(logits(), onehot).shape(), (Shape{2}));
}

TEST(SoftmaxCrossEntropyWithLogits, BadInputsAreNamed) {
  SoftmaxCrossEntropyWithLogits sparse(true, "mean");
  try {
    sparse(logits(), Tensor::from_vector(std::vector<float>{0, 1}, {2}));
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("sparse labels f32[2]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(SoftmaxCrossEntropyWithLogits(false)(logits(), Tensor::ones({3, 2})), ShapeError);
  EXPECT_THROW(SoftmaxCrossEntropyWithLogits(true, "average"), Error);
}

TEST(SoftmaxCrossEntropyWithLogits, ClassIdsWithDenseLossNameTheFix) {
  try {
    SoftmaxCrossEntropyWithLogits()(logits(), Tensor::from_vector(std::vector<int32_t>{2, 0}, {2}));
    FAIL() << "class ids accepted by a dense loss";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("sparse=true"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("i32[2]"), std::string::npos) << e.what();
  }
}

// Sequence logits [B, T, C] with labels [B, T] (a language model's next tokens): every position
// is one sample, as if flattened to [B·T, C].
TEST(SoftmaxCrossEntropyWithLogits, SparseSequenceLogitsTakeEveryPositionAsASample) {
  Tensor seq =
      Tensor::from_vector(std::vector<float>{1, 2, 3, 1, 1, 1, 1, 1, 1, 1, 2, 3}, {2, 2, 3});
  Tensor labels = Tensor::from_vector(std::vector<int32_t>{2, 0, 0, 2}, {2, 2});
  EXPECT_NEAR(SoftmaxCrossEntropyWithLogits(true, "mean")(seq, labels).item<float>(),
              (kRow0 + kRow1 + kRow1 + kRow0) / 4, 1e-5);
  EXPECT_NEAR(SoftmaxCrossEntropyWithLogits(true, "sum")(seq, labels).item<float>(),
              2 * (kRow0 + kRow1), 1e-5);
  Tensor none = SoftmaxCrossEntropyWithLogits(true, "none")(seq, labels);
  EXPECT_EQ(none.shape(), (Shape{2, 2}));
  std::vector<float> v = none.to_vector<float>();
  EXPECT_NEAR(v[0], kRow0, 1e-5);
  EXPECT_NEAR(v[1], kRow1, 1e-5);
  EXPECT_NEAR(v[3], kRow0, 1e-5);
  try {
    SoftmaxCrossEntropyWithLogits(true, "mean")(seq, Tensor::zeros({2, 3}, DType::i32));
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("leading shape [2, 2]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("i32[2, 3]"), std::string::npos) << e.what();
  }
}

TEST(MSELoss, ReductionsAndGradient) {
  autograd::install_tape();
  Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 0, 4}, {2, 2});
  Tensor b = Tensor::from_vector(std::vector<float>{3, 5, 0, 3}, {2, 2});
  EXPECT_NEAR(MSELoss()(a, b).item<float>(), (4 + 9 + 0 + 1) / 4.0, 1e-6);
  EXPECT_NEAR(MSELoss("sum")(a, b).item<float>(), 14.0, 1e-6);
  EXPECT_EQ(MSELoss("none")(a, b).to_vector<float>(), (std::vector<float>{4, 9, 0, 1}));
  a.set_requires_grad(true);
  auto g = autograd::grad(MSELoss()(a, b), {a})[0].to_vector<float>();
  EXPECT_EQ(g, (std::vector<float>{-1, -1.5f, 0, 0.5f}));  // 2 (a - b) / 4
  EXPECT_NEAR(L1Loss()(a, b).item<float>(), (2 + 3 + 0 + 1) / 4.0, 1e-6);
  EXPECT_THROW(MSELoss()(a, Tensor::ones({4})), ShapeError);
}

}  // namespace
}  // namespace kiln::nn::loss_test
