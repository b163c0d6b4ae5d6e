#include "kiln/train/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "kiln/core/error.h"
#include "kiln/core/random.h"
#include "kiln/models/lenet.h"
#include "kiln/models/mlp.h"
#include "kiln/models/resnet.h"
#include "kiln/nn/loss.h"
#include "kiln/optim/momentum.h"
#include "kiln/train/model.h"
#include "train/train_testing.h"

namespace kiln::train::checkpoint_test {
namespace {

namespace fs = std::filesystem;

Tensor images(int64_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> d(0, 1);
  std::vector<float> v(size_t(n * 28 * 28));
  for (float& x : v) x = d(gen);
  return Tensor::from_vector(v, {n, 1, 28, 28});
}

TEST(Checkpoint, SaveLoadGivesIdenticalPredictions) {
  std::string dir = testing::temp_dir("ckpt");
  set_seed(3);
  auto net = std::make_shared<models::ResNet20>();
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), optim::constant_lr(0.05));
  Model model(net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"), opt);
  Tensor x = images(4, 1);
  Tensor y = Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 4}, {4});
  model.train_step(x, y);  // BatchNorm statistics and weights move away from their init
  model.train_step(x, y);
  save_checkpoint(*net, dir + "/r.safetensors", {.optimizer = opt.get(), .epoch = 1});
  Tensor before = model.predict(x);

  set_seed(99);
  auto fresh = std::make_shared<models::ResNet20>();
  Tensor different = Model(fresh, nullptr, nullptr).predict(x);
  EXPECT_NE(different.to_vector<float>(), before.to_vector<float>());
  Checkpoint c = load_checkpoint(dir + "/r.safetensors");
  EXPECT_EQ(c.metadata.at("optimizer"), "Momentum");
  EXPECT_EQ(c.metadata.at("global_step"), "2");
  EXPECT_NE(c.find("optimizer.moments.0"), nullptr);
  EXPECT_NE(c.find("stem.1.moving_mean"), nullptr);
  std::vector<std::string> missing = load_param_into_net(*fresh, c, true);
  EXPECT_TRUE(missing.empty());
  Tensor after = Model(fresh, nullptr, nullptr).predict(x);
  EXPECT_EQ(after.to_vector<float>(), before.to_vector<float>());
  fs::remove_all(dir);
}

TEST(Checkpoint, WrongShapesAndNamesAreNamed) {
  std::string dir = testing::temp_dir("ckpt_bad");
  models::LeNet5 ten(10);
  save_checkpoint(ten, dir + "/l.safetensors");
  Checkpoint c = load_checkpoint(dir + "/l.safetensors");
  models::LeNet5 five(5);
  Tensor w_before = five.parameters_and_names()[0].second.clone();
  try {
    load_param_into_net(five, c);
    FAIL();
  } catch (const ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("'classifier.4.weight'"), std::string::npos) << m;
    EXPECT_NE(m.find("[5, 84]"), std::string::npos) << m;
    EXPECT_NE(m.find("[10, 84]"), std::string::npos) << m;
    EXPECT_NE(m.find("l.safetensors"), std::string::npos) << m;
  }
  // Nothing was copied: a failed load leaves the network as it was.
  EXPECT_EQ(five.parameters_and_names()[0].second.to_vector<float>(), w_before.to_vector<float>());

  models::MLP mlp(784, {16}, 10);
  std::vector<std::string> missing = load_param_into_net(mlp, c);
  EXPECT_EQ(missing, (std::vector<std::string>{"layers.1.weight", "layers.1.bias",
                                               "layers.3.weight", "layers.3.bias"}));
  try {
    load_param_into_net(mlp, c, true);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lacks 'layers.1.weight'"), std::string::npos) << e.what();
  }
  models::LeNet5 other(10);
  EXPECT_TRUE(load_param_into_net(other, c, true).empty());
  optim::Momentum opt(other.trainable_params(), optim::constant_lr(0.1));
  try {
    resume_from_checkpoint(dir + "/l.safetensors", other, opt);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no optimizer state"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_checkpoint(dir + "/none.safetensors"), FileError);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln::train::checkpoint_test
