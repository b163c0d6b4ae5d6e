#include "kiln/amp/level.h"

#include <string>

#include "kiln/core/error.h"

namespace kiln::amp {

AmpLevel parse_level(std::string_view name) {
  if (name == "O0") return AmpLevel::O0;
  if (name == "O1") return AmpLevel::O1;
  if (name == "O2") return AmpLevel::O2;
  if (name == "O3") return AmpLevel::O3;
  throw Error("amp_level: unknown level '" + std::string(name) + "' (expected O0, O1, O2 or O3)");
}

std::string_view level_name(AmpLevel level) {
  switch (level) {
    case AmpLevel::O0:
      return "O0";
    case AmpLevel::O1:
      return "O1";
    case AmpLevel::O2:
      return "O2";
    case AmpLevel::O3:
      return "O3";
  }
  return "?";
}

DType parse_low_dtype(std::string_view name) {
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "fp16" || name == "f16" || name == "float16") return DType::f16;
  throw Error("amp_dtype: unknown low-precision type '" + std::string(name) +
              "' (expected bf16 or fp16)");
}

}  // namespace kiln::amp
