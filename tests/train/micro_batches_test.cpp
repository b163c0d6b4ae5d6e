// Graph mode's micro-batches (CompileOptions::micro_batches): the batch traced as equal slices,
// each one's forward and backward before the next, and one update from the summed gradients.
// The step must train like eager on the whole batch, with less memory in its plan.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <tuple>

#include "kiln/autograd/tape.h"
#include "kiln/core/context.h"
#include "kiln/core/error.h"
#include "kiln/core/random.h"
#include "kiln/models/zoo.h"
#include "kiln/nn/loss.h"
#include "kiln/ops/functional.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/momentum.h"
#include "kiln/train/compiled_step.h"
#include "kiln/train/model.h"

#include "train_testing.h"

namespace kiln::train::micro_batches_test {
namespace {

using testing::batch_images;
using testing::batch_labels;

struct Trainer {
  std::shared_ptr<nn::Cell> net;
  nn::SoftmaxCrossEntropyWithLogits loss{true, "mean"};
  std::unique_ptr<optim::Optimizer> opt;
  explicit Trainer(const std::string& model, bool adam = false, double weight_decay = 0.01) {
    set_seed(42);
    net = models::create(model);
    if (adam) {
      opt = std::make_unique<optim::Adam>(net->trainable_params(), optim::constant_lr(1e-3));
    } else {
      opt = std::make_unique<optim::Momentum>(
          net->trainable_params(), optim::constant_lr(0.05),
          optim::MomentumOptions{.momentum = 0.9, .weight_decay = weight_decay});
    }
  }
  float eager_step(const Tensor& x, const Tensor& y) {
    autograd::install_tape();
    opt->prepare_step();
    Tensor l = loss(net->construct(x), y);
    opt->apply(autograd::grad(l, net->trainable_params()));
    opt->advance();
    return l.item<float>();
  }
};

// Trains 3 steps of `batch` in eager and in graph mode with `micro_batches`, and checks
// that losses and parameters agree. Returns the graph step's report.
graph::CompileReport expect_matches_eager(const std::string& model, int micro_batches, bool fusion,
                                          int64_t batch, bool adam = false) {
  Trainer eager(model, adam), graph(model, adam);
  CompiledTrainStep step(*graph.net, graph.loss, *graph.opt,
                         {.fusion = fusion, .micro_batches = micro_batches});
  step.set_verbose(false);
  for (int s = 0; s < 3; ++s) {
    Tensor x = batch_images(batch, 100 + uint64_t(s)), y = batch_labels(batch, 200 + uint64_t(s));
    const float le = eager.eager_step(x, y);
    // The slices' means, averaged, and their gradients, summed: other roundings, same values.
    EXPECT_NEAR(step.run(x, y).item<float>(), le, 1e-5 * std::max(1.f, std::abs(le)))
        << "step " << s;
  }
  auto values = [](nn::Cell& net) {
    std::vector<std::vector<float>> v;
    for (auto& [name, t] : net.state_and_names()) v.push_back(t.to_vector<float>());
    return v;
  };
  EXPECT_LT(testing::worst_difference(values(*eager.net), values(*graph.net)), 1e-3) << model;
  return step.report();
}

// mlp(a) - mlp(b): a network of two inputs, each sliced alike into the micro-batches.
class MlpDifference : public nn::Cell {
 public:
  MlpDifference() : Cell("MlpDifference"), mlp_(register_cell("mlp", models::create("mlp"))) {}
  nn::Tensors construct_multi(const nn::Tensors& inputs) override {
    return {ops::sub((*mlp_)(inputs.at(0)), (*mlp_)(inputs.at(1)))};
  }

