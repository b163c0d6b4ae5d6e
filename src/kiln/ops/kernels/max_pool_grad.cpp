#include "kiln/ops/kernels/max_pool_grad.h"

#include <immintrin.h>
#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kiln/core/isa_variant.h"

// GCC 12's AVX-512 intrinsics trip -W[maybe-]uninitialized on their undefined-register idiom.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

KILN_ISA_TARGET_BEGIN
namespace kiln::ops::KILN_ISA {
namespace {

// Elements are compared and moved as floats (core/dtype.h's to_float, from_float); bf16 → float
// → bf16 is exact, so a bf16 pass picks the same winners and writes the same gradient bits as an
// f32 pass would.

// One 2×2 window of channels-last data, all C channels: a..d are the window's four pixels
// (each C contiguous floats), g the pooled gradient. The first maximum in window order wins, as
// in oneDNN's max pooling; with `mask` (x is a relu's output) a winner <= 0 gets nothing.
template <class T>
void window_2x2(const T* __restrict a, const T* __restrict b, const T* __restrict c,
                const T* __restrict d, const T* __restrict g, T* __restrict da, T* __restrict db,
                T* __restrict dc, T* __restrict dd, int64_t C, bool mask) {
  const T zero = from_float<T>(0.0f);
  for (int64_t ch = 0; ch < C; ++ch) {
    const float va = to_float(a[ch]), vb = to_float(b[ch]), vc = to_float(c[ch]),
                vd = to_float(d[ch]);
    const bool pb = vb > va;
    const float m1 = pb ? vb : va;
    const bool pc = vc > m1;
    const float m2 = pc ? vc : m1;
    const bool pd = vd > m2;
    const float m3 = pd ? vd : m2;
    const T gv = (mask && !(m3 > 0.0f)) ? zero : g[ch];
    const bool sd = pd, sc = !pd && pc, sb = !pd && !pc && pb, sa = !pd && !pc && !pb;
    da[ch] = sa ? gv : zero;
    db[ch] = sb ? gv : zero;
    dc[ch] = sc ? gv : zero;
    dd[ch] = sd ? gv : zero;
  }
}

constexpr int64_t kMaxFastChannels = 1024;

#if KILN_ISA_AVX512
// ---- 2×2 windows over whole channels-last rows, 16 lanes at a time.
// A pair of input rows (h0, h0 + 1) is W·C contiguous elements each, and the windows tile it:
// flat index i = w·C + c is in column w, whose window partner is C elements ahead (w even, the
// window's left column) or behind (w odd). Vectorizing over i rather than over c keeps all 16
// lanes busy when C is 6 or 16 (the per-window loop above runs C lanes, scalar for LeNet's 6).
// Each lane replays window_2x2's compare order, so the winners and bits are the same.

inline __m512 load16(const float* p, __mmask16 live) {
  return _mm512_maskz_loadu_ps(live, p);
}
inline __m512 load16(const bf16_t* p, __mmask16 live) {
  const __m256i h = _mm256_maskz_loadu_epi16(live, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline void store16(float* p, __mmask16 live, __m512 v) {
  _mm512_mask_storeu_ps(p, live, v);
}
// Exact: every value stored is a bf16 gradient widened above, or zero.
inline void store16(bf16_t* p, __mmask16 live, __m512 v) {
  _mm512_mask_cvtepi32_storeu_epi16(p, live, _mm512_srli_epi32(_mm512_castps_si512(v), 16));
}
// g[offset[j]] for the lanes in `live`, zero elsewhere.
inline __m512 gather16(const float* g, const int32_t* offset, __mmask16 live) {
  const __m512i idx = _mm512_maskz_loadu_epi32(live, offset);
  return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, idx, g, 4);
}
inline __m512 gather16(const bf16_t* g, const int32_t* offset, __mmask16 live) {
  // No 16-bit gather exists (a 32-bit one could read past the tensor's end), so lanes gather
  // one by one; bf16 pooling is rare enough.
  alignas(64) float lanes[16];
  for (int j = 0; j < 16; ++j) lanes[j] = (live >> j) & 1 ? bf16_to_float(g[offset[j]]) : 0.0f;
  return _mm512_load_ps(lanes);
}

// What every row pair of one call shares: where each flat index's pooled gradient sits in a
// gradient row (any gradient layout), and which lanes of each 16-block are left columns.
struct RowPlan {
  int64_t length = 0;  // elements per row that windows cover: 2·OW·C
  std::vector<int32_t> gradient_offset;
  std::vector<uint16_t> left_lanes;
};

// False when a gradient offset would not fit the gather's 32-bit indices.
bool make_row_plan(int64_t C, int64_t OW, int64_t g1, int64_t g3, RowPlan& plan) {
  plan.length = 2 * OW * C;
  if ((C - 1) * g1 + (OW - 1) * g3 > std::numeric_limits<int32_t>::max()) return false;
  plan.gradient_offset.resize(size_t(plan.length));
  plan.left_lanes.assign(size_t((plan.length + 15) / 16), 0);
  for (int64_t i = 0; i < plan.length; ++i) {
    const int64_t column = i / C, channel = i % C;
    plan.gradient_offset[size_t(i)] = int32_t(channel * g1 + (column / 2) * g3);
    if (column % 2 == 0) plan.left_lanes[size_t(i / 16)] |= uint16_t(1u << (i % 16));
  }
  return true;
}

template <class T>
void row_pair_2x2(const T* r0, const T* r1, const T* g, T* d0, T* d1, int64_t C,
                  const RowPlan& plan, bool mask) {
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t i = 0; i < plan.length; i += 16) {
    const int64_t rest = plan.length - i;
    const __mmask16 live = rest >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << rest) - 1);
    const __mmask16 left = plan.left_lanes[size_t(i / 16)] & live, right = ~left & live;
    // Left lanes load their partners C ahead, right lanes C behind; masked-off lanes are not
    // read, so the loads never leave the row.
    const __m512 x0 = load16(r0 + i, live), x1 = load16(r1 + i, live);
    const __m512 ahead0 = load16(r0 + i + C, left), ahead1 = load16(r1 + i + C, left);
    const __m512 behind0 = load16(r0 + i - C, right), behind1 = load16(r1 + i - C, right);
    const __m512 a = _mm512_mask_blend_ps(left, behind0, x0);
    const __m512 b = _mm512_mask_blend_ps(left, x0, ahead0);
    const __m512 c = _mm512_mask_blend_ps(left, behind1, x1);
    const __m512 d = _mm512_mask_blend_ps(left, x1, ahead1);
    const __mmask16 pb = _mm512_cmp_ps_mask(b, a, _CMP_GT_OQ);
    const __m512 m1 = _mm512_mask_blend_ps(pb, a, b);
    const __mmask16 pc = _mm512_cmp_ps_mask(c, m1, _CMP_GT_OQ);
    const __m512 m2 = _mm512_mask_blend_ps(pc, m1, c);
    const __mmask16 pd = _mm512_cmp_ps_mask(d, m2, _CMP_GT_OQ);
    __mmask16 pass = live;
    if (mask) pass &= _mm512_cmp_ps_mask(_mm512_mask_blend_ps(pd, m2, d), zero, _CMP_GT_OQ);
    const __m512 gv = gather16(g, plan.gradient_offset.data() + i, pass);
    const __mmask16 win_a = ~(pb | pc | pd), win_b = pb & ~pc & ~pd, win_c = pc & ~pd, win_d = pd;
    store16(d0 + i, live, _mm512_maskz_mov_ps((left & win_a) | (right & win_b), gv));
    store16(d1 + i, live, _mm512_maskz_mov_ps((left & win_c) | (right & win_d), gv));
  }
}

