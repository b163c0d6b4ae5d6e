// Loss scaling in graph mode must behave exactly as eager Model does: the same losses and
// parameters with a fixed scale, the same skipped steps (weights AND optimizer state untouched)
// and the same dynamic scale after an overflow, and a changing scale must never recompile.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "kiln/core/context.h"
#include "kiln/core/random.h"
#include "kiln/models/zoo.h"
#include "kiln/nn/loss.h"
#include "kiln/optim/momentum.h"
#include "kiln/train/compiled_step.h"
#include "kiln/train/model.h"

#include "testing/mode_scope.h"
#include "train_testing.h"

namespace kiln::train::graph_loss_scale_test {
namespace {

using testing::batch_images;
using testing::batch_labels;
using testing::worst_difference;

graph::CompileOptions fused() {
  graph::CompileOptions o;
  o.fusion = true;
  return o;
}

// A zoo model trained through Model (eager_step or graph_step), Momentum so that a skipped
// step would show in the optimizer state too.
struct Trainer {
  std::shared_ptr<nn::Cell> net;
  std::shared_ptr<optim::Momentum> opt;
  std::unique_ptr<Model> model;
  ExecutionMode mode;
  bool fusion;

  Trainer(const std::string& name, ExecutionMode m, bool fuse, ModelOptions options)
      : mode(m), fusion(fuse) {
    set_seed(42);
    net = models::create(name);
    opt = std::make_shared<optim::Momentum>(net->trainable_params(), optim::constant_lr(0.05),
                                            optim::MomentumOptions{.momentum = 0.9});
    model = std::make_unique<Model>(
        net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"), opt,
        std::move(options));
  }
  float step(const Tensor& x, const Tensor& y) {
    kiln::testing::ModeScope guard(mode, fusion);
    return model->train_step(x, y);
  }
  double scale() const { return model->loss_scale_manager()->scale(); }
  // Parameters, buffers and momentum buffers, as raw floats.
  std::vector<std::vector<float>> state() const {
    std::vector<std::vector<float>> s;
    for (auto& [name, t] : net->state_and_names()) s.push_back(t.to_vector<float>());
    for (auto& [name, t] : opt->state_and_names()) {
      if (name != "global_step") s.push_back(t.to_vector<float>());
    }
    return s;
  }
};

struct Case {
  std::string model;
  bool fusion;
};

class GraphFixedLossScale : public ::testing::TestWithParam<Case> {};

// A fixed scale of 1024 (a power of two: scaling and unscaling are exact in f32) gives the
// losses and parameters of eager mode with the same manager.
TEST_P(GraphFixedLossScale, MatchesEager) {
  const Case& c = GetParam();
  ModelOptions options;
  options.loss_scale = "fixed:1024";
  Trainer eager(c.model, PYNATIVE_MODE, false, options),
      graph(c.model, GRAPH_MODE, c.fusion, options);
  for (int s = 0; s < 4; ++s) {
    Tensor x = batch_images(8, 100 + s), y = batch_labels(8, 200 + s);
    float le = eager.step(x, y), lg = graph.step(x, y);
    EXPECT_NEAR(lg, le, 1e-4 * std::max(1.f, std::abs(le))) << c.model << " step " << s;
  }
  EXPECT_EQ(graph.model->skipped_steps(), 0);
  EXPECT_EQ(graph.model->global_step(), 4);
  EXPECT_LT(worst_difference(eager.state(), graph.state()), 2e-3) << c.model;
}

INSTANTIATE_TEST_SUITE_P(Zoo, GraphFixedLossScale,
                         ::testing::Values(Case{"mlp", false}, Case{"mlp", true},
                                           Case{"lenet", false}, Case{"lenet", true}),
                         [](const auto& info) {
                           return info.param.model + (info.param.fusion ? "_fused" : "_unfused");
                         });

// A batch holding an inf overflows the gradients: that step, and only that one, is skipped.
// Weights and momentum buffers stay bit-identical, the dynamic scale halves, the global step
// still advances; the next step updates again, and everything matches eager mode throughout.
TEST(GraphLossScale, OverflowSkipsExactlyThatStep) {
  ModelOptions options;
  options.loss_scale = "dynamic";
  for (bool fusion : {false, true}) {
    Trainer eager("lenet", PYNATIVE_MODE, false, options),
        graph("lenet", GRAPH_MODE, fusion, options);
    Tensor bad = batch_images(8, 101);
    bad.data<float>()[123] = std::numeric_limits<float>::infinity();
    const Tensor xs[3] = {batch_images(8, 100), bad, batch_images(8, 102)};
    const double initial = graph.scale();
    std::vector<std::vector<float>> before;
    for (int s = 0; s < 3; ++s) {
      Tensor y = batch_labels(8, 200 + s);
      if (s == 1) before = graph.state();
      eager.step(xs[s], y);
      graph.step(xs[s], y);
      if (s == 1) {
        EXPECT_EQ(graph.state(), before) << "fusion " << fusion << ": the skipped step wrote";
        EXPECT_EQ(graph.model->skipped_steps(), 1);
        EXPECT_EQ(graph.scale(), initial / 2);
      }
      if (s == 2) {
        EXPECT_GT(worst_difference(before, graph.state()), 0) << "the next step did not update";
      }
      EXPECT_EQ(graph.scale(), eager.scale()) << "step " << s;
      EXPECT_EQ(graph.model->skipped_steps(), eager.model->skipped_steps()) << "step " << s;
    }
    EXPECT_EQ(graph.model->global_step(), 3);
    EXPECT_EQ(graph.model->skipped_steps(), 1);
    EXPECT_LT(worst_difference(eager.state(), graph.state()), 2e-3) << "fusion " << fusion;
  }
}

// fp16 O2 with the default dynamic scale (2^24): the first steps overflow fp16 and are skipped
// while the scale falls, then training proceeds. Graph mode skips the same steps, ends at the
// same scale, and follows eager's losses within fp16 tolerance.
TEST(GraphLossScale, Fp16O2DynamicMatchesEager) {
  ModelOptions options;  // loss_scale "": dynamic, the default for fp16 at O2
  options.amp_level = "O2";
  options.amp_dtype = "fp16";
  Trainer eager("lenet", PYNATIVE_MODE, false, options), graph("lenet", GRAPH_MODE, true, options);
  ASSERT_NE(graph.model->loss_scale_manager(), nullptr);
  int updated = 0;
  for (int s = 0; s < 10; ++s) {
    Tensor x = batch_images(16, 300 + s), y = batch_labels(16, 400 + s);
    const int64_t skipped = graph.model->skipped_steps();
    float le = eager.step(x, y), lg = graph.step(x, y);
    EXPECT_NEAR(lg, le, 2e-2 * std::max(1.f, std::abs(le))) << "step " << s;
    EXPECT_EQ(graph.model->skipped_steps(), eager.model->skipped_steps()) << "step " << s;
    EXPECT_EQ(graph.scale(), eager.scale()) << "step " << s;
    updated += graph.model->skipped_steps() == skipped;
  }
  // Both regimes were exercised: some steps skipped, some applied.
  EXPECT_GT(graph.model->skipped_steps(), 0);
  EXPECT_GT(updated, 0);
  EXPECT_LT(graph.scale(), 16777216.0);
  EXPECT_LT(worst_difference(eager.state(), graph.state()), 5e-2);
  for (const Tensor& p : graph.net->trainable_params()) EXPECT_EQ(p.dtype(), DType::f32);
}

// The scale lives in a state scalar written before each step: a dynamic scale that grows every
// clean step and halves on overflow never recompiles; a new batch shape recompiles once.
TEST(GraphLossScale, ChangingScaleDoesNotRecompile) {
  set_seed(5);
  std::shared_ptr<nn::Cell> net = models::create("mlp");
  optim::Momentum opt(net->trainable_params(), optim::constant_lr(0.05),
                      optim::MomentumOptions{.momentum = 0.9});
  nn::SoftmaxCrossEntropyWithLogits loss(true, "mean");
  amp::DynamicLossScaleManager manager(1024.0, 2.0, /*scale_window=*/1);
  CompiledTrainStep step(*net, loss, opt, fused(), {}, &manager);
  step.set_verbose(false);
  Tensor bad = batch_images(8, 3);
  bad.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  std::vector<double> scales;
  for (int s = 0; s < 5; ++s) {
    step.run(s == 3 ? bad : batch_images(8, s), batch_labels(8, s));
    scales.push_back(manager.scale());
    EXPECT_EQ(step.last_step_skipped(), s == 3) << "step " << s;
  }
  EXPECT_EQ(scales, (std::vector<double>{2048, 4096, 8192, 4096, 8192}));
  EXPECT_EQ(step.compiles(), 1);
  const graph::Executable* first = &step.executable();
  step.run(batch_images(5, 9), batch_labels(5, 9));  // the last, partial batch
  EXPECT_EQ(step.compiles(), 2);
  step.run(batch_images(8, 10), batch_labels(8, 10));  // next epoch: the first graph again
  EXPECT_EQ(step.compiles(), 2);
  EXPECT_EQ(&step.executable(), first);
  EXPECT_EQ(manager.skipped_steps(), 1);
  EXPECT_EQ(opt.global_step(), 7);
}

}  // namespace
}  // namespace kiln::train::graph_loss_scale_test
