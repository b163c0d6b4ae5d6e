#include "kiln/ops/kernels/conv_winograd.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

// GCC 12's AVX-512 intrinsics trip -W[maybe-]uninitialized on their undefined-register idiom.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "kiln/core/error.h"
#include "kiln/ops/kernels/conv_geometry.h"

// How it works. F(2x2, 3x3) computes a 2x2 block of outputs from a 4x4 block of inputs d as
// Y = Aᵀ [Σ_c (G g Gᵀ) ⊙ (Bᵀ d B)] A, per output channel, with g the 3x3 filter. Over the 16
// positions p of the 4x4 transformed tile the sum over input channels is a matrix product:
// M[p][o] = Σ_c V[p][c] · U[p][c][o], V = Bᵀ d B the input tile transformed, U = G g Gᵀ the
// weights transformed (once per call, 16·C·O floats).
//
// A channels-last pixel of 16 channels is one vector, so a tile is 16 vectors per channel block:
// the input transform reads them, writes V; the product takes, per position and per block of 16
// output channels, 16 weight vectors into registers and runs them against kTiles tiles at once
// (kTiles accumulators; each FMA broadcasts one V value from memory); the output transform reads
// M and writes the 2x2 outputs. A task is one row of tiles of one image.
//
// Measured within ResNet-20's training step (batch 128, 2 threads, graph mode, medians of 3 runs
// of 20 steps, ms per launch, oneDNN's kernel -> this one):
//   16->16 at 28x28, channels-last: forward 1.28 -> 1.01, backward-data 1.25 -> 0.92;
//   32->32 at 14x14, channels-last: forward 1.37 -> 1.05 (brgconv), backward-data 1.29 -> 1.00;
//   32->32 at 14x14, nChw16c: forward 1.25 -> 1.04, backward-data 1.18 -> 0.97 (oneDNN's
//   F(4x4, 3x3)).
// The whole step: 80.6 -> 72.2 ms with fusion, 91.1 -> 83.6 without. Alone, on a warm cache, the
// 16-channel forward takes 0.85-0.95 ms: in the step its input comes from memory, which is what
// the prefetches below are for (1.33 -> 1.10 ms, then 1.05 with the output's lines fetched too).
// At 64 channels and 7x7 oneDNN's F(4x4, 3x3) is faster (0.95 vs 1.16 alone: it has a quarter of
// the direct kernel's products against F(2x2)'s 4/9, and 7x7 wastes a third of the 2x2 tiles), so
// the rule stops at 32.

