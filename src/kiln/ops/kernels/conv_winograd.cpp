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

#include <immintrin.h>

#include "kiln/core/context.h"
#include "kiln/core/error.h"
#include "kiln/core/isa_variant.h"
#include "kiln/ops/kernel_name.h"
#include "kiln/ops/kernels/conv_geometry.h"

// How it works. F(4x4, 3x3) computes a 4x4 block of outputs from a 6x6 block of inputs d as
// Y = Aᵀ [Σ_c (G g Gᵀ) ⊙ (Bᵀ d B)] A, per output channel, with g the 3x3 filter (Lavin and Gray,
// "Fast Algorithms for Convolutional Neural Networks", 2016, with the points 0, ±1, ±2). Over
// the 36 positions p of the 6x6 transformed tile the sum over input channels is a matrix product:
// M[p][o] = Σ_c V[p][c] · U[p][c][o], V = Bᵀ d B the input tile transformed, U = G g Gᵀ the
// weights transformed (once per call, 36·C·O floats).
//
// A channels-last pixel of 16 channels is one vector, so the transforms work on whole vectors:
// the input transform reads a tile's 36 pixels of one channel block and writes V; the product
// takes, per position and per block of 16 output channels, 16 weight vectors into registers and
// runs them against kTiles tiles at once (kTiles accumulators; each FMA broadcasts one V value
// from memory); the output transform reads M and writes the 4x4 outputs. A task is kTiles
// consecutive tiles. The weight gradient (further down) reuses the input transform.
//
// Measured within ResNet-20's training step (batch 128, 2 threads, graph mode, medians of 3 runs
// of 20 steps, ms per launch): see the table in bench/README.md ("Winograd by hand"). At 64
// channels and 7x7 it only ties oneDNN's own F(4x4, 3x3) (0.95-1.0 ms alone), so the rule stops
// at 32.

