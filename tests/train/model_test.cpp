#include "kiln/train/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <sstream>

#include "kiln/core/context.h"
#include "kiln/core/error.h"
#include "kiln/core/random.h"
#include "kiln/models/mlp.h"
#include "kiln/nn/dense.h"
#include "kiln/nn/loss.h"
#include "kiln/ops/cpu_support.h"
#include "kiln/ops/functional.h"
#include "kiln/optim/lr_schedule.h"
#include "kiln/optim/momentum.h"
#include "kiln/train/callbacks.h"
#include "kiln/train/checkpoint.h"
#include "kiln/train/compiled_step.h"
#include "testing/cpu_features.h"
#include "testing/mode_scope.h"
#include "train/train_testing.h"

namespace kiln::train::model_test {
namespace {

namespace fs = std::filesystem;
using testing::LossRecorder;

constexpr int64_t kRows = 64, kFeatures = 12, kBatch = 8;  // 8 steps per epoch

std::unique_ptr<Model> make_model(uint64_t seed) {
  set_seed(seed);
  auto net = std::make_shared<models::MLP>(kFeatures, std::vector<int64_t>{16}, 3);
  auto opt = std::make_shared<optim::Momentum>(
      net->trainable_params(), optim::linear_warmup(optim::cosine_decay_lr(0.0, 0.1, 20), 4),
      optim::MomentumOptions{.momentum = 0.9, .weight_decay = 1e-4});
  return std::make_unique<Model>(net,
                                 std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"),
                                 opt, ModelOptions{.metrics = {"accuracy", "loss"}});
}

TEST(Model, TrainsAndEvaluates) {
  auto ds = testing::synthetic_dataset(kRows, kFeatures, kBatch);
  auto model = make_model(1);
  double before = model->eval(ds)["loss"];
  auto rec = std::make_shared<LossRecorder>();
  model->train(3, ds, {rec});
  EXPECT_EQ(rec->losses.size(), 24u);
  EXPECT_EQ(rec->steps.front(), 1);
  EXPECT_EQ(rec->steps.back(), 24);
  EXPECT_EQ(rec->epochs, 3);
  auto after = model->eval(ds);
  EXPECT_LT(after["loss"], before);
  EXPECT_GT(after["accuracy"], 0.5);
  EXPECT_EQ(model->predict(Tensor::zeros({5, kFeatures})).shape(), (Shape{5, 3}));
  EXPECT_TRUE(model->network().training());  // eval/predict restore the mode
}

TEST(Model, ResumeContinuesTheSameLossCurve) {
  std::string dir = testing::temp_dir("resume");
  auto ds = testing::synthetic_dataset(kRows, kFeatures, kBatch);
  // Uninterrupted: 3 epochs.
  auto full = make_model(1);
  auto all = std::make_shared<LossRecorder>();
  full->train(3, ds, {all});
  ASSERT_EQ(all->losses.size(), 24u);

  // Interrupted after 12 steps (mid-epoch 2), checkpointed, resumed in a fresh process state.
  auto first = make_model(1);
  auto part = std::make_shared<LossRecorder>();
  auto ckpt = std::make_shared<ModelCheckpoint>(
      "mlp", dir, CheckpointConfig{.save_checkpoint_steps = 4, .keep_checkpoint_max = 2});
  first->train(3, ds, {part, ckpt}, {.max_steps = 12});
  ASSERT_EQ(part->losses.size(), 12u);
  EXPECT_EQ(ckpt->latest_checkpoint(), dir + "/mlp-2_4.safetensors");

  auto resumed = make_model(77);  // different init: everything must come from the checkpoint
  ResumePoint at =
      resume_from_checkpoint(ckpt->latest_checkpoint(), resumed->network(), resumed->optimizer());
  EXPECT_EQ(at.epoch, 1);
  EXPECT_EQ(at.step_in_epoch, 4);
  EXPECT_EQ(at.global_step, 12);
  auto rest = std::make_shared<LossRecorder>();
  resumed->train(3, ds, {rest}, {.initial_epoch = at.epoch, .initial_step = at.step_in_epoch});
  ASSERT_EQ(rest->losses.size(), 12u);
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_FLOAT_EQ(rest->losses[i], all->losses[12 + i]) << "step " << 13 + i;
    EXPECT_EQ(rest->steps[i], int64_t(13 + i));
  }
  for (size_t i = 0; i < 12; ++i) EXPECT_FLOAT_EQ(part->losses[i], all->losses[i]);
  fs::remove_all(dir);
}

// With shuffling, the resumed run replays the data order of the epochs it skips.
TEST(Model, ResumeWithShufflingReplaysTheDataOrder) {
  std::string dir = testing::temp_dir("resume_shuffled");
  auto ds = testing::synthetic_dataset(kRows, kFeatures, kBatch, 11, /*shuffle=*/true);
  auto full = make_model(1);
  auto all = std::make_shared<LossRecorder>();
  full->train(3, ds, {all});

  auto first = make_model(1);
  auto ckpt =
      std::make_shared<ModelCheckpoint>("mlp", dir, CheckpointConfig{.save_checkpoint_steps = 0});
  first->train(3, ds, {ckpt}, {.max_steps = 19});
  auto resumed = make_model(77);
  ResumePoint at =
      resume_from_checkpoint(ckpt->latest_checkpoint(), resumed->network(), resumed->optimizer());
  EXPECT_EQ(at.epoch, 2);
  EXPECT_EQ(at.step_in_epoch, 3);
  auto rest = std::make_shared<LossRecorder>();
  resumed->train(
      3, ds, {rest},
      {.initial_epoch = at.epoch, .initial_step = at.step_in_epoch, .replay_skipped_epochs = true});
  ASSERT_EQ(rest->losses.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_FLOAT_EQ(rest->losses[i], all->losses[19 + i]) << "step " << 20 + i;
  }
  fs::remove_all(dir);
}

TEST(Model, CheckpointCallbackKeepsTheNewest) {
  std::string dir = testing::temp_dir("keep");
  auto ds = testing::synthetic_dataset(kRows, kFeatures, kBatch);
  auto model = make_model(2);
  auto ckpt = std::make_shared<ModelCheckpoint>(
      "net", dir, CheckpointConfig{.save_checkpoint_steps = 2, .keep_checkpoint_max = 2});
  model->train(2, ds, {ckpt});
  std::vector<std::string> files;
  for (auto& e : fs::directory_iterator(dir)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"net-2_6.safetensors", "net-2_8.safetensors"}));
  Checkpoint c = load_checkpoint(dir + "/net-2_8.safetensors");
  EXPECT_EQ(c.metadata.at("epoch"), "2");
  EXPECT_EQ(c.metadata.at("step_in_epoch"), "0");
  EXPECT_EQ(c.metadata.at("global_step"), "16");
  fs::remove_all(dir);
}

