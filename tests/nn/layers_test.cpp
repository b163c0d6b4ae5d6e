// Layers against hand-computed values (small inputs worked out by hand, or a plain loop).
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/autograd/tape.h"
#include "kiln/core/error.h"
#include "kiln/core/random.h"
#include "kiln/nn/nn.h"
#include "kiln/ops/functional.h"

namespace kiln::nn::layers_test {
namespace {

Tensor vec(std::vector<float> v, Shape s) {
  return Tensor::from_vector(v, s);
}

void expect_values(const Tensor& t, const std::vector<float>& expected, float tol = 1e-5f) {
  std::vector<float> got = t.to_vector<float>();
  ASSERT_EQ(got.size(), expected.size()) << describe(t);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], tol) << "at " << i;
}

TEST(Dense, ForwardAndGradientByHand) {
  autograd::install_tape();
  Dense d(3, 2, {.weight_init = Constant(0), .bias_init = Constant(0)});
  d.weight().copy_from(vec({1, 2, 3, -1, 0, 1}, {2, 3}));
  d.bias().copy_from(vec({0.5f, -0.5f}, {2}));
  Tensor x = vec({1, 1, 1, 2, 0, -1}, {2, 3});
  Tensor y = d(x);
  // [1,1,1]: 1+2+3+0.5 = 6.5, -1+0+1-0.5 = -0.5; [2,0,-1]: 2-3+0.5 = -0.5, -2-1-0.5 = -3.5
  expect_values(y, {6.5f, -0.5f, -0.5f, -3.5f});
  auto grads = autograd::grad(ops::sum(y), d.trainable_params());
  expect_values(grads[0], {3, 1, 0, 3, 1, 0});  // column sums of x, per output row
  expect_values(grads[1], {2, 2});
  auto names = d.parameters_and_names();
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0].first, "weight");
  EXPECT_EQ(names[1].first, "bias");
  EXPECT_THROW(d(vec({1, 2}, {1, 2})), ShapeError);
  EXPECT_EQ(Dense(3, 2, {.has_bias = false}).trainable_params().size(), 1u);
}

// Plain NCHW convolution with explicit (possibly asymmetric) zero padding.
std::vector<float> reference_conv(const std::vector<float>& x, int n, int c, int h, int w,
                                  const std::vector<float>& k, int o, int kh, int kw, int stride,
                                  int pad_top, int pad_left, int oh, int ow) {
  std::vector<float> y(size_t(n * o * oh * ow), 0.f);
  for (int b = 0; b < n; ++b)
    for (int oc = 0; oc < o; ++oc)
      for (int i = 0; i < oh; ++i)
        for (int j = 0; j < ow; ++j) {
          double s = 0;
          for (int ic = 0; ic < c; ++ic)
            for (int u = 0; u < kh; ++u)
              for (int v = 0; v < kw; ++v) {
                int yy = i * stride + u - pad_top, xx = j * stride + v - pad_left;
                if (yy < 0 || yy >= h || xx < 0 || xx >= w) continue;
                s += x[size_t(((b * c + ic) * h + yy) * w + xx)] *
                     k[size_t(((oc * c + ic) * kh + u) * kw + v)];
              }
          y[size_t(((b * o + oc) * oh + i) * ow + j)] = float(s);
        }
  return y;
}

TEST(Conv2d, SamePaddingIsAsymmetricLikeMindSpore) {
  // 4x4 input, 3x3 kernel, stride 2, "same": output 2x2, total padding 1 -> 0 before, 1 after.
  EXPECT_EQ(same_padding(4, 3, 2, 1), (std::array<int64_t, 2>{0, 1}));
  EXPECT_EQ(same_padding(5, 3, 1, 1), (std::array<int64_t, 2>{1, 1}));
  EXPECT_EQ(same_padding(28, 5, 1, 1), (std::array<int64_t, 2>{2, 2}));
  set_seed(7);
  Conv2d conv(2, 3, 3, {.stride = {2, 2}, .pad_mode = "same"});
  std::vector<float> x(32);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 7) - 3.f;
  Tensor y = conv(vec(x, {1, 2, 4, 4}));
  ASSERT_EQ(y.shape(), (Shape{1, 3, 2, 2}));
  expect_values(
      y, reference_conv(x, 1, 2, 4, 4, conv.weight().to_vector<float>(), 3, 3, 3, 2, 0, 0, 2, 2),
      1e-4f);
}

