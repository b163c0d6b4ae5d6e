#include "kiln/ops/cpu_support.h"

#include <oneapi/dnnl/dnnl.h>

namespace kiln::ops {
namespace {

// dnnl_cpu_isa_t values are feature masks: an ISA includes another when it has all its bits.
bool isa_includes(dnnl_cpu_isa_t isa, dnnl_cpu_isa_t feature) {
  return (static_cast<unsigned>(isa) & static_cast<unsigned>(feature)) ==
         static_cast<unsigned>(feature);
}

}  // namespace

bool dnnl_has_avx512_core() {
  static const bool has = isa_includes(dnnl_get_effective_cpu_isa(), dnnl_cpu_isa_avx512_core);
  return has;
}

bool arithmetic_available(DType dtype) {
  return dtype != DType::bf16 || dnnl_has_avx512_core();
}

}  // namespace kiln::ops
