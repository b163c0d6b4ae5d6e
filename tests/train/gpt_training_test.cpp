// The GPT decoder trained on Debian's GPL-3 text: graph mode (traced, differentiated by graph
// autodiff, fused) agrees with eager step by step, and both learn.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "kiln/core/random.h"
#include "kiln/data/config.h"
#include "kiln/data/text_dataset.h"
#include "kiln/models/gpt.h"
#include "kiln/nn/loss.h"
#include "kiln/optim/adam.h"
#include "kiln/train/model.h"
#include "testing/mode_scope.h"
#include "train_testing.h"

namespace kiln::train::gpt_training_test {
namespace {

using testing::LossRecorder;

constexpr int64_t kContext = 32, kBatch = 16;

std::shared_ptr<const data::TextCorpus> corpus() {
  static auto c =
      std::make_shared<const data::TextCorpus>(data::read_text_corpus(data::kDefaultTextCorpus));
  return c;
}

// Runs `steps` training steps from the same seed and data order; the per-step losses, the
// trained parameters, and the validation metrics.
struct TrainedRun {
  std::vector<float> losses;
  std::vector<std::vector<float>> params;
  std::map<std::string, double> eval;
};

TrainedRun train_gpt(ExecutionMode mode, bool fusion, int64_t steps, bool evaluate = false) {
  kiln::testing::ModeScope scope(mode, fusion);
  set_seed(17);
  data::config::set_seed(17);
  models::GptConfig config{.vocab_size = corpus()->vocab_size(),
                           .context_length = kContext,
                           .num_layers = 2,
                           .num_heads = 4,
                           .embed_dim = 64,
                           .mlp_ratio = 4};
  auto net = std::make_shared<models::Gpt>(config);
  auto loss = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean");
  auto opt = std::make_shared<optim::Adam>(net->trainable_params(), 3e-3);
  Model model(net, loss, opt,
              {.metrics = {"loss", "perplexity", "accuracy"}, .compile_log = false});
  data::TextSplit split = data::split_text_corpus(corpus(), {.context_length = kContext});
  auto recorder = std::make_shared<LossRecorder>();
  model.train(1, split.train.batch(kBatch, true), {recorder}, {.max_steps = steps});
  TrainedRun r;
  r.losses = recorder->losses;
  for (const Tensor& p : net->trainable_params()) r.params.push_back(p.to_vector<float>());
  // All validation windows in one batch: the loss metric's mean of batch means is then the
  // mean per token, which perplexity exponentiates.
  if (evaluate) r.eval = model.eval(split.validation.batch(1 << 20));
  return r;
}

class GptTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(data::kDefaultTextCorpus)) {
      GTEST_SKIP() << data::kDefaultTextCorpus << " (Debian's base-files) is not installed";
    }
  }
};

TEST_F(GptTraining, GraphModeMatchesEagerStepByStep) {
  TrainedRun eager = train_gpt(PYNATIVE_MODE, false, 4);
  for (bool fusion : {false, true}) {
    TrainedRun graph = train_gpt(GRAPH_MODE, fusion, 4);
    ASSERT_EQ(graph.losses.size(), eager.losses.size());
    for (size_t s = 0; s < eager.losses.size(); ++s) {
      EXPECT_NEAR(graph.losses[s], eager.losses[s], 1e-5 * std::abs(eager.losses[s]))
          << "step " << s << (fusion ? " (fused)" : "");
    }
    EXPECT_LT(testing::worst_difference(eager.params, graph.params), 2e-3)
        << (fusion ? "fused" : "unfused");
  }
}

TEST_F(GptTraining, LossFallsWithinThirtySteps) {
  TrainedRun r = train_gpt(GRAPH_MODE, true, 30, /*evaluate=*/true);
  ASSERT_EQ(r.losses.size(), 30u);
  // Untrained, the logits are near zero: the loss starts at about ln(vocabulary).
  EXPECT_NEAR(r.losses.front(), std::log(double(corpus()->vocab_size())), 0.3);
  double last = 0;
  for (size_t s = 25; s < 30; ++s) last += r.losses[s] / 5;
  EXPECT_LT(last, r.losses.front() - 1.0) << "the model did not learn the text's letters";
  // Perplexity is exp of the mean validation loss per token.
  EXPECT_NEAR(r.eval["perplexity"], std::exp(r.eval["loss"]), 1e-3 * r.eval["perplexity"]);
  EXPECT_LT(r.eval["perplexity"], double(corpus()->vocab_size()) / 2);
  EXPECT_GT(r.eval["accuracy"], 0.1);
}

}  // namespace
}  // namespace kiln::train::gpt_training_test
