#pragma once
// Vectorizable float math. libm's expf/logf/erff are opaque calls that stop GCC from vectorizing a
// loop (glibc only exposes its SIMD variants under -ffast-math), so the transcendental tiles use
// these branch-free versions instead: selects, integer bit tricks and polynomials only, so that a
// `#pragma omp simd` loop over them compiles to AVX-512. Accuracy is a few ulp (≈1e-7 relative),
// and IEEE special values (±inf, NaN, 0) behave as libm's do.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

namespace kiln::ops::vmath {

// Round to nearest integer for |v| < 2^22 (adding and subtracting 1.5·2^23 leaves the rounded
// value); vectorizes where nearbyintf may not.
inline float round_nearest(float v) {
  constexpr float kMagic = 12582912.0f;
  return (v + kMagic) - kMagic;
}

// e^x. Range reduction x = n·ln2 + r, |r| ≤ ln2/2, then a degree-6 polynomial (Cephes expf).
// 2^n is applied as two halves so that n = 128 (overflow to inf) and n ≤ -127 (denormals) come
// out right without a branch.
inline float exp(float x) {
  float xc = x < -104.0f ? -104.0f : x;
  xc = xc > 89.0f ? 89.0f : xc;
  float n = round_nearest(xc * 1.44269504088896341f);
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t ni = int32_t(n);
  int32_t n1 = ni >> 1, n2 = ni - n1;
  float s1 = std::bit_cast<float>((n1 + 127) << 23);
  float s2 = std::bit_cast<float>((n2 + 127) << 23);
  float y = p * s1 * s2;
  return x != x ? x : y;
}

// Natural log (Cephes logf): x = m·2^e with m in [√½, √2), polynomial in m-1.
inline float log(float x) {
  // Selects are written as arithmetic on 0/1 floats: GCC does not if-convert a bool that feeds
  // several selects, which would leave a branch in the loop and stop vectorization.
  // Denormals: scale into the normal range first.
  const float tiny = x < 1.17549435e-38f ? 1.0f : 0.0f;
  const float xs = x * (1.0f + tiny * 8388607.0f);
  const int32_t bits = std::bit_cast<int32_t>(xs);
  float e = float(((bits >> 23) & 0xff) - 126) - tiny * 23.0f;
  float m = std::bit_cast<float>((bits & 0x807fffff) | 0x3f000000);  // [0.5, 1)
  const float small = m < 0.707106781186547524f ? 1.0f : 0.0f;
  e = e - small;
  m = m + small * m - 1.0f;
  float z = m * m;
  float y = 7.0376836292e-2f;
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  y += e * -2.12194440e-4f;
  y += -0.5f * z;
  float r = m + y + e * 0.693359375f;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  r = x == 0.0f ? -kInf : r;
  r = x < 0.0f ? kNaN : r;
  r = x == kInf ? kInf : r;
  return x != x ? x : r;
}

inline float tanh(float x) {
  float ax = x < 0.0f ? -x : x;
  // Small |x|: odd polynomial (Cephes tanhf); 1 - 2/(e^2x + 1) would cancel there.
  float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  float small = p * z * x + x;
  float big = 1.0f - 2.0f / (exp(2.0f * ax) + 1.0f);
  big = x < 0.0f ? -big : big;
  return ax < 0.625f ? small : big;
}

inline float sigmoid(float x) {
  return 1.0f / (1.0f + exp(-x));
}

// erfc(z) for z ≥ 0 with ≈1.2e-7 relative error everywhere (Numerical Recipes' Chebyshev fit),
// so Φ(x) keeps its relative accuracy deep in the left tail.
inline float erfc_nonneg(float z) {
  // erfc(10) is below the smallest float: clamping keeps z² finite for z = inf, and the result
  // is flushed to 0 there.
  const float zc = z > 10.0f ? 10.0f : z;
  float t = 1.0f / (1.0f + 0.5f * zc);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  // e^(p - z²) with p - z² carried as an exact sum hi + lo (Knuth's TwoSum): the exponent is
  // ≈ -z², so its rounding error would be magnified z²-fold by exp.
  const float z2 = zc * zc;
  const float z2_lo = __builtin_fmaf(zc, zc, -z2);
  const float hi = p - z2;
  const float b = hi - p;
  const float lo = (p - (hi - b)) + (-z2 - b) - z2_lo;
  float r = t * exp(hi) * (1.0f + lo);
  return z >= 10.0f ? 0.0f : r;
}

// Standard normal CDF Φ(x) = ½·erfc(-x/√2).
inline float normal_cdf(float x) {
  float z = (x < 0.0f ? -x : x) * 0.70710678118654752f;
  float half_tail = 0.5f * erfc_nonneg(z);
  return x < 0.0f ? half_tail : 1.0f - half_tail;
}

// Standard normal density φ(x).
inline float normal_pdf(float x) {
  return 0.39894228040143268f * exp(-0.5f * x * x);
}

// o[i] = √x[i], or 1/√x[i] when `reciprocal`. GCC will not vectorize sqrtf without
// -fno-math-errno (the errno write on negative inputs is a side effect), so this uses the
// instruction directly where the target has it; results are IEEE-exact either way.
// (GCC 12's own _mm512_sqrt_ps trips -Wmaybe-uninitialized on its undefined-register idiom.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
template <bool Reciprocal>
inline void sqrt_n(float* o, const float* x, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 one = _mm512_set1_ps(1.0f);
  for (; i + 16 <= n; i += 16) {
    __m512 r = _mm512_sqrt_ps(_mm512_loadu_ps(x + i));
    _mm512_storeu_ps(o + i, Reciprocal ? _mm512_div_ps(one, r) : r);
  }
#elif defined(__AVX__)
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= n; i += 8) {
    __m256 r = _mm256_sqrt_ps(_mm256_loadu_ps(x + i));
    _mm256_storeu_ps(o + i, Reciprocal ? _mm256_div_ps(one, r) : r);
  }
#endif
  for (; i < n; ++i) o[i] = Reciprocal ? 1.0f / std::sqrt(x[i]) : std::sqrt(x[i]);
}
#pragma GCC diagnostic pop

}  // namespace kiln::ops::vmath
