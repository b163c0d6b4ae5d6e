#include "kiln/ops/kernels/conv_single_channel.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <new>
#include <numeric>
#include <vector>

// GCC 12's AVX-512 intrinsics trip -W[maybe-]uninitialized on their undefined-register idiom.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include "kiln/core/error.h"
#include "kiln/core/isa_variant.h"
#include "kiln/ops/kernel_name.h"
#include "kiln/ops/kernels/conv_geometry.h"

// How it works. With one input channel an output row of y (channels-last: OW*O floats, flat index
// j = ow*O + o) is a sum over taps (kh, kw) of w[o, kh, kw] * xpad[oh + kh, ow + kw]. Each padded
// input row is "expanded" once, E[q*O + o] = xpad[q], so that for every tap the input values an
// output row needs are the contiguous run E[oh + kh][j + kw*O]: one unaligned vector load per 16
// outputs, whatever O is. The weight a lane needs depends only on j mod O, which repeats every
// P = O / gcd(O, 16) vectors, so the weights are expanded into P vectors per tap.
//
// When O is a multiple of 16 a chunk is 16 channels of one pixel, all fed by one input value:
// that value is broadcast straight from the padded input and no expanded rows are built.
//
// Forward: blocks of 8 output rows; for 3x3 and 5x5 kernels the KH weight vectors of one kw stay
// in registers and each input vector loaded feeds up to KH output rows.
// Backward-weights: for one 16-wide column of the output row the kernel walks down the input
// rows keeping the last KH gradient rows in registers; each input vector loaded feeds KH FMAs
// into KH x (up to 4) accumulators that live in registers for the whole image (3x3 and 5x5;
// other heights go one kh at a time). The per-lane sums are folded to dw[o, kh, kw] at the end.
//
// Measured here (2 threads, best of 9 x 50 calls; oneDNN 2.6 through its API in the same
// process, channels-last, weights `any`):
//   LeNet conv1    fwd 0.081-0.089 ms (oneDNN brgconv 0.17), bwd_w 0.083 (0.12-0.13),
//                  bwd_w + db 0.088-0.091 (0.18)
//   ResNet-20 conv1 fwd 0.151 ms (oneDNN 0.25 here, 0.14-0.17 in earlier runs), bwd_w 0.197
//                  (oneDNN 0.14: slower, so O % 16 == 0 backward-weights stays on oneDNN)

KILN_ISA_TARGET_BEGIN
#include "kiln/ops/kernels/pool_window.h"
namespace kiln::ops::KILN_ISA {

#if KILN_ISA_AVX512
namespace {
using namespace conv_geometry;

constexpr int64_t kMaxOutChannels = 64;
constexpr int64_t kMaxTaps = 121;
constexpr int64_t kLanes = 16;

struct Geometry {
  int64_t n, h, w, o, kh, kw, ph, pw, oh, ow;
  int64_t row_len() const { return ow * o; }  // one output row, flat (ow, o)
  int64_t chunks() const { return (row_len() + kLanes - 1) / kLanes; }
  int64_t padded_w() const { return w + 2 * pw; }
  // Expanded rows are read up to 15 floats past padded_w * o by the last column's last tap.
  int64_t e_stride() const { return round_up(padded_w() * o + kLanes - 1, kLanes); }
  int64_t period() const { return o / std::gcd(o, kLanes); }
  int64_t taps() const { return kh * kw; }
  // O a multiple of 16: a 16-lane chunk is 16 channels of one output pixel, all fed by the same
  // input value, so the kernels broadcast it from the padded input instead of expanding rows.
  bool broadcast() const { return o % kLanes == 0; }
  __mmask16 tail_mask() const {
    int64_t rem = row_len() - (chunks() - 1) * kLanes;
    return __mmask16((1u << rem) - 1u);
  }
};

bool x_is_dense(const Tensor& x) {
  return strides_are(x, {x.dim(2) * x.dim(3), 1, x.dim(3), 1});
}

Geometry geometry(const Tensor& x, const Shape& w, const Shape& y, const char* op) {
  if (x.rank() != 4 || x.dim(1) != 1 || w.rank() != 4 || w[1] != 1 || y.rank() != 4 ||
      y[0] != x.dim(0) || y[1] != w[0] || x.dtype() != DType::f32) {
    throw ShapeError(detail::concat(op, ": expects f32 x [N, 1, H, W], w [O, 1, KH, KW], y [N, O, ",
                                    "OH, OW]; got x ", describe(x), ", w ", w.str(), ", y ",
                                    y.str()));
  }
  if (!x_is_dense(x)) throw Error(detail::concat(op, ": x ", describe(x), " is not dense"));
  Geometry g{x.dim(0), x.dim(2), x.dim(3), w[0], w[2], w[3], 0, 0, y[2], y[3]};
  g.ph = implied_padding("single_channel_conv", g.h, g.kh, g.oh, "height");
  g.pw = implied_padding("single_channel_conv", g.w, g.kw, g.ow, "width");
  return g;
}

// A 64-byte-aligned float buffer that only grows: reused across calls so that pages are touched
// once per thread.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { std::free(data_); }
  float* get(int64_t n) {
    if (size_t(n) > capacity_) {
      std::free(data_);
      capacity_ = size_t(round_up(n, kLanes));
      data_ = static_cast<float*>(std::aligned_alloc(64, capacity_ * sizeof(float)));
      if (!data_) {
        capacity_ = 0;
        throw std::bad_alloc();
      }
    }
    return data_;
  }

