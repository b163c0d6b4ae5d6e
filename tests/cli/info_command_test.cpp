#include "kiln/cli/info_command.h"

#include <gtest/gtest.h>

namespace kiln::cli::info_command_test {
namespace {

TEST(InfoCommand, CpuFeaturesAgreeWithTheCompiler) {
  CpuFeatures f = detect_cpu_features();
  EXPECT_FALSE(f.vendor.empty());
  __builtin_cpu_init();
  EXPECT_EQ(f.has("avx2"), bool(__builtin_cpu_supports("avx2")));
  EXPECT_EQ(f.has("avx512f"), bool(__builtin_cpu_supports("avx512f")));
  bool listed = false;
  for (auto& [name, on] : f.flags) listed = listed || name == "avx512_bf16";
  EXPECT_TRUE(listed);
  // bf16 implies the AVX-512 foundation.
  if (f.has("avx512_bf16")) EXPECT_TRUE(f.has("avx512f"));
}

// The AMP path follows oneDNN's ISA first (AMX), then the CPU's bf16 instructions, and says
// float32 where there is no bf16 arithmetic at all.
TEST(InfoCommand, AmpPathFollowsTheIsa) {
  EXPECT_EQ(amp_path(true, true, "avx512_core_amx", true).name, "amx");
  EXPECT_EQ(amp_path(true, true, "avx512_core_bf16", true).name, "avx512_bf16");
  EXPECT_NE(amp_path(true, true, "avx512_core_bf16", true).description.find("ONEDNN_MAX_CPU_ISA"),
            std::string::npos);
  EXPECT_EQ(amp_path(true, false, "avx512_core_bf16", true).name, "avx512_bf16");
  EXPECT_EQ(amp_path(false, false, "avx512_core", true).name, "avx512_emulated");
  EXPECT_EQ(amp_path(false, false, "avx2", false).name, "float32");
}

}  // namespace
}  // namespace kiln::cli::info_command_test
