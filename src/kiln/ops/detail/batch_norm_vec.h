#pragma once
// The W-wide float vectors the batch-norm rows kernels (batch_norm_rows.cpp) are written in:
// AVX-512 registers for W = 16 in the AVX-512 variant (core/isa_variant.h), plain arrays (which the
// compiler vectorizes as it can) otherwise and for the scalar tails (W = 1), so one kernel body
// serves both. Only that file includes this header; it lives apart to keep the kernels readable.
#include <immintrin.h>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kiln/core/dtype.h"
#include "kiln/core/isa_variant.h"

// Its inline code belongs to the variant being compiled: include it after KILN_ISA_TARGET_BEGIN.

// GCC 12's AVX-512 intrinsics trip -W[maybe-]uninitialized on their undefined-register idiom
// (the warning lands wherever they are inlined).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace kiln::ops::KILN_ISA::batch_norm_vec {

template <int W>
struct Vec {
  float v[W];
};
#if KILN_ISA_AVX512
template <>
struct Vec<16> {
  __m512 v;
};
#endif

template <int W>
using Width = std::integral_constant<int, W>;

template <int W>
inline Vec<W> vzero() {
  Vec<W> r;
  for (int i = 0; i < W; ++i) r.v[i] = 0.0f;
  return r;
}
template <int W>
inline Vec<W> vload(const float* p) {
  Vec<W> r;
  for (int i = 0; i < W; ++i) r.v[i] = p[i];
  return r;
}
template <int W>
inline Vec<W> vload(const bf16_t* p) {
  Vec<W> r;
  for (int i = 0; i < W; ++i) r.v[i] = bf16_to_float(p[i]);
  return r;
}
template <int W>
inline void vstore(float* p, Vec<W> a) {
  for (int i = 0; i < W; ++i) p[i] = a.v[i];
}
template <int W>
inline void vstore(bf16_t* p, Vec<W> a) {
  for (int i = 0; i < W; ++i) p[i] = float_to_bf16(a.v[i]);
}
template <int W>
inline Vec<W> vadd(Vec<W> a, Vec<W> b) {
  for (int i = 0; i < W; ++i) a.v[i] += b.v[i];
  return a;
}
template <int W>
inline Vec<W> vsub(Vec<W> a, Vec<W> b) {
  for (int i = 0; i < W; ++i) a.v[i] -= b.v[i];
  return a;
}
template <int W>
inline Vec<W> vmul(Vec<W> a, Vec<W> b) {
  for (int i = 0; i < W; ++i) a.v[i] *= b.v[i];
  return a;
}
// a·b + c, rounded once where the CPU the variant is compiled for has FMA (so vector bodies and
// scalar tails round alike). Below x86-64-v3 there is no FMA instruction and std::fma would be a
// call into libm per element: there it is a multiply then an add, in every kernel and tail alike,
// which keeps the fused and unfused batch-norm kernels equal to each other bit for bit.
template <int W>
inline Vec<W> vfma(Vec<W> a, Vec<W> b, Vec<W> c) {
#if defined(__FMA__) || KILN_ISA_AVX512
  for (int i = 0; i < W; ++i) a.v[i] = std::fma(a.v[i], b.v[i], c.v[i]);
#else
  for (int i = 0; i < W; ++i) a.v[i] = a.v[i] * b.v[i] + c.v[i];
#endif
  return a;
}
// `a < 0 ? 0 : a`: keeps NaN, as the relu op does.
template <int W>
inline Vec<W> vrelu(Vec<W> a) {
  for (int i = 0; i < W; ++i) a.v[i] = a.v[i] < 0.0f ? 0.0f : a.v[i];
  return a;
}
// Batch norm's output before any residual: (x - mean)·scale + beta, scale = gamma·inv_std (see
// batch_norm_scale), one rounding in the fma. Every kernel that normalizes uses this one, so a
// value computed twice (the fused backward's relu mask, a convolution reading relu(normalize(x))
// on the fly) has the same bits.
template <int W>
inline Vec<W> vnormalize(Vec<W> x, Vec<W> mean, Vec<W> scale, Vec<W> beta) {
  return vfma(vsub(x, mean), scale, beta);
}
// g where r > 0, else 0: relu_grad's mask.
template <int W>
inline Vec<W> vpass(Vec<W> r, Vec<W> g) {
  for (int i = 0; i < W; ++i) g.v[i] = r.v[i] > 0.0f ? g.v[i] : 0.0f;
  return g;
}

