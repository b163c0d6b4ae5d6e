#pragma once
// `kiln info`: CPU features (from cpuid), oneDNN version and the ISA it dispatches to, threads
// and library versions. `--json` prints one JSON object instead.
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace kiln::cli {

void add_info_command(CLI::App& app);

struct CpuFeatures {
  std::string vendor, brand;
  std::vector<std::pair<std::string, bool>> flags;  // e.g. {"avx512f", true}
  bool has(const std::string& flag) const;
};
CpuFeatures detect_cpu_features();

}  // namespace kiln::cli

// The global name the brief and main.cpp use.
using kiln::cli::add_info_command;