// The row-pair path, when x and dx rows are dense channels-last; false if it does not apply.
template <class T>
bool rows_2x2(const Tensor& dy_t, const Tensor& x_t, Tensor& dx_t, bool mask) {
  const Shape& s = x_t.shape();
  const int64_t N = s[0], C = s[1];
  const int64_t OH = dy_t.shape()[2], OW = dy_t.shape()[3];
  const auto& xs = x_t.strides();
  const auto& gs = dy_t.strides();
  const auto& ds = dx_t.strides();
  if (xs[1] != 1 || xs[3] != C || ds[1] != 1 || ds[3] != C) return false;
  thread_local RowPlan plan;
  if (!make_row_plan(C, OW, gs[1], gs[3], plan)) return false;
  const T* x = x_t.data<T>();
  const T* dy = dy_t.data<T>();
  T* dx = dx_t.data<T>();
  const RowPlan& shared_plan = plan;
#pragma omp parallel for collapse(2) schedule(static) if (dx_t.numel() > 32768)
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t oh = 0; oh < OH; ++oh) {
      const T* r0 = x + n * xs[0] + 2 * oh * xs[2];
      T* d0 = dx + n * ds[0] + 2 * oh * ds[2];
      row_pair_2x2(r0, r0 + xs[2], dy + n * gs[0] + oh * gs[2], d0, d0 + ds[2], C, shared_plan,
                   mask);
    }
  }
  return true;
}
#endif

