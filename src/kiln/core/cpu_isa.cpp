#include "kiln/core/cpu_isa.h"

#include <cctype>
#include <cstdlib>
#include <string>

#include "kiln/core/error.h"

namespace kiln::cpu {
namespace {

Isa isa_cap_from_environment() {
  const char* value = std::getenv("KILN_MAX_CPU_ISA");
  if (value == nullptr || *value == '\0') return Isa::avx512;
  std::string v = value;
  for (char& c : v) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (v == "baseline") return Isa::baseline;
  if (v == "avx512") return Isa::avx512;
  throw Error("KILN_MAX_CPU_ISA=" + std::string(value) +
              ": expected baseline or avx512 (the most Kiln's own kernels may use)");
}

}  // namespace

bool cpu_has_avx512() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }();
  return has;
}

bool avx512_variants_built() {
#if defined(KILN_ISA_AVX512_VARIANTS)
  return true;
#else
  return false;
#endif
}

Isa kernel_isa() {
  static const Isa isa = [] {
    const Isa cap = isa_cap_from_environment();
    if (cap == Isa::avx512 && avx512_variants_built() && cpu_has_avx512()) return Isa::avx512;
    return Isa::baseline;
  }();
  return isa;
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::baseline:
      return "baseline";
    case Isa::avx512:
      return "avx512";
  }
  return "?";
}

}  // namespace kiln::cpu
