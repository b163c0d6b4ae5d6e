// Dataset sink mode (TrainOptions::dataset_sink_mode): sinks of sink_size steps run back to back
// with the callbacks once per sink, and train exactly what per-step training trains.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "kiln/core/context.h"
#include "kiln/core/error.h"
#include "kiln/core/random.h"
#include "kiln/graph/executor.h"
#include "kiln/models/lenet.h"
#include "kiln/models/mlp.h"
#include "kiln/nn/loss.h"
#include "kiln/optim/momentum.h"
#include "kiln/train/callbacks.h"
#include "kiln/train/compiled_step.h"
#include "kiln/train/model.h"
#include "train/train_testing.h"

namespace kiln::train::sink_mode_test {
namespace {

constexpr int64_t kRows = 64, kFeatures = 12, kBatch = 8;  // 8 steps per epoch

std::unique_ptr<Model> make_mlp_model(uint64_t seed) {
  set_seed(seed);
  auto net = std::make_shared<models::MLP>(kFeatures, std::vector<int64_t>{16}, 3);
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), optim::constant_lr(0.05),
                                               optim::MomentumOptions{.momentum = 0.9});
  return std::make_unique<Model>(net,
                                 std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"),
                                 opt, ModelOptions{.compile_log = false});
}

// What the step hooks saw, call by call.
class SinkRecorder : public Callback {
 public:
  void on_train_step_begin(RunContext&) override { ++begins; }
  void on_train_step_end(RunContext& ctx) override {
    const CallbackParams& p = ctx.original_args();
    global_steps.push_back(p.cur_step_num);
    steps_in_epoch.push_back(p.cur_step_in_epoch);
    sink_sizes.push_back(p.steps_this_sink);
    EXPECT_EQ(int64_t(p.step_losses.size()), p.steps_this_sink);
    EXPECT_EQ(p.step_losses.back(), p.net_outputs);
    losses.insert(losses.end(), p.step_losses.begin(), p.step_losses.end());
  }
  int begins = 0;
  std::vector<int64_t> global_steps, steps_in_epoch, sink_sizes;
  std::vector<float> losses;  // every step's, from the sinks' step_losses
};

std::vector<std::vector<float>> state_of(Model& model) {
  std::vector<std::vector<float>> out;
  for (const auto& [name, t] : model.network().state_and_names())
    out.push_back(t.to_vector<float>());
  return out;
}

// Runs `body` in `mode` with every step on the whole batch (a measured thread strategy could
// differ between two runs, and with it the last bits), restoring both after.
template <class Body>
void in_mode(ExecutionMode mode, Body body) {
  const char* strategy = std::getenv("KILN_THREAD_STRATEGY");
  const std::string saved_strategy = strategy ? strategy : "";
  ::setenv("KILN_THREAD_STRATEGY", "per_kernel", 1);
  struct RestoreStrategy {
    std::string value;
    ~RestoreStrategy() {
      if (value.empty()) {
        ::unsetenv("KILN_THREAD_STRATEGY");
      } else {
        ::setenv("KILN_THREAD_STRATEGY", value.c_str(), 1);
      }
    }
  } restore{saved_strategy};
  Context saved = get_context();
  Context c = saved;
  c.mode = mode;
  set_context(c);
  try {
    body();
  } catch (...) {
    set_context(saved);
    throw;
  }
  set_context(saved);
}

class SinkModeInBothModes : public ::testing::TestWithParam<ExecutionMode> {};

TEST_P(SinkModeInBothModes, TrainsTheSameLossesAndWeightsAsPerStepTraining) {
  in_mode(GetParam(), [] {
    auto ds = testing::synthetic_dataset(kRows, kFeatures, kBatch, 11, /*shuffle=*/true);
    auto per_step = make_mlp_model(3);
    auto per_step_record = std::make_shared<SinkRecorder>();
    per_step->train(2, ds, {per_step_record});
    auto sunk = make_mlp_model(3);
    auto sunk_record = std::make_shared<SinkRecorder>();
    sunk->train(2, ds, {sunk_record}, {.dataset_sink_mode = true, .sink_size = 3});

    ASSERT_EQ(per_step_record->losses.size(), 16u);
    EXPECT_EQ(sunk_record->losses, per_step_record->losses);  // the same steps, bit for bit
    EXPECT_EQ(state_of(*sunk), state_of(*per_step));
    EXPECT_EQ(sunk->global_step(), 16);
  });
}

INSTANTIATE_TEST_SUITE_P(, SinkModeInBothModes, ::testing::Values(PYNATIVE_MODE, GRAPH_MODE),
                         [](const auto& info) {
                           return std::string(info.param == GRAPH_MODE ? "Graph" : "Eager");
                         });