 private:
  float* data_ = nullptr;
  size_t capacity_ = 0;
};

// Output rows per work item: whole images when there are enough of them, else images split so
// that every thread gets work; also bounded so an item's expanded rows stay cache-sized.
int64_t rows_per_item(const Geometry& g, int threads) {
  int64_t rows = g.oh;
  if (g.n < 2 * threads) {
    int64_t splits = (2 * threads + g.n - 1) / g.n;
    rows = round_up((g.oh + splits - 1) / splits, 8);
  }
  constexpr int64_t kMaxExpandedBytes = int64_t(512) << 10;
  while (rows > 8 && (rows + g.kh - 1) * g.e_stride() * int64_t(sizeof(float)) > kMaxExpandedBytes)
    rows = round_up(rows / 2, 8);
  return std::min(rows, g.oh);
}

// The permutation that expands 16 consecutive padded-input values into output chunk c's lanes
// (lane l of chunk c holds xpad[(16c + l) / O]); it depends on c mod P only, and the first value
// a chunk reads, (16c) / O, grows by 16P / O every P chunks.
struct ExpandTable {
  alignas(64) int32_t index[kMaxOutChannels][kLanes];  // [P][16]; P = O / gcd(O, 16) <= O
  int64_t first[kMaxOutChannels];                      // (16p) / O
};

ExpandTable expand_table(const Geometry& g) {
  ExpandTable t;
  for (int64_t p = 0; p < g.period(); ++p) {
    t.first[p] = p * kLanes / g.o;
    for (int64_t l = 0; l < kLanes; ++l)
      t.index[p][l] = int32_t((p * kLanes + l) / g.o - t.first[p]);
  }
  return t;
}

int64_t xpad_stride(const Geometry& g) {
  return round_up(g.padded_w() + 2 * kLanes, kLanes);
}

// Where the kernels find the input value for output chunk c, tap (kh, kw), counting rows from
// the block's first output row: expanded rows, or in broadcast mode the padded input itself.
struct Source {
  const float* data;
  int64_t row_stride, kw_stride, chunks_per_pixel;
  bool broadcast;
  const float* chunk(int64_t c) const {
    return broadcast ? data + c / chunks_per_pixel : data + c * kLanes;
  }
  Source rows_down(int64_t r) const {
    Source s = *this;
    s.data += r * row_stride;
    return s;
  }
};

template <bool kBroadcast>
__m512 load_input(const float* p) {
  if constexpr (kBroadcast)
    return _mm512_set1_ps(*p);
  else
    return _mm512_loadu_ps(p);
}

// Copies padded rows [r0, r0 + count) of image `x_img` into xpad (count * xpad_stride floats)
// and, unless in broadcast mode, expands them into e (row stride e_stride()). All rows are
// copied before any is read back, so the vector loads do not wait on the copies' stores.
Source prepare_rows(const float* x_img, const Geometry& g, const ExpandTable& t, int64_t r0,
                    int64_t count, float* xpad, float* e) {
  const int64_t rs = g.e_stride(), period = g.period(), xs = xpad_stride(g);
  for (int64_t i = 0; i < count; ++i) {
    float* xr = xpad + i * xs;
    int64_t ir = r0 + i - g.ph;
    if (ir < 0 || ir >= g.h) {
      if (g.broadcast()) std::memset(xr, 0, size_t(xs) * sizeof(float));
      continue;
    }
    std::memset(xr, 0, size_t(g.pw) * sizeof(float));
    std::memcpy(xr + g.pw, x_img + ir * g.w, size_t(g.w) * sizeof(float));
    std::memset(xr + g.pw + g.w, 0, size_t(xs - g.pw - g.w) * sizeof(float));
  }
  if (g.broadcast()) return {xpad, xs, 1, g.o / kLanes, true};
  const int64_t step = period * kLanes / g.o;  // input values per period of chunks
  for (int64_t i = 0; i < count; ++i) {
    float* er = e + i * rs;
    int64_t ir = r0 + i - g.ph;
    if (ir < 0 || ir >= g.h) {
      std::memset(er, 0, size_t(rs) * sizeof(float));
      continue;
    }
    const float* xr = xpad + i * xs;
    for (int64_t c = 0, p = 0, base = 0; c < rs / kLanes; ++c) {
      __m512i index = _mm512_load_si512(t.index[p]);
      __m512 v = _mm512_loadu_ps(xr + base + t.first[p]);
      _mm512_store_ps(er + c * kLanes, _mm512_permutexvar_ps(index, v));
      if (++p == period) {
        p = 0;
        base += step;
      }
    }
  }
  return {e, rs, g.o, 1, false};
}

// ------------------------------------------------------------------------------- forward

struct ForwardArgs {
  const float* wexp;  // [taps][P][16]
  const float* bexp;  // [P][16] or null
  bool relu;
};

// Stores R finished rows of chunk c.
template <int R>
void store_rows(const __m512 (&acc)[R], const Geometry& g, int64_t c, bool relu, float* y) {
  const __mmask16 m = c == g.chunks() - 1 ? g.tail_mask() : __mmask16(0xFFFF);
  for (int r = 0; r < R; ++r) {
    __m512 v = relu ? _mm512_max_ps(acc[r], _mm512_setzero_ps()) : acc[r];
    _mm512_mask_storeu_ps(y + r * g.row_len() + c * kLanes, m, v);
  }
}

// R output rows, KH a compile-time constant: for each kw the KH weight vectors stay in registers
// and each input vector loaded feeds every output row it touches (up to KH FMAs per load).
template <bool kB, int KH, int R>
void forward_rows_fixed_kh(const Source& s, const Geometry& g, const ForwardArgs& a, float* y) {
  const int64_t nch = g.chunks(), period = g.period(), kw_n = g.kw;
  for (int64_t c = 0, p = 0; c < nch; ++c, p = p + 1 == period ? 0 : p + 1) {
    __m512 acc[R];
    __m512 b = a.bexp ? _mm512_load_ps(a.bexp + p * kLanes) : _mm512_setzero_ps();
    for (int r = 0; r < R; ++r) acc[r] = b;
    const float* base = s.chunk(c);
    for (int64_t kw = 0; kw < kw_n; ++kw) {
      __m512 w[KH];
      for (int kh = 0; kh < KH; ++kh)
        w[kh] = _mm512_load_ps(a.wexp + ((kh * kw_n + kw) * period + p) * kLanes);
      const float* col = base + kw * s.kw_stride;
#pragma GCC unroll 32
      for (int i = 0; i < R + KH - 1; ++i) {
        __m512 e = load_input<kB>(col + i * s.row_stride);
#pragma GCC unroll 16
        for (int kh = 0; kh < KH; ++kh) {
          const int r = i - kh;
          if (r >= 0 && r < R) acc[r] = _mm512_fmadd_ps(e, w[kh], acc[r]);
        }
      }
    }
    store_rows<R>(acc, g, c, a.relu, y);
  }
}

// R output rows, any kernel height: each weight vector feeds R rows.
template <bool kB, int R>
void forward_rows_any_kh(const Source& s, const Geometry& g, const ForwardArgs& a, float* y) {
  const int64_t nch = g.chunks(), period = g.period();
  for (int64_t c = 0, p = 0; c < nch; ++c, p = p + 1 == period ? 0 : p + 1) {
    __m512 acc[R];
    __m512 b = a.bexp ? _mm512_load_ps(a.bexp + p * kLanes) : _mm512_setzero_ps();
    for (int r = 0; r < R; ++r) acc[r] = b;
    const float* base = s.chunk(c);
    for (int64_t kh = 0; kh < g.kh; ++kh) {
      for (int64_t kw = 0; kw < g.kw; ++kw) {
        __m512 wv = _mm512_load_ps(a.wexp + ((kh * g.kw + kw) * period + p) * kLanes);
        const float* ek = base + kh * s.row_stride + kw * s.kw_stride;
        for (int r = 0; r < R; ++r)
          acc[r] = _mm512_fmadd_ps(load_input<kB>(ek + r * s.row_stride), wv, acc[r]);
      }
    }
    store_rows<R>(acc, g, c, a.relu, y);
  }
}

template <bool kB, int KH, int R>
void forward_block(const Source& s, const Geometry& g, const ForwardArgs& a, float* y) {
  if constexpr (KH == 0)
    forward_rows_any_kh<kB, R>(s, g, a, y);
  else
    forward_rows_fixed_kh<kB, KH, R>(s, g, a, y);
}

// `rows` output rows in blocks of 8. KH == 0: any kernel height.
template <bool kB, int KH>
void forward_item(int64_t rows, const Source& s, const Geometry& g, const ForwardArgs& a,
                  float* y) {
  const int64_t len = g.row_len();
  int64_t r = 0;
  for (; r + 8 <= rows; r += 8) forward_block<kB, KH, 8>(s.rows_down(r), g, a, y + r * len);
  const Source t = s.rows_down(r);
  float* yr = y + r * len;
  switch (rows - r) {
    case 7:
      forward_block<kB, KH, 7>(t, g, a, yr);
      break;
    case 6:
      forward_block<kB, KH, 6>(t, g, a, yr);
      break;
    case 5:
      forward_block<kB, KH, 5>(t, g, a, yr);
      break;
    case 4:
      forward_block<kB, KH, 4>(t, g, a, yr);
      break;
    case 3:
      forward_block<kB, KH, 3>(t, g, a, yr);
      break;
    case 2:
      forward_block<kB, KH, 2>(t, g, a, yr);
      break;
    case 1:
      forward_block<kB, KH, 1>(t, g, a, yr);
      break;
    default:
      break;
  }
}

template <bool kB>
void forward_item_any(int64_t rows, const Source& s, const Geometry& g, const ForwardArgs& a,
                      float* y) {
  if (g.kh == 3) return forward_item<kB, 3>(rows, s, g, a, y);
  if (g.kh == 5) return forward_item<kB, 5>(rows, s, g, a, y);
  forward_item<kB, 0>(rows, s, g, a, y);
}

// ---------------------------------------------------------------------- backward, weights

// Per-lane weight-gradient sums for taps (kh, kw0 .. kw0+B-1), all kh, over `rows` output rows:
// g_acc[tap][c*16 + l] += sum over the rows of dy[row][c*16 + l] * input(c, row + kh, kw). The
// KH*B accumulators stay in registers while the column walks down the input rows; the last KH
// gradient rows rotate through d[], so each input vector loaded feeds KH FMAs.
template <bool kB, int KH, int B>
void weights_columns(const Source& s, const float* dy, int64_t rows, const Geometry& g, int64_t kw0,
                     float* g_acc) {
  const int64_t len = g.row_len(), nch = g.chunks(), tap_stride = nch * kLanes;
  const __mmask16 tail = g.tail_mask();
  for (int64_t c = 0; c < nch; ++c) {
    const __mmask16 m = c == nch - 1 ? tail : __mmask16(0xFFFF);
    __m512 acc[KH][B], d[KH];
    for (int kh = 0; kh < KH; ++kh) {
      d[kh] = _mm512_setzero_ps();
      for (int b = 0; b < B; ++b) acc[kh][b] = _mm512_setzero_ps();
    }
    const float* col = s.chunk(c) + kw0 * s.kw_stride;
    auto step = [&](int64_t i, __m512 fresh) {
      for (int kh = KH - 1; kh > 0; --kh) d[kh] = d[kh - 1];
      d[0] = fresh;
      const float* ei = col + i * s.row_stride;
      for (int b = 0; b < B; ++b) {
        __m512 ev = load_input<kB>(ei + b * s.kw_stride);
        for (int kh = 0; kh < KH; ++kh) acc[kh][b] = _mm512_fmadd_ps(d[kh], ev, acc[kh][b]);
      }
    };
    // Input row i meets output rows i - kh; d[kh] is zero where that row is outside the item.
    int64_t i = 0;
    for (; i < rows; ++i) step(i, _mm512_maskz_loadu_ps(m, dy + i * len + c * kLanes));
    for (; i < rows + KH - 1; ++i) step(i, _mm512_setzero_ps());
    for (int kh = 0; kh < KH; ++kh) {
      for (int b = 0; b < B; ++b) {
        float* dst = g_acc + (kh * g.kw + kw0 + b) * tap_stride + c * kLanes;
        _mm512_store_ps(dst, _mm512_add_ps(_mm512_load_ps(dst), acc[kh][b]));
      }
    }
  }
}

// Any kernel height: one kh at a time, B kw taps per pass over the rows.
template <bool kB, int B>
void weights_tap_block(const Source& s, const float* dy, int64_t rows, const Geometry& g,
                       int64_t kh, int64_t kw0, float* g_acc) {
  const int64_t len = g.row_len(), nch = g.chunks(), tap_stride = nch * kLanes;
  const __mmask16 tail = g.tail_mask();
  for (int64_t c = 0; c < nch; ++c) {
    const __mmask16 m = c == nch - 1 ? tail : __mmask16(0xFFFF);
    __m512 acc[B];
    for (int b = 0; b < B; ++b) acc[b] = _mm512_setzero_ps();
    const float* col = s.chunk(c) + kh * s.row_stride + kw0 * s.kw_stride;
    for (int64_t i = 0; i < rows; ++i) {
      __m512 d = _mm512_maskz_loadu_ps(m, dy + i * len + c * kLanes);
      const float* ei = col + i * s.row_stride;
      for (int b = 0; b < B; ++b)
        acc[b] = _mm512_fmadd_ps(d, load_input<kB>(ei + b * s.kw_stride), acc[b]);
    }
    for (int b = 0; b < B; ++b) {
      float* dst = g_acc + (kh * g.kw + kw0 + b) * tap_stride + c * kLanes;
      _mm512_store_ps(dst, _mm512_add_ps(_mm512_load_ps(dst), acc[b]));
    }
  }
}

// Taps kw0 .. kw0+B-1 (B a compile-time constant); KH == 0: any kernel height.
template <bool kB, int KH, int B>
void weights_block(const Source& s, const float* dy, int64_t rows, const Geometry& g, int64_t kw0,
                   float* g_acc) {
  if constexpr (KH == 0) {
    for (int64_t kh = 0; kh < g.kh; ++kh) weights_tap_block<kB, B>(s, dy, rows, g, kh, kw0, g_acc);
  } else {
    weights_columns<kB, KH, B>(s, dy, rows, g, kw0, g_acc);
  }
}

// The kw taps in blocks of at most 4, as even as possible (5 = 3 + 2): few enough accumulators
// (KH*B) to stay in registers.
template <bool kB, int KH>
void weights_item(const Source& s, const float* dy, int64_t rows, const Geometry& g, float* g_acc) {
  const int64_t blocks = (g.kw + 3) / 4;
  for (int64_t k = 0, kw0 = 0; k < blocks; ++k) {
    const int64_t width = g.kw / blocks + (k < g.kw % blocks ? 1 : 0);
    switch (width) {
      case 4:
        weights_block<kB, KH, 4>(s, dy, rows, g, kw0, g_acc);
        break;
      case 3:
        weights_block<kB, KH, 3>(s, dy, rows, g, kw0, g_acc);
        break;
      case 2:
        weights_block<kB, KH, 2>(s, dy, rows, g, kw0, g_acc);
        break;
      default:
        weights_block<kB, KH, 1>(s, dy, rows, g, kw0, g_acc);
        break;
    }
    kw0 += width;
  }
}

template <bool kB>
void weights_item_any(const Source& s, const float* dy, int64_t rows, const Geometry& g,
                      float* g_acc) {
  if (g.kh == 3) return weights_item<kB, 3>(s, dy, rows, g, g_acc);
  if (g.kh == 5) return weights_item<kB, 5>(s, dy, rows, g, g_acc);
  weights_item<kB, 0>(s, dy, rows, g, g_acc);
}

// Per-lane bias-gradient sums: b_acc[c*16 + l] += sum over the rows of dy[row][c*16 + l].
void bias_columns(const float* dy, int64_t rows, const Geometry& g, float* b_acc) {
  const int64_t len = g.row_len(), nch = g.chunks();
  const __mmask16 tail = g.tail_mask();
  for (int64_t c = 0; c < nch; ++c) {
    const __mmask16 m = c == nch - 1 ? tail : __mmask16(0xFFFF);
    __m512 s = _mm512_load_ps(b_acc + c * kLanes);
    for (int64_t i = 0; i < rows; ++i)
      s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(m, dy + i * len + c * kLanes));
    _mm512_store_ps(b_acc + c * kLanes, s);
  }
}

}  // namespace