TEST(Model, MonitorsPrintMindSporeLines) {
  auto ds = testing::synthetic_dataset(kRows, kFeatures, kBatch);
  auto model = make_model(3);
  std::ostringstream out;
  model->train(2, ds,
               {std::make_shared<LossMonitor>(3, &out), std::make_shared<TimeMonitor>(0, &out)});
  std::string text = out.str();
  std::regex loss_line(R"(epoch: (\d+) step: (\d+), loss is (\d+\.?\d*(e-?\d+)?))");
  std::regex time_line(R"(Train epoch time: \d+\.\d{3} ms, per step time: \d+\.\d{3} ms)");
  std::vector<std::string> steps;
  for (std::sregex_iterator it(text.begin(), text.end(), loss_line), end; it != end; ++it) {
    steps.push_back((*it)[1].str() + ":" + (*it)[2].str());
  }
  // Every 3 global steps: 3, 6 (epoch 1), 9, 12, 15 -> steps 1, 4, 7 of epoch 2.
  EXPECT_EQ(steps, (std::vector<std::string>{"1:3", "1:6", "2:1", "2:4", "2:7"})) << text;
  auto n_time = std::distance(std::sregex_iterator(text.begin(), text.end(), time_line),
                              std::sregex_iterator());
  EXPECT_EQ(n_time, 2) << text;
}

TEST(Model, InvalidLossStopsTraining) {
  auto ds = testing::synthetic_dataset(kRows, kFeatures, kBatch);
  set_seed(4);
  auto net = std::make_shared<models::MLP>(kFeatures, std::vector<int64_t>{16}, 3);
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), optim::constant_lr(1e30));
  Model model(net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"), opt);
  std::ostringstream out;
  try {
    model.train(5, ds, {std::make_shared<LossMonitor>(1, &out)});
    FAIL() << "a diverging run must stop";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Invalid loss"), std::string::npos) << e.what();
  }
}

