// Bitwise reproducibility (docs/numerics.md): with the same seed and thread count a training step
// gives the same bits run to run, eager and graph alike, and graph mode without fusion gives the
// bits eager mode gives, for every conv_algorithm. Fusion may change bits: which fusions do,
// and why, is in docs/numerics.md; the fused-vs-eager agreement within tolerances is
// compiled_step_test.cpp's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/autograd/tape.h"
#include "kiln/core/context.h"
#include "kiln/core/random.h"
#include "kiln/models/zoo.h"
#include "kiln/nn/loss.h"
#include "kiln/optim/momentum.h"
#include "kiln/train/compiled_step.h"

#include "train_testing.h"

namespace kiln::train::reproducible_step_test {
namespace {

using testing::batch_images;
using testing::batch_labels;

constexpr int kSteps = 2;
constexpr int64_t kBatch = 8;

// The losses of kSteps momentum steps from seed 42 and every state tensor after them.
struct StepResults {
  std::vector<float> losses;
  std::vector<std::pair<std::string, std::vector<float>>> state;
};

StepResults train(const std::string& model, bool graph, bool fusion) {
  set_seed(42);
  auto net = models::create(model);
  nn::SoftmaxCrossEntropyWithLogits loss{true, "mean"};
  optim::Momentum opt(net->trainable_params(), optim::constant_lr(0.05),
                      optim::MomentumOptions{.momentum = 0.9});
  std::unique_ptr<CompiledTrainStep> step;
  if (graph) {
    step = std::make_unique<CompiledTrainStep>(*net, loss, opt,
                                               graph::CompileOptions{.fusion = fusion});
    step->set_verbose(false);
    // A measured thread strategy may differ run to run, and with it the summation order.
    step->force_thread_strategy(ThreadStrategy::per_kernel);
  }
  StepResults r;
  for (int s = 0; s < kSteps; ++s) {
    Tensor x = batch_images(kBatch, 100 + s), y = batch_labels(kBatch, 200 + s);
    if (graph) {
      r.losses.push_back(step->run(x, y).item<float>());
      continue;
    }
    autograd::install_tape();
    opt.prepare_step();
    Tensor l = loss(net->construct(x), y);
    opt.apply(autograd::grad(l, net->trainable_params()));
    opt.advance();
    r.losses.push_back(l.item<float>());
  }
  for (auto& [name, t] : net->state_and_names()) r.state.emplace_back(name, t.to_vector<float>());
  return r;
}

// Names of the state tensors whose bits differ (all of them if the lists differ).
std::vector<std::string> differing(const StepResults& a, const StepResults& b) {
  std::vector<std::string> out;
  if (a.losses != b.losses) out.push_back("loss");
  for (size_t i = 0; i < a.state.size() && i < b.state.size(); ++i) {
    if (a.state[i] != b.state[i]) out.push_back(a.state[i].first);
  }
  if (a.state.size() != b.state.size()) out.push_back("(state size)");
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& n : v) s += n + " ";
  return s;
}

class ReproducibleStep : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override {
    Context c = saved_;
    c.conv_algorithm = std::get<1>(GetParam());
    set_context(c);
  }
  void TearDown() override { set_context(saved_); }
  Context saved_ = get_context();
};

TEST_P(ReproducibleStep, RunToRunBitwiseEagerAndGraph) {
  const std::string& model = std::get<0>(GetParam());
  EXPECT_EQ(joined(differing(train(model, false, false), train(model, false, false))), "")
      << "eager";
  EXPECT_EQ(joined(differing(train(model, true, true), train(model, true, true))), "")
      << "graph with fusion";
}

TEST_P(ReproducibleStep, GraphWithoutFusionMatchesEagerBitwise) {
  const std::string& model = std::get<0>(GetParam());
  const StepResults eager = train(model, false, false), graph = train(model, true, false);
  EXPECT_EQ(joined(differing(eager, graph)), "");
}

INSTANTIATE_TEST_SUITE_P(Zoo, ReproducibleStep,
                         // ResNet-20 (and so the algorithms, which change only 3x3
                         // convolutions) takes minutes here on 2 shared cores: see numerics.md.
                         ::testing::Values(std::tuple{"mlp", "auto"}, std::tuple{"lenet", "auto"},
                                           std::tuple{"lenet", "direct"}),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

}  // namespace
}  // namespace kiln::train::reproducible_step_test