bool single_channel_conv_fits(const Shape& x, const Shape& w_shape, const ConvAttrs& a,
                              bool backward_weights) {
  if (x.rank() != 4 || x[1] != 1 || w_shape.rank() != 4 || w_shape[1] != 1 || a.groups != 1)
    return false;
  for (int i = 0; i < 2; ++i) {
    if (a.stride[i] != 1 || a.dilation[i] != 1 || a.padding[i] < 0) return false;
  }
  int64_t o = w_shape[0], kh = w_shape[2], kw = w_shape[3];
  if (o < 1 || o > kMaxOutChannels || kh < 1 || kw < 1 || kh * kw > kMaxTaps) return false;
  // Broadcast-mode backward-weights (O = 16, 32, ...) measured slower than oneDNN's.
  if (backward_weights && o % kLanes == 0) return false;
  int64_t oh = x[2] + 2 * a.padding[0] - kh + 1, ow = x[3] + 2 * a.padding[1] - kw + 1;
  if (x.numel() == 0 || oh < 1 || ow < 1) return false;
  // Keeps the per-thread buffers (an expanded row is (W + 2*pad) * O floats) modest.
  return (x[3] + 2 * a.padding[1]) * o <= (int64_t(1) << 16);
}

bool can_run_single_channel_conv(const Tensor& x, const Shape& w_shape, const ConvAttrs& a,
                                 bool backward_weights) {
  return x.dtype() == DType::f32 &&
         KILN_ISA::single_channel_conv_fits(x.shape(), w_shape, a, backward_weights) &&
         x_is_dense(x);
}

