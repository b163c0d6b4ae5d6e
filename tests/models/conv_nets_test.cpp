// The zoo's larger convolution nets: ResNet-56 (CIFAR), ResNet-18 and ResNet-50 (ImageNet, with
// the small-image stem below 64 pixels) and MobileNetV2. Trainable parameters against each
// architecture's formula and the published totals, output shapes at two input sizes (the
// configuration's classes, channels and size), and a few steps lowering the loss on a fixed
// batch, all at small batches and images (CI time). Graph mode against eager:
// tests/train/compiled_step_test.cpp.
#include <gtest/gtest.h>

#include <string>

#include "kiln/autograd/tape.h"
#include "kiln/core/error.h"
#include "kiln/core/random.h"
#include "kiln/models/imagenet_resnet.h"
#include "kiln/models/resnet.h"
#include "kiln/models/zoo.h"
#include "kiln/nn/loss.h"
#include "kiln/ops/dispatch_chain.h"
#include "kiln/ops/functional.h"

namespace kiln::models::conv_nets_test {
namespace {

int64_t trainable(const nn::Cell& net) {
  int64_t n = 0;
  for (const Tensor& t : net.trainable_params()) n += t.numel();
  return n;
}

// The architectures' parameter formulas: convolutions without bias, BN's gamma and beta, a
// dense classifier with bias.
int64_t conv(int64_t k, int64_t in, int64_t out, int64_t groups = 1) {
  return k * k * (in / groups) * out;
}
int64_t bn(int64_t c) {
  return 2 * c;
}
int64_t dense(int64_t in, int64_t out) {
  return in * out + out;
}
int64_t basic_block(int64_t in, int64_t out, int64_t stride) {
  const int64_t shortcut = stride != 1 || in != out ? conv(1, in, out) + bn(out) : 0;
  return conv(3, in, out) + bn(out) + conv(3, out, out) + bn(out) + shortcut;
}

int64_t cifar_resnet(int64_t depth, int64_t in, int64_t classes) {
  int64_t n = conv(3, in, 16) + bn(16), channels = 16;
  for (int64_t w : {16, 32, 64}) {
    for (int64_t b = 0; b < (depth - 2) / 6; ++b) {
      n += basic_block(channels, w, b == 0 && w != 16 ? 2 : 1);
      channels = w;
    }
  }
  return n + dense(64, classes);
}

int64_t imagenet_resnet(int64_t depth, int64_t in, int64_t classes, int64_t stem_kernel) {
  const bool bottleneck = depth == 50;
  const std::vector<int64_t> blocks =
      bottleneck ? std::vector<int64_t>{3, 4, 6, 3} : std::vector<int64_t>{2, 2, 2, 2};
  int64_t n = conv(stem_kernel, in, 64) + bn(64), channels = 64;
  const int64_t widths[] = {64, 128, 256, 512};
  for (size_t s = 0; s < 4; ++s) {
    for (int64_t b = 0; b < blocks[s]; ++b) {
      const int64_t stride = b == 0 && s > 0 ? 2 : 1, w = widths[s];
      if (!bottleneck) {
        n += basic_block(channels, w, stride);
        channels = w;
        continue;
      }
      const int64_t out = 4 * w;
      n += conv(1, channels, w) + bn(w) + conv(3, w, w) + bn(w) + conv(1, w, out) + bn(out);
      if (stride != 1 || channels != out) n += conv(1, channels, out) + bn(out);
      channels = out;
    }
  }
  return n + dense(channels, classes);
}

int64_t mobilenet_v2(int64_t in, int64_t classes) {
  int64_t n = conv(3, in, 32) + bn(32), channels = 32;
  const int64_t stages[][3] = {{1, 16, 1}, {6, 24, 2},  {6, 32, 3}, {6, 64, 4},
                               {6, 96, 3}, {6, 160, 3}, {6, 320, 1}};
  for (const auto& [t, c, blocks] : stages) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t hidden = channels * t;
      if (t != 1) n += conv(1, channels, hidden) + bn(hidden);
      n += conv(3, hidden, hidden, hidden) + bn(hidden) + conv(1, hidden, c) + bn(c);
      channels = c;
    }
  }
  return n + conv(1, 320, 1280) + bn(1280) + dense(1280, classes);
}

Tensor images(int64_t n, int64_t channels, int64_t size, uint64_t seed) {
  Generator gen(seed);
  Tensor x = Tensor::empty({n, channels, size, size});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = gen.uniform(-1.f, 1.f);
  return x;
}