TEST(SinkMode, HooksFireOncePerSinkWithTheSinksLastStep) {
  auto ds = testing::synthetic_dataset(kRows, kFeatures, kBatch);
  auto model = make_mlp_model(1);
  auto record = std::make_shared<SinkRecorder>();
  // 3 does not divide an epoch of 8 steps: each epoch ends with a sink of 2.
  model->train(2, ds, {record}, {.dataset_sink_mode = true, .sink_size = 3});
  EXPECT_EQ(record->begins, 6);
  EXPECT_EQ(record->global_steps, (std::vector<int64_t>{3, 6, 8, 11, 14, 16}));
  EXPECT_EQ(record->steps_in_epoch, (std::vector<int64_t>{3, 6, 8, 3, 6, 8}));
  EXPECT_EQ(record->sink_sizes, (std::vector<int64_t>{3, 3, 2, 3, 3, 2}));

  auto per_epoch = std::make_shared<SinkRecorder>();
  model->train(1, ds, {per_epoch}, {.dataset_sink_mode = true});  // sink_size -1: the epoch
  EXPECT_EQ(per_epoch->begins, 1);
  EXPECT_EQ(per_epoch->global_steps, (std::vector<int64_t>{24}));
  EXPECT_EQ(per_epoch->sink_sizes, (std::vector<int64_t>{8}));
}

TEST(SinkMode, MaxStepsAndStopRequestsEndTrainingAtASinkEnd) {
  auto ds = testing::synthetic_dataset(kRows, kFeatures, kBatch);
  auto model = make_mlp_model(1);
  auto record = std::make_shared<SinkRecorder>();
  model->train(3, ds, {record}, {.dataset_sink_mode = true, .sink_size = 3, .max_steps = 5});
  EXPECT_EQ(record->sink_sizes, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(model->global_step(), 5);

  class StopAtFirstSink : public Callback {
    void on_train_step_end(RunContext& ctx) override { ctx.request_stop(); }
  };
  auto stopped = make_mlp_model(1);
  stopped->train(3, ds, {std::make_shared<StopAtFirstSink>()},
                 {.dataset_sink_mode = true, .sink_size = 4});
  EXPECT_EQ(stopped->global_step(), 4);
}

TEST(SinkMode, LossMonitorPrintsEveryStepsLineAtTheSinksEnd) {
  auto ds = testing::synthetic_dataset(kRows, kFeatures, kBatch);
  in_mode(PYNATIVE_MODE, [&] {
    for (int64_t per_print : {1, 2}) {
      std::ostringstream per_step_out, sunk_out;
      make_mlp_model(5)->train(1, ds, {std::make_shared<LossMonitor>(per_print, &per_step_out)});
      // Lines written when each sink's later callbacks run: all of the sink's, none of the next.
      class LineCounter : public Callback {
       public:
        explicit LineCounter(std::ostringstream& out) : out_(out) {}
        void on_train_step_end(RunContext&) override {
          const std::string text = out_.str();
          lines.push_back(std::count(text.begin(), text.end(), '\n'));
        }
        std::vector<int64_t> lines;

       private:
        std::ostringstream& out_;
      };
      auto counter = std::make_shared<LineCounter>(sunk_out);
      make_mlp_model(5)->train(1, ds,
                               {std::make_shared<LossMonitor>(per_print, &sunk_out), counter},
                               {.dataset_sink_mode = true, .sink_size = 3});
      EXPECT_EQ(sunk_out.str(), per_step_out.str()) << "per_print_times " << per_print;
      const std::vector<int64_t> expected =
          per_print == 1 ? std::vector<int64_t>{3, 6, 8} : std::vector<int64_t>{1, 3, 4};
      EXPECT_EQ(counter->lines, expected);
    }
  });
}

TEST(SinkMode, LossMonitorNamesTheStepOfAnInvalidLossInsideASink) {
  CallbackParams p;
  p.cur_epoch_num = 2;
  p.cur_step_num = 14;
  p.cur_step_in_epoch = 6;
  p.steps_this_sink = 3;
  p.step_losses = {0.5f, std::nanf(""), 0.25f};
  p.net_outputs = 0.25f;
  RunContext ctx(&p);
  std::ostringstream out;
  LossMonitor monitor(1, &out);
  try {
    monitor.on_train_step_end(ctx);
    FAIL() << "a NaN loss must end training";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("epoch: 2 step: 5. Invalid loss nan"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(out.str(), "epoch: 2 step: 4, loss is 0.5\n");  // the steps before it were shown
}

// Graph mode in sink mode: the step reads each batch the pipeline made where it lies.
TEST(SinkMode, CompiledStepReadsThePipelinesBatchesWithoutACopy) {
  in_mode(GRAPH_MODE, [] {
    set_seed(2);
    auto net = std::make_shared<models::LeNet5>();
    auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), optim::constant_lr(0.01),
                                                 optim::MomentumOptions{.momentum = 0.9});
    Model model(net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"), opt,
                {.compile_log = false});
    std::vector<float> images(size_t(48 * 28 * 28));
    for (size_t i = 0; i < images.size(); ++i) images[i] = float(i % 255) / 255.f;
    std::vector<int32_t> labels(48);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = int32_t(i % 10);
    data::Dataset ds = data::NumpySlicesDataset({Tensor::from_vector(images, {48, 1, 28, 28}),
                                                 Tensor::from_vector(labels, {48})},
                                                {"image", "label"}, {.shuffle = true})
                           .batch(16, true);
    model.train(2, ds, {}, {.dataset_sink_mode = true, .sink_size = 2});
    ASSERT_NE(model.compiled_step(), nullptr);
    EXPECT_EQ(model.global_step(), 6);
    EXPECT_EQ(model.compiled_step()->executable().report().inputs_in_place, 2);
    EXPECT_EQ(model.compiled_step()->executable().input_bytes_copied(), 0);
  });
}

}  // namespace
}  // namespace kiln::train::sink_mode_test