#if defined(__AVX2__)
// ---- 2×2 windows over whole rows, 8 f32 lanes at a time with AVX2 (CPUs without AVX-512).
// A row pair (h0, h0 + 1) holds 2·OW pixels of `pixel` elements each (C channels-last, 1
// row-major); flat index i is in column i / pixel, whose window partner is `pixel` elements ahead
// (an even, left column) or behind (an odd, right one). Vectorizing over i keeps the lanes busy
// for LeNet's 6 channels and for row-major rows, where the per-window loop runs scalar. Each lane
// replays window_2x2's compare order, so the winners and bits are the same.
struct Avx2RowPlan {
  int64_t pixel = 0, length = 0;  // length: 2·OW·pixel
  std::vector<int32_t> left;      // [length rounded up to 8]: -1 in a left column
};

void make_avx2_row_plan(int64_t pixel, int64_t OW, Avx2RowPlan& plan) {
  plan.pixel = pixel;
  plan.length = 2 * OW * pixel;
  plan.left.assign(size_t((plan.length + 7) / 8 * 8), 0);
  for (int64_t i = 0; i < plan.length; ++i) plan.left[size_t(i)] = (i / pixel) % 2 == 0 ? -1 : 0;
}

// `wide`[i] = the pooled gradient of flat index i's window: each pixel of a dy row (its `pixel`
// elements `element_stride` apart, pixels `pixel_stride` apart) written twice, for the window's
// two columns. `wide` holds the row's length rounded up to 8.
void widen_gradient_row(const float* g, int64_t OW, int64_t pixel, int64_t element_stride,
                        int64_t pixel_stride, float* wide) {
  if (element_stride != 1 || pixel == 1) {
    for (int64_t ow = 0; ow < OW; ++ow) {
      for (int64_t p = 0; p < pixel; ++p) {
        const float v = g[ow * pixel_stride + p * element_stride];
        wide[2 * ow * pixel + p] = v;
        wide[(2 * ow + 1) * pixel + p] = v;
      }
    }
    return;
  }
  // Whole 8-lane stores in ascending order: the lanes past a pixel's end land where the next
  // store overwrites them, or in the buffer's padding (masked stores are microcoded, slow, on
  // AMD's cores). The loads are masked: a pixel's end may be the tensor's.
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t ow = 0; ow < OW; ++ow) {
    for (int64_t p = 0; p < pixel; p += 8) {
      const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(pixel - p)), lane);
      const __m256 v = _mm256_maskload_ps(g + ow * pixel_stride + p, live);
      _mm256_storeu_ps(wide + 2 * ow * pixel + p, v);
    }
    for (int64_t p = 0; p < pixel; p += 8) {
      const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(pixel - p)), lane);
      const __m256 v = _mm256_maskload_ps(g + ow * pixel_stride + p, live);
      _mm256_storeu_ps(wide + (2 * ow + 1) * pixel + p, v);
    }
  }
}