// Each model at two configurations (building ResNet-50 costs more than its forward, so each
// network built is checked for both): its parameters against the formula, and its output for one
// image of the configured size.
TEST(ConvNets, ParametersAndOutputShapesFollowTheConfiguration) {
  // Fashion-MNIST's 10 classes of 28x28 grey images: the ImageNet ResNets take the 3x3 stem,
  // MobileNetV2 its stride-1 start (same parameters).
  const ModelConfig mnist{
      .num_classes = 10, .in_channels = 1, .image_height = 28, .image_width = 28};
  // ImageNet's 1000 classes of 224x224 RGB: torchvision's published totals.
  const ModelConfig imagenet{
      .num_classes = 1000, .in_channels = 3, .image_height = 224, .image_width = 224};
  // CIFAR-100 for the CIFAR ResNet (at 224 its unstrided stem would cost 12 GFLOP).
  const ModelConfig cifar100{
      .num_classes = 100, .in_channels = 3, .image_height = 32, .image_width = 32};
  struct Check {
    const char* name;
    ModelConfig config;
    int64_t formula, published;  // published: 0 when not compared
  };
  const Check checks[] = {
      {"resnet56", mnist, cifar_resnet(56, 1, 10), 0},
      {"resnet56", cifar100, cifar_resnet(56, 3, 100), 0},
      {"resnet18", mnist, imagenet_resnet(18, 1, 10, 3), 0},
      {"resnet18", imagenet, imagenet_resnet(18, 3, 1000, 7), 11689512},
      {"resnet50", mnist, imagenet_resnet(50, 1, 10, 3), 0},
      {"resnet50", imagenet, imagenet_resnet(50, 3, 1000, 7), 25557032},
      {"mobilenetv2", mnist, mobilenet_v2(1, 10), 0},
      {"mobilenetv2", imagenet, mobilenet_v2(3, 1000), 3504872},
  };
  ops::NoGradGuard no_grad;
  for (const Check& c : checks) {
    SCOPED_TRACE(std::string(c.name) + " at " + std::to_string(c.config.image_height) + "x" +
                 std::to_string(c.config.image_width));
    set_seed(3);
    auto net = create(c.name, c.config);
    EXPECT_EQ(trainable(*net), c.formula);
    if (c.published) EXPECT_EQ(c.formula, c.published);
    net->set_train(false);
    const Tensor y = net->construct(images(1, c.config.in_channels, c.config.image_height, 4));
    EXPECT_EQ(y.shape(), (Shape{1, c.config.num_classes}));
    for (float v : y.to_vector<float>()) ASSERT_TRUE(std::isfinite(v));
  }
  // The CIFAR formula gives ResNet-20's count (tests/models/zoo_test.cpp) too; ResNet-56 has 27
  // basic blocks, 2 shortcut BNs and the stem's: 57 BatchNorms, two running statistics each.
  EXPECT_EQ(cifar_resnet(20, 1, 10), 272186);
  EXPECT_EQ(create("resnet56", mnist)->buffers_and_names().size(), 2u * (1 + 2 * 27 + 2));
}

// Momentum SGD memorizing four 16x16 RGB images, a few steps each (the ImageNet ResNets, whose
// steps cost most, learn them in fewer).
TEST(ConvNets, AFewStepsLowerTheLoss) {
  autograd::install_tape();
  const ModelConfig c{.num_classes = 4, .in_channels = 3, .image_height = 16, .image_width = 16};
  const Tensor x = images(4, 3, 16, 5);
  const Tensor y = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 3}, {4});
  const std::pair<const char*, int> models[] = {
      {"resnet56", 6}, {"resnet18", 3}, {"resnet50", 3}, {"mobilenetv2", 6}};
  for (const auto& [name, steps] : models) {
    set_seed(6);
    auto net = create(name, c);
    nn::SoftmaxCrossEntropyWithLogits loss(true, "mean");
    std::vector<Tensor> params = net->trainable_params();
    std::vector<Tensor> velocity;
    for (const Tensor& p : params) velocity.push_back(Tensor::zeros(p.shape()));
    const Tensor lr = Tensor::scalar(0.01);
    float first = 0, last = 0;
    for (int step = 0; step < steps; ++step) {
      Tensor l = loss(net->construct(x), y);
      std::vector<Tensor> grads = autograd::grad(l, params);
      for (size_t i = 0; i < params.size(); ++i) {
        ops::momentum_update(params[i], grads[i], velocity[i], lr, 0.9, 0.0, false);
      }
      (step == 0 ? first : last) = l.item<float>();
    }
    EXPECT_LT(last, 0.8f * first) << name << ": " << first << " -> " << last;
  }
}

TEST(ConvNets, BadDepthsAreClearErrors) {
  try {
    CifarResNet(21, 10, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("depth 21 is not 6n + 2"), std::string::npos) << e.what();
  }
  try {
    ImageNetResNet(34, 10, 3, 224, 224);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("depth 34 is not one of 18, 50"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiln::models::conv_nets_test
