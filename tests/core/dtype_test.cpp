#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kiln/core/bf16_convert.h"
#include "kiln/core/dtype.h"

namespace kiln::dtype_test {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Bf16, RoundsToNearestEven) {
  // 0x3f80'8000 is exactly halfway between bf16 0x3f80 and 0x3f81: ties go to even (0x3f80).
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808000u)).bits, 0x3f80);
  // Halfway between 0x3f81 and 0x3f82: ties go to even (0x3f82).
  EXPECT_EQ(float_to_bf16(from_bits(0x3f818000u)).bits, 0x3f82);
  // Just above and below halfway round to nearest.
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808001u)).bits, 0x3f81);
  EXPECT_EQ(float_to_bf16(from_bits(0x3f807fffu)).bits, 0x3f80);
  // Exact values are kept, including the sign.
  EXPECT_EQ(bf16_to_float(float_to_bf16(-2.5f)), -2.5f);
  EXPECT_EQ(float_to_bf16(0.0f).bits, 0x0000);
  EXPECT_EQ(float_to_bf16(-0.0f).bits, 0x8000);
}

TEST(Bf16, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bf16_to_float(float_to_bf16(inf)), inf);
  EXPECT_EQ(bf16_to_float(float_to_bf16(-inf)), -inf);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  // A NaN whose payload sits only in the low bits must stay NaN (not round to inf).
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(from_bits(0x7f800001u)))));
  // The largest float rounds up to inf in bf16.
  EXPECT_EQ(bf16_to_float(float_to_bf16(std::numeric_limits<float>::max())), inf);
}

TEST(F16, RoundsToNearestEvenWithSubnormalsAndOverflow) {
  EXPECT_EQ(f16_to_float(float_to_f16(1.0f + 1.0f / 2048)), 1.0f);                // tie → even
  EXPECT_EQ(f16_to_float(float_to_f16(1.0f + 3.0f / 2048)), 1.0f + 4.0f / 2048);  // tie → even
  EXPECT_EQ(f16_to_float(float_to_f16(65504.f)), 65504.f);
  EXPECT_EQ(f16_to_float(float_to_f16(65519.f)), 65504.f);
  EXPECT_TRUE(std::isinf(f16_to_float(float_to_f16(65520.f))));
  const float min_sub = std::ldexp(1.0f, -24);
  EXPECT_EQ(f16_to_float(float_to_f16(min_sub)), min_sub);
  EXPECT_EQ(f16_to_float(float_to_f16(min_sub * 0.5f)), 0.0f);         // tie with 0 → even (0)
  EXPECT_EQ(f16_to_float(float_to_f16(min_sub * 1.5f)), 2 * min_sub);  // tie → even
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(std::nanf("")))));
}

TEST(Convert, EveryPairRoundTripsSmallIntegers) {
  const std::vector<float> values{0, 1, 2, 3, 7, 100};
  for (int s = 0; s < kNumDTypes; ++s) {
    for (int d = 0; d < kNumDTypes; ++d) {
      DType src = DType(s), dst = DType(d);
      if (src == DType::boolean || dst == DType::boolean) continue;
      std::vector<unsigned char> a(values.size() * 8), b(values.size() * 8);
      std::vector<float> back(values.size());
      convert(values.data(), DType::f32, a.data(), src, int64_t(values.size()));
      convert(a.data(), src, b.data(), dst, int64_t(values.size()));
      convert(b.data(), dst, back.data(), DType::f32, int64_t(values.size()));
      EXPECT_EQ(back, values) << dtype_name(src) << " -> " << dtype_name(dst);
    }
  }
}

TEST(Convert, BoolAndLargeBuffers) {
  std::vector<float> f{0.f, 2.f, -1.f};
  bool b[3];
  convert(f.data(), DType::f32, b, DType::boolean, 3);
  EXPECT_FALSE(b[0]);
  EXPECT_TRUE(b[1]);
  EXPECT_TRUE(b[2]);
  // Big enough for the OpenMP path; every element converted with round-to-nearest-even.
  const int64_t n = 200000;
  std::vector<float> src(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) src[size_t(i)] = float(i) * 1.0001f;
  std::vector<bf16_t> dst(static_cast<size_t>(n));
  convert(src.data(), DType::f32, dst.data(), DType::bf16, n);
  for (int64_t i = 0; i < n; i += 997) {
    EXPECT_EQ(dst[size_t(i)].bits, float_to_bf16(src[size_t(i)]).bits) << i;
  }
}

TEST(DTypeNames, RoundTripAndUnknownNamed) {
  for (int i = 0; i < kNumDTypes; ++i) EXPECT_EQ(dtype_from_name(dtype_name(DType(i))), DType(i));
  EXPECT_EQ(dtype_from_name("bfloat16"), DType::bf16);
  try {
    dtype_from_name("f64");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f64"), std::string::npos);
  }
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_TRUE(is_floating(DType::f16));
  EXPECT_FALSE(is_floating(DType::i32));
}

}  // namespace
}  // namespace kiln::dtype_test

