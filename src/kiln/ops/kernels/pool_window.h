#pragma once
// A 2×2 max-pool window, 16 channels at once: the rule every kernel that records or re-finds a
// window's winner shares. The pixels compare in window order (a, b, c, d = top-left, top-right,
// bottom-left, bottom-right) with a strict >, so the first maximum wins, as in oneDNN's max
// pooling and ops/kernels/max_pool_grad.cpp. AVX-512 variants only.
#include <immintrin.h>

#include "kiln/core/isa_variant.h"

// Its inline code belongs to the variant being compiled: include it after KILN_ISA_TARGET_BEGIN.
#if KILN_ISA_AVX512
namespace kiln::ops::KILN_ISA {

struct WindowMax {
  __m512 max;
  __m512i winner;  // 0..3 in window order: bit 0 the column, bit 1 the row
};

inline WindowMax window_max_2x2(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __mmask16 pb = _mm512_cmp_ps_mask(b, a, _CMP_GT_OQ);
  const __m512 m1 = _mm512_mask_mov_ps(a, pb, b);
  const __mmask16 pc = _mm512_cmp_ps_mask(c, m1, _CMP_GT_OQ);
  const __m512 m2 = _mm512_mask_mov_ps(m1, pc, c);
  const __mmask16 pd = _mm512_cmp_ps_mask(d, m2, _CMP_GT_OQ);
  __m512i winner = _mm512_maskz_mov_epi32(pb, _mm512_set1_epi32(1));
  winner = _mm512_mask_mov_epi32(winner, pc, _mm512_set1_epi32(2));
  winner = _mm512_mask_mov_epi32(winner, pd, _mm512_set1_epi32(3));
  return {_mm512_mask_mov_ps(m2, pd, d), winner};
}

// The byte a recorded window keeps (graph mode's conv_relu_pool and max_pool_with_winners nodes,
// read by pooled_conv_grad): the winner, plus kWindowDead when the maximum is <= 0 or NaN, where a
// relu before the pool passes no gradient.
inline constexpr int kWindowDead = 4;

inline __m512i window_code(const WindowMax& w) {
  const __mmask16 dead = _mm512_cmp_ps_mask(w.max, _mm512_setzero_ps(), _CMP_NGT_UQ);
  return _mm512_mask_or_epi32(w.winner, dead, w.winner, _mm512_set1_epi32(kWindowDead));
}

}  // namespace kiln::ops::KILN_ISA
#endif