namespace {

// Floats of scratch the forward uses: the expanded weights and bias, then per thread the padded
// input rows, their expansion and (pooling) the finished output rows of one item. Each part is
// a whole number of 64-byte lines.
struct ForwardScratch {
  int64_t weights = 0, xpad = 0, expanded = 0, out_rows = 0;
  int64_t per_thread() const { return xpad + expanded + out_rows; }
  int64_t floats(int threads) const { return weights + threads * per_thread(); }
};

ForwardScratch forward_scratch(const Geometry& g, int threads, bool pooled) {
  const int64_t rows = rows_per_item(g, threads), in_rows = rows + g.kh - 1;
  ForwardScratch s;
  s.weights = round_up((g.taps() + 1) * g.period() * kLanes, kLanes);
  s.xpad = round_up(in_rows * xpad_stride(g), kLanes);
  s.expanded = g.broadcast() ? 0 : round_up(in_rows * g.e_stride(), kLanes);
  s.out_rows = pooled ? round_up(rows * g.row_len(), kLanes) : 0;
  return s;
}

// The forward's set-up (weights and bias expanded to the lane pattern) and its parallel loop
// over items. `rows_for(n, r0, count, out_rows)` says where an item's finished output rows go
// ([count] rows of OW*O floats; `out_rows` is this thread's scratch for them, when pooling);
// `done(n, r0, count, rows)` runs after they are written. The scratch is `lent` when the caller
// lent it for this many threads, else the kernels' own per-thread buffers.
template <class RowsFor, class Done>
void forward_items(const Tensor& x, const Tensor& w, const Tensor* bias, bool relu,
                   const Geometry& g, bool pooled, const SingleChannelConvScratch* lent,
                   RowsFor rows_for, Done done) {
  const int threads = omp_get_max_threads();
  const ForwardScratch layout = forward_scratch(g, threads, pooled);
  float* lent_data = lent != nullptr && lent->threads == threads ? lent->data : nullptr;
  const int64_t period = g.period(), taps = g.taps();
  // Expanded weights [tap][P][16] and bias [P][16]: lane l of phase p is channel (16p + l) % O.
  thread_local Scratch weight_buffer;
  float* wexp = lent_data != nullptr ? lent_data : weight_buffer.get(layout.weights);
  float* bexp = bias ? wexp + taps * period * kLanes : nullptr;
  const float* wd = w.data<float>();
  for (int64_t t = 0; t < taps; ++t)
    for (int64_t p = 0; p < period; ++p)
      for (int64_t l = 0; l < kLanes; ++l)
        wexp[(t * period + p) * kLanes + l] = wd[((p * kLanes + l) % g.o) * taps + t];
  if (bias) {
    const float* bd = bias->data<float>();
    for (int64_t i = 0; i < period * kLanes; ++i) bexp[i] = bd[i % g.o];
  }
  const ForwardArgs args{wexp, bexp, relu};
  const ExpandTable table = expand_table(g);
  const int64_t rows = rows_per_item(g, threads);
  const int64_t blocks = (g.oh + rows - 1) / rows, items = g.n * blocks;
  const float* xd = x.data<float>();
  const int64_t x_image = g.h * g.w;
#pragma omp parallel for schedule(static) if (items > 1)
  for (int64_t item = 0; item < items; ++item) {
    thread_local Scratch e_buffer, row_buffer, out_buffer;
    float *xpad, *e, *out_rows;
    if (lent_data != nullptr) {
      xpad = lent_data + layout.weights + omp_get_thread_num() * layout.per_thread();
      e = xpad + layout.xpad;
      out_rows = e + layout.expanded;
    } else {
      xpad = row_buffer.get(layout.xpad);
      e = g.broadcast() ? nullptr : e_buffer.get(layout.expanded);
      out_rows = pooled ? out_buffer.get(layout.out_rows) : nullptr;
    }
    int64_t n = item / blocks, r0 = item % blocks * rows, count = std::min(rows, g.oh - r0);
    const int64_t in_rows = count + g.kh - 1;
    Source src =
        prepare_rows(xd + n * x_image, g, table, r0, in_rows, xpad, g.broadcast() ? nullptr : e);
    float* y_rows = rows_for(n, r0, count, out_rows);
    if (g.broadcast())
      forward_item_any<true>(count, src, g, args, y_rows);
    else
      forward_item_any<false>(count, src, g, args, y_rows);
    done(n, r0, count, y_rows);
  }
}

// 2×2/2 max pooling of `count` finished rows starting at output row r0 (even; a last unpaired
// row is dropped, as floor pooling drops it): the maxima, and per (pixel, channel) the window's
// byte (kernels/pool_window.h).
void pool_rows(const float* rows, int64_t r0, int64_t count, const Geometry& g, int64_t pw,
               float* pooled, uint8_t* winners) {
  const int64_t len = g.row_len();
  for (int64_t i = 0; i + 1 < count; i += 2) {
    const float* top = rows + i * len;
    const float* bottom = top + len;
    const int64_t py = (r0 + i) / 2;
    for (int64_t px = 0; px < pw; ++px) {
      for (int64_t c0 = 0; c0 < g.o; c0 += kLanes) {
        const __mmask16 m =
            g.o - c0 >= kLanes ? __mmask16(0xFFFF) : __mmask16((1u << (g.o - c0)) - 1u);
        const int64_t left = 2 * px * g.o + c0, right = left + g.o;
        const __m512 va = _mm512_maskz_loadu_ps(m, top + left),
                     vb = _mm512_maskz_loadu_ps(m, top + right);
        const __m512 vc = _mm512_maskz_loadu_ps(m, bottom + left),
                     vd = _mm512_maskz_loadu_ps(m, bottom + right);
        const WindowMax wm = window_max_2x2(va, vb, vc, vd);
        const int64_t at = (py * pw + px) * g.o + c0;
        _mm512_mask_storeu_ps(pooled + at, m, wm.max);
        _mm512_mask_cvtepi32_storeu_epi8(winners + at, m, window_code(wm));
      }
    }
  }
}

void check_forward_operands(const char* op, const Geometry& g, const Tensor& w,
                            const Tensor* bias) {
  if (w.dtype() != DType::f32 || !w.is_contiguous() ||
      (bias &&
       (bias->dtype() != DType::f32 || bias->shape() != Shape{g.o} || !bias->is_contiguous())))
    throw Error(
        detail::concat(op, ": needs contiguous f32 w ", describe(w), " and bias [", g.o, "]"));
}

}  // namespace

