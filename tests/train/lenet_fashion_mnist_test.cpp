// The CI training test: LeNet-5 on the real Fashion-MNIST, batch 64, Momentum(lr 0.01, 0.9),
// plain /255 scaling, no schedule, two epochs: at least 84% test accuracy.
#include <gtest/gtest.h>

#include <chrono>

#include "kiln/core/random.h"
#include "kiln/data/config.h"
#include "kiln/data/presets.h"
#include "kiln/models/lenet.h"
#include "kiln/nn/loss.h"
#include "kiln/optim/momentum.h"
#include "kiln/train/model.h"

namespace kiln::train::lenet_fashion_mnist_test {
namespace {

TEST(LeNetFashionMnist, TwoEpochsReach84Percent) {
  set_seed(0);
  data::config::set_seed(0);
  auto train_ds = data::fashion_mnist_pipeline(
      {.usage = "train", .batch_size = 64, .augment = false, .mean = 0, .std = 1});
  auto test_ds = data::fashion_mnist_pipeline({.usage = "test",
                                               .batch_size = 256,
                                               .drop_remainder = false,
                                               .shuffle = false,
                                               .augment = false,
                                               .mean = 0,
                                               .std = 1});
  auto net = std::make_shared<models::LeNet5>();
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), optim::constant_lr(0.01),
                                               optim::MomentumOptions{.momentum = 0.9});
  Model model(net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"), opt);
  auto start = std::chrono::steady_clock::now();
  model.train(2, train_ds);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double accuracy = model.eval(test_ds, {"accuracy"})["accuracy"];
  std::printf("LeNet-5, 2 epochs: test accuracy %.4f, training %.1f s (%.0f img/s)\n", accuracy,
              seconds, 2 * 937 * 64 / seconds);
  EXPECT_GE(accuracy, 0.84);
  EXPECT_EQ(model.global_step(), 2 * 937);
}

}  // namespace
}  // namespace kiln::train::lenet_fashion_mnist_test
