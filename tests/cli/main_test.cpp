// The `kiln` executable: exit codes and error lines.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "kiln/core/cpu_isa.h"
#include "testing/kiln_command.h"

namespace kiln::cli::main_test {
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

// Which variant of Kiln's own kernels runs (core/cpu_isa.h): the CPU's best unless
// KILN_MAX_CPU_ISA caps it, and a value that names no variant is an error, not a silent default.
TEST(KilnExecutable, KernelIsaFollowsTheCpuAndKilnMaxCpuIsa) {
  const std::string best = kiln::cpu::isa_name(kiln::cpu::kernel_isa()).data();
  Result r = run("info");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("kernels: " + best + " (built for "), std::string::npos) << r.output;
  Result capped = kiln::testing::run_kiln("info --json", "KILN_MAX_CPU_ISA=baseline ");
  EXPECT_EQ(capped.status, 0) << capped.output;
  EXPECT_NE(capped.output.find("\"isa\":\"baseline\""), std::string::npos) << capped.output;
  Result bad = kiln::testing::run_kiln("info", "KILN_MAX_CPU_ISA=avx9000 ");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("kiln: error: KILN_MAX_CPU_ISA=avx9000: expected baseline or avx512"),
            std::string::npos)
      << bad.output;
}

}  // namespace
}  // namespace kiln::cli::main_test
