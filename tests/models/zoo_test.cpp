#include "kiln/models/zoo.h"

#include <gtest/gtest.h>

#include <random>

#include "kiln/autograd/tape.h"
#include "kiln/core/error.h"
#include "kiln/core/random.h"
#include "kiln/nn/loss.h"
#include "kiln/ops/functional.h"

namespace kiln::models::zoo_test {
namespace {

int64_t count(const std::vector<nn::NamedTensor>& ts) {
  int64_t n = 0;
  for (auto& [name, t] : ts) n += t.numel();
  return n;
}

// Noise plus a bright 7x7 block whose position encodes the class (label = row % 10).
Tensor batch(int64_t n) {
  std::mt19937 gen(static_cast<uint32_t>(n));
  std::uniform_real_distribution<float> d(0.f, 0.3f);
  std::vector<float> v(size_t(n * 784));
  for (float& x : v) x = d(gen);
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = i % 10, top = k / 4 * 7, left = k % 4 * 7;
    for (int64_t r = top; r < top + 7; ++r)
      for (int64_t c = left; c < left + 7; ++c) v[size_t(i * 784 + r * 28 + c)] = 1.f;
  }
  for (float& x : v) x = (x - 0.2f) / 0.3f;  // roughly standardized, as training inputs are
  return Tensor::from_vector(v, {n, 1, 28, 28});
}

TEST(Zoo, ParameterCountsMatchTheArchitectures) {
  // LeNet-5: 6·25+6, 16·6·25+16, 400·120+120, 120·84+84, 84·10+10.
  EXPECT_EQ(count(create("lenet")->parameters_and_names()), 61706);
  // ResNet-20, one input channel, option-B (1x1 conv + BN) shortcuts in stages 2 and 3.
  auto resnet = create("resnet20");
  EXPECT_EQ(count(resnet->parameters_and_names()), 272186);
  EXPECT_EQ(resnet->buffers_and_names().size(), 2u * 21);  // 21 BatchNorms
  // MLP 784-1024-1024-10.
  EXPECT_EQ(count(create("mlp")->parameters_and_names()), 1863690);
}

TEST(Zoo, UnknownNamesAreListed) {
  try {
    create("vgg16");
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("'vgg16'"), std::string::npos);
    EXPECT_NE(m.find("lenet, resnet20, resnet56, resnet18, resnet50, mobilenetv2, mlp or gpt"),
              std::string::npos)
        << m;
  }
  EXPECT_EQ(model_names().size(), 8u);
}

TEST(Zoo, EveryModelLearnsAFixedBatch) {
  autograd::install_tape();
  for (const std::string& name : model_names()) {
    if (is_language_model(name)) continue;  // token ids, not images: tests/models/gpt_test.cpp
    // Forty steps of batch 16 would take the larger conv nets many seconds each: they learn a
    // smaller batch in tests/models/conv_nets_test.cpp.
    if (name != "lenet" && name != "resnet20" && name != "mlp") continue;
    set_seed(5);
    auto net = create(name);
    Tensor x = batch(16);
    Tensor y = Tensor::from_vector(
        std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5}, {16});
    EXPECT_EQ((*net)(x).shape(), (Shape{16, 10})) << name;
    nn::SoftmaxCrossEntropyWithLogits loss(true, "mean");
    std::vector<Tensor> params = net->trainable_params();
    std::vector<Tensor> velocity;
    for (const Tensor& p : params) velocity.push_back(Tensor::zeros(p.shape()));
    Tensor lr = Tensor::scalar(0.05);
    float first = 0, best = 1e30f;
    for (int step = 0; step < 40; ++step) {
      Tensor l = loss((*net)(x), y);
      std::vector<Tensor> grads = autograd::grad(l, params);
      for (size_t i = 0; i < params.size(); ++i) {
        ops::momentum_update(params[i], grads[i], velocity[i], lr, 0.9, 0.0, false);
      }
      if (step == 0) first = l.item<float>();
      best = std::min(best, l.item<float>());
    }
    EXPECT_LT(best, 0.5f * first) << name << ": " << first << " -> " << best;
  }
}

TEST(Zoo, ResNetEvalModeUsesMovingStatistics) {
  set_seed(6);
  auto net = create("resnet20");
  Tensor x = batch(4);
  Tensor train_out = (*net)(x);
  net->set_train(false);
  Tensor eval_out = (*net)(x);
  EXPECT_NE(train_out.to_vector<float>(), eval_out.to_vector<float>());
  EXPECT_EQ((*net)(batch(1)).shape(), (Shape{1, 10}));  // batch of one works in eval mode
}

}  // namespace
}  // namespace kiln::models::zoo_test
