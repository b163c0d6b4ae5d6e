// Every numeric flag of `kiln train` and `kiln data bench`, on the command line and in YAML, is
// checked for range and finiteness; errors name the flag (or the file and key) and the value.
#include "kiln/cli/option_checks.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kiln/cli/data_command.h"
#include "kiln/cli/train_command.h"
#include "kiln/core/error.h"

namespace kiln::cli::option_checks_test {
namespace {

namespace fs = std::filesystem;

// The error `kiln train ARGS` stops with before training ("" when it would train).
std::string train_error(std::vector<std::string> args) {
  CLI::App app;
  add_train_command(app, [](const TrainConfig&) {});
  args.insert(args.begin(), "train");
  std::reverse(args.begin(), args.end());
  try {
    app.parse(args);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::string data_bench_error(std::vector<std::string> args) {
  CLI::App app;
  add_data_command(app);
  args.insert(args.begin(), {"data", "bench", "--source", "fashion-mnist:/nonexistent"});
  std::reverse(args.begin(), args.end());
  try {
    app.parse(args);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::string write_yaml(const std::string& name, const std::string& text) {
  fs::path p = fs::temp_directory_path() / ("kiln_checks_" + std::to_string(::getpid()) + name);
  std::ofstream(p) << text;
  return p.string();
}

void expect_has(const std::string& m, const std::string& part) {
  EXPECT_NE(m.find(part), std::string::npos) << "'" << part << "' not in: " << m;
}

TEST(OptionChecks, ValidatorsAcceptTheRangeAndNothingElse) {
  auto check = [](const CLI::Validator& v, std::string s) { return v(s); };
  CLI::Validator one_to_ten = integer_in(1, 10);
  EXPECT_EQ(check(one_to_ten, "1"), "");
  EXPECT_EQ(check(one_to_ten, "10"), "");
  for (const char* bad : {"0", "11", "-1", "", "1.5", "1e3", " 3", "3x", "99999999999999999999"}) {
    EXPECT_NE(check(one_to_ten, bad), "") << bad;
  }
  CLI::Validator seed = unsigned_integer();
  EXPECT_EQ(check(seed, "0"), "");
  EXPECT_EQ(check(seed, "18446744073709551615"), "");
  for (const char* bad : {"-1", "18446744073709551616", "+1", "1.0", ""}) {
    EXPECT_NE(check(seed, bad), "") << bad;
  }
  CLI::Validator lr = finite_in(0, 1000);
  EXPECT_EQ(check(lr, "1e-3"), "");
  EXPECT_EQ(check(lr, "1000"), "");
  for (const char* bad : {"0", "-0.1", "nan", "NaN", "inf", "-inf", "1e400", "1001", "0.1x", ""}) {
    EXPECT_NE(check(lr, bad), "") << bad;
  }
  EXPECT_EQ(check(finite_in(0, 1, /*lo_inclusive=*/true), "0"), "");
}

TEST(OptionChecks, TrainFlagsNameTheFlagAndTheValue) {
  struct Case {
    const char* flag;
    const char* value;
  };
  for (Case c : {Case{"--lr", "nan"},
                 {"--lr", "-inf"},
                 {"--lr", "-0.1"},
                 {"--lr", "0"},
                 {"--lr", "inf"},
                 {"--steps", "-1"},
                 {"--steps", "0"},
                 {"--seed", "-1"},
                 {"--epochs", "0"},
                 {"--epochs", "-3"},
                 {"--batch-size", "0"},
                 {"--batch-size", "99999999999"},
                 {"--threads", "-1"},
                 {"--threads", "100000"},
                 {"--micro-batches", "0"},
                 {"--print-every", "-5"},
                 {"--bucket-cap-mb", "nan"},
                 {"--bucket-cap-mb", "0"}}) {
    std::string m = train_error({c.flag, c.value});
    expect_has(m, c.flag);
    expect_has(m, std::string("'") + c.value + "'");
  }
  EXPECT_EQ(train_error({"--lr", "0.2", "--steps", "3", "--seed", "0", "--threads", "0"}), "");
  // fixed:inf and fixed:nan are not loss scales.
  expect_has(train_error({"--loss-scale", "fixed:inf"}), "--loss-scale");
  expect_has(train_error({"--loss-scale", "fixed:nan"}), "--loss-scale");
}

TEST(OptionChecks, DataBenchFlagsAreChecked) {
  for (const char* flag : {"--batch-size", "--workers", "--batch-workers", "--epochs", "--prefetch",
                           "--rows-per-block"}) {
    std::string m = data_bench_error({flag, "-1"});
    expect_has(m, flag);
    expect_has(m, "'-1'");
  }
}

TEST(OptionChecks, YamlValuesAreCheckedLikeFlagsAndNameTheFileAndKey) {
  for (const char* text : {"lr: nan\n", "lr: -0.1\n", "lr: .inf\n", "steps: -1\n", "seed: -1\n"}) {
    std::string path = write_yaml("values.yaml", text);
    std::string key = std::string(text).substr(0, std::string(text).find(':'));
    std::string m = train_error({"--config", path});
    expect_has(m, path);
    expect_has(m, "'" + key + "'");
    fs::remove(path);
  }
}

TEST(OptionChecks, YamlNullKeysAndValuesNameTheFileAndKey) {
  std::string null_value = write_yaml("null_value.yaml", "epochs: 2\nlr:\n");
  std::string m = train_error({"--config", null_value});
  expect_has(m, null_value);
  expect_has(m, "'lr' has no value");
  EXPECT_EQ(m.find("bad conversion"), std::string::npos) << m;
  for (const char* text : {"~: 3\n", "null: 3\n", ": 3\n", "[a, b]: 3\n"}) {
    std::string path = write_yaml("null_key.yaml", text);
    m = train_error({"--config", path});
    expect_has(m, path);
    expect_has(m, "line 1");
    expect_has(m, "a key must be a flag name");
    fs::remove(path);
  }
  fs::remove(null_value);
}

TEST(OptionChecks, ConfigOrResumeThatIsAFolderSaysSo) {
  std::string dir = fs::temp_directory_path().string();
  std::string m = train_error({"--config", dir});
  expect_has(m, "--config " + dir + " is a folder");
  TrainConfig c;
  c.resume = dir;
  std::ostringstream out;
  try {
    run_train(c, out);
    FAIL() << "expected a FileError";
  } catch (const FileError& e) {
    expect_has(e.what(), "--resume " + dir + " is a folder");
  }
}

TEST(OptionChecks, RunTrainRefusesNonsenseSetInCode) {
  auto error_of = [](TrainConfig c) -> std::string {
    std::ostringstream out;
    try {
      c.data_dir = "/nonexistent/fashion";  // never reached when the check works
      run_train(c, out);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  TrainConfig c;
  c.lr = std::nan("");
  expect_has(error_of(c), "--lr");
  c.lr = 0;
  expect_has(error_of(c), "--lr");
  c = TrainConfig{};
  c.threads = -2;
  expect_has(error_of(c), "--threads");
  c = TrainConfig{};
  c.print_every = -1;
  expect_has(error_of(c), "--print-every");
}

}  // namespace
}  // namespace kiln::cli::option_checks_test
