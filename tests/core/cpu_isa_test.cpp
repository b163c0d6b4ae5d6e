// Which variant of Kiln's own kernels runs (core/cpu_isa.h), and that the process passed the
// baseline check it runs before everything else.
#include "kiln/core/cpu_isa.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace kiln::cpu::cpu_isa_test {
namespace {

TEST(CpuIsa, KernelVariantIsTheCpusBestUnlessCapped) {
  const char* cap = std::getenv("KILN_MAX_CPU_ISA");
  const bool capped = cap != nullptr && std::string(cap) == "baseline";
  const Isa expected =
      !capped && avx512_variants_built() && cpu_has_avx512() ? Isa::avx512 : Isa::baseline;
  EXPECT_EQ(kernel_isa(), expected) << "cpu_has_avx512=" << cpu_has_avx512()
                                    << " avx512_variants_built=" << avx512_variants_built();
  EXPECT_EQ(isa_name(Isa::baseline), "baseline");
  EXPECT_EQ(isa_name(Isa::avx512), "avx512");
}

TEST(CpuIsa, ThisCpuRunsTheBaselineItWasBuiltFor) {
  EXPECT_FALSE(baseline_isa().empty());
  // Below the baseline the process would have ended before main with a message instead.
  EXPECT_TRUE(cpu_runs_baseline()) << baseline_isa();
}

}  // namespace
}  // namespace kiln::cpu::cpu_isa_test
