// The first program to read: LeNet-5 on Fashion-MNIST with the MindSpore-style API.
//
//   build/examples/train_lenet [graph]
//
// Data comes from Debian's dataset-fashion-mnist. With "graph" the whole training step is traced
// once and compiled (GRAPH_MODE with graph-kernel fusion); the network code is the same.
#include <cstdio>
#include <string>

#include "kiln/core/context.h"
#include "kiln/core/error.h"
#include "kiln/data/presets.h"
#include "kiln/models/lenet.h"
#include "kiln/nn/loss.h"
#include "kiln/optim/momentum.h"
#include "kiln/train/callbacks.h"
#include "kiln/train/model.h"

int main(int argc, char** argv) {
  using namespace kiln;
  try {
    if (argc > 1 && std::string(argv[1]) == "graph") {
      set_context({.mode = GRAPH_MODE, .enable_graph_kernel = true});
    }
    // Plain /255 scaling, no augmentation.
    auto train_ds = data::fashion_mnist_pipeline(
        {.usage = "train", .batch_size = 64, .augment = false, .mean = 0, .std = 1});
    auto test_ds = data::fashion_mnist_pipeline({.usage = "test",
                                                    .batch_size = 256,
                                                    .shuffle = false,
                                                    .augment = false,
                                                    .mean = 0,
                                                    .std = 1});

    auto net = std::make_shared<models::LeNet5>();
    auto loss = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean");
    auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), optim::constant_lr(0.01),
                                                 optim::MomentumOptions{.momentum = 0.9});
    train::Model model(net, loss, opt, {.metrics = {"accuracy"}});
    model.train(
        2, train_ds,
        {std::make_shared<train::LossMonitor>(200), std::make_shared<train::TimeMonitor>()});
    std::printf("test accuracy: %.4f\n", model.eval(test_ds)["accuracy"]);
  } catch (const Error& e) {
    std::fprintf(stderr, "train_lenet: %s\n", e.what());
    return 1;
  }
  return 0;
}
