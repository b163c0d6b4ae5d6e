#include "kiln/core/dtype.h"

#include <immintrin.h>

#include <string>

namespace kiln {

DType dtype_from_name(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (dtype_name(DType(i)) == name) return DType(i);
  }
  if (name == "float32") return DType::f32;
  if (name == "float16" || name == "fp16") return DType::f16;
  if (name == "bfloat16") return DType::bf16;
  if (name == "int32") return DType::i32;
  if (name == "int64") return DType::i64;
  if (name == "uint8") return DType::u8;
  throw Error("unknown dtype '" + std::string(name) +
              "' (expected f32, f16, bf16, i32, i64, u8 or bool)");
}

// F16C conversions round to nearest even in hardware (imm 0 = _MM_FROUND_TO_NEAREST_INT).
float f16_to_float(f16_t v) { return _cvtsh_ss(v.bits); }
f16_t float_to_f16(float f) { return {_cvtss_sh(f, 0)}; }

namespace {

template <class T>
float load_as_float(const void* p, int64_t i) {
  if constexpr (std::is_same_v<T, bf16_t>) {
    return bf16_to_float(static_cast<const bf16_t*>(p)[i]);
  } else if constexpr (std::is_same_v<T, f16_t>) {
    return f16_to_float(static_cast<const f16_t*>(p)[i]);
  } else {
    return float(static_cast<const T*>(p)[i]);
  }
}

template <class Src, class Dst>
void convert_typed(const void* src, void* dst, int64_t n) {
  auto* out = static_cast<Dst*>(dst);
  if constexpr (std::is_same_v<Src, Dst>) {
    std::memcpy(dst, src, size_t(n) * sizeof(Src));
  } else if constexpr (std::is_same_v<Dst, bf16_t>) {
#pragma omp parallel for if (n > 65536) schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(load_as_float<Src>(src, i));
  } else if constexpr (std::is_same_v<Dst, f16_t>) {
#pragma omp parallel for if (n > 65536) schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_f16(load_as_float<Src>(src, i));
  } else if constexpr (std::is_same_v<Src, bf16_t> || std::is_same_v<Src, f16_t>) {
#pragma omp parallel for if (n > 65536) schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = Dst(load_as_float<Src>(src, i));
  } else {
    const auto* in = static_cast<const Src*>(src);
#pragma omp parallel for if (n > 65536) schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = Dst(in[i]);
  }
}

template <class Src>
void convert_from(const void* src, void* dst, DType dst_type, int64_t n) {
  switch (dst_type) {
    case DType::f32: return convert_typed<Src, float>(src, dst, n);
    case DType::f16: return convert_typed<Src, f16_t>(src, dst, n);
    case DType::bf16: return convert_typed<Src, bf16_t>(src, dst, n);
    case DType::i32: return convert_typed<Src, int32_t>(src, dst, n);
    case DType::i64: return convert_typed<Src, int64_t>(src, dst, n);
    case DType::u8: return convert_typed<Src, uint8_t>(src, dst, n);
    case DType::boolean: return convert_typed<Src, bool>(src, dst, n);
  }
}

}  // namespace

void convert(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) {
  switch (src_type) {
    case DType::f32: return convert_from<float>(src, dst, dst_type, n);
    case DType::f16: return convert_from<f16_t>(src, dst, dst_type, n);
    case DType::bf16: return convert_from<bf16_t>(src, dst, dst_type, n);
    case DType::i32: return convert_from<int32_t>(src, dst, dst_type, n);
    case DType::i64: return convert_from<int64_t>(src, dst, dst_type, n);
    case DType::u8: return convert_from<uint8_t>(src, dst, dst_type, n);
    case DType::boolean: return convert_from<bool>(src, dst, dst_type, n);
  }
}

}  // namespace kiln