KILN_ISA_TARGET_BEGIN
#include "kiln/ops/detail/batch_norm_vec.h"
namespace kiln::ops::KILN_ISA {

#if KILN_ISA_AVX512
namespace {

using conv_geometry::is_dense_channels_last;

// Tiles per matrix product: kTiles accumulators and 16 weight vectors stay in 23 of the 32
// registers. A 28-wide output is 7 tiles.
constexpr int kTiles = 7;
constexpr int kLanes = 16;
constexpr int kTile = 4;        // outputs per tile side
constexpr int kSide = 6;        // inputs per tile side, and the transformed tile's side
constexpr int kPositions = 36;  // the 6x6 transformed tile

struct Geometry {
  int64_t n, h, w, oh, ow, ph, pw;
  int64_t tile_rows() const { return (oh + kTile - 1) / kTile; }
  int64_t tile_cols() const { return (ow + kTile - 1) / kTile; }
};

// G = [[¼, 0, 0], [-⅙, -⅙, -⅙], [-⅙, ⅙, -⅙], [1/24, 1/12, ⅙], [1/24, -1/12, ⅙], [0, 0, 1]].
constexpr float kG[kSide][3] = {{1.0f / 4, 0, 0},
                                {-1.0f / 6, -1.0f / 6, -1.0f / 6},
                                {-1.0f / 6, 1.0f / 6, -1.0f / 6},
                                {1.0f / 24, 1.0f / 12, 1.0f / 6},
                                {1.0f / 24, -1.0f / 12, 1.0f / 6},
                                {0, 0, 1}};

// Σ_r coefficients[r]·v[r] for compile-time coefficients, skipping the zero ones.
template <int N>
inline __m512 combine(const float (&coefficients)[N], const __m512* v) {
  __m512 sum = _mm512_setzero_ps();
  for (int r = 0; r < N; ++r) {
    if (coefficients[r] != 0) sum = _mm512_fmadd_ps(_mm512_set1_ps(coefficients[r]), v[r], sum);
  }
  return sum;
}

// Lane l of a gather or scatter over the 16 output channels ob..ob+15 of an OIHW 3x3 tensor
// with `ins` input channels: l·ins·9 floats on.
inline __m512i output_channel_offsets(int64_t ins) {
  return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                            _mm512_set1_epi32(int(ins * 9)));
}

// u[p][c][o] = (G g Gᵀ)[p] for filter g = w[o, c], 16 output channels at a time (once per call:
// with a batch of one it is a good part of the work).
void transform_weights(const float* w, int64_t outs, int64_t ins, float* u) {
  const __m512i lanes = output_channel_offsets(ins);
  for (int64_t c = 0; c < ins; ++c) {
    for (int64_t ob = 0; ob < outs; ob += kLanes) {
      __m512 g[9];
      for (int k = 0; k < 9; ++k) g[k] = _mm512_i32gather_ps(lanes, w + (ob * ins + c) * 9 + k, 4);
      __m512 t[kSide][3];  // G g
      for (int i = 0; i < kSide; ++i) {
        for (int j = 0; j < 3; ++j) {
          const __m512 column[3] = {g[j], g[3 + j], g[6 + j]};
          t[i][j] = combine(kG[i], column);
        }
      }
      for (int i = 0; i < kSide; ++i) {
        for (int k = 0; k < kSide; ++k) {
          _mm512_store_ps(u + ((i * kSide + k) * ins + c) * outs + ob, combine(kG[k], t[i]));
        }
      }
    }
  }
}

inline __m512 fma_by(float a, __m512 x, __m512 y) {
  return _mm512_fmadd_ps(_mm512_set1_ps(a), x, y);
}

// r = Bᵀ z, Bᵀ = [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
// [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]].
inline void transform_input_1d(const __m512 (&z)[kSide], __m512 (&r)[kSide]) {
  const __m512 t0 = fma_by(-4.f, z[2], z[4]), t1 = fma_by(-4.f, z[1], z[3]);
  const __m512 t2 = _mm512_sub_ps(z[4], z[2]), t3 = _mm512_sub_ps(z[3], z[1]);
  r[0] = fma_by(-5.f, z[2], fma_by(4.f, z[0], z[4]));
  r[1] = _mm512_add_ps(t0, t1);
  r[2] = _mm512_sub_ps(t0, t1);
  r[3] = fma_by(2.f, t3, t2);
  r[4] = fma_by(-2.f, t3, t2);
  r[5] = fma_by(-5.f, z[3], fma_by(4.f, z[1], z[5]));
}

// y = Aᵀ m, Aᵀ = [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
// [0, 1, -1, 8, -8, 1]].
inline void transform_output_1d(const __m512 (&m)[kSide], __m512 (&y)[kTile]) {
  const __m512 a = _mm512_add_ps(m[1], m[2]), b = _mm512_sub_ps(m[1], m[2]);
  const __m512 c = _mm512_add_ps(m[3], m[4]), d = _mm512_sub_ps(m[3], m[4]);
  y[0] = _mm512_add_ps(_mm512_add_ps(m[0], a), c);
  y[1] = fma_by(2.f, d, b);
  y[2] = fma_by(4.f, c, a);
  y[3] = _mm512_add_ps(fma_by(8.f, d, b), m[5]);
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

// The second pass of a 2-D transform to 6x6: row i of the result is the 1-D transform of row i
// of `columns` (the first pass's results, one array per column), stored at out + (6i + j)·stride.
template <int kIn, class Transform>
inline void transform_rows_and_store(const __m512 (&columns)[kIn][kSide], Transform transform,
                                     float* out, int64_t stride) {
#pragma GCC unroll 6
  for (int i = 0; i < kSide; ++i) {
    __m512 row[kIn], r[kSide];
#pragma GCC unroll 6
    for (int j = 0; j < kIn; ++j) row[j] = columns[j][i];
    transform(row, r);
#pragma GCC unroll 6
    for (int j = 0; j < kSide; ++j) _mm512_store_ps(out + (kSide * i + j) * stride, r[j]);
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

// V = Bᵀ d B for the 6x6 input tile d of output tile (ty, tx) in channel block b of image n
// (zeros outside the image); position p = 6i + j goes to v + p·stride. Also prefetches the
// input rows this tile's columns bring in for the next row of tiles (with a 28-wide output, the
// next task's): about a task ahead, where the hardware prefetcher, seeing rows of only a few
// tiles, comes too late.
// With kBnRelu each pixel read is relu(batch_norm(pixel)) first, as `bn` says (padding stays 0).
template <bool kBnRelu>
inline void transform_input_tile(const Plane<const float>& x, const BnReluInput* bn,
                                 const Geometry& g, int64_t n, int64_t b, int64_t ty, int64_t tx,
                                 float* v, int64_t stride) {
  using batch_norm_vec::Vec;
  const float* xb = x.block(n, b);
  const int64_t pixel = x.pixel();
  [[maybe_unused]] Vec<16> mean, scale, beta;
  if constexpr (kBnRelu) {
    mean = {_mm512_loadu_ps(bn->mean + b * kLanes)};
    scale = {_mm512_loadu_ps(bn->scale + b * kLanes)};
    beta = {_mm512_loadu_ps(bn->beta + b * kLanes)};
  }
  auto read = [&](const float* at) {
    const __m512 raw = _mm512_loadu_ps(at);
    if constexpr (kBnRelu) {
      return batch_norm_vec::vrelu(batch_norm_vec::vnormalize(Vec<16>{raw}, mean, scale, beta)).v;
    }
    return raw;
  };
  __m512 columns[kSide][kSide];  // columns[j] = Bᵀ (column j of d)
#pragma GCC unroll 6
  for (int j = 0; j < kSide; ++j) {
    const int64_t ix = kTile * tx - g.pw + j;
    __m512 z[kSide];
#pragma GCC unroll 6
    for (int i = 0; i < kSide; ++i) {
      const int64_t iy = kTile * ty - g.ph + i;
      z[i] = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w ? read(xb + (iy * g.w + ix) * pixel)
                                                        : _mm512_setzero_ps();
    }
    transform_input_1d(z, columns[j]);
  }
#pragma GCC unroll 4
  for (int i = kSide; i < kSide + kTile; ++i) {
    const int64_t iy = kTile * ty - g.ph + i;
#pragma GCC unroll 4
    for (int j = kSide - kTile; j < kSide; ++j) {
      const int64_t ix = kTile * tx - g.pw + j;
      if (iy < g.h && ix >= 0 && ix < g.w) __builtin_prefetch(xb + (iy * g.w + ix) * pixel, 0, 3);
    }
  }
  transform_rows_and_store(columns, transform_input_1d, v, stride);
}

// Prefetches the output-sized tensor's pixels of tile (ty + 1, tx), the same column in the next
// row of tiles (about a task ahead), where they lie inside the output; kWrite: for writing.
template <int kWrite>
inline void prefetch_next_tile_row(const float* base, const Geometry& g, int64_t ty, int64_t tx,
                                   int64_t pixel) {
#pragma GCC unroll 4
  for (int i = kTile; i < 2 * kTile; ++i) {
    const int64_t oy = kTile * ty + i;
#pragma GCC unroll 4
    for (int j = 0; j < kTile; ++j) {
      const int64_t ox = kTile * tx + j;
      if (oy < g.oh && ox < g.ow) __builtin_prefetch(base + (oy * g.ow + ox) * pixel, kWrite, 3);
    }
  }
}

// Y = Aᵀ M A + bias for one 16-channel block of a tile, M at m + p·stride, written to output
// tile (ty, tx) of image n within the output's extent. Also prefetches, for writing, the output
// lines of the next row of tiles.
inline void transform_output_tile(const float* m, int64_t stride, __m512 bias,
                                  const Plane<float>& y, const Geometry& g, int64_t n, int64_t b,
                                  int64_t ty, int64_t tx) {
  __m512 columns[kSide][kTile];  // columns[j] = Aᵀ (column j of M)
#pragma GCC unroll 6
  for (int j = 0; j < kSide; ++j) {
    __m512 col[kSide];
#pragma GCC unroll 6
    for (int i = 0; i < kSide; ++i) col[i] = _mm512_load_ps(m + (kSide * i + j) * stride);
    transform_output_1d(col, columns[j]);
  }
  float* yb = y.block(n, b);
  const int64_t pixel = y.pixel();
  prefetch_next_tile_row</*kWrite=*/1>(yb, g, ty, tx, pixel);
#pragma GCC unroll 4
  for (int i = 0; i < kTile; ++i) {
    const int64_t oy = kTile * ty + i;
    __m512 row[kSide], out[kTile];
#pragma GCC unroll 6
    for (int j = 0; j < kSide; ++j) row[j] = columns[j][i];
    transform_output_1d(row, out);
    if (oy >= g.oh) continue;
#pragma GCC unroll 4
    for (int j = 0; j < kTile; ++j) {
      const int64_t ox = kTile * tx + j;
      if (ox < g.ow) _mm512_storeu_ps(yb + (oy * g.ow + ox) * pixel, _mm512_add_ps(out[j], bias));
    }
  }
}

template <int C, int O, bool kBnRelu>
void forward(const Plane<const float>& x, const BnReluInput* bn, const float* u, const float* bias,
             const Plane<float>& y, const Geometry& g) {
  const int64_t tile_rows = g.tile_rows(), tile_cols = g.tile_cols();
  const int64_t total = g.n * tile_rows * tile_cols;
  // Tile t of the whole batch, in (image, row, column) order.
  auto tile_at = [&](int64_t t) {
    struct {
      int64_t n, ty, tx;
    } at{t / (tile_rows * tile_cols), t / tile_cols % tile_rows, t % tile_cols};
    return at;
  };
#pragma omp parallel
  {
    alignas(64) float v[kTiles * kPositions * C];
    alignas(64) float m[kTiles * kPositions * O];
    // A task is kTiles consecutive tiles, across rows and images where a row has fewer.
#pragma omp for schedule(static)
    for (int64_t first = 0; first < total; first += kTiles) {
      const int tiles = int(std::min<int64_t>(kTiles, total - first));
      for (int t = 0; t < tiles; ++t) {
        const auto at = tile_at(first + t);
        for (int64_t b = 0; b < C / kLanes; ++b) {
          transform_input_tile<kBnRelu>(x, bn, g, at.n, b, at.ty, at.tx,
                                        v + t * kPositions * C + b * kLanes, C);
        }
      }
      multiply_tiles<C, O>(tiles, v, u, m);
      for (int t = 0; t < tiles; ++t) {
        const auto at = tile_at(first + t);
        for (int64_t b = 0; b < O / kLanes; ++b) {
          const __m512 add = bias ? _mm512_loadu_ps(bias + b * kLanes) : _mm512_setzero_ps();
          transform_output_tile(m + t * kPositions * O + b * kLanes, O, add, y, g, at.n, b, at.ty,
                                at.tx);
        }
      }
    }
  }
}

// ---- Backward-weights. With M = U ⊙ V and Y = Aᵀ M A, the gradient reaching M is A dY Aᵀ (a
// 6x6 from the 4x4 output gradient) and the one reaching U is (A dY Aᵀ) ⊙ V, summed over the
// tiles: dU[p][c][o] = Σ_tiles V[p][c] · Ŷ[p][o] with Ŷ = A dY Aᵀ, a matrix product over the
// tiles per position. Each thread sums its tiles into a dU of its own; the sums are added and
// taken back to the 3x3 filters once, dw = Gᵀ dU G.

// Tiles per accumulation pass: the 16 accumulators of a (position, channel blocks) pair are
// loaded and stored once a pass.
constexpr int kGradTiles = 14;

// m = A y, A = Aᵀ transposed: [[1, 0, 0, 0], [1, 1, 1, 1], [1, -1, 1, -1], [1, 2, 4, 8],
// [1, -2, 4, -8], [0, 0, 0, 1]].
inline void transform_gradient_1d(const __m512 (&y)[kTile], __m512 (&m)[kSide]) {
  const __m512 even = _mm512_add_ps(y[0], y[2]), odd = _mm512_add_ps(y[1], y[3]);
  const __m512 even4 = fma_by(4.f, y[2], y[0]), odd8 = fma_by(8.f, y[3], _mm512_add_ps(y[1], y[1]));
  m[0] = y[0];
  m[1] = _mm512_add_ps(even, odd);
  m[2] = _mm512_sub_ps(even, odd);
  m[3] = _mm512_add_ps(even4, odd8);
  m[4] = _mm512_sub_ps(even4, odd8);
  m[5] = y[3];
}

// Ŷ = A dY Aᵀ for output tile (ty, tx) of image n in channel block b (zeros outside the output),
// position p to yh + p·stride; prefetches the next row of tiles' gradient.
inline void transform_gradient_tile(const Plane<const float>& dy, const Geometry& g, int64_t n,
                                    int64_t b, int64_t ty, int64_t tx, float* yh, int64_t stride) {
  const float* db = dy.block(n, b);
  const int64_t pixel = dy.pixel();
  __m512 columns[kTile][kSide];  // columns[j] = A (column j of dY)
#pragma GCC unroll 4
  for (int j = 0; j < kTile; ++j) {
    const int64_t ox = kTile * tx + j;
    __m512 z[kTile];
#pragma GCC unroll 4
    for (int i = 0; i < kTile; ++i) {
      const int64_t oy = kTile * ty + i;
      z[i] = oy < g.oh && ox < g.ow ? _mm512_loadu_ps(db + (oy * g.ow + ox) * pixel)
                                    : _mm512_setzero_ps();
    }
    transform_gradient_1d(z, columns[j]);
  }
  prefetch_next_tile_row</*kWrite=*/0>(db, g, ty, tx, pixel);
  transform_rows_and_store(columns, transform_gradient_1d, yh, stride);
}

// du[p][c][o] += Σ_t v[t][p][c] · yh[t][p][o] over `tiles` tiles.
template <int C, int O>
void accumulate(int tiles, const float* v, const float* yh, float* du) {
  for (int p = 0; p < kPositions; ++p) {
    for (int cb = 0; cb < C; cb += kLanes) {
      for (int ob = 0; ob < O; ob += kLanes) {
        float* out = du + (p * C + cb) * O + ob;
        __m512 acc[kLanes];
#pragma GCC unroll 16
        for (int k = 0; k < kLanes; ++k) acc[k] = _mm512_load_ps(out + k * O);
        for (int t = 0; t < tiles; ++t) {
          const __m512 grad = _mm512_load_ps(yh + (t * kPositions + p) * O + ob);
          const float* vt = v + (t * kPositions + p) * C + cb;
#pragma GCC unroll 16
          for (int k = 0; k < kLanes; ++k) {
            acc[k] = _mm512_fmadd_ps(_mm512_set1_ps(vt[k]), grad, acc[k]);
          }
        }
#pragma GCC unroll 16
        for (int k = 0; k < kLanes; ++k) _mm512_store_ps(out + k * O, acc[k]);
      }
    }
  }
}

// dw[o][c] = Gᵀ du[·][c][o] G (G as in transform_weights), 16 output channels at a time.
void transform_weight_gradient(const float* du, int64_t outs, int64_t ins, float* dw) {
  const __m512i lanes = output_channel_offsets(ins);
  for (int64_t c = 0; c < ins; ++c) {
    for (int64_t ob = 0; ob < outs; ob += kLanes) {
      __m512 t[3][kSide];  // Gᵀ du
      for (int k = 0; k < kSide; ++k) {
        __m512 column[kSide];
        for (int i = 0; i < kSide; ++i) {
          column[i] = _mm512_load_ps(du + ((i * kSide + k) * ins + c) * outs + ob);
        }
        for (int a = 0; a < 3; ++a) {
          float coefficients[kSide];
          for (int i = 0; i < kSide; ++i) coefficients[i] = kG[i][a];
          t[a][k] = combine(coefficients, column);
        }
      }
      for (int a = 0; a < 3; ++a) {
        for (int b = 0; b < 3; ++b) {
          float coefficients[kSide];
          for (int k = 0; k < kSide; ++k) coefficients[k] = kG[k][b];
          _mm512_i32scatter_ps(dw + (ob * ins + c) * 9 + 3 * a + b, lanes,
                               combine(coefficients, t[a]), 4);
        }
      }
    }
  }
}

// Each thread's dU in `partials` (threads × 36·C·O floats, 64-byte aligned, zeroed).
template <int C, int O, bool kBnRelu>
void backward_weights(const Plane<const float>& x, const BnReluInput* bn,
                      const Plane<const float>& dy, const Geometry& g, float* partials,
                      int threads) {
  const int64_t tile_rows = g.tile_rows(), tile_cols = g.tile_cols();
  const int64_t total = g.n * tile_rows * tile_cols;
#pragma omp parallel num_threads(threads)
  {
    alignas(64) float v[kGradTiles * kPositions * C];
    alignas(64) float yh[kGradTiles * kPositions * O];
    float* du = partials + omp_get_thread_num() * kPositions * C * O;
#pragma omp for schedule(static)
    for (int64_t first = 0; first < total; first += kGradTiles) {
      const int tiles = int(std::min<int64_t>(kGradTiles, total - first));
      for (int t = 0; t < tiles; ++t) {
        const int64_t tile = first + t, n = tile / (tile_rows * tile_cols),
                      ty = tile / tile_cols % tile_rows, tx = tile % tile_cols;
        for (int64_t b = 0; b < C / kLanes; ++b) {
          transform_input_tile<kBnRelu>(x, bn, g, n, b, ty, tx, v + t * kPositions * C + b * kLanes,
                                        C);
        }
        for (int64_t b = 0; b < O / kLanes; ++b) {
          transform_gradient_tile(dy, g, n, b, ty, tx, yh + t * kPositions * O + b * kLanes, O);
        }
      }
      accumulate<C, O>(tiles, v, yh, du);
    }
  }
}

bool dense_nchw16c(const Tensor& t) {
  return t.rank() == 4 && t.dim(1) % kLanes == 0 && t.is_dense();
}

}  // namespace

bool winograd_3x3_fits(const Shape& x, const Shape& w, const ConvAttrs& a) {
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

bool winograd_3x3_pays(const Shape& x, const ConvAttrs& a) {
  constexpr int64_t kMinOutputPixels = 2048;
  if (x.rank() != 4) return false;
  const int64_t oh = x[2] + 2 * a.padding[0] - 2, ow = x[3] + 2 * a.padding[1] - 2;
  return x[0] * oh * ow >= kMinOutputPixels;
}

bool winograd_3x3_chosen(const Shape& x, const ConvAttrs& a) {
  const std::string& algorithm = get_context().conv_algorithm;
  if (algorithm == "direct") return false;
  return algorithm == "winograd" || KILN_ISA::winograd_3x3_pays(x, a);
}

bool can_run_winograd_3x3(const Tensor& x, bool x_blocked, const Shape& w_shape, const ConvAttrs& a,
                          const Tensor& y, bool y_blocked) {
  auto laid_out = [](const Tensor& t, bool blocked) {
    return blocked ? dense_nchw16c(t) : is_dense_channels_last(t);
  };
  return x.dtype() == DType::f32 && y.dtype() == DType::f32 &&
         KILN_ISA::winograd_3x3_fits(x.shape(), w_shape, a) && laid_out(x, x_blocked) &&
         laid_out(y, y_blocked);
}

namespace {

// The kernels' geometry, after checking that their rule holds and the extents agree.
Geometry checked_geometry(const char* kernel, const Tensor& x, bool x_blocked, const Shape& w_shape,
                          const ConvAttrs& a, const Tensor& y, bool y_blocked) {
  if (!KILN_ISA::can_run_winograd_3x3(x, x_blocked, w_shape, a, y, y_blocked)) {
    throw Error(std::string(kernel) + ": input " + describe(x) + ", weight " + w_shape.str() +
                " and output " + describe(y) + " are outside this kernel's rule");
  }
  const Geometry g{x.dim(0), x.dim(2), x.dim(3), y.dim(2), y.dim(3), a.padding[0], a.padding[1]};
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

void winograd_3x3_forward(const Tensor& x, bool x_blocked, const Tensor& w, const Tensor* bias,
                          const ConvAttrs& a, Tensor& y, bool y_blocked, const BnReluInput* bn) {
  const Geometry g =
      checked_geometry("winograd_3x3_forward", x, x_blocked, w.shape(), a, y, y_blocked);
  note_kernel("kiln:winograd_f4x4_3x3");
  if (!w.is_contiguous() || w.dtype() != DType::f32 ||
      (bias && (bias->dtype() != DType::f32 || !bias->is_contiguous()))) {
    throw Error("winograd_3x3_forward: weight " + describe(w) +
                (bias ? " and bias " + describe(*bias) : std::string()) +
                " must be contiguous f32");
  }
  const int64_t c = x.dim(1), o = y.dim(1);
  float* u = thread_buffer(size_t(kPositions * c * o));
  transform_weights(w.data<float>(), o, c, u);
  const Plane<const float> xp{x.data<float>(), c, g.h, g.w, x_blocked};
  const Plane<float> yp{y.data<float>(), o, g.oh, g.ow, y_blocked};
  const float* b = bias ? bias->data<float>() : nullptr;
  with_channels(c, o, [&](auto ci, auto oi) {
    if (bn) return forward<ci(), oi(), true>(xp, bn, u, b, yp, g);
    forward<ci(), oi(), false>(xp, nullptr, u, b, yp, g);
  });
}

void winograd_3x3_backward_weights(const Tensor& dy, bool dy_blocked, const Tensor& x,
                                   bool x_blocked, const ConvAttrs& a, Tensor& dw,
                                   const BnReluInput* bn) {
  const Geometry g = checked_geometry("winograd_3x3_backward_weights", x, x_blocked, dw.shape(), a,
                                      dy, dy_blocked);
  note_kernel("kiln:winograd_f4x4_3x3_weights");
  if (!dw.is_contiguous() || dw.dtype() != DType::f32) {
    throw Error("winograd_3x3_backward_weights: weight gradient " + describe(dw) +
                " must be contiguous f32");
  }
  const int64_t c = x.dim(1), o = dy.dim(1), size = kPositions * c * o;
  const int threads = omp_get_max_threads();
  float* partials = thread_buffer(size_t(threads * size));
  std::fill(partials, partials + threads * size, 0.0f);
  const Plane<const float> xp{x.data<float>(), c, g.h, g.w, x_blocked};
  const Plane<const float> dyp{dy.data<float>(), o, g.oh, g.ow, dy_blocked};
  with_channels(c, o, [&](auto ci, auto oi) {
    if (bn) return backward_weights<ci(), oi(), true>(xp, bn, dyp, g, partials, threads);
    backward_weights<ci(), oi(), false>(xp, nullptr, dyp, g, partials, threads);
  });
  for (int t = 1; t < threads; ++t) {
    const float* part = partials + t * size;
    for (int64_t i = 0; i < size; ++i) partials[i] += part[i];
  }
  transform_weight_gradient(partials, o, c, dw.data<float>());
}

#else  // the baseline variant: the conv ops use oneDNN

bool winograd_3x3_fits(const Shape&, const Shape&, const ConvAttrs&) {
  return false;
}
bool winograd_3x3_pays(const Shape&, const ConvAttrs&) {
  return false;
}
bool winograd_3x3_chosen(const Shape&, const ConvAttrs&) {
  return false;
}
bool can_run_winograd_3x3(const Tensor&, bool, const Shape&, const ConvAttrs&, const Tensor&,
                          bool) {
  return false;
}
void winograd_3x3_forward(const Tensor&, bool, const Tensor&, const Tensor*, const ConvAttrs&,
                          Tensor&, bool, const BnReluInput*) {
  throw Error("winograd_3x3_forward: runs only where the AVX-512 kernels do");
}
void winograd_3x3_backward_weights(const Tensor&, bool, const Tensor&, bool, const ConvAttrs&,
                                   Tensor&, const BnReluInput*) {
  throw Error("winograd_3x3_backward_weights: runs only where the AVX-512 kernels do");
}

#endif

}  // namespace kiln::ops::KILN_ISA
KILN_ISA_TARGET_END

#if KILN_ISA_DISPATCH
namespace kiln::ops {

KILN_ISA_DECLARE(bool winograd_3x3_fits(const Shape& x_shape, const Shape& w_shape,
                                        const ConvAttrs& a))
KILN_ISA_DECLARE(bool winograd_3x3_pays(const Shape& x_shape, const ConvAttrs& a))
KILN_ISA_DECLARE(bool winograd_3x3_chosen(const Shape& x_shape, const ConvAttrs& a))
KILN_ISA_DECLARE(bool can_run_winograd_3x3(const Tensor& x, bool x_blocked, const Shape& w_shape,
                                           const ConvAttrs& a, const Tensor& y, bool y_blocked))
KILN_ISA_DECLARE(void winograd_3x3_forward(const Tensor& x, bool x_blocked, const Tensor& w,
                                           const Tensor* bias, const ConvAttrs& a, Tensor& y,
                                           bool y_blocked, const BnReluInput* bn))
KILN_ISA_DECLARE(void winograd_3x3_backward_weights(const Tensor& dy, bool dy_blocked,
                                                    const Tensor& x, bool x_blocked,
                                                    const ConvAttrs& a, Tensor& dw,
                                                    const BnReluInput* bn))

bool winograd_3x3_fits(const Shape& x_shape, const Shape& w_shape, const ConvAttrs& a) {
  return KILN_ISA_CALL(winograd_3x3_fits, x_shape, w_shape, a);
}
bool winograd_3x3_pays(const Shape& x_shape, const ConvAttrs& a) {
  return KILN_ISA_CALL(winograd_3x3_pays, x_shape, a);
}
bool winograd_3x3_chosen(const Shape& x_shape, const ConvAttrs& a) {
  return KILN_ISA_CALL(winograd_3x3_chosen, x_shape, a);
}
bool can_run_winograd_3x3(const Tensor& x, bool x_blocked, const Shape& w_shape, const ConvAttrs& a,
                          const Tensor& y, bool y_blocked) {
  return KILN_ISA_CALL(can_run_winograd_3x3, x, x_blocked, w_shape, a, y, y_blocked);
}
void winograd_3x3_forward(const Tensor& x, bool x_blocked, const Tensor& w, const Tensor* bias,
                          const ConvAttrs& a, Tensor& y, bool y_blocked, const BnReluInput* bn) {
  KILN_ISA_CALL(winograd_3x3_forward, x, x_blocked, w, bias, a, y, y_blocked, bn);
}
void winograd_3x3_backward_weights(const Tensor& dy, bool dy_blocked, const Tensor& x,
                                   bool x_blocked, const ConvAttrs& a, Tensor& dw,
                                   const BnReluInput* bn) {
  KILN_ISA_CALL(winograd_3x3_backward_weights, dy, dy_blocked, x, x_blocked, a, dw, bn);
}

}  // namespace kiln::ops
#endif
