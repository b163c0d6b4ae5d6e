// kiln tune: the budget's grammar, and a short tune on LeNet that stays within its budget and
// writes a YAML file kiln train --config takes, with the choices the trials measured.
#include "kiln/cli/tune_command.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli/train_args.h"
#include "kiln/core/error.h"

namespace kiln::cli::tune_command_test {
namespace {

namespace fs = std::filesystem;

// How far past its budget a tune may end (see the budget checks below).
constexpr double kBudgetSlackS = 1.0;

TEST(TuneCommand, BudgetTakesSecondsMinutesAndHours) {
  EXPECT_DOUBLE_EQ(parse_budget("60s"), 60);
  EXPECT_DOUBLE_EQ(parse_budget("90"), 90);
  EXPECT_DOUBLE_EQ(parse_budget("1.5m"), 90);
  EXPECT_DOUBLE_EQ(parse_budget("1h"), 3600);
  for (const char* bad : {"", "s", "0", "-5s", "ten", "5 s", "nan", "1e9"}) {
    try {
      parse_budget(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--budget"), std::string::npos) << e.what();
    }
  }
}

TrainConfig parse_train_config(const std::string& yaml_path) {
  return testing::parse_train_args({"--config", yaml_path});
}

// `kiln tune` on LeNet b64 within `budget_s`, its file at `yaml`, checked to stay within the
// budget: trials stop before a step would end past it; what may not is writing the table and the
// file, and a compilation slower than any before it on a busy machine.
TuneResult timed_lenet_tune(double budget_s, std::vector<std::string> only, const fs::path& yaml,
                            std::ostringstream& out) {
  TuneConfig c;
  c.model = "lenet";
  c.batch_size = 64;
  c.budget_s = budget_s;
  c.only = std::move(only);
  c.output = yaml.string();
  const auto t0 = std::chrono::steady_clock::now();
  const TuneResult r = run_tune(c, out);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LE(elapsed, budget_s + kBudgetSlackS) << out.str();
  EXPECT_LE(r.elapsed_s, elapsed);
  return r;
}

TEST(TuneCommand, ShortTuneOnLenetStaysInBudgetAndWritesATrainConfig) {
  const fs::path yaml =
      fs::temp_directory_path() / ("kiln-tune-" + std::to_string(getpid()) + ".yaml");
  std::ostringstream out;
  const TuneResult r = timed_lenet_tune(15, {}, yaml, out);

  ASSERT_FALSE(r.trials.empty());
  EXPECT_EQ(r.trials[0].option, "baseline");
  EXPECT_GT(r.baseline_images_per_sec, 0) << out.str();
  EXPECT_GE(r.best_images_per_sec, r.baseline_images_per_sec);
  int measured = 0;
  for (const TuneTrial& t : r.trials) {
    if (t.images_per_sec > 0) {
      ++measured;
      EXPECT_NEAR(t.vs_baseline, t.images_per_sec / r.baseline_images_per_sec - 1, 1e-9);
    } else {
      EXPECT_FALSE(t.note.empty()) << t.option << " " << t.value << ": says why not";
    }
  }
  EXPECT_GE(measured, 2) << out.str();
  EXPECT_NE(out.str().find("vs baseline"), std::string::npos) << out.str();

  // kiln train --config takes the file and gets the best combination.
  ASSERT_TRUE(fs::exists(yaml));
  const TrainConfig t = parse_train_config(yaml.string());
  EXPECT_EQ(t.model, "lenet");
  EXPECT_EQ(t.batch_size, 64);
  EXPECT_EQ(t.mode, r.best.mode);
  EXPECT_EQ(t.amp_level, r.best.amp_level);
  EXPECT_EQ(t.workers, r.best.workers);
  EXPECT_EQ(t.prefetch, r.best.prefetch);
  EXPECT_EQ(t.micro_batches, r.best.micro_batches);
  EXPECT_EQ(t.graph_kernel, r.best.graph_kernel);
  EXPECT_EQ(t.sink_size, r.best.sink_size);
  fs::remove(yaml);
}

// A sink's steps run with no callback between them, so a trial stops only at a sink's end: the
// sizes tried are cut to fit the trial's window, and a sink trial is timed over whole sinks.
TEST(TuneCommand, SinkSizeTrialsRunWholeSinksWithinTheBudget) {
  const fs::path yaml =
      fs::temp_directory_path() / ("kiln-tune-sink-" + std::to_string(getpid()) + ".yaml");
  std::ostringstream out;
  const TuneResult r = timed_lenet_tune(6, {"sink-size"}, yaml, out);

  int measured = 0;
  for (const TuneTrial& t : r.trials) {
    EXPECT_TRUE(t.option == "baseline" || t.option == "sink-size") << t.option;
    if (t.option != "sink-size" || t.images_per_sec <= 0) continue;
    ++measured;
    const int64_t sink = std::stoll(t.value);
    EXPECT_GE(sink, 2);
    // "N steps in S s": the window holds whole sinks, and an epoch (937 full batches of
    // Fashion-MNIST) ends with a shorter one when a trial gets that far, as LeNet's fast
    // steps can within one trial's window.
    constexpr int64_t kEpochSteps = 937;
    const int64_t steps = std::stoll(t.note);
    EXPECT_GE(steps, sink) << t.note;
    EXPECT_EQ(steps % kEpochSteps % sink, 0) << t.note;
  }
  EXPECT_GE(measured, 1) << out.str();
  fs::remove(yaml);
}

// The config file tune writes for `r`, as kiln train --config reads it back.
std::pair<std::string, TrainConfig> written_config(const TuneResult& r) {
  const fs::path yaml =
      fs::temp_directory_path() / ("kiln-tune-yaml-" + std::to_string(getpid()) + ".yaml");
  const std::string text = tune_yaml(TuneConfig{}, r);
  {
    std::ofstream file(yaml);
    file << text;
  }
  TrainConfig read = parse_train_config(yaml.string());
  fs::remove(yaml);
  return {text, read};
}

TEST(TuneCommand, ConfigFileCarriesTheSinkSize) {
  TuneResult r;
  r.best.model = "lenet";
  r.best.mode = "graph";
  for (int64_t sink : {16, 0}) {
    r.best.sink_size = sink;
    const auto [text, t] = written_config(r);
    EXPECT_EQ(text.find("sink-size:") != std::string::npos, sink != 0) << text;
    EXPECT_EQ(t.sink_size, sink) << text;
    EXPECT_EQ(t.mode, "graph") << text;
  }
}

// The baseline is eager and unfused; a config file naming eager must still say fusion off, or
// kiln train's default (on) would stand in for what was timed.
TEST(TuneCommand, ConfigFileCarriesFusionInEagerMode) {
  TuneResult r;
  r.best.model = "lenet";
  r.best.mode = "eager";
  for (bool fusion : {false, true}) {
    r.best.graph_kernel = fusion;
    const auto [text, t] = written_config(r);
    EXPECT_EQ(t.mode, "eager") << text;
    EXPECT_EQ(t.graph_kernel, fusion) << text;
  }
}

TEST(TuneCommand, OnlyNamesTheOptionsItTakes) {
  TuneConfig c;
  c.only = {"sink-size", "fusion-on"};
  std::ostringstream out;
  try {
    run_tune(c, out);
    ADD_FAILURE() << "accepted --only fusion-on";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'fusion-on'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sink-size"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln::cli::tune_command_test
