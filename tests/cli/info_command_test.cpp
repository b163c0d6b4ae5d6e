#include "kiln/cli/info_command.h"

#include <gtest/gtest.h>

namespace kiln::cli {
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

}  // namespace
}  // namespace kiln::cli