void single_channel_conv_forward(const Tensor& x, const Tensor& w, const Tensor* bias, bool relu,
                                 Tensor& y) {
  const char* op = "single_channel_conv_forward";
  Geometry g = geometry(x, w.shape(), y.shape(), op);
  note_kernel("kiln:single_channel_conv");
  check_forward_operands(op, g, w, bias);
  if (y.dtype() != DType::f32 || !is_dense_channels_last(y))
    throw Error(detail::concat(op, ": needs a channels-last f32 y, got ", describe(y)));
  float* yd = y.data<float>();
  const int64_t y_image = g.oh * g.row_len();
  forward_items(
      x, w, bias, relu, g, /*pooled=*/false, nullptr,
      [&](int64_t n, int64_t r0, int64_t, float*) { return yd + n * y_image + r0 * g.row_len(); },
      [](int64_t, int64_t, int64_t, const float*) {});
}

namespace {
Shape relu_pool_conv_shape(const Shape& x, const Shape& w, std::array<int64_t, 2> padding,
                           const char* op) {
  if (x.rank() != 4 || w.rank() != 4) {
    throw ShapeError(
        detail::concat(op, ": expects rank-4 x and w, got x ", x.str(), ", w ", w.str()));
  }
  return {x[0], w[0], x[2] + 2 * padding[0] - w[2] + 1, x[3] + 2 * padding[1] - w[3] + 1};
}
}  // namespace

