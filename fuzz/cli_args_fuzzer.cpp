// libFuzzer target for the `kiln` command line: the input, split at NUL and newline bytes, is the
// argument list after `kiln`, parsed by the same subcommands the kiln binary has
// (cli/commands.h), stopped before the commands' actions, so no input trains, reads data or
// measures anything. A CLI11 usage error or a kiln::Error is an answer; a crash, undefined
// behaviour or any other exception escaping is a finding. What train accepts is checked to be in
// range.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/cli/commands.h"
#include "kiln/core/error.h"

namespace {

// More arguments than any real command line needs only slow the search down.
constexpr size_t kMaxArguments = 64;

std::vector<std::string> split_arguments(const uint8_t* data, size_t size) {
  std::vector<std::string> args(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0 || data[i] == '\n') {
      args.emplace_back();
    } else {
      args.back().push_back(char(data[i]));
    }
  }
  return args;
}

// An option of `kiln train` the input gave, converted again: its validator let it through, so it
// must be a number in the option's range.
template <class T>
bool given(CLI::App& train, const char* name, T& value) {
  CLI::Option* option = train.get_option(name);
  if (option->count() == 0) return false;
  value = option->as<T>();
  return true;
}

void check_train_values(CLI::App& app) {
  CLI::App* train = app.get_subcommand("train");
  if (train->parsed() == 0) return;
  double lr = 0;
  if (given(*train, "--lr", lr) && !(std::isfinite(lr) && lr > 0)) __builtin_trap();
  int64_t count = 0;
  if (given(*train, "--steps", count) && count < 1) __builtin_trap();
  if (given(*train, "--epochs", count) && count < 1) __builtin_trap();
  if (given(*train, "--batch-size", count) && count < 1) __builtin_trap();
  if (given(*train, "--threads", count) && count < 0) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = split_arguments(data, size);
  if (args.size() > kMaxArguments) return 0;
  std::vector<const char*> argv{"kiln"};
  for (const std::string& a : args) argv.push_back(a.c_str());

  CLI::App app{"kiln: a C++ deep-learning training engine", "kiln"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kiln (fuzz)");
  kiln::cli::add_kiln_commands(app);
  try {
    kiln::cli::parse_without_running(app, int(argv.size()), argv.data());
  } catch (const CLI::ParseError&) {
    return 0;
  } catch (const kiln::Error&) {
    return 0;
  }
  check_train_values(app);
  return 0;
}