 private:
  std::shared_ptr<nn::Cell> mlp_;
};

TEST(MicroBatches, EveryInputOfANetworkOfTwoIsSliced) {
  std::vector<std::vector<float>> losses(2);
  for (int micro_batches : {1, 4}) {
    set_seed(5);
    MlpDifference net;
    nn::SoftmaxCrossEntropyWithLogits loss(true, "mean");
    optim::Momentum opt(net.trainable_params(), optim::constant_lr(0.05),
                        optim::MomentumOptions{.momentum = 0.9});
    CompiledTrainStep step(net, loss, opt, {.fusion = true, .micro_batches = micro_batches});
    step.set_verbose(false);
    for (int s = 0; s < 3; ++s) {
      const nn::Tensors inputs{batch_images(32, 10 + uint64_t(s)),
                               batch_images(32, 20 + uint64_t(s))};
      losses[micro_batches == 1 ? 0 : 1].push_back(
          step.run(inputs, batch_labels(32, 30 + uint64_t(s))).item<float>());
    }
  }
  for (size_t s = 0; s < losses[0].size(); ++s) {
    EXPECT_NEAR(losses[1][s], losses[0][s], 1e-5 * std::max(1.f, std::abs(losses[0][s])))
        << "step " << s;
  }
}

TEST(MicroBatches, MlpTrainsLikeEagerOnTheWholeBatch) {
  for (bool fusion : {false, true}) {
    SCOPED_TRACE(fusion ? "fused" : "unfused");
    graph::CompileReport r = expect_matches_eager("mlp", 2, fusion, 16);
    // With fusion each weight's two products accumulate into its velocity (3 weights).
    if (fusion) {
      EXPECT_EQ(r.fused("matmul_momentum"), 6) << r.str();
    }
  }
}

// LeNet's fused convolution kernels (conv + relu + pool, the pooled conv's gradient) on slices,
// which are views into the batch at an offset.
TEST(MicroBatches, LeNetTrainsLikeEagerOnTheWholeBatch) {
  for (bool fusion : {false, true}) {
    SCOPED_TRACE(fusion ? "fused" : "unfused");
    expect_matches_eager("lenet", 2, fusion, 64);
  }
}

TEST(MicroBatches, FourSlicesWithAdamTrainLikeEager) {
  expect_matches_eager("mlp", 4, true, 16, /*adam=*/true);
}

// What micro-batches are for: one slice's activations alive at a time.
TEST(MicroBatches, HalveTheMlpPlan) {
  auto plan_bytes = [](int micro_batches) {
    Trainer t("mlp");
    CompiledTrainStep step(*t.net, t.loss, *t.opt,
                           {.fusion = true, .micro_batches = micro_batches});
    step.set_verbose(false);
    step.run(batch_images(128, 1), batch_labels(128, 2));
    return step.report().arena_bytes;
  };
  const int64_t whole = plan_bytes(1), halves = plan_bytes(2);
  EXPECT_GT(halves, 0);
  EXPECT_LT(double(halves), 0.6 * double(whole)) << whole << " vs " << halves << " bytes";
}

// Through Model and set_context, as `kiln train --micro-batches 2` runs it, with a fixed loss
// scale of 1024 (exact in f32): each slice's backward is seeded with the scale, and the overflow
// check and unscaling read the summed gradients.
TEST(MicroBatches, ModelWithLossScaleTrainsLikeEager) {
  auto make = [] {
    set_seed(42);
    auto net = models::create("mlp");
    auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), optim::constant_lr(0.05));
    ModelOptions options;
    options.loss_scale = "fixed:1024";
    return std::make_unique<Model>(
        net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"), opt, options);
  };
  auto eager = make(), graph = make();
  const Context saved = get_context();
  for (int s = 0; s < 3; ++s) {
    Tensor x = batch_images(8, 10 + uint64_t(s)), y = batch_labels(8, 20 + uint64_t(s));
    set_context(saved);
    const float le = eager->train_step(x, y);
    Context c = saved;
    c.mode = GRAPH_MODE;
    c.enable_graph_kernel = true;
    c.micro_batches = 2;
    set_context(c);
    ::testing::internal::CaptureStderr();
    const float lg = graph->train_step(x, y);
    const std::string log = ::testing::internal::GetCapturedStderr();
    set_context(saved);
    if (s == 0) {
      EXPECT_NE(log.find("in 2 micro-batches"), std::string::npos) << log;
    }
    EXPECT_NEAR(lg, le, 1e-5 * std::max(1.f, std::abs(le))) << "step " << s;
  }
  EXPECT_EQ(graph->skipped_steps(), 0);
  auto pe = eager->network().trainable_params(), pg = graph->network().trainable_params();
  ASSERT_EQ(pe.size(), pg.size());
  for (size_t i = 0; i < pe.size(); ++i) {
    std::vector<float> a = pe[i].to_vector<float>(), b = pg[i].to_vector<float>();
    for (size_t k = 0; k < a.size(); ++k) {
      ASSERT_NEAR(a[k], b[k], 1e-6 + 1e-3 * std::abs(a[k])) << "param " << i << " at " << k;
    }
  }
}

TEST(MicroBatches, SetContextRefusesZero) {
  Context c = get_context();
  c.micro_batches = 0;
  EXPECT_THROW(set_context(c), Error);
}

// The evaluation forward runs in slices too (else its arena would be the whole batch's): the
// logits and loss of eager's forward, in a smaller arena than unsplit.
TEST(MicroBatches, EvaluationRunsInSlicesWithEagersResults) {
  auto evaluate = [](int micro_batches, Tensor& logits, Tensor& loss) {
    Trainer t("mlp");
    auto arena = std::make_shared<graph::Arena>();
    CompiledTrainStep step(*t.net, t.loss, *t.opt,
                           {.fusion = true, .micro_batches = micro_batches, .arena = arena});
    step.set_verbose(false);
    t.net->set_train(false);
    std::tie(logits, loss) = step.evaluate(batch_images(256, 5), batch_labels(256, 6));
    return arena->storage->bytes();
  };
  Trainer eager("mlp");
  eager.net->set_train(false);
  const Tensor x = batch_images(256, 5), y = batch_labels(256, 6);
  const Tensor eager_logits = eager.net->construct(x);
  const float eager_loss = eager.loss(eager_logits, y).item<float>();
  Tensor whole_logits, whole_loss, logits, loss;
  const int64_t whole = evaluate(1, whole_logits, whole_loss);
  const int64_t halves = evaluate(2, logits, loss);
  EXPECT_LT(double(halves), 0.6 * double(whole)) << whole << " vs " << halves << " bytes";
  EXPECT_NEAR(loss.item<float>(), eager_loss, 1e-5 * std::max(1.f, std::abs(eager_loss)));
  ASSERT_EQ(logits.shape(), eager_logits.shape());
  std::vector<float> a = eager_logits.to_vector<float>(), b = logits.to_vector<float>();
  for (size_t k = 0; k < a.size(); ++k) ASSERT_NEAR(b[k], a[k], 1e-4 + 1e-4 * std::abs(a[k])) << k;
}

// A batch that does not split evenly (an epoch's last) runs whole, and still trains right.
TEST(MicroBatches, UnevenBatchRunsWhole) {
  graph::CompileReport r = expect_matches_eager("mlp", 2, true, 5);
  EXPECT_EQ(r.fused("matmul_momentum"), 3) << "one product per weight: the batch was not split";
}

// BatchNorm's training statistics would be each slice's, not the batch's: refused, by name.
TEST(MicroBatches, BatchNormInTrainingIsRefused) {
  Trainer t("resnet20");
  CompiledTrainStep step(*t.net, t.loss, *t.opt, {.fusion = true, .micro_batches = 2});
  step.set_verbose(false);
  try {
    step.run(batch_images(4, 1), batch_labels(4, 2));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("BatchNorm"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("micro_batches = 2"), std::string::npos) << e.what();
  }
  EXPECT_EQ(t.opt->global_step(), 0);
}

// A loss that does not say whether it is a mean or a sum cannot be split.
TEST(MicroBatches, LossWithoutBatchReductionIsRefused) {
  struct SumOfSquares : nn::LossCell {
    Tensor construct(const Tensor& logits, const Tensor&) override {
      return ops::sum(ops::square(logits));
    }
  };
  Trainer t("mlp");
  SumOfSquares loss;
  CompiledTrainStep step(*t.net, loss, *t.opt, {.micro_batches = 2});
  step.set_verbose(false);
  EXPECT_THROW(step.run(batch_images(4, 1), batch_labels(4, 2)), Error);
}

}  // namespace
}  // namespace kiln::train::micro_batches_test