int64_t single_channel_conv_relu_pool_scratch_floats(const Tensor& x, const Shape& w_shape,
                                                     std::array<int64_t, 2> padding, int threads) {
  const char* op = "single_channel_conv_relu_pool_forward";
  const Geometry g =
      geometry(x, w_shape, relu_pool_conv_shape(x.shape(), w_shape, padding, op), op);
  return forward_scratch(g, threads, /*pooled=*/true).floats(threads);
}

void single_channel_conv_relu_pool_forward(const Tensor& x, const Tensor& w, const Tensor* bias,
                                           std::array<int64_t, 2> padding, Tensor& pooled,
                                           Tensor& winners,
                                           const SingleChannelConvScratch* scratch) {
  const char* op = "single_channel_conv_relu_pool_forward";
  const Shape conv = relu_pool_conv_shape(x.shape(), w.shape(), padding, op);
  Geometry g = geometry(x, w.shape(), conv, op);
  note_kernel("kiln:single_channel_conv_relu_pool");
  check_forward_operands(op, g, w, bias);
  const Shape pooled_shape{g.n, g.o, g.oh / 2, g.ow / 2};
  if (pooled.shape() != pooled_shape || pooled.dtype() != DType::f32 ||
      !is_dense_channels_last(pooled) || winners.shape() != pooled_shape ||
      winners.dtype() != DType::u8 || !is_dense_channels_last(winners)) {
    throw ShapeError(detail::concat(op, ": expects channels-last f32 pooled and u8 winners ",
                                    pooled_shape.str(), ", got ", describe(pooled), " and ",
                                    describe(winners)));
  }
  float* pd = pooled.data<float>();
  uint8_t* wd = winners.data<uint8_t>();
  const int64_t pooled_image = pooled_shape[2] * pooled_shape[3] * g.o;
  // The relu output never leaves this thread's cache: each item's rows are pooled right away.
  forward_items(
      x, w, bias, /*relu=*/true, g, /*pooled=*/true, scratch,
      [](int64_t, int64_t, int64_t, float* out_rows) { return out_rows; },
      [&](int64_t n, int64_t r0, int64_t count, const float* rows) {
        // Items start at even rows, so an odd OH's last row is the unpaired end of its item.
        pool_rows(rows, r0, count, g, pooled_shape[3], pd + n * pooled_image,
                  wd + n * pooled_image);
      });
}

