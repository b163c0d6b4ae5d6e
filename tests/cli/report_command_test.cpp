// kiln report as a user runs it: `kiln train --profile DIR`, then `kiln report DIR` rebuilds the
// page and the tables from the raw files alone, and `kiln report DIR --text` prints the summary.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "testing/kiln_command.h"

namespace kiln::cli::report_command_test {
namespace {

namespace fs = std::filesystem;
using kiln::testing::CommandResult;
using kiln::testing::run_kiln;

std::string read_text(const fs::path& path) {
  std::ifstream file(path);
  std::stringstream s;
  s << file.rdbuf();
  return s.str();
}

class ReportCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kiln::testing::kiln_exe())) {
      GTEST_SKIP() << "no kiln binary (build target kiln)";
    }
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  // This machine's peaks measured into the test's folder, not the user's cache.
  std::string env() const { return "KILN_CACHE_DIR=" + (root_ / "cache").string() + " "; }

  const fs::path root_ =
      fs::temp_directory_path() / ("kiln-report-command-" + std::to_string(getpid()));
};

TEST_F(ReportCommand, TrainWithProfileThenReportRebuildsThePageAndPrintsTheSummary) {
  const fs::path dir = root_ / "profile";
  const CommandResult train = run_kiln(
      "train --model lenet --mode graph --steps 6 --batch-size 16 "
      "--print-every 0 --profile-compare off --profile " +
          dir.string(),
      env());
  ASSERT_TRUE(train.exited && train.status == 0) << train.output;
  EXPECT_NE(train.output.find("profile written: " + (dir / "report.html").string()),
            std::string::npos)
      << train.output;
  for (const char* file : {"trace.json", "profile.json", "ops.csv", "steps.csv", "report.html"}) {
    ASSERT_TRUE(fs::exists(dir / file)) << file << "\n" << train.output;
  }
  const std::string written = read_text(dir / "report.html");

  // The page and the tables gone, `kiln report DIR` builds them again from the raw files and
  // prints the page's path.
  for (const char* file : {"report.html", "ops.csv", "steps.csv"}) fs::remove(dir / file);
  const CommandResult report = run_kiln("report " + dir.string(), env());
  ASSERT_TRUE(report.exited && report.status == 0) << report.output;
  EXPECT_EQ(report.output, (dir / "report.html").string() + "\n");
  ASSERT_TRUE(fs::exists(dir / "report.html"));
  const std::string rebuilt = read_text(dir / "report.html");
  EXPECT_EQ(rebuilt, written) << "the same page from the same raw files";
  EXPECT_NE(rebuilt.find("id=top-ops"), std::string::npos);
  const std::string ops = read_text(dir / "ops.csv");
  EXPECT_EQ(ops.rfind("op,mode,kernel,", 0), 0u) << ops.substr(0, 200);
  EXPECT_NE(ops.find("conv2d"), std::string::npos) << ops.substr(0, 400);
  // steps.csv: the header and one line per step.
  const std::string steps = read_text(dir / "steps.csv");
  EXPECT_EQ(std::count(steps.begin(), steps.end(), '\n'), 1 + 6) << steps;

  const CommandResult text = run_kiln("report " + dir.string() + " --text", env());
  ASSERT_TRUE(text.exited && text.status == 0) << text.output;
  EXPECT_EQ(text.output.rfind("profile " + dir.string() + ": 6 steps, ", 0), 0u) << text.output;
  // Graph mode's step in eager mode's phases, each launch's time in its node's.
  for (const char* part : {"step (mean of the steady steps)",
                           "forward: ", "backward: ", "optimizer update: ", "top ops", "conv2d",
                           "allocator peak", "recommendations:"}) {
    EXPECT_NE(text.output.find(part), std::string::npos) << part << "\n" << text.output;
  }
  EXPECT_EQ(text.output.find("report.html"), std::string::npos) << "--text writes no page";
}

TEST_F(ReportCommand, AFolderWithoutAProfileIsAClearError) {
  const CommandResult r = run_kiln("report " + root_.string(), env());
  ASSERT_TRUE(r.exited);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("holds no trace.json"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("kiln train --profile"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kiln::cli::report_command_test
