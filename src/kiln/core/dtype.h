#pragma once
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "kiln/core/error.h"

namespace kiln {

enum class DType : uint8_t { f32, f16, bf16, i32, i64, u8, boolean };
inline constexpr int kNumDTypes = 7;

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 2;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
    case DType::boolean:
      return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
    case DType::boolean:
      return "bool";
  }
  return "?";
}

constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16;
}
constexpr bool is_low_precision(DType t) {
  return t == DType::f16 || t == DType::bf16;
}

DType dtype_from_name(std::string_view name);  // throws Error naming the unknown dtype

// bfloat16 storage: the top 16 bits of an IEEE float, rounded to nearest even.
struct bf16_t {
  uint16_t bits;
};
// IEEE half storage, rounded to nearest even; no arithmetic (fp16 has no fast path on this CPU).
struct f16_t {
  uint16_t bits;
};

inline float bf16_to_float(bf16_t v) {
  uint32_t u = uint32_t(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline bf16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {uint16_t((u >> 16) | 0x40)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return {uint16_t(u >> 16)};
}

// An f32 or bf16 kernel element widened to float and narrowed back, one spelling for kernels
// templated on the element type. Widening is exact, so a float widened from bf16 narrows back to
// the same bits.
inline float to_float(float v) {
  return v;
}
inline float to_float(bf16_t v) {
  return bf16_to_float(v);
}
template <class T>
inline T from_float(float v) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, bf16_t>);
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return float_to_bf16(v);
  }
}

// IEEE half <-> float, round to nearest even; F16C instructions where the build targets them.
float f16_to_float(f16_t v);
f16_t float_to_f16(float f);

namespace detail {
// The same conversions in plain integer code, for builds without F16C (KILN_NATIVE=OFF on a
// generic x86-64 target); always compiled so the tests can hold them against the hardware's.
float f16_to_float_portable(f16_t v);
f16_t float_to_f16_portable(float f);
}  // namespace detail

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<f16_t>() {
  return DType::f16;
}
template <>
constexpr DType dtype_of<bf16_t>() {
  return DType::bf16;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::i64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::u8;
}
template <>
constexpr DType dtype_of<bool>() {
  return DType::boolean;
}

// Writes `value` (converted to dtype, rounded to nearest even for bf16/f16) into n elements.
void fill(void* dst, DType dtype, double value, int64_t n);

// Converts n values between any two dtypes (round-to-nearest-even into bf16/f16).
void convert(const void* src, DType src_type, void* dst, DType dst_type, int64_t n);

}  // namespace kiln