void single_channel_conv_backward_weights(const Tensor& dy, const Tensor& x, Tensor& dw,
                                          Tensor* db) {
  const char* op = "single_channel_conv_backward_weights";
  Geometry g = geometry(x, dw.shape(), dy.shape(), op);
  note_kernel("kiln:single_channel_conv_weights");
  if (dy.dtype() != DType::f32 || !is_dense_channels_last(dy) || dw.dtype() != DType::f32 ||
      !dw.is_contiguous() ||
      (db && (db->dtype() != DType::f32 || db->shape() != Shape{g.o} || !db->is_contiguous())))
    throw Error(detail::concat(op, ": needs channels-last f32 dy ", describe(dy),
                               ", contiguous f32 dw ", describe(dw), " and db [", g.o, "]"));
  const int64_t taps = g.taps(), tap_stride = g.chunks() * kLanes;
  const int64_t folded = (taps + 1) * g.o;  // dw as [O][taps], then db
  const int max_threads = omp_get_max_threads();
  const ExpandTable table = expand_table(g);
  const int64_t rows = rows_per_item(g, max_threads);
  const int64_t blocks = (g.oh + rows - 1) / rows, items = g.n * blocks;
  thread_local Scratch partial_buffer;
  float* partials = partial_buffer.get(max_threads * folded);
  const float* xd = x.data<float>();
  const float* dyd = dy.data<float>();
  const int64_t x_image = g.h * g.w, y_image = g.oh * g.row_len();
  int used_threads = 1;
#pragma omp parallel if (items > 1)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    if (t == 0) used_threads = nt;
    thread_local Scratch e_buffer, row_buffer, acc_buffer;
    float* g_acc = acc_buffer.get((taps + 1) * tap_stride);  // per-lane sums; the last is db's
    std::memset(g_acc, 0, size_t((taps + 1) * tap_stride) * sizeof(float));
    // A fixed, contiguous share of the items per thread keeps the summation order fixed.
    const int64_t begin = items * t / nt, end = items * (t + 1) / nt;
    for (int64_t item = begin; item < end; ++item) {
      int64_t n = item / blocks, r0 = item % blocks * rows, count = std::min(rows, g.oh - r0);
      const int64_t in_rows = count + g.kh - 1;
      Source src = prepare_rows(xd + n * x_image, g, table, r0, in_rows,
                                row_buffer.get(in_rows * xpad_stride(g)),
                                g.broadcast() ? nullptr : e_buffer.get(in_rows * g.e_stride()));
      const float* dy_rows = dyd + n * y_image + r0 * g.row_len();
      if (g.broadcast())
        weights_item_any<true>(src, dy_rows, count, g, g_acc);
      else
        weights_item_any<false>(src, dy_rows, count, g, g_acc);
      if (db) bias_columns(dy_rows, count, g, g_acc + taps * tap_stride);
    }
    // Fold lanes to channels: flat index j of an output row is channel j % O.
    float* part = partials + t * folded;
    std::memset(part, 0, size_t(folded) * sizeof(float));
    for (int64_t tap = 0; tap <= taps; ++tap) {
      const float* src = g_acc + tap * tap_stride;
      float* dst = tap < taps ? part + tap : part + taps * g.o;
      const int64_t step = tap < taps ? taps : 1;
      for (int64_t j = 0, ch = 0; j < g.row_len(); ++j, ch = ch + 1 == g.o ? 0 : ch + 1)
        dst[ch * step] += src[j];
    }
  }
  float* dwd = dw.data<float>();
  float* dbd = db ? db->data<float>() : nullptr;
  for (int64_t i = 0; i < folded; ++i) {
    if (i >= taps * g.o && !dbd) break;
    float s = 0;
    for (int t = 0; t < used_threads; ++t) s += partials[t * folded + i];
    if (i < taps * g.o)
      dwd[i] = s;
    else
      dbd[i - taps * g.o] = s;
  }
}