// Lanes i..i+7 of a row pair, with `g` the widened gradient row: dx's two rows there. `live`,
// `has_ahead`, `has_behind`: which lanes are in the row and may read their partner ahead or
// behind (all, away from the row's ends); masked-off lanes read nothing.
struct LanePair {
  __m256 top, bottom;
};
inline LanePair row_lanes_avx2(const float* r0, const float* r1, const float* g, int64_t i,
                               const Avx2RowPlan& plan, __m256i live, __m256i has_ahead,
                               __m256i has_behind, bool mask) {
  const int64_t pixel = plan.pixel;
  const __m256i l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(plan.left.data() + i));
  const __m256 lf = _mm256_castsi256_ps(l);
  const __m256i ahead = _mm256_and_si256(has_ahead, l);
  const __m256i behind = _mm256_andnot_si256(l, has_behind);
  const __m256 x0 = _mm256_maskload_ps(r0 + i, live), x1 = _mm256_maskload_ps(r1 + i, live);
  const __m256 ahead0 = _mm256_maskload_ps(r0 + i + pixel, ahead);
  const __m256 ahead1 = _mm256_maskload_ps(r1 + i + pixel, ahead);
  const __m256 behind0 = _mm256_maskload_ps(r0 + i - pixel, behind);
  const __m256 behind1 = _mm256_maskload_ps(r1 + i - pixel, behind);
  const __m256 a = _mm256_blendv_ps(behind0, x0, lf), b = _mm256_blendv_ps(x0, ahead0, lf);
  const __m256 c = _mm256_blendv_ps(behind1, x1, lf), d = _mm256_blendv_ps(x1, ahead1, lf);
  const __m256 pb = _mm256_cmp_ps(b, a, _CMP_GT_OQ);
  const __m256 m1 = _mm256_blendv_ps(a, b, pb);
  const __m256 pc = _mm256_cmp_ps(c, m1, _CMP_GT_OQ);
  const __m256 m2 = _mm256_blendv_ps(m1, c, pc);
  const __m256 pd = _mm256_cmp_ps(d, m2, _CMP_GT_OQ);
  __m256 gv = _mm256_loadu_ps(g + i);  // the widened row: its padding is in the buffer
  if (mask) {
    const __m256 m3 = _mm256_blendv_ps(m2, d, pd);
    gv = _mm256_and_ps(gv, _mm256_cmp_ps(m3, _mm256_setzero_ps(), _CMP_GT_OQ));
  }
  const __m256 later = _mm256_or_ps(pc, pd);  // c or d beat the first two
  const __m256 all = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  const __m256 win_a = _mm256_andnot_ps(_mm256_or_ps(pb, later), all);
  const __m256 win_b = _mm256_andnot_ps(later, pb);
  const __m256 win_c = _mm256_andnot_ps(pd, pc);
  return {_mm256_and_ps(_mm256_blendv_ps(win_b, win_a, lf), gv),
          _mm256_and_ps(_mm256_blendv_ps(pd, win_c, lf), gv)};
}

void row_pair_avx2(const float* r0, const float* r1, const float* g, float* d0, float* d1,
                   const Avx2RowPlan& plan, bool mask) {
  const int64_t pixel = plan.pixel, length = plan.length;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i all = _mm256_set1_epi32(-1);
  for (int64_t i = 0; i < length; i += 8) {
    if (i >= pixel && i + 8 + pixel <= length) {
      const LanePair out = row_lanes_avx2(r0, r1, g, i, plan, all, all, all, mask);
      _mm256_storeu_ps(d0 + i, out.top);
      _mm256_storeu_ps(d1 + i, out.bottom);
      continue;
    }
    // A chunk at either end of the row: lanes past it, and partners outside it, are masked off,
    // and only its live lanes are stored.
    const __m256i index = _mm256_add_epi32(_mm256_set1_epi32(int32_t(i)), lane);
    const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(length)), index);
    const __m256i has_ahead = _mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(length - pixel)), index);
    const __m256i has_behind = _mm256_cmpgt_epi32(index, _mm256_set1_epi32(int32_t(pixel - 1)));
    const LanePair out = row_lanes_avx2(r0, r1, g, i, plan, live, _mm256_and_si256(live, has_ahead),
                                        _mm256_and_si256(live, has_behind), mask);
    const int64_t count = std::min<int64_t>(8, length - i);
    alignas(32) float top[8], bottom[8];
    _mm256_store_ps(top, out.top);
    _mm256_store_ps(bottom, out.bottom);
    std::memcpy(d0 + i, top, size_t(count) * sizeof(float));
    std::memcpy(d1 + i, bottom, size_t(count) * sizeof(float));
  }
}

