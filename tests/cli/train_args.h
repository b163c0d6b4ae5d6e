#pragma once
// Parses a `kiln train ...` command line the way the kiln command does and returns the
// configuration it would run, for the tests of train's flags and YAML keys.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/cli/train_command.h"

namespace kiln::testing {

inline cli::TrainConfig parse_train_args(std::vector<std::string> args) {
  CLI::App app;
  cli::TrainConfig seen;
  bool ran = false;
  cli::add_train_command(app, [&](const cli::TrainConfig& c) {
    seen = c;
    ran = true;
  });
  args.insert(args.begin(), "train");
  std::reverse(args.begin(), args.end());  // CLI11 takes the vector in reverse order
  app.parse(args);
  if (!ran) throw std::runtime_error("train did not run");
  return seen;
}

}  // namespace kiln::testing