#else  // the baseline variant: the conv ops use oneDNN.

bool can_run_single_channel_conv(const Tensor&, const Shape&, const ConvAttrs&, bool) {
  return false;
}
bool single_channel_conv_fits(const Shape&, const Shape&, const ConvAttrs&, bool) {
  return false;
}
void single_channel_conv_forward(const Tensor&, const Tensor&, const Tensor*, bool, Tensor&) {
  throw Error("single_channel_conv_forward: runs only where the AVX-512 kernels do");
}
int64_t single_channel_conv_relu_pool_scratch_floats(const Tensor&, const Shape&,
                                                     std::array<int64_t, 2>, int) {
  throw Error("single_channel_conv_relu_pool_forward: runs only where the AVX-512 kernels do");
}
void single_channel_conv_relu_pool_forward(const Tensor&, const Tensor&, const Tensor*,
                                           std::array<int64_t, 2>, Tensor&, Tensor&,
                                           const SingleChannelConvScratch*) {
  throw Error("single_channel_conv_relu_pool_forward: runs only where the AVX-512 kernels do");
}
void single_channel_conv_backward_weights(const Tensor&, const Tensor&, Tensor&, Tensor*) {
  throw Error("single_channel_conv_backward_weights: runs only where the AVX-512 kernels do");
}

#endif

}  // namespace kiln::ops::KILN_ISA
KILN_ISA_TARGET_END

#if KILN_ISA_DISPATCH
namespace kiln::ops {

KILN_ISA_DECLARE(bool can_run_single_channel_conv(const Tensor& x, const Shape& w_shape,
                                                  const ConvAttrs& a, bool backward_weights))
KILN_ISA_DECLARE(bool single_channel_conv_fits(const Shape& x_shape, const Shape& w_shape,
                                               const ConvAttrs& a, bool backward_weights))
KILN_ISA_DECLARE(void single_channel_conv_forward(const Tensor& x, const Tensor& w,
                                                  const Tensor* bias, bool relu, Tensor& y))
KILN_ISA_DECLARE(int64_t single_channel_conv_relu_pool_scratch_floats(
    const Tensor& x, const Shape& w_shape, std::array<int64_t, 2> padding, int threads))
KILN_ISA_DECLARE(void single_channel_conv_relu_pool_forward(
    const Tensor& x, const Tensor& w, const Tensor* bias, std::array<int64_t, 2> padding,
    Tensor& pooled, Tensor& winners, const SingleChannelConvScratch* scratch))
KILN_ISA_DECLARE(void single_channel_conv_backward_weights(const Tensor& dy, const Tensor& x,
                                                           Tensor& dw, Tensor* db))

bool can_run_single_channel_conv(const Tensor& x, const Shape& w_shape, const ConvAttrs& a,
                                 bool backward_weights) {
  return KILN_ISA_CALL(can_run_single_channel_conv, x, w_shape, a, backward_weights);
}
bool single_channel_conv_fits(const Shape& x_shape, const Shape& w_shape, const ConvAttrs& a,
                              bool backward_weights) {
  return KILN_ISA_CALL(single_channel_conv_fits, x_shape, w_shape, a, backward_weights);
}
void single_channel_conv_forward(const Tensor& x, const Tensor& w, const Tensor* bias, bool relu,
                                 Tensor& y) {
  KILN_ISA_CALL(single_channel_conv_forward, x, w, bias, relu, y);
}
int64_t single_channel_conv_relu_pool_scratch_floats(const Tensor& x, const Shape& w_shape,
                                                     std::array<int64_t, 2> padding, int threads) {
  return KILN_ISA_CALL(single_channel_conv_relu_pool_scratch_floats, x, w_shape, padding, threads);
}
void single_channel_conv_relu_pool_forward(const Tensor& x, const Tensor& w, const Tensor* bias,
                                           std::array<int64_t, 2> padding, Tensor& pooled,
                                           Tensor& winners,
                                           const SingleChannelConvScratch* scratch) {
  KILN_ISA_CALL(single_channel_conv_relu_pool_forward, x, w, bias, padding, pooled, winners,
                scratch);
}
void single_channel_conv_backward_weights(const Tensor& dy, const Tensor& x, Tensor& dw,
                                          Tensor* db) {
  KILN_ISA_CALL(single_channel_conv_backward_weights, dy, x, dw, db);
}

}  // namespace kiln::ops
#endif
