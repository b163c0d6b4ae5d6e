#include "kiln/core/bf16_convert.h"

#include <immintrin.h>

#include <cstdint>

#include "kiln/core/isa_variant.h"

// GCC 12's AVX-512 intrinsics trip -W[maybe-]uninitialized on their undefined-register idiom.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

KILN_ISA_TARGET_BEGIN
namespace kiln::detail::KILN_ISA {

// Explicit 16-wide loops where AVX-512 runs. The f32 -> bf16 one repeats
// float_to_bf16's integer rounding exactly (rather than vcvtneps2bf16, which flushes denormals)
// so vector and scalar paths agree bit for bit.
void bf16_to_f32_n(const bf16_t* in, float* out, int64_t n) {
  int64_t i = 0;
#if KILN_ISA_AVX512
  for (; i + 16 <= n; i += 16) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    _mm512_storeu_si512(out + i, w);
  }
#endif
  for (; i < n; ++i) out[i] = bf16_to_float(in[i]);
}

#if KILN_ISA_AVX512
namespace {

// 16 floats rounded to bf16 as float_to_bf16 rounds them.
inline __m256i round_16(const float* in) {
  const __m512i u = _mm512_loadu_si512(in);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  const __m512i r =
      _mm512_mask_or_epi32(rounded, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(r);
}

}  // namespace
#endif

void f32_to_bf16_n(const float* in, bf16_t* out, int64_t n) {
  int64_t i = 0;
#if KILN_ISA_AVX512
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), round_16(in + i));
  }
#endif
  for (; i < n; ++i) out[i] = float_to_bf16(in[i]);
}

void f32_to_bf16_stream_n(const float* in, bf16_t* out, int64_t n) {
  int64_t i = 0;
#if KILN_ISA_AVX512
  for (; i < n && reinterpret_cast<uintptr_t>(out + i) % 32 != 0; ++i) {
    out[i] = float_to_bf16(in[i]);
  }
  for (; i + 16 <= n; i += 16) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out + i), round_16(in + i));
  }
  _mm_sfence();  // the stores are weakly ordered: done before whoever reads them next
#endif
  for (; i < n; ++i) out[i] = float_to_bf16(in[i]);
}

}  // namespace kiln::detail::KILN_ISA
KILN_ISA_TARGET_END

#if KILN_ISA_DISPATCH
namespace kiln::detail {

KILN_ISA_DECLARE(void bf16_to_f32_n(const bf16_t* in, float* out, int64_t n))
KILN_ISA_DECLARE(void f32_to_bf16_n(const float* in, bf16_t* out, int64_t n))
KILN_ISA_DECLARE(void f32_to_bf16_stream_n(const float* in, bf16_t* out, int64_t n))

void bf16_to_f32_n(const bf16_t* in, float* out, int64_t n) {
  KILN_ISA_CALL(bf16_to_f32_n, in, out, n);
}
void f32_to_bf16_n(const float* in, bf16_t* out, int64_t n) {
  KILN_ISA_CALL(f32_to_bf16_n, in, out, n);
}
void f32_to_bf16_stream_n(const float* in, bf16_t* out, int64_t n) {
  KILN_ISA_CALL(f32_to_bf16_stream_n, in, out, n);
}

}  // namespace kiln::detail
#endif