namespace kiln::ops {

#if defined(__AVX512F__)
namespace {

using conv_geometry::is_dense_channels_last;

// Tiles per matrix product: kTiles accumulators and 16 weight vectors stay in 23 of the 32
// registers. 7 also splits a 28-wide row (14 tiles) evenly; 4 and 8 measured slower.
constexpr int kTiles = 7;
constexpr int kLanes = 16;
constexpr int kPositions = 16;  // the 4x4 transformed tile

struct Geometry {
  int64_t n, h, w, oh, ow, ph, pw;
  bool x_blocked, y_blocked;
  int64_t tile_rows() const { return (oh + 1) / 2; }
  int64_t tile_cols() const { return (ow + 1) / 2; }
};

// u[p][c][o] = (G g Gᵀ)[p] for filter g = w[o, c], G = [[1, 0, 0], [½, ½, ½], [½, -½, ½],
// [0, 0, 1]].
void transform_weights(const float* w, int64_t outs, int64_t ins, float* u) {
  for (int64_t o = 0; o < outs; ++o) {
    for (int64_t c = 0; c < ins; ++c) {
      const float* g = w + (o * ins + c) * 9;
      float t[4][3];  // G g
      for (int j = 0; j < 3; ++j) {
        t[0][j] = g[j];
        t[1][j] = 0.5f * (g[j] + g[3 + j] + g[6 + j]);
        t[2][j] = 0.5f * (g[j] - g[3 + j] + g[6 + j]);
        t[3][j] = g[6 + j];
      }
      for (int i = 0; i < 4; ++i) {
        const float row[4] = {t[i][0], 0.5f * (t[i][0] + t[i][1] + t[i][2]),
                              0.5f * (t[i][0] - t[i][1] + t[i][2]), t[i][2]};
        for (int k = 0; k < 4; ++k) u[((i * 4 + k) * ins + c) * outs + o] = row[k];
      }
    }
  }
}

// V = Bᵀ d B for one 16-channel block of a tile, d[i][j] the input pixel at row i, column j;
// Bᵀ = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]. Position p = 4i + j of V
// goes to v + p·stride.
inline void transform_input(const __m512 (&d)[16], float* v, int64_t stride) {
  __m512 r[16];  // Bᵀ d
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm512_sub_ps(d[j], d[8 + j]);
    r[4 + j] = _mm512_add_ps(d[4 + j], d[8 + j]);
    r[8 + j] = _mm512_sub_ps(d[8 + j], d[4 + j]);
    r[12 + j] = _mm512_sub_ps(d[4 + j], d[12 + j]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const __m512 a0 = r[4 * i], a1 = r[4 * i + 1], a2 = r[4 * i + 2], a3 = r[4 * i + 3];
    _mm512_store_ps(v + (4 * i) * stride, _mm512_sub_ps(a0, a2));
    _mm512_store_ps(v + (4 * i + 1) * stride, _mm512_add_ps(a1, a2));
    _mm512_store_ps(v + (4 * i + 2) * stride, _mm512_sub_ps(a2, a1));
    _mm512_store_ps(v + (4 * i + 3) * stride, _mm512_sub_ps(a1, a3));
  }
}

// m[t][p][o] = Σ_c v[t][p][c] · u[p][c][o] for NT tiles. Every loop inside a position is
// unrolled, so the accumulators and the weight vectors stay in registers.
template <int NT, int C, int O>
void multiply(const float* v, const float* u, float* m) {
  for (int p = 0; p < kPositions; ++p) {
    for (int ob = 0; ob < O; ob += kLanes) {
      __m512 acc[NT];
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
      for (int cb = 0; cb < C; cb += kLanes) {
        __m512 weights[kLanes];
#pragma GCC unroll 16
        for (int k = 0; k < kLanes; ++k) {
          weights[k] = _mm512_load_ps(u + (p * C + cb + k) * O + ob);
        }
#pragma GCC unroll 16
        for (int k = 0; k < kLanes; ++k) {
#pragma GCC unroll 8
          for (int t = 0; t < NT; ++t) {
            acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(v[(t * kPositions + p) * C + cb + k]),
                                     weights[k], acc[t]);
          }
        }
      }
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) _mm512_store_ps(m + (t * kPositions + p) * O + ob, acc[t]);
    }
  }
}

template <int C, int O>
void multiply_tiles(int tiles, const float* v, const float* u, float* m) {
  static_assert(kTiles == 7, "one case per tile count");
  switch (tiles) {
    case 1:
      return multiply<1, C, O>(v, u, m);
    case 2:
      return multiply<2, C, O>(v, u, m);
    case 3:
      return multiply<3, C, O>(v, u, m);
    case 4:
      return multiply<4, C, O>(v, u, m);
    case 5:
      return multiply<5, C, O>(v, u, m);
    case 6:
      return multiply<6, C, O>(v, u, m);
    default:
      return multiply<7, C, O>(v, u, m);
  }
}

// An activation tensor's memory: channel block b of image n starts at block(n, b), and pixels
// follow each other `pixel` floats apart (channels-last: C, nChw16c: 16).
template <class T>
struct Plane {
  T* data;
  int64_t channels, h, w;
  bool blocked;
  T* block(int64_t n, int64_t b) const {
    return data + (blocked ? (n * (channels / kLanes) + b) * h * w * kLanes
                           : n * h * w * channels + b * kLanes);
  }
  int64_t pixel() const { return blocked ? kLanes : channels; }
};

// The 4x4 input tile of output tile (ty, tx) in channel block b of image n (zeros outside the
// image), and a prefetch of the two input rows this tile's column brings in for the next row of
// tiles (the next task): a task ahead, where the hardware prefetcher, seeing rows of only OW/2
// tiles, comes too late (the 16-channel forward in ResNet-20's step: 1.33 -> 1.10 ms).
inline void load_input_tile(const Plane<const float>& x, const Geometry& g, int64_t n, int64_t b,
                            int64_t ty, int64_t tx, __m512 (&d)[16]) {
  const float* xb = x.block(n, b);
  const int64_t pixel = x.pixel();
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const int64_t iy = 2 * ty - g.ph + i;
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const int64_t ix = 2 * tx - g.pw + j;
      d[4 * i + j] = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w
                         ? _mm512_loadu_ps(xb + (iy * g.w + ix) * pixel)
                         : _mm512_setzero_ps();
    }
  }
