// The kiln binary's subcommands on one app (cli/commands.h) and the parse-only mode the argument
// fuzzer (fuzz/cli_args_fuzzer.cpp) drives: a command line is checked, nothing runs.
#include "kiln/cli/commands.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "kiln/core/error.h"

namespace kiln::cli::commands_test {
namespace {

// `kiln ARGS` parsed without running anything: "" when accepted, else the error.
std::string parse_only(const std::vector<std::string>& args) {
  CLI::App app{"kiln", "kiln"};
  app.require_subcommand(1);
  add_kiln_commands(app);
  std::vector<const char*> argv{"kiln"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    parse_without_running(app, int(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return e.get_name() + ": " + e.what();
  }
  return "";
}

TEST(KilnCommands, HasEverySubcommandOfTheBinary) {
  CLI::App app;
  add_kiln_commands(app);
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"train", "info", "launch", "data", "convert", "record",
                                             "eval", "predict", "export", "report", "plan", "bench",
                                             "tune"}));
}

TEST(KilnCommands, ParseOnlyRunsNoAction) {
  CLI::App app;
  bool ran = false;
  int value = 0;
  CLI::App* probe = app.add_subcommand("probe");
  CLI::App* inner = probe->add_subcommand("inner");
  inner->add_option("--value", value)->check(CLI::Range(1, 9));
  inner->callback([&ran] { ran = true; });
  probe->callback([&ran] { ran = true; });
  app.callback([&ran] { ran = true; });
  const char* argv[] = {"kiln", "probe", "inner", "--value", "7"};
  parse_without_running(app, 5, argv);
  EXPECT_FALSE(ran);
  EXPECT_TRUE(inner->parsed());
  EXPECT_EQ(value, 7);
  const char* bad[] = {"kiln", "probe", "inner", "--value", "10"};
  EXPECT_THROW(parse_without_running(app, 5, bad), CLI::ValidationError);
  EXPECT_FALSE(ran);
  app.parse(3, argv);  // a plain parse afterwards runs the actions again
  EXPECT_TRUE(ran);
}

// The fuzzer's first finding: the commands' state lives in their actions, so parsing without
// running must keep them (removing them freed what `record verify FILE...` writes into).
TEST(KilnCommands, ParseOnlyKeepsTheStateTheOptionsWriteInto) {
  EXPECT_EQ(parse_only({"record", "verify", "a.rec", "b.rec", "-q"}), "");
  EXPECT_EQ(parse_only({"predict", "c.safetensors", "a.png", "b.jpg", "--top-k", "5"}), "");
}

TEST(KilnCommands, ParseOnlyAcceptsRealCommandLinesWithoutRunningThem) {
  // Each would train, read a checkpoint or start mpirun if its action ran.
  EXPECT_EQ(parse_only({"train", "--model", "lenet", "--steps", "20", "--lr", "0.05"}), "");
  EXPECT_EQ(parse_only({"eval", "/nonexistent.safetensors", "--data", "mnist"}), "");
  EXPECT_EQ(parse_only({"launch", "-n", "2", "--", "train", "--steps", "5"}), "");
  EXPECT_EQ(parse_only({"info", "--peaks", "--remeasure"}), "");
}

TEST(KilnCommands, BadNumbersAreUsageErrorsNamingTheFlag) {
  EXPECT_NE(parse_only({"train", "--lr", "nan"}).find("--lr"), std::string::npos);
  EXPECT_NE(parse_only({"train", "--steps", "-1"}).find("--steps"), std::string::npos);
  EXPECT_NE(parse_only({"train", "--seed", "-1"}).find("--seed"), std::string::npos);
  EXPECT_NE(parse_only({"eval", "c", "--data", "mnist", "--batch-size", "0"}).find("--batch-size"),
            std::string::npos);
  EXPECT_NE(parse_only({"bogus"}), "");
  EXPECT_NE(parse_only({}), "");  // a subcommand is required
}

}  // namespace
}  // namespace kiln::cli::commands_test
