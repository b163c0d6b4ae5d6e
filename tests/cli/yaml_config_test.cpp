// YAML configuration files: values go through the same checks as flags; keys, nulls, duplicates
// and folders are errors naming the file, the line and the key.
#include "kiln/cli/yaml_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>

#include "kiln/cli/option_checks.h"
#include "kiln/core/error.h"

namespace kiln::cli::yaml_config_test {
namespace {

namespace fs = std::filesystem;

struct Options {
  int64_t epochs = 5;
  double lr = -1;
  bool json = false;
};

// The error applying `text` gives ("" when it applies), and the options it set.
std::string apply(const std::string& text, Options* out = nullptr) {
  fs::path p = fs::temp_directory_path() / ("kiln_yaml_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(p) << text;
  CLI::App app;
  Options o;
  app.add_option("--epochs", o.epochs)->check(integer_in(1, 100));
  app.add_option("--lr", o.lr)->check(finite_in(0, 1000));
  app.add_flag("--json", o.json);
  app.add_option("--config", o.epochs);
  std::string error;
  try {
    apply_yaml_config(app, p.string(), "kiln test");
  } catch (const Error& e) {
    error = e.what();
  }
  fs::remove(p);
  if (out) *out = o;
  return error;
}

void expect_has(const std::string& m, const std::string& part) {
  EXPECT_NE(m.find(part), std::string::npos) << "'" << part << "' not in: " << m;
}

TEST(YamlConfig, AppliesKeysThroughTheFlagsChecks) {
  Options o;
  EXPECT_EQ(apply("epochs: 7\nlr: 1e-3\njson: yes\n", &o), "");
  EXPECT_EQ(o.epochs, 7);
  EXPECT_DOUBLE_EQ(o.lr, 1e-3);
  EXPECT_TRUE(o.json);
  EXPECT_EQ(apply(""), "");
  expect_has(apply("lr: nan\n"),
             "key 'lr': --lr: must be a finite number > 0 and <= 1000, got 'nan'");
  expect_has(apply("epochs: 1000\n"), "key 'epochs'");
  std::string flag = apply("json: maybe\n");
  expect_has(flag, "key 'json'");
  expect_has(flag, "maybe");
}

TEST(YamlConfig, BadKeysNameTheLine) {
  expect_has(apply("epochs: 2\n~: 3\n"), "line 2, column 1: a key must be a flag name");
  expect_has(apply("epochs: 2\nlr:\n"), "key 'lr' has no value");
  expect_has(apply("epochs: 2\nepochs: 3\n"), "line 2, column 1: key 'epochs' appears twice");
  expect_has(apply("help: true\n"), "unknown key 'help'");
  expect_has(apply("config: x\n"), "unknown key 'config'");
  expect_has(apply("epochs: [1, 2]\n"), "key 'epochs' must have a single value");
  expect_has(apply("- 1\n- 2\n"), "is not a mapping of flag names to values");
  expect_has(apply("epochs: [1,\n"), "line ");
}

TEST(YamlConfig, FoldersAndMissingFilesAreFileErrors) {
  CLI::App app;
  EXPECT_THROW(apply_yaml_config(app, fs::temp_directory_path().string(), "kiln test"), FileError);
  EXPECT_THROW(apply_yaml_config(app, "/nonexistent/x.yaml", "kiln test"), FileError);
}

}  // namespace
}  // namespace kiln::cli::yaml_config_test