// A store past the caches (non-temporal) where the target has one; p 64-byte aligned for W = 16.
// stream_fence() after the last of a thread's streaming stores orders them before its later
// stores (the team's barrier), so other threads then read the values.
template <int W>
inline void vstream(float* p, Vec<W> a) {
  vstore<W>(p, a);
}
inline void stream_fence() {
#if KILN_ISA_AVX512
  _mm_sfence();
#endif
}

// d[0..W) += a, widened to double.
template <int W>
inline void vadd_to(double* d, Vec<W> a) {
  for (int i = 0; i < W; ++i) d[i] += double(a.v[i]);
}

#if KILN_ISA_AVX512
template <>
inline Vec<16> vzero<16>() {
  return {_mm512_setzero_ps()};
}
template <>
inline Vec<16> vload<16>(const float* p) {
  return {_mm512_loadu_ps(p)};
}
template <>
inline Vec<16> vload<16>(const bf16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))};
}
template <>
inline void vstore<16>(float* p, Vec<16> a) {
  _mm512_storeu_ps(p, a.v);
}
// Rounding to bf16: nearest even, NaN kept quiet. With AVX512_BF16 one vcvtneps2bf16 does it
// (it also flushes values below 2^-126 to zero, which no normalized activation is); without, the
// integer rounding of float_to_bf16. The scalar tails use the same instruction, so a tensor's
// elements all round alike.
#if KILN_ISA_AVX512_BF16
template <>
inline void vstore<16>(bf16_t* p, Vec<16> a) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), (__m256i)_mm512_cvtneps_pbh(a.v));
}
template <>
inline void vstore<1>(bf16_t* p, Vec<1> a) {
  const __m128i h = (__m128i)_mm_cvtneps_pbh(_mm_set_ss(a.v[0]));
  p->bits = uint16_t(_mm_extract_epi16(h, 0));
}
#else
template <>
inline void vstore<16>(bf16_t* p, Vec<16> a) {
  const __m512i u = _mm512_castps_si512(a.v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb);
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  const __m512i r =
      _mm512_mask_or_epi32(rounded, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
}
#endif
template <>
inline void vadd_to<16>(double* d, Vec<16> a) {
  const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(a.v));
  const __m512d hi =
      _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a.v), 1)));
  _mm512_storeu_pd(d, _mm512_add_pd(_mm512_loadu_pd(d), lo));
  _mm512_storeu_pd(d + 8, _mm512_add_pd(_mm512_loadu_pd(d + 8), hi));
}
template <>
inline void vstream<16>(float* p, Vec<16> a) {
  _mm512_stream_ps(p, a.v);
}
template <>
inline Vec<16> vadd<16>(Vec<16> a, Vec<16> b) {
  return {_mm512_add_ps(a.v, b.v)};
}
template <>
inline Vec<16> vsub<16>(Vec<16> a, Vec<16> b) {
  return {_mm512_sub_ps(a.v, b.v)};
}
template <>
inline Vec<16> vmul<16>(Vec<16> a, Vec<16> b) {
  return {_mm512_mul_ps(a.v, b.v)};
}
template <>
inline Vec<16> vfma<16>(Vec<16> a, Vec<16> b, Vec<16> c) {
  return {_mm512_fmadd_ps(a.v, b.v, c.v)};
}
template <>
inline Vec<16> vrelu<16>(Vec<16> a) {
  const __mmask16 negative = _mm512_cmp_ps_mask(a.v, _mm512_setzero_ps(), _CMP_LT_OQ);
  return {_mm512_mask_mov_ps(a.v, negative, _mm512_setzero_ps())};
}
template <>
inline Vec<16> vpass<16>(Vec<16> r, Vec<16> g) {
  const __mmask16 positive = _mm512_cmp_ps_mask(r.v, _mm512_setzero_ps(), _CMP_GT_OQ);
  return {_mm512_maskz_mov_ps(positive, g.v)};
}
#endif

}  // namespace kiln::ops::KILN_ISA::batch_norm_vec

#pragma GCC diagnostic pop
