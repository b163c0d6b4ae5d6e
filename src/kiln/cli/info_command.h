#pragma once
// `kiln info`: CPU features (from cpuid), oneDNN version and the ISA it dispatches to, the path
// mixed precision takes, threads and library versions. `--json` prints one JSON object instead.
#include <string>
#include <string_view>
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

// The path bf16 mixed precision takes: "amx" (oneDNN's AMX kernels), "avx512_bf16" (bf16 dot
// products, no AMX: the CPU has none, or ONEDNN_MAX_CPU_ISA keeps oneDNN off it),
// "avx512_emulated" (bf16 converted to fp32 in AVX-512 registers) or "float32" (no bf16
// arithmetic: O1-O3 train in fp32), with one sentence on what it means for AMP.
struct AmpPath {
  std::string name;
  std::string description;
};
AmpPath amp_path(bool bf16_instructions, bool amx, std::string_view onednn_isa,
                 bool bf16_arithmetic);

}  // namespace kiln::cli

// The global name the brief and main.cpp use.
using kiln::cli::add_info_command;