#pragma GCC unroll 2
  for (int i = 4; i < 6; ++i) {
    const int64_t iy = 2 * ty - g.ph + i;
#pragma GCC unroll 2
    for (int j = 2; j < 4; ++j) {
      const int64_t ix = 2 * tx - g.pw + j;
      if (iy < g.h && ix >= 0 && ix < g.w) __builtin_prefetch(xb + (iy * g.w + ix) * pixel, 0, 3);
    }
  }
}

template <int C, int O>
void forward(const Plane<const float>& x, const float* u, const float* bias, const Plane<float>& y,
             const Geometry& g) {
  const int64_t tile_rows = g.tile_rows(), tile_cols = g.tile_cols(), y_pixel = y.pixel();
#pragma omp parallel
  {
    alignas(64) float v[kTiles * kPositions * C];
    alignas(64) float m[kTiles * kPositions * O];
#pragma omp for schedule(static)
    for (int64_t task = 0; task < g.n * tile_rows; ++task) {
      const int64_t n = task / tile_rows, ty = task % tile_rows;
      for (int64_t tx0 = 0; tx0 < tile_cols; tx0 += kTiles) {
        const int tiles = int(std::min<int64_t>(kTiles, tile_cols - tx0));
        for (int t = 0; t < tiles; ++t) {
          for (int64_t b = 0; b < C / kLanes; ++b) {
            __m512 d[16];
            load_input_tile(x, g, n, b, ty, tx0 + t, d);
            transform_input(d, v + t * kPositions * C + b * kLanes, C);
          }
        }
        multiply_tiles<C, O>(tiles, v, u, m);
        // Y = Aᵀ M A, Aᵀ = [[1, 1, 1, 0], [0, 1, -1, -1]].
        for (int t = 0; t < tiles; ++t) {
          const int64_t tx = tx0 + t;
          for (int64_t b = 0; b < O / kLanes; ++b) {
            const float* mt = m + t * kPositions * O + b * kLanes;
            const __m512 add = bias ? _mm512_loadu_ps(bias + b * kLanes) : _mm512_setzero_ps();
            __m512 s[8];  // Aᵀ M
#pragma GCC unroll 4
            for (int j = 0; j < 4; ++j) {
              const __m512 m0 = _mm512_load_ps(mt + j * O), m1 = _mm512_load_ps(mt + (4 + j) * O),
                           m2 = _mm512_load_ps(mt + (8 + j) * O),
                           m3 = _mm512_load_ps(mt + (12 + j) * O);
              s[j] = _mm512_add_ps(_mm512_add_ps(m0, m1), m2);
              s[4 + j] = _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3);
            }
            float* yb = y.block(n, b);
            // The next task's output lines, for writing (1.10 -> 1.05 ms, as above).
#pragma GCC unroll 2
            for (int i = 2; i < 4; ++i) {
              const int64_t oy = 2 * ty + i;
#pragma GCC unroll 2
              for (int j = 0; j < 2; ++j) {
                const int64_t ox = 2 * tx + j;
                if (oy < g.oh && ox < g.ow)
                  __builtin_prefetch(yb + (oy * g.ow + ox) * y_pixel, 1, 3);
              }
            }
#pragma GCC unroll 2
            for (int i = 0; i < 2; ++i) {
              const int64_t oy = 2 * ty + i;
              if (oy >= g.oh) continue;
              const __m512 left = _mm512_add_ps(
                  _mm512_add_ps(_mm512_add_ps(s[4 * i], s[4 * i + 1]), s[4 * i + 2]), add);
              const __m512 right = _mm512_add_ps(
                  _mm512_sub_ps(_mm512_sub_ps(s[4 * i + 1], s[4 * i + 2]), s[4 * i + 3]), add);
              _mm512_storeu_ps(yb + (oy * g.ow + 2 * tx) * y_pixel, left);
              if (2 * tx + 1 < g.ow)
                _mm512_storeu_ps(yb + (oy * g.ow + 2 * tx + 1) * y_pixel, right);
            }
          }
        }
      }
    }
  }
}

bool dense_nchw16c(const Tensor& t) {
  return t.rank() == 4 && t.dim(1) % kLanes == 0 && t.is_dense();
}

}  // namespace

bool winograd_f2_fits(const Shape& x, const Shape& w, const Attrs& a) {
  auto channels_ok = [](int64_t c) { return c == 16 || c == 32; };
  if (x.rank() != 4 || w.rank() != 4 || w[2] != 3 || w[3] != 3 || w[1] != x[1]) return false;
  if (!channels_ok(x[1]) || !channels_ok(w[0]) || a.groups != 1) return false;
  for (int i = 0; i < 2; ++i) {
    if (a.stride[i] != 1 || a.dilation[i] != 1 || a.padding[i] < 0 || a.padding[i] > 2) {
      return false;
    }
  }
  return x[0] > 0 && x[2] + 2 * a.padding[0] >= 3 && x[3] + 2 * a.padding[1] >= 3;
}