TEST(Conv2d, ValidPadAndBias) {
  set_seed(8);
  Conv2d valid(1, 2, 3, {.pad_mode = "valid", .has_bias = true});
  std::vector<float> x(25);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) * 0.1f;
  Tensor y = valid(vec(x, {1, 1, 5, 5}));
  ASSERT_EQ(y.shape(), (Shape{1, 2, 3, 3}));
  std::vector<float> ref =
      reference_conv(x, 1, 1, 5, 5, valid.weight().to_vector<float>(), 2, 3, 3, 1, 0, 0, 3, 3);
  std::vector<float> b = valid.bias().to_vector<float>();
  for (size_t i = 0; i < ref.size(); ++i) ref[i] += b[i / 9];
  expect_values(y, ref, 1e-4f);

  Conv2d pad(1, 1, 3, {.pad_mode = "pad", .padding = {1, 1}, .weight_init = One()});
  // All-ones kernel with zero padding: each output is the sum of its 3x3 neighbourhood.
  Tensor ones = pad(Tensor::ones({1, 1, 3, 3}));
  expect_values(ones, {4, 6, 4, 6, 9, 6, 4, 6, 4});
  EXPECT_THROW(Conv2d(1, 1, 3, {.pad_mode = "valid", .padding = {1, 1}}), Error);
  EXPECT_THROW(Conv2d(1, 1, 3, {.pad_mode = "reflect"}), Error);
  EXPECT_THROW(pad(Tensor::ones({1, 2, 3, 3})), ShapeError);
}

TEST(BatchNorm2d, TrainingUsesBatchStatsAndUpdatesMovingStats) {
  BatchNorm2d bn(2);
  // Channel 0 holds {1,2,3,4} (mean 2.5, biased var 1.25), channel 1 holds {0,0,0,0}.
  Tensor x = vec({1, 2, 0, 0, 3, 4, 0, 0}, {2, 2, 1, 2});
  Tensor y = bn(x);
  float s = 1.f / std::sqrt(1.25f + 1e-5f);
  expect_values(y, {-1.5f * s, -0.5f * s, 0, 0, 0.5f * s, 1.5f * s, 0, 0}, 1e-4f);
  // moving = 0.9 * moving + 0.1 * batch; the variance is the unbiased one (5/3).
  expect_values(bn.moving_mean(), {0.25f, 0.f});
  expect_values(bn.moving_variance(), {0.9f + 0.1f * 5.f / 3.f, 0.9f});
  bn.set_train(false);
  Tensor z = bn(x);  // eval: (x - 0.25) / sqrt(var + eps)
  float v0 = 0.9f + 0.1f * 5.f / 3.f;
  expect_values(z,
                {(1 - 0.25f) / std::sqrt(v0 + 1e-5f), (2 - 0.25f) / std::sqrt(v0 + 1e-5f), 0, 0,
                 (3 - 0.25f) / std::sqrt(v0 + 1e-5f), (4 - 0.25f) / std::sqrt(v0 + 1e-5f), 0, 0},
                1e-4f);
  auto params = bn.parameters_and_names();
  auto buffers = bn.buffers_and_names();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].first, "gamma");
  ASSERT_EQ(buffers.size(), 2u);
  EXPECT_EQ(buffers[0].first, "moving_mean");
  EXPECT_EQ(buffers[1].first, "moving_variance");
  EXPECT_FALSE(buffers[0].second.requires_grad());
}

TEST(LayerNorm, NormalizesLastDims) {
  LayerNorm ln({4}, {.eps = 1e-5});
  Tensor y = ln(vec({1, 2, 3, 4, 2, 2, 2, 2}, {2, 4}));
  float s = 1.f / std::sqrt(1.25f + 1e-5f);
  expect_values(y, {-1.5f * s, -0.5f * s, 0.5f * s, 1.5f * s, 0, 0, 0, 0}, 1e-4f);
  EXPECT_THROW(ln(Tensor::ones({2, 3})), ShapeError);
}