TEST(Model, SinkModeFiresStepHooksPerSink) {
  auto ds = testing::synthetic_dataset(kRows, kFeatures, kBatch);
  auto model = make_model(5);
  auto rec = std::make_shared<LossRecorder>();
  model->train(3, ds, {rec}, {.dataset_sink_mode = true});
  EXPECT_EQ(rec->steps, (std::vector<int64_t>{8, 16, 24}));
  EXPECT_EQ(rec->sinks, (std::vector<int64_t>{8, 8, 8}));
  auto rec2 = std::make_shared<LossRecorder>();
  model->train(1, ds, {rec2}, {.dataset_sink_mode = true, .sink_size = 3});
  EXPECT_EQ(rec2->sinks, (std::vector<int64_t>{3, 3, 2}));
  EXPECT_EQ(model->global_step(), 32);
}

// GRAPH_MODE makes Model compile the whole step once; the loss curve matches eager mode.
TEST(Model, GraphModeFollowsTheEagerLossCurve) {
  auto ds = testing::synthetic_dataset(kRows, kFeatures, kBatch);
  auto eager = make_model(7);
  auto eager_losses = std::make_shared<LossRecorder>();
  eager->train(2, ds, {eager_losses});

  Context saved = get_context();
  Context graph = saved;
  graph.mode = GRAPH_MODE;
  set_context(graph);
  auto compiled = make_model(7);
  auto graph_losses = std::make_shared<LossRecorder>();
  try {
    compiled->train(2, ds, {graph_losses});
  } catch (...) {
    set_context(saved);
    throw;
  }
  set_context(saved);
  ASSERT_EQ(graph_losses->losses.size(), eager_losses->losses.size());
  for (size_t i = 0; i < eager_losses->losses.size(); ++i) {
    EXPECT_NEAR(graph_losses->losses[i], eager_losses->losses[i],
                1e-4 * (1 + std::abs(eager_losses->losses[i])))
        << "step " << i + 1;
  }
  EXPECT_EQ(compiled->global_step(), 16);
  // Eager evaluation sees the weights the compiled steps wrote.
  EXPECT_NEAR(compiled->eval(ds)["loss"], eager->eval(ds)["loss"], 1e-4);
}

// A network of two inputs: dense_a(a) + dense_b(b), on rows (a, b, label).
class TwoTowers : public nn::Cell {
 public:
  TwoTowers()
      : Cell("TwoTowers"),
        dense_a_(register_cell("dense_a", std::make_shared<nn::Dense>(kFeatures, 3))),
        dense_b_(register_cell("dense_b", std::make_shared<nn::Dense>(
                                              kFeatures, 3, nn::DenseOptions{.has_bias = false}))) {
  }
  nn::Tensors construct_multi(const nn::Tensors& inputs) override {
    return {ops::add((*dense_a_)(inputs.at(0)), (*dense_b_)(inputs.at(1)))};
  }
  // Dense(2F, 3) on concat(a, b) with weight [W_a | W_b] and bias b_a: the same function, which
  // Momentum trains the same way (its gradients are the towers' side by side).
  std::shared_ptr<nn::Dense> as_one_input() const {
    auto dense = std::make_shared<nn::Dense>(2 * kFeatures, 3);
    dense->weight().copy_from(ops::concat({dense_a_->weight(), dense_b_->weight()}, 1));
    dense->bias().copy_from(dense_a_->bias());
    return dense;
  }

 private:
  std::shared_ptr<nn::Dense> dense_a_, dense_b_;
};

// Two Momentum epochs over rows of `columns` (the inputs, then the label), batches of kBatch.
std::vector<float> train_on_columns(std::shared_ptr<nn::Cell> net, std::vector<Tensor> columns) {
  std::vector<std::string> names;
  for (size_t i = 0; i < columns.size(); ++i) names.push_back("column" + std::to_string(i));
  auto ds = data::NumpySlicesDataset(std::move(columns), names, {.shuffle = false}).batch(kBatch);
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.1,
                                               optim::MomentumOptions{.momentum = 0.9});
  Model model(net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"), opt,
              {.compile_log = false});
  auto rec = std::make_shared<LossRecorder>();
  model.train(2, ds, {rec});
  return rec->losses;
}