bool can_run_winograd_f2(const Tensor& x, bool x_blocked, const Shape& w_shape, const Attrs& a,
                         const Tensor& y, bool y_blocked) {
  auto laid_out = [](const Tensor& t, bool blocked) {
    return blocked ? dense_nchw16c(t) : is_dense_channels_last(t);
  };
  return x.dtype() == DType::f32 && y.dtype() == DType::f32 &&
         winograd_f2_fits(x.shape(), w_shape, a) && laid_out(x, x_blocked) &&
         laid_out(y, y_blocked);
}

namespace {

// The kernels' geometry, after checking that their rule holds and the extents agree.
Geometry checked_geometry(const char* kernel, const Tensor& x, bool x_blocked, const Shape& w_shape,
                          const Attrs& a, const Tensor& y, bool y_blocked) {
  if (!can_run_winograd_f2(x, x_blocked, w_shape, a, y, y_blocked)) {
    throw Error(std::string(kernel) + ": input " + describe(x) + ", weight " + w_shape.str() +
                " and output " + describe(y) + " are outside this kernel's rule");
  }
  const Geometry g{x.dim(0),     x.dim(2),     x.dim(3),  y.dim(2), y.dim(3),
                   a.padding[0], a.padding[1], x_blocked, y_blocked};
  if (g.oh != g.h + 2 * g.ph - 2 || g.ow != g.w + 2 * g.pw - 2 || y.dim(1) != w_shape[0]) {
    throw ShapeError(std::string(kernel) + ": output " + describe(y) + " does not match input " +
                     describe(x) + " and weight " + w_shape.str());
  }
  return g;
}

// `floats` floats, 64-byte aligned, in a buffer this thread keeps for the next call.
float* thread_buffer(size_t floats) {
  thread_local std::vector<float> buffer;
  buffer.resize(floats + kLanes);
  const size_t misalignment = (reinterpret_cast<uintptr_t>(buffer.data()) / sizeof(float)) % kLanes;
  return buffer.data() + (kLanes - misalignment) % kLanes;
}

template <class F>
void with_channels(int64_t c, int64_t o, F f) {
  if (c == 16 && o == 16)
    return f(std::integral_constant<int, 16>{}, std::integral_constant<int, 16>{});
  if (c == 16 && o == 32)
    return f(std::integral_constant<int, 16>{}, std::integral_constant<int, 32>{});
  if (c == 32 && o == 16)
    return f(std::integral_constant<int, 32>{}, std::integral_constant<int, 16>{});
  return f(std::integral_constant<int, 32>{}, std::integral_constant<int, 32>{});
}

}  // namespace

void winograd_f2_forward(const Tensor& x, bool x_blocked, const Tensor& w, const Tensor* bias,
                         const Attrs& a, Tensor& y, bool y_blocked) {
  const Geometry g =
      checked_geometry("winograd_f2_forward", x, x_blocked, w.shape(), a, y, y_blocked);
  if (!w.is_contiguous() || w.dtype() != DType::f32 ||
      (bias && (bias->dtype() != DType::f32 || !bias->is_contiguous()))) {
    throw Error("winograd_f2_forward: weight " + describe(w) +
                (bias ? " and bias " + describe(*bias) : std::string()) +
                " must be contiguous f32");
  }
  const int64_t c = x.dim(1), o = y.dim(1);
  float* u = thread_buffer(size_t(kPositions * c * o));
  transform_weights(w.data<float>(), o, c, u);
  const Plane<const float> xp{x.data<float>(), c, g.h, g.w, x_blocked};
  const Plane<float> yp{y.data<float>(), o, g.oh, g.ow, y_blocked};
  const float* b = bias ? bias->data<float>() : nullptr;
  with_channels(c, o, [&](auto ci, auto oi) { forward<ci(), oi()>(xp, u, b, yp, g); });
}

#else  // no AVX-512

bool winograd_f2_fits(const Shape&, const Shape&, const Attrs&) {
  return false;
}
bool can_run_winograd_f2(const Tensor&, bool, const Shape&, const Attrs&, const Tensor&, bool) {
  return false;
}
void winograd_f2_forward(const Tensor&, bool, const Tensor&, const Tensor*, const Attrs&, Tensor&,
                         bool) {
  throw Error("winograd_f2_forward: built without AVX-512");
}

#endif

}  // namespace kiln::ops
