// kiln tune: the budget's grammar, and a short tune on LeNet that stays within its budget and
// writes a YAML file kiln train --config takes, with the choices the trials measured.
#include "kiln/cli/tune_command.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <filesystem>
#include <sstream>

#include "kiln/core/error.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

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
  CLI::App app;
  TrainConfig seen;
  add_train_command(app, [&](const TrainConfig& c) { seen = c; });
  app.parse(std::vector<std::string>{yaml_path, "--config", "train"});  // CLI11: reversed
  return seen;
}

TEST(TuneCommand, ShortTuneOnLenetStaysInBudgetAndWritesATrainConfig) {
  const fs::path yaml =
      fs::temp_directory_path() / ("kiln-tune-" + std::to_string(getpid()) + ".yaml");
  TuneConfig c;
  c.model = "lenet";
  c.batch_size = 64;
  c.budget_s = 15;
  c.output = yaml.string();
  std::ostringstream out;
  const auto t0 = std::chrono::steady_clock::now();
  const TuneResult r = run_tune(c, out);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Within the budget; a trial's last step (at most a LeNet step or its compilation on a busy
  // machine) may end past it.
  EXPECT_LE(elapsed, c.budget_s + 2.0) << out.str();
  EXPECT_LE(r.elapsed_s, elapsed);

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
  fs::remove(yaml);
}

}  // namespace
}  // namespace kiln::cli
