#include "kiln/core/dtype.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kiln/core/bf16_convert.h"

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

namespace detail {

float f16_to_float_portable(f16_t v) {
  const uint32_t sign = uint32_t(v.bits & 0x8000u) << 16, exponent = (v.bits >> 10) & 0x1fu,
                 mantissa = v.bits & 0x3ffu;
  float f;
  if (exponent == 0) {  // zero or subnormal: mantissa · 2^-24, exact in float
    f = std::ldexp(float(mantissa), -24);
    return sign ? -f : f;
  }
  uint32_t bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  if (exponent == 0x1fu) {  // inf, or NaN made quiet (as F16C does)
    bits = sign | 0x7f800000u | (mantissa ? 0x400000u | (mantissa << 13) : 0u);
  }
  std::memcpy(&f, &bits, 4);
  return f;
}

f16_t float_to_f16_portable(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf, or NaN made quiet with its payload's top bits (as F16C does)
    return {uint16_t(sign | (ax > 0x7f800000u ? 0x7e00u | ((ax >> 13) & 0x3ffu) : 0x7c00u))};
  }
  if (ax >= 0x477ff000u) return {uint16_t(sign | 0x7c00u)};  // >= 65520 rounds to inf
  if (ax < 0x38800000u) {  // below 2^-14: a half subnormal, round(|f| · 2^24) (exact product)
    float a;
    std::memcpy(&a, &ax, 4);
    return {uint16_t(sign | uint32_t(std::nearbyint(a * 16777216.0f)))};
  }
  uint32_t h = (((ax >> 23) - 112u) << 10) | ((ax >> 13) & 0x3ffu);
  const uint32_t rest = ax & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry may bump the exponent
  return {uint16_t(sign | h)};
}

}  // namespace detail

#if defined(__F16C__)
// F16C conversions round to nearest even in hardware (imm 0 = _MM_FROUND_TO_NEAREST_INT).
float f16_to_float(f16_t v) {
  return _cvtsh_ss(v.bits);
}
f16_t float_to_f16(float f) {
  return {_cvtss_sh(f, 0)};
}
#else
float f16_to_float(f16_t v) {
  return detail::f16_to_float_portable(v);
}
f16_t float_to_f16(float f) {
  return detail::float_to_f16_portable(f);
}
#endif

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
void convert_serial(const void* src, void* dst, int64_t n) {
  auto* out = static_cast<Dst*>(dst);
  if constexpr (std::is_same_v<Src, Dst>) {
    std::memcpy(dst, src, size_t(n) * sizeof(Src));
  } else if constexpr (std::is_same_v<Src, float> && std::is_same_v<Dst, bf16_t>) {
    detail::f32_to_bf16_n(static_cast<const float*>(src), out, n);
  } else if constexpr (std::is_same_v<Src, bf16_t> && std::is_same_v<Dst, float>) {
    detail::bf16_to_f32_n(static_cast<const bf16_t*>(src), out, n);
  } else if constexpr (std::is_same_v<Dst, bf16_t>) {
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(load_as_float<Src>(src, i));
  } else if constexpr (std::is_same_v<Dst, f16_t>) {
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_f16(load_as_float<Src>(src, i));
  } else if constexpr (std::is_same_v<Src, bf16_t> || std::is_same_v<Src, f16_t>) {
    for (int64_t i = 0; i < n; ++i) out[i] = Dst(load_as_float<Src>(src, i));
  } else {
    const auto* in = static_cast<const Src*>(src);
    for (int64_t i = 0; i < n; ++i) out[i] = Dst(in[i]);
  }
}

// Small conversions (the pointwise engine converts one tile at a time, from inside its own
// parallel region) must not open an OpenMP region: even a one-thread nested region costs more
// than converting a 1024-element tile.
constexpr int64_t kParallelConvertMin = 65536;
constexpr int64_t kConvertChunk = 16384;

template <class Src, class Dst>
void convert_typed(const void* src, void* dst, int64_t n) {
  if (n <= kParallelConvertMin || omp_in_parallel()) return convert_serial<Src, Dst>(src, dst, n);
  const int64_t chunks = (n + kConvertChunk - 1) / kConvertChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kConvertChunk, len = std::min(kConvertChunk, n - begin);
    convert_serial<Src, Dst>(static_cast<const Src*>(src) + begin, static_cast<Dst*>(dst) + begin,
                             len);
  }
}

template <class Src>
void convert_from(const void* src, void* dst, DType dst_type, int64_t n) {
  switch (dst_type) {
    case DType::f32:
      return convert_typed<Src, float>(src, dst, n);
    case DType::f16:
      return convert_typed<Src, f16_t>(src, dst, n);
    case DType::bf16:
      return convert_typed<Src, bf16_t>(src, dst, n);
    case DType::i32:
      return convert_typed<Src, int32_t>(src, dst, n);
    case DType::i64:
      return convert_typed<Src, int64_t>(src, dst, n);
    case DType::u8:
      return convert_typed<Src, uint8_t>(src, dst, n);
    case DType::boolean:
      return convert_typed<Src, bool>(src, dst, n);
  }
}

}  // namespace

void convert(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) {
  switch (src_type) {
    case DType::f32:
      return convert_from<float>(src, dst, dst_type, n);
    case DType::f16:
      return convert_from<f16_t>(src, dst, dst_type, n);
    case DType::bf16:
      return convert_from<bf16_t>(src, dst, dst_type, n);
    case DType::i32:
      return convert_from<int32_t>(src, dst, dst_type, n);
    case DType::i64:
      return convert_from<int64_t>(src, dst, dst_type, n);
    case DType::u8:
      return convert_from<uint8_t>(src, dst, dst_type, n);
    case DType::boolean:
      return convert_from<bool>(src, dst, dst_type, n);
  }
}

void fill(void* dst, DType dtype, double value, int64_t n) {
  if (n <= 0) return;
  // Convert once, then replicate the element's bytes.
  alignas(8) unsigned char elem[8];
  if (dtype == DType::i64) {
    int64_t v = int64_t(value);
    std::memcpy(elem, &v, 8);
  } else if (dtype == DType::i32) {
    int32_t v = int32_t(value);
    std::memcpy(elem, &v, 4);
  } else {
    float f = float(value);
    convert(&f, DType::f32, elem, dtype, 1);
  }
  size_t es = dtype_size(dtype);
  auto* out = static_cast<unsigned char*>(dst);
  if (es == 1) {
    std::memset(out, elem[0], size_t(n));
    return;
  }
  for (int64_t i = 0; i < n; ++i) std::memcpy(out + size_t(i) * es, elem, es);
}

}  // namespace kiln