TEST(Activations, ReluGelu) {
  Tensor x = vec({-1, 0, 1, 2}, {4});
  expect_values(ReLU()(x), {0, 0, 1, 2});
  // x * Phi(x): Phi(1) = 0.8413447, Phi(-1) = 0.1586553, Phi(2) = 0.9772499
  expect_values(GELU()(x), {-0.1586553f, 0, 0.8413447f, 1.9544997f}, 1e-5f);
}

TEST(Pooling, MaxAndAverage) {
  std::vector<float> v(16);
  for (size_t i = 0; i < 16; ++i) v[i] = float(i);
  Tensor x = vec(v, {1, 1, 4, 4});
  expect_values(MaxPool2d(2)(x), {5, 7, 13, 15});
  expect_values(AvgPool2d(2)(x), {2.5f, 4.5f, 10.5f, 12.5f});
  expect_values(MaxPool2d(3, {.stride = {1, 1}})(x), {10, 11, 14, 15});
  expect_values(MaxPool2d(2, {.stride = {2, 2}, .pad_mode = "valid"})(
                    vec({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3})),
                {5});
  EXPECT_THROW(MaxPool2d(0), Error);
}

TEST(Basic, FlattenAndDropout) {
  Tensor x = Tensor::ones({2, 3, 4, 5});
  EXPECT_EQ(Flatten()(x).shape(), (Shape{2, 60}));
  Dropout d(0.25);
  d.set_train(false);
  Tensor same = d(x);
  EXPECT_EQ(same.to_vector<float>(), x.to_vector<float>());
  d.set_train(true);
  Tensor big = Tensor::ones({10000});
  std::vector<float> y = d(big).to_vector<float>();
  int zeros = 0;
  for (float v : y) {
    ASSERT_TRUE(v == 0.f || std::abs(v - 1.f / 0.75f) < 1e-6f) << v;
    zeros += v == 0.f;
  }
  EXPECT_NEAR(zeros / 10000.0, 0.25, 0.03);
  EXPECT_DOUBLE_EQ(Dropout::with_keep_prob(0.9)->p(), 1.0 - 0.9);
  EXPECT_THROW(Dropout(1.0), Error);
  EXPECT_THROW(Dropout::with_keep_prob(0.0), Error);
}

TEST(Embedding, LooksUpRowsAndAccumulatesGradients) {
  autograd::install_tape();
  Embedding e(4, 2, {.embedding_table_init = Constant(0)});
  e.embedding_table().copy_from(vec({0, 1, 10, 11, 20, 21, 30, 31}, {4, 2}));
  Tensor idx = Tensor::from_vector(std::vector<int32_t>{3, 0, 3}, {3});
  Tensor y = e(idx);
  ASSERT_EQ(y.shape(), (Shape{3, 2}));
  expect_values(y, {30, 31, 0, 1, 30, 31});
  auto g = autograd::grad(ops::sum(y), e.trainable_params());
  expect_values(g[0], {1, 1, 0, 0, 0, 0, 2, 2});
  EXPECT_THROW(e(Tensor::ones({2})), ShapeError);
}

TEST(SequentialCell, NamesAndTrainMode) {
  auto seq = std::make_shared<SequentialCell>(std::vector<std::shared_ptr<Cell>>{
      std::make_shared<Conv2d>(1, 2, 3), std::make_shared<BatchNorm2d>(2), std::make_shared<ReLU>(),
      std::make_shared<Flatten>(), std::make_shared<Dense>(32, 3)});
  std::vector<std::string> names;
  for (auto& [n, t] : seq->state_and_names()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "1.gamma", "1.beta", "4.weight", "4.bias",
                                             "1.moving_mean", "1.moving_variance"}));
  EXPECT_EQ(seq->trainable_params().size(), 5u);
  seq->set_train(false);
  EXPECT_FALSE((*seq)[1]->training());
  Tensor y = (*seq)(Tensor::ones({2, 1, 4, 4}));
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_THROW(seq->append(nullptr), Error);
}

}  // namespace
}  // namespace kiln::nn::layers_test
