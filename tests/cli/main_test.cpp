// The `kiln` executable: exit codes and error lines.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "testing/kiln_command.h"

namespace {

using Result = kiln::testing::CommandResult;

Result run(const std::string& args) {
  return kiln::testing::run_kiln(args);
}

TEST(KilnExecutable, UnknownFlagIsAnErrorWithStatus2) {
  Result r = run("train --no-such-flag");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_EQ(r.output.rfind("kiln: error: ", 0), 0u) << r.output;
  EXPECT_NE(r.output.find("--no-such-flag"), std::string::npos) << r.output;
}

TEST(KilnExecutable, KilnErrorsPrintOneLine) {
  Result r = run("train --data-dir /nonexistent/fashion");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("kiln: error: Fashion-MNIST not found"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
  Result no_cmd = run("");
  EXPECT_EQ(no_cmd.status, 2) << no_cmd.output;
}

TEST(KilnExecutable, InfoShowsCpuAndOneDnn) {
  Result r = run("info");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("avx512f="), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("avx512_bf16="), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("oneDNN: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("amp: bf16 arithmetic "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("; path "), std::string::npos) << r.output;
  Result help = run("train --help");
  EXPECT_EQ(help.status, 0) << help.output;
  EXPECT_NE(help.output.find("--batch-size"), std::string::npos);
}

}  // namespace