// The AVX2 row-pair path, for f32 x and dx both dense channels-last with channels not a multiple
// of 8 (the per-window loop vectorizes over 8 and more), or both row-major; false where it does
// not apply.
bool rows_2x2_avx2(const Tensor& dy_t, const Tensor& x_t, Tensor& dx_t, bool mask) {
  if (x_t.dtype() != DType::f32) return false;
  const Shape& s = x_t.shape();
  const int64_t N = s[0], C = s[1];
  const int64_t OH = dy_t.shape()[2], OW = dy_t.shape()[3];
  const auto& xs = x_t.strides();
  const auto& gs = dy_t.strides();
  const auto& ds = dx_t.strides();
  const bool channels_last = xs[1] == 1 && xs[3] == C && ds[1] == 1 && ds[3] == C && C % 8 != 0;
  const bool row_major = xs[3] == 1 && ds[3] == 1;
  if (!channels_last && !row_major) return false;
  if (2 * OW * (channels_last ? C : 1) > std::numeric_limits<int32_t>::max() - 16) return false;
  // Channels-last rows hold every channel; row-major rows one channel each.
  const int64_t pixel = channels_last ? C : 1, planes = channels_last ? 1 : C;
  thread_local Avx2RowPlan plan;
  make_avx2_row_plan(pixel, OW, plan);
  const Avx2RowPlan& shared_plan = plan;
  const float* x = x_t.data<float>();
  const float* dy = dy_t.data<float>();
  float* dx = dx_t.data<float>();
  const int64_t rows = N * planes * OH;
#pragma omp parallel if (dx_t.numel() > 32768)
  {
    thread_local std::vector<float> wide;
    wide.resize(shared_plan.left.size() + 8);  // the widening's last store may pass the row
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t n = r / (planes * OH), q = r / OH % planes, oh = r % OH;
      widen_gradient_row(dy + n * gs[0] + q * gs[1] + oh * gs[2], OW, pixel,
                         channels_last ? gs[1] : 0, gs[3], wide.data());
      const float* r0 = x + n * xs[0] + q * xs[1] + 2 * oh * xs[2];
      float* d0 = dx + n * ds[0] + q * ds[1] + 2 * oh * ds[2];
      row_pair_avx2(r0, r0 + xs[2], wide.data(), d0, d0 + ds[2], shared_plan, mask);
    }
  }
  return true;
}
#endif

template <class T>
void one_pass(const Tensor& dy_t, const Tensor& x_t, Tensor& dx_t, std::array<int64_t, 2> kernel,
              bool relu_mask);

}  // namespace

bool can_run_max_pool_grad_one_pass(const Tensor& dy, const Tensor& x, const Tensor& dx,
                                    std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                                    std::array<int64_t, 2> padding) {
  const DType t = x.dtype();
  return kernel == stride && padding[0] == 0 && padding[1] == 0 &&
         (t == DType::f32 || t == DType::bf16) && dy.dtype() == t && dx.dtype() == t &&
         dx.is_dense() && x.rank() == 4 && dy.rank() == 4 && dx.shape() == x.shape();
}

void max_pool_grad_one_pass(const Tensor& dy_t, const Tensor& x_t, Tensor& dx_t,
                            std::array<int64_t, 2> kernel, bool relu_mask) {
  if (x_t.dtype() == DType::bf16) return one_pass<bf16_t>(dy_t, x_t, dx_t, kernel, relu_mask);
  one_pass<float>(dy_t, x_t, dx_t, kernel, relu_mask);
}

