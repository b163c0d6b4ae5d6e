// kiln train --sink-size: dataset sink mode from the command line (and YAML's sink-size).
#include <gtest/gtest.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/train_args.h"
#include "kiln/cli/train_command.h"

namespace kiln::cli::sink_size_test {
namespace {

namespace fs = std::filesystem;

using kiln::testing::parse_train_args;

TEST(SinkSize, FromTheFlagOrYamlAndOffByDefault) {
  EXPECT_EQ(parse_train_args({}).sink_size, 0);
  EXPECT_EQ(parse_train_args({"--sink-size", "100"}).sink_size, 100);
  EXPECT_EQ(parse_train_args({"--sink-size", "-1"}).sink_size, -1);
  fs::path yaml = fs::temp_directory_path() / ("kiln_sink_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(yaml) << "sink-size: 25\n";
  EXPECT_EQ(parse_train_args({"--config", yaml.string()}).sink_size, 25);
  EXPECT_EQ(parse_train_args({"--config", yaml.string(), "--sink-size", "5"}).sink_size, 5);
  fs::remove(yaml);
  try {
    parse_train_args({"--sink-size", "-2"});
    FAIL() << "--sink-size -2 was taken";
  } catch (const CLI::ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("--sink-size"), std::string::npos) << e.what();
  }
}

// The loss lines (every step's) without the timing lines, which differ run to run.
std::string loss_lines(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line)) {
    if (line.find("loss is") != std::string::npos) out += line + "\n";
  }
  return out;
}

TEST(SinkSize, SinksTrainTheSameStepsAndCountThemInTheSummary) {
  TrainConfig c;
  c.mode = "graph";
  c.steps = 24;
  c.batch_size = 32;
  c.print_every = 1;
  c.threads = 1;
  c.json = true;
  std::ostringstream per_step_out, sunk_out;
  run_train(c, per_step_out);
  c.sink_size = 8;
  TrainReport sunk = run_train(c, sunk_out);
  const std::string lines = loss_lines(per_step_out.str());
  EXPECT_NE(lines.find("epoch: 1 step: 24, loss is "), std::string::npos) << lines;
  EXPECT_EQ(loss_lines(sunk_out.str()), lines);
  const std::string text = sunk_out.str();
  nlohmann::json j = nlohmann::json::parse(text.substr(text.rfind('\n', text.size() - 2) + 1));
  EXPECT_EQ(j["steps"], 24);
  EXPECT_EQ(j["sink_size"], 8);
  EXPECT_EQ(sunk.steps, 24);
  EXPECT_GT(sunk.images_per_sec, 0);
}

}  // namespace
}  // namespace kiln::cli::sink_size_test
