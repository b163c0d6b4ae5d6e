// kiln train's --conv-algorithm (flag and YAML key) reaches Context::conv_algorithm, and --threads
// above the cores this process may run on is warned about by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/train_args.h"
#include "kiln/cli/train_command.h"
#include "kiln/core/context.h"
#include "kiln/core/error.h"
#include "kiln/core/threads.h"

namespace kiln::cli::conv_algorithm_and_threads_test {
namespace {

namespace fs = std::filesystem;

using kiln::testing::parse_train_args;

TEST(ConvAlgorithmFlag, ParsesFromTheCommandLineAndYaml) {
  EXPECT_EQ(parse_train_args({}).conv_algorithm, "auto");
  EXPECT_EQ(parse_train_args({"--conv-algorithm", "direct"}).conv_algorithm, "direct");
  EXPECT_EQ(parse_train_args({"--conv-algorithm", "winograd"}).conv_algorithm, "winograd");
  fs::path yaml = fs::temp_directory_path() / ("kiln_conv_alg_" + std::to_string(::getpid()));
  std::ofstream(yaml) << "conv-algorithm: direct\n";
  EXPECT_EQ(parse_train_args({"--config", yaml.string()}).conv_algorithm, "direct");
  EXPECT_EQ(
      parse_train_args({"--config", yaml.string(), "--conv-algorithm", "winograd"}).conv_algorithm,
      "winograd");  // the command line wins
  fs::remove(yaml);
  try {
    parse_train_args({"--conv-algorithm", "fft"});
    FAIL() << "fft was accepted";
  } catch (const CLI::ParseError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--conv-algorithm"), std::string::npos) << m;
    EXPECT_NE(m.find("fft"), std::string::npos) << m;
  }
}

TEST(ConvAlgorithmFlag, ReachesTheContextBeforeTraining) {
  const Context before = get_context();
  TrainConfig c;
  c.conv_algorithm = "direct";
  c.data_dir = "/nonexistent/fashion";  // stops the run right after the context is set
  std::ostringstream out;
  EXPECT_THROW(run_train(c, out), Error);
  EXPECT_EQ(get_context().conv_algorithm, "direct");
  c.conv_algorithm = "fft";
  try {
    run_train(c, out);
    FAIL() << "fft was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--conv-algorithm"), std::string::npos) << e.what();
  }
  set_context(before);
}

TEST(ThreadsFlag, MoreThreadsThanCoresIsWarnedAboutByName) {
  const int threads_before = num_threads();
  TrainConfig c;
  c.threads = available_cores() + 1;
  c.data_dir = "/nonexistent/fashion";
  std::ostringstream out;
  ::testing::internal::CaptureStderr();
  EXPECT_THROW(run_train(c, out), Error);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("warning: --threads " + std::to_string(c.threads)), std::string::npos) << err;

  c.threads = available_cores();
  ::testing::internal::CaptureStderr();
  EXPECT_THROW(run_train(c, out), Error);
  EXPECT_EQ(::testing::internal::GetCapturedStderr().find("warning"), std::string::npos);
  set_num_threads(threads_before);
}

}  // namespace
}  // namespace kiln::cli::conv_algorithm_and_threads_test