// Rows (a, b, label): the two-input network trains step for step as its one-input equivalent on
// (concat(a, b), label), eagerly and compiled, and both modes agree.
TEST(Model, ANetworkOfTwoInputsTrainsFromRowsOfThreeColumns) {
  const data::Dataset plain = testing::synthetic_dataset(kRows, 2 * kFeatures, kRows);
  std::vector<Tensor> whole;
  data::TupleIterator it = plain.create_tuple_iterator({.num_epochs = 1});
  ASSERT_TRUE(it.next(whole));
  const Tensor a = ops::contiguous(ops::slice(whole[0], 1, 0, kFeatures));
  const Tensor b = ops::contiguous(ops::slice(whole[0], 1, kFeatures, 2 * kFeatures));
  std::map<ExecutionMode, std::vector<float>> by_mode;
  for (ExecutionMode mode : {PYNATIVE_MODE, GRAPH_MODE}) {
    kiln::testing::ModeScope scope(mode, true);
    set_seed(21);
    auto towers = std::make_shared<TwoTowers>();
    std::shared_ptr<nn::Dense> one = towers->as_one_input();
    const std::vector<float> two_inputs = train_on_columns(towers, {a, b, whole[1]});
    const std::vector<float> one_input = train_on_columns(one, {whole[0], whole[1]});
    ASSERT_EQ(two_inputs.size(), size_t(2 * kRows / kBatch));
    ASSERT_EQ(one_input.size(), two_inputs.size());
    for (size_t i = 0; i < one_input.size(); ++i) {
      EXPECT_NEAR(two_inputs[i], one_input[i], 1e-5 * (1 + std::abs(one_input[i])))
          << "step " << i + 1 << (mode == GRAPH_MODE ? " (graph)" : " (eager)");
    }
    EXPECT_LT(two_inputs.back(), two_inputs.front());
    const std::vector<float> trained = towers->as_one_input()->weight().to_vector<float>();
    const std::vector<float> expected = one->weight().to_vector<float>();
    for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(trained[i], expected[i], 1e-5);
    by_mode[mode] = two_inputs;
  }
  for (size_t i = 0; i < by_mode[PYNATIVE_MODE].size(); ++i) {
    EXPECT_NEAR(by_mode[GRAPH_MODE][i], by_mode[PYNATIVE_MODE][i],
                1e-5 * (1 + std::abs(by_mode[PYNATIVE_MODE][i])))
        << "step " << i + 1;
  }
}

TEST(Model, ColumnsOfDifferentBatchSizesAreNamed) {
  auto towers = std::make_shared<TwoTowers>();
  Model model(towers, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"),
              std::make_shared<optim::Momentum>(towers->trainable_params(), 0.1));
  try {
    model.train_step({Tensor::zeros({4, kFeatures}), Tensor::zeros({3, kFeatures})},
                     Tensor::zeros({4}, DType::i32));
    FAIL() << "columns of 4 and 3 samples trained";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("column 1 is f32[3, 12]"), std::string::npos) << e.what();
  }
  EXPECT_EQ(
      model.predict({Tensor::zeros({5, kFeatures}), Tensor::zeros({5, kFeatures})}).at(0).shape(),
      (Shape{5, 3}));
}

// Graph-mode evaluation runs one compiled forward for every batch: a short last batch is padded
// to the full batch, and counts only its own rows, so the metrics are eager evaluation's.
TEST(Model, GraphEvaluationPadsTheShortLastBatchInsteadOfCompilingAgain) {
  const auto train_ds = testing::synthetic_dataset(kRows, kFeatures, kBatch);
  // 7 batches of 8 rows, then one of 4.
  const auto eval_ds = testing::synthetic_dataset(60, kFeatures, kBatch, 13, false, false);
  auto model = make_model(3);
  std::map<std::string, double> graph_metrics;
  {
    kiln::testing::ModeScope graph(GRAPH_MODE, true);
    model->train(1, train_ds, {});
    graph_metrics = model->eval(eval_ds);
  }
  ASSERT_NE(model->compiled_step(), nullptr);
  EXPECT_EQ(model->compiled_step()->evaluation_compiles(), 1);
  auto eager_metrics = model->eval(eval_ds);
  EXPECT_DOUBLE_EQ(graph_metrics["accuracy"], eager_metrics["accuracy"]);
  EXPECT_NEAR(graph_metrics["loss"], eager_metrics["loss"], 1e-5);
  EXPECT_GT(graph_metrics["loss"], 0);
}