namespace kiln::dtype_test {
namespace {

// convert() runs vectorized, chunked loops; every lane must round exactly as the scalar
// float_to_bf16 / bf16_to_float do (ties to even, quiet NaN, denormals kept), at every length
// and alignment the vector loop's tail handling can see.
TEST(DTypeConvert, VectorisedBf16MatchesScalarBitForBit) {
  std::vector<float> values;
  uint32_t bits = 0x12345678u;
  for (int i = 0; i < 70000; ++i) {
    bits = bits * 1664525u + 1013904223u;  // every exponent, sign and mantissa pattern
    float f;
    std::memcpy(&f, &bits, 4);
    values.push_back(f);
  }
  for (float special : {0.0f, -0.0f, 1.0f + 0x1p-8f, 1.0f + 0x3p-8f, 1e-40f, -1e-42f,
                        std::numeric_limits<float>::infinity(), std::nanf("")}) {
    values.push_back(special);
  }
  for (size_t n : {size_t(1), size_t(15), size_t(17), size_t(1023), values.size()}) {
    std::vector<bf16_t> out(n);
    convert(values.data(), DType::f32, out.data(), DType::bf16, int64_t(n));
    std::vector<float> back(n);
    convert(out.data(), DType::bf16, back.data(), DType::f32, int64_t(n));
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[i].bits, float_to_bf16(values[i]).bits) << "n=" << n << " i=" << i;
      float expected = bf16_to_float(out[i]);
      ASSERT_EQ(std::memcmp(&back[i], &expected, 4), 0) << "n=" << n << " i=" << i;
    }
  }
}

// The non-temporal variant (a weight's bf16 copy): the same bits, at any alignment of the
// output and any length.
TEST(DTypeConvert, StreamedBf16MatchesScalarBitForBit) {
  std::vector<float> values;
  uint32_t bits = 0x9e3779b9u;
  for (int i = 0; i < 5000; ++i) {
    bits = bits * 1664525u + 1013904223u;
    values.push_back(from_bits(bits));
  }
  values.push_back(std::nanf(""));
  values.push_back(1e-40f);
  std::vector<bf16_t> out(values.size() + 64);
  for (size_t shift : {size_t(0), size_t(1), size_t(7), size_t(16)}) {
    for (size_t n : {size_t(1), size_t(17), size_t(4000), values.size()}) {
      bf16_t* dst = out.data() + shift;
      detail::f32_to_bf16_stream_n(values.data(), dst, int64_t(n));
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(dst[i].bits, float_to_bf16(values[i]).bits)
            << "shift=" << shift << " n=" << n << " i=" << i;
      }
    }
  }
}

// IEEE half: round to nearest even, subnormals kept, overflow to inf, NaN kept quiet.
TEST(F16, RoundsToNearestEvenAndKeepsSpecialValues) {
  for (auto convert : {&float_to_f16, &detail::float_to_f16_portable}) {
    EXPECT_EQ(convert(1.0f).bits, 0x3c00);
    EXPECT_EQ(convert(-2.0f).bits, 0xc000);
    EXPECT_EQ(convert(65504.0f).bits, 0x7bff);  // the largest half
    EXPECT_EQ(convert(65519.0f).bits, 0x7bff);
    EXPECT_EQ(convert(65520.0f).bits, 0x7c00);  // halfway to 2^16: ties to even is inf
    EXPECT_EQ(convert(-1e9f).bits, 0xfc00);
    // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1); 1 + 3·2^-11 rounds up.
    EXPECT_EQ(convert(from_bits(0x3f801000u)).bits, 0x3c00);
    EXPECT_EQ(convert(from_bits(0x3f803000u)).bits, 0x3c02);
    EXPECT_EQ(convert(std::ldexp(1.0f, -24)).bits, 0x0001);  // smallest subnormal
    EXPECT_EQ(convert(std::ldexp(1.0f, -25)).bits, 0x0000);  // halfway to it: even is zero
    EXPECT_EQ(convert(std::ldexp(3.0f, -25)).bits, 0x0002);
    EXPECT_EQ(convert(std::ldexp(1023.5f, -24)).bits, 0x0400);  // rounds up to the smallest normal
    EXPECT_EQ(convert(-0.0f).bits, 0x8000);
    EXPECT_EQ(convert(std::numeric_limits<float>::infinity()).bits, 0x7c00);
    EXPECT_EQ(convert(std::numeric_limits<float>::quiet_NaN()).bits & 0x7e00, 0x7e00);
  }
}

// The portable conversions are the hardware's, bit for bit: every half to float, and back from
// every half's value and from the midpoints between neighbouring halves (the rounding ties).
TEST(F16, PortableConversionsMatchTheDefaultOnes) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const f16_t v{uint16_t(h)};
    const float f = f16_to_float(v);
    uint32_t a, b;
    const float p = detail::f16_to_float_portable(v);
    std::memcpy(&a, &f, 4);
    std::memcpy(&b, &p, 4);
    ASSERT_EQ(a, b) << "half " << h;
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_f16(f).bits, detail::float_to_f16_portable(f).bits) << "half " << h;
    const float next = f16_to_float(f16_t{uint16_t(h + 1)});
    if ((h & 0x7fffu) < 0x7c00u && !std::isinf(next) && !std::isnan(next)) {
      const float mid = f + (next - f) / 2, above = std::nextafter(mid, next);
      ASSERT_EQ(float_to_f16(mid).bits, detail::float_to_f16_portable(mid).bits) << "mid " << h;
      ASSERT_EQ(float_to_f16(above).bits, detail::float_to_f16_portable(above).bits) << h;
    }
  }
}

}  // namespace
}  // namespace kiln::dtype_test
