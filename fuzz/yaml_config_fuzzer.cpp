// libFuzzer target for YAML configuration files and the numeric option checks they go through:
// any file, applied to a command with options of each kind `kiln train` has (integers with
// ranges, a seed, a learning rate, choices, flags, paths), must configure it or give a
// kiln::Error, never a crash, undefined behaviour or a library's exception escaping.
#include <CLI/CLI.hpp>
#include <cstdint>

#include "fuzz/fuzz_file.h"
#include "kiln/cli/option_checks.h"
#include "kiln/cli/yaml_config.h"
#include "kiln/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzFile file(data, size);
  CLI::App app("fuzz");
  int64_t epochs = 5, steps = -1, batch = 64;
  int threads = 0;
  uint64_t seed = 1;
  double lr = -1;
  std::string model = "lenet", dir;
  bool json = false;
  app.add_option("--epochs", epochs)->check(kiln::cli::integer_in(1, 1'000'000));
  app.add_option("--steps", steps)->check(kiln::cli::integer_in(1, INT64_MAX));
  app.add_option("--batch-size", batch)->check(kiln::cli::integer_in(1, 1 << 20));
  app.add_option("--threads", threads)->check(kiln::cli::integer_in(0, 4096));
  app.add_option("--seed", seed)->check(kiln::cli::unsigned_integer());
  app.add_option("--lr", lr)->check(kiln::cli::finite_in(0, 1000));
  app.add_option("--model", model)->check(CLI::IsMember({"lenet", "resnet20", "mlp"}));
  app.add_option("--data-dir", dir);
  app.add_flag("--json", json);
  try {
    kiln::cli::apply_yaml_config(app, file.path(), "fuzz");
  } catch (const kiln::Error&) {
    return 0;
  }
  // Whatever was accepted is in range.
  if (epochs < 1 || batch < 1 || threads < 0 || threads > 4096) __builtin_trap();
  if (lr != -1 && !(lr > 0 && lr <= 1000)) __builtin_trap();
  return 0;
}