// Mixed precision in eager mode: bf16 compute, fp32 master weights, the loss still falls; a
// loss scale that overflows skips those steps instead of writing inf/NaN into the weights.
TEST(Model, AmpLevelsTrain) {
  if (!ops::arithmetic_available(DType::bf16)) GTEST_SKIP() << kiln::testing::kNoBf16Arithmetic;
  auto ds = testing::synthetic_dataset(kRows, kFeatures, kBatch);
  for (const char* level : {"O1", "O2"}) {
    set_seed(8);
    auto net = std::make_shared<models::MLP>(kFeatures, std::vector<int64_t>{16}, 3);
    auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), optim::constant_lr(0.05));
    Model model(net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"), opt,
                {.amp_level = level});
    auto rec = std::make_shared<LossRecorder>();
    model.train(4, ds, {rec});
    EXPECT_LT(rec->losses.back(), rec->losses.front()) << level;
    for (const Tensor& p : net->trainable_params()) EXPECT_EQ(p.dtype(), DType::f32) << level;
  }
  // A loss scale so large the scaled gradients overflow: every update is skipped, none lands.
  set_seed(9);
  auto net = std::make_shared<models::MLP>(kFeatures, std::vector<int64_t>{16}, 3);
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), optim::constant_lr(0.05));
  Model model(net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"), opt,
              {.amp_level = "O2", .loss_scale = "fixed:1e300"});
  std::vector<float> before = net->trainable_params()[0].to_vector<float>();
  model.train(1, ds);
  EXPECT_EQ(model.skipped_steps(), 8);
  EXPECT_EQ(model.global_step(), 8);
  EXPECT_EQ(net->trainable_params()[0].to_vector<float>(), before);
}

// On a CPU without bf16 arithmetic (AVX2), O1/O2 train in float32 and say so, instead of
// failing inside oneDNN.
TEST(Model, AmpLevelsTrainInFloat32WhereTheCpuHasNoBf16) {
  if (ops::arithmetic_available(DType::bf16)) GTEST_SKIP() << "bf16 runs here: AmpLevelsTrain";
  auto ds = testing::synthetic_dataset(kRows, kFeatures, kBatch);
  set_seed(8);
  auto net = std::make_shared<models::MLP>(kFeatures, std::vector<int64_t>{16}, 3);
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), optim::constant_lr(0.05));
  ::testing::internal::CaptureStderr();
  Model model(net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"), opt,
              {.amp_level = "O2"});
  const std::string warning = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(warning.find("amp_level O2 (bf16): this CPU has no bf16 arithmetic"), std::string::npos)
      << warning;
  auto rec = std::make_shared<LossRecorder>();
  model.train(4, ds, {rec});
  EXPECT_LT(rec->losses.back(), rec->losses.front());
}

TEST(Model, BadArgumentsAreNamed) {
  auto ds = testing::synthetic_dataset(kRows, kFeatures, kBatch);
  auto model = make_model(6);
  EXPECT_THROW(model->train(0, ds), Error);
  EXPECT_THROW(model->train(2, ds, {}, {.initial_epoch = 2}), Error);
  EXPECT_THROW(model->eval(ds, {"f1"}), Error);
  auto net = std::make_shared<models::MLP>(kFeatures, std::vector<int64_t>{4}, 3);
  EXPECT_THROW(Model(net, nullptr, nullptr, {.amp_level = "O5"}), Error);
  Model no_opt(net, nullptr, nullptr);
  try {
    no_opt.train(1, ds);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a loss function and an optimizer"),
              std::string::npos);
  }
  auto bad_ds =
      data::NumpySlicesDataset({Tensor::zeros({8, kFeatures})}, {"data"}, {.shuffle = false})
          .batch(4);
  EXPECT_THROW(model->train(1, bad_ds), Error);
}

}  // namespace
}  // namespace kiln::train::model_test

namespace kiln::train::model_test {
namespace {

// Holds a layer without registering it: nothing to train, which must be said, not run.
class UnregisteredChild : public nn::Cell {
 public:
  UnregisteredChild() : Cell("UnregisteredChild"), dense_(std::make_shared<nn::Dense>(4, 2)) {}
  Tensor construct(const Tensor& x) override { return dense_->construct(x); }

 private:
  std::shared_ptr<nn::Dense> dense_;
};

TEST(Model, ANetworkWithNothingToTrainIsALoudError) {
  auto net = std::make_shared<UnregisteredChild>();
  // A plain number is a learning rate.
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.01);
  try {
    Model model(net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"), opt);
    FAIL() << "a network without parameters was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("register_cell"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("UnregisteredChild"), std::string::npos) << e.what();
  }
  auto mlp = std::make_shared<models::MLP>(4, std::vector<int64_t>{8}, 2);
  optim::Momentum constant(mlp->trainable_params(), 0.01);
  EXPECT_DOUBLE_EQ(constant.current_lr(), 0.01);
}

}  // namespace
}  // namespace kiln::train::model_test