namespace {

template <class T>
void one_pass(const Tensor& dy_t, const Tensor& x_t, Tensor& dx_t, std::array<int64_t, 2> kernel,
              bool relu_mask) {
  const T zero = from_float<T>(0.0f);
  const Shape& s = x_t.shape();
  const int64_t N = s[0], C = s[1], H = s[2], W = s[3];
  const int64_t OH = dy_t.shape()[2], OW = dy_t.shape()[3], KH = kernel[0], KW = kernel[1];
  const T* x = x_t.data<T>();
  const T* dy = dy_t.data<T>();
  T* dx = dx_t.data<T>();
  const int64_t x0 = x_t.strides()[0], x1 = x_t.strides()[1], x2 = x_t.strides()[2],
                x3 = x_t.strides()[3];
  const int64_t g0 = dy_t.strides()[0], g1 = dy_t.strides()[1], g2 = dy_t.strides()[2],
                g3 = dy_t.strides()[3];
  const int64_t d0 = dx_t.strides()[0], d1 = dx_t.strides()[1], d2 = dx_t.strides()[2],
                d3 = dx_t.strides()[3];
  // Rows and columns no window covers get zero gradient.
  if (OH * KH != H || OW * KW != W) std::memset(dx, 0, dx_t.nbytes());
#if KILN_ISA_AVX512
  if (KH == 2 && KW == 2 && rows_2x2<T>(dy_t, x_t, dx_t, relu_mask)) return;
#endif
#if defined(__AVX2__)
  if constexpr (std::is_same_v<T, float>) {
    if (KH == 2 && KW == 2 && rows_2x2_avx2(dy_t, x_t, dx_t, relu_mask)) return;
  }
#endif
  const bool fast = KH == 2 && KW == 2 && x1 == 1 && d1 == 1 && C <= kMaxFastChannels;
  const bool mask = relu_mask;
#pragma omp parallel for collapse(2) schedule(static) if (dx_t.numel() > 32768)
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t oh = 0; oh < OH; ++oh) {
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t h0 = oh * KH, w0 = ow * KW;
        const T* xw = x + n * x0 + h0 * x2 + w0 * x3;
        T* dw = dx + n * d0 + h0 * d2 + w0 * d3;
        const T* gw = dy + n * g0 + oh * g2 + ow * g3;
        if (fast) {
          // A gradient in another layout (row-major from a flatten's reshape) is gathered.
          T gathered[kMaxFastChannels];
          const T* g = gw;
          if (g1 != 1) {
            for (int64_t ch = 0; ch < C; ++ch) gathered[ch] = gw[ch * g1];
            g = gathered;
          }
          window_2x2(xw, xw + x3, xw + x2, xw + x2 + x3, g, dw, dw + d3, dw + d2, dw + d2 + d3, C,
                     mask);
          continue;
        }
        for (int64_t ch = 0; ch < C; ++ch) {
          const T* xc = xw + ch * x1;
          T* dc = dw + ch * d1;
          float best = to_float(xc[0]);
          int64_t bi = 0, bj = 0;
          for (int64_t i = 0; i < KH; ++i) {
            for (int64_t j = 0; j < KW; ++j) {
              float v = to_float(xc[i * x2 + j * x3]);
              if (v > best) {
                best = v;
                bi = i;
                bj = j;
              }
            }
          }
          const T g = (mask && !(best > 0.0f)) ? zero : gw[ch * g1];
          for (int64_t i = 0; i < KH; ++i) {
            for (int64_t j = 0; j < KW; ++j) dc[i * d2 + j * d3] = (i == bi && j == bj) ? g : zero;
          }
        }
      }
    }
  }
}

}  // namespace

}  // namespace kiln::ops::KILN_ISA
KILN_ISA_TARGET_END

#if KILN_ISA_DISPATCH
namespace kiln::ops {

KILN_ISA_DECLARE(bool can_run_max_pool_grad_one_pass(
    const Tensor& dy, const Tensor& x, const Tensor& dx, std::array<int64_t, 2> kernel,
    std::array<int64_t, 2> stride, std::array<int64_t, 2> padding))
KILN_ISA_DECLARE(void max_pool_grad_one_pass(const Tensor& dy, const Tensor& x, Tensor& dx,
                                             std::array<int64_t, 2> kernel, bool relu_mask))

bool can_run_max_pool_grad_one_pass(const Tensor& dy, const Tensor& x, const Tensor& dx,
                                    std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                                    std::array<int64_t, 2> padding) {
  return KILN_ISA_CALL(can_run_max_pool_grad_one_pass, dy, x, dx, kernel, stride, padding);
}
void max_pool_grad_one_pass(const Tensor& dy, const Tensor& x, Tensor& dx,
                            std::array<int64_t, 2> kernel, bool relu_mask) {
  KILN_ISA_CALL(max_pool_grad_one_pass, dy, x, dx, kernel, relu_mask);
}

}  // namespace kiln::ops
#endif

#pragma GCC diagnostic pop
