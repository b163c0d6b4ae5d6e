#include "kiln/ops/kernels/conv_single_channel_avx2.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/ops/attrs.h"
#include "kiln/ops/kernel_name.h"
#include "kiln/ops/kernels/conv_geometry.h"

namespace kiln::ops {

#if defined(__AVX2__) && defined(__FMA__)
namespace {

using conv_geometry::is_dense_channels_last;
using conv_geometry::strides_are;

constexpr int64_t kLanes = 8;
constexpr int64_t kMaxOutChannels = 16;
constexpr int64_t kMaxTaps = 121;

// Lane l of v[j] into out[l * stride + j], for the first `count` lanes and `channels` vectors
// (channels <= 8): an 8x8 transpose, then each output pixel's channels stored whole.
void store_transposed(const __m256 v[8], int64_t channels, int64_t count, float* out,
                      int64_t stride) {
  const __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
  const __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
  const __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
  const __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  alignas(32) float rows[8][8];  // rows[l]: lane l of every vector
  _mm256_store_ps(rows[0], _mm256_permute2f128_ps(s0, s4, 0x20));
  _mm256_store_ps(rows[1], _mm256_permute2f128_ps(s1, s5, 0x20));
  _mm256_store_ps(rows[2], _mm256_permute2f128_ps(s2, s6, 0x20));
  _mm256_store_ps(rows[3], _mm256_permute2f128_ps(s3, s7, 0x20));
  _mm256_store_ps(rows[4], _mm256_permute2f128_ps(s0, s4, 0x31));
  _mm256_store_ps(rows[5], _mm256_permute2f128_ps(s1, s5, 0x31));
  _mm256_store_ps(rows[6], _mm256_permute2f128_ps(s2, s6, 0x31));
  _mm256_store_ps(rows[7], _mm256_permute2f128_ps(s3, s7, 0x31));
  for (int64_t l = 0; l < count; ++l) {
    std::memcpy(out + l * stride, rows[l], size_t(channels) * sizeof(float));
  }
}

struct Geometry {
  int64_t n, h, w, o, kh, kw, ph, pw, oh, ow;
  // Padded input rows: zeros around each image row, and past the last output column's taps, so
  // that a partial last group of 8 columns reads zeros: the taps of every output column, rounded
  // up to whole groups of 8, and 8 more, which the last group's loads may reach.
  int64_t padded_w() const { return conv_geometry::round_up(ow + kw - 1, kLanes) + kLanes; }
  int64_t padded_h() const { return oh + kh - 1; }
};

// One output row of kChannels channels from o0: `rows` the padded input rows it reads (kh of
// them, `row_stride` apart), `taps` each channel's weights broadcast to 8 lanes ([channel][tap]
// [lane]), `out` the row's first pixel at channel o0 (pixels O apart). The channel count is a
// template argument so that the accumulators stay in registers.
template <int kChannels>
void conv_row(const float* rows, int64_t row_stride, const Geometry& g, const float* taps,
              const float* bias, bool relu, int64_t o0, float* out) {
  const int64_t ntaps = g.kh * g.kw;
  for (int64_t x0 = 0; x0 < g.ow; x0 += kLanes) {
    __m256 acc[8];
    for (int j = 0; j < 8; ++j) {
      acc[j] = j < kChannels && bias ? _mm256_set1_ps(bias[o0 + j]) : _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < g.kh; ++i) {
      const float* r = rows + i * row_stride + x0;
      for (int64_t k = 0; k < g.kw; ++k) {
        const __m256 v = _mm256_loadu_ps(r + k);
        const float* t = taps + (i * g.kw + k) * kLanes;
        for (int j = 0; j < kChannels; ++j) {
          acc[j] = _mm256_fmadd_ps(v, _mm256_loadu_ps(t + j * ntaps * kLanes), acc[j]);
        }
      }
    }
    if (relu) {
      for (int j = 0; j < kChannels; ++j) acc[j] = _mm256_max_ps(acc[j], _mm256_setzero_ps());
    }
    store_transposed(acc, kChannels, std::min(kLanes, g.ow - x0), out + x0 * g.o, g.o);
  }
}

void conv_row_of(int64_t channels, const float* rows, int64_t row_stride, const Geometry& g,
                 const float* taps, const float* bias, bool relu, int64_t o0, float* out) {
  switch (channels) {
    case 1:
      return conv_row<1>(rows, row_stride, g, taps, bias, relu, o0, out);
    case 2:
      return conv_row<2>(rows, row_stride, g, taps, bias, relu, o0, out);
    case 3:
      return conv_row<3>(rows, row_stride, g, taps, bias, relu, o0, out);
    case 4:
      return conv_row<4>(rows, row_stride, g, taps, bias, relu, o0, out);
    case 5:
      return conv_row<5>(rows, row_stride, g, taps, bias, relu, o0, out);
    case 6:
      return conv_row<6>(rows, row_stride, g, taps, bias, relu, o0, out);
    case 7:
      return conv_row<7>(rows, row_stride, g, taps, bias, relu, o0, out);
    default:
      return conv_row<8>(rows, row_stride, g, taps, bias, relu, o0, out);
  }
}

// Image n of x into its padded rows (`padded`, padded_h() rows of padded_w() floats): the rows
// and columns outside the image must be zero already, and stay so.
void copy_padded_image(const float* xp, int64_t n, const Geometry& g, float* padded) {
  for (int64_t r = 0; r < g.padded_h(); ++r) {
    const int64_t ih = r - g.ph;
    if (ih < 0 || ih >= g.h) continue;
    std::memcpy(padded + r * g.padded_w() + g.pw, xp + (n * g.h + ih) * g.w,
                size_t(g.w) * sizeof(float));
  }
}

// The weight gradient of kernel rows i0 .. i0 + kRows - 1 and, with kBias, the bias gradient,
// for the channels of one group (`mask`: its lanes) over one image: acc[r][k] += dy(pixel) *
// x(pixel + tap). dy points at the image's first pixel, channel o0; `padded` its padded rows.
// Adds the image's sums into sums[r * kw + k] (and bias_sum). The column count is a template
// argument so that the kRows * kKw (+ 1) accumulators stay in registers.
template <int kKw, int kRows, bool kBias>
void weights_rows(const float* dy, const float* padded, const Geometry& g, int64_t i0, __m256i mask,
                  bool full, float* sums, float* bias_sum) {
  // Unrolled before the compiler splits the array into registers: a loop left for later keeps
  // every accumulator in memory too, a store per FMA.
  __m256 acc[kRows][kKw], bacc = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 11
    for (int k = 0; k < kKw; ++k) acc[r][k] = _mm256_setzero_ps();
  }
  const int64_t stride = g.padded_w();
  for (int64_t y = 0; y < g.oh; ++y) {
    const float* d = dy + y * g.ow * g.o;
    const float* x = padded + (y + i0) * stride;
    for (int64_t c = 0; c < g.ow; ++c, d += g.o, ++x) {
      const __m256 dv = full ? _mm256_loadu_ps(d) : _mm256_maskload_ps(d, mask);
      if constexpr (kBias) bacc = _mm256_add_ps(bacc, dv);
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 11
        for (int k = 0; k < kKw; ++k) {
          acc[r][k] = _mm256_fmadd_ps(dv, _mm256_broadcast_ss(x + r * stride + k), acc[r][k]);
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 11
    for (int k = 0; k < kKw; ++k) {
      float* s = sums + ((i0 + r) * g.kw + k) * kLanes;
      _mm256_storeu_ps(s, _mm256_add_ps(_mm256_loadu_ps(s), acc[r][k]));
    }
  }
  if constexpr (kBias) _mm256_storeu_ps(bias_sum, _mm256_add_ps(_mm256_loadu_ps(bias_sum), bacc));
}

// Kernel rows i .. i + rows - 1 (rows <= kRows) in one pass over the image.
template <int kKw, int kRows>
void weights_pass(int64_t rows, bool bias, const float* dy, const float* padded, const Geometry& g,
                  int64_t i, __m256i mask, bool full, float* sums, float* bias_sum) {
  if constexpr (kRows > 1) {
    if (rows < kRows) {
      return weights_pass<kKw, kRows - 1>(rows, bias, dy, padded, g, i, mask, full, sums, bias_sum);
    }
  }
  if (bias)
    weights_rows<kKw, kRows, true>(dy, padded, g, i, mask, full, sums, bias_sum);
  else
    weights_rows<kKw, kRows, false>(dy, padded, g, i, mask, full, sums, nullptr);
}

// Every kernel row of one channel group over one image, as many rows per pass as keep enough
// accumulators in flight to hide the FMA's latency while rows * kw of them, dy, a broadcast and
// the bias sum fit the 16 registers; the bias gradient in the first pass.
template <int kKw>
void weights_image(const float* dy, const float* padded, const Geometry& g, __m256i mask, bool full,
                   float* sums, float* bias_sum) {
  constexpr int kRows = std::max(1, std::min(4, 10 / kKw));
  for (int64_t i = 0; i < g.kh; i += kRows) {
    weights_pass<kKw, kRows>(std::min<int64_t>(kRows, g.kh - i), i == 0 && bias_sum, dy, padded, g,
                             i, mask, full, sums, bias_sum);
  }
}

using WeightsImage = void (*)(const float*, const float*, const Geometry&, __m256i, bool, float*,
                              float*);
constexpr int kMaxWeightsColumns = 11;
constexpr WeightsImage kWeightsImage[kMaxWeightsColumns] = {
    weights_image<1>, weights_image<2>,  weights_image<3>, weights_image<4>,
    weights_image<5>, weights_image<6>,  weights_image<7>, weights_image<8>,
    weights_image<9>, weights_image<10>, weights_image<11>};

// The checks both kernels share: x [N, 1, H, W] dense f32, a [O, 1, KH, KW] weight within the
// limits, stride and dilation 1, and `y` (the forward's output, or dy) of the output's extent,
// dense channels-last f32.
bool fits(const Tensor& x, const Shape& w, const ConvAttrs& a, const Tensor& y) {
  if (x.rank() != 4 || x.dim(1) != 1 || x.dtype() != DType::f32 || w.rank() != 4 || w[1] != 1 ||
      w[0] < 1 || w[0] > kMaxOutChannels || w[2] * w[3] > kMaxTaps || y.rank() != 4 ||
      y.dtype() != DType::f32 || y.dim(0) != x.dim(0) || y.dim(1) != w[0] || y.numel() == 0) {
    return false;
  }
  if (a.groups != 1 || a.stride != std::array<int64_t, 2>{1, 1} ||
      a.dilation != std::array<int64_t, 2>{1, 1} || a.padding[0] < 0 || a.padding[1] < 0) {
    return false;
  }
  if (y.dim(2) != x.dim(2) + 2 * a.padding[0] - w[2] + 1 ||
      y.dim(3) != x.dim(3) + 2 * a.padding[1] - w[3] + 1) {
    return false;
  }
  const int64_t h = x.dim(2), wd = x.dim(3);
  return strides_are(x, {h * wd, h * wd, wd, 1}) && is_dense_channels_last(y);
}

Geometry geometry_of(const Tensor& x, const Shape& w, const ConvAttrs& a, const Tensor& y) {
  return {x.dim(0), x.dim(2),     x.dim(3),     w[0],     w[2],
          w[3],     a.padding[0], a.padding[1], y.dim(2), y.dim(3)};
}

}  // namespace

bool can_run_single_channel_conv_avx2(const Tensor& x, const Shape& w, const ConvAttrs& a,
                                      const Tensor& y) {
  return fits(x, w, a, y);
}

bool can_run_single_channel_conv_backward_weights_avx2(const Tensor& dy, const Tensor& x,
                                                       const Shape& w_shape, const ConvAttrs& a) {
  return fits(x, w_shape, a, dy) && w_shape[3] <= kMaxWeightsColumns;
}

void single_channel_conv_backward_weights_avx2(const Tensor& dy, const Tensor& x,
                                               const ConvAttrs& a, Tensor& dw, Tensor* db) {
  const char* op = "single_channel_conv_backward_weights_avx2";
  if (!can_run_single_channel_conv_backward_weights_avx2(dy, x, dw.shape(), a) ||
      dw.dtype() != DType::f32 || !dw.is_contiguous() ||
      (db &&
       (db->dtype() != DType::f32 || db->shape() != Shape{dw.dim(0)} || !db->is_contiguous()))) {
    throw Error(detail::concat(op,
                               ": needs x f32 [N, 1, H, W] dense, dy channels-last f32 of the "
                               "output's extent, contiguous f32 dw and db; got x ",
                               describe(x), ", dy ", describe(dy), ", dw ", describe(dw)));
  }
  note_kernel("kiln:single_channel_conv_weights_avx2");
  const Geometry g = geometry_of(x, dw.shape(), a, dy);
  const int64_t groups = (g.o + kLanes - 1) / kLanes, ntaps = g.kh * g.kw;
  // Per thread: [group][tap] sums of 8 lanes, then [group] bias sums.
  const int64_t per_thread = groups * (ntaps + 1) * kLanes;
  const int max_threads = omp_get_max_threads();
  std::vector<float> partials(size_t(max_threads * per_thread), 0.0f);
  const float* xp = x.data<float>();
  const float* dyp = dy.data<float>();
  const WeightsImage image = kWeightsImage[g.kw - 1];
  int used_threads = 1;
#pragma omp parallel if (dy.numel() > 32768)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    if (t == 0) used_threads = nt;
    thread_local std::vector<float> padded;
    padded.assign(size_t(g.padded_h() * g.padded_w()), 0.0f);
    float* sums = partials.data() + t * per_thread;
    // A fixed, contiguous share of the images per thread keeps the summation order fixed.
    const int64_t begin = g.n * t / nt, end = g.n * (t + 1) / nt;
    for (int64_t n = begin; n < end; ++n) {
      copy_padded_image(xp, n, g, padded.data());
      for (int64_t group = 0; group < groups; ++group) {
        const int64_t lanes = std::min(kLanes, g.o - group * kLanes);
        alignas(32) int32_t mask_lanes[kLanes];
        for (int64_t l = 0; l < kLanes; ++l) mask_lanes[l] = l < lanes ? -1 : 0;
        image(dyp + n * g.oh * g.ow * g.o + group * kLanes, padded.data(), g,
              _mm256_load_si256(reinterpret_cast<const __m256i*>(mask_lanes)), lanes == kLanes,
              sums + group * ntaps * kLanes,
              db ? sums + (groups * ntaps + group) * kLanes : nullptr);
      }
    }
  }
  // The threads' sums in thread order, each lane to its channel.
  float* dwp = dw.data<float>();
  float* dbp = db ? db->data<float>() : nullptr;
  for (int64_t i = 0; i < groups * (ntaps + 1); ++i) {
    const bool bias = i >= groups * ntaps;
    if (bias && !dbp) break;
    __m256 total = _mm256_loadu_ps(partials.data() + i * kLanes);
    for (int t = 1; t < used_threads; ++t) {
      total = _mm256_add_ps(total, _mm256_loadu_ps(partials.data() + t * per_thread + i * kLanes));
    }
    alignas(32) float lanes[kLanes];
    _mm256_store_ps(lanes, total);
    const int64_t group = bias ? i - groups * ntaps : i / ntaps, tap = i % ntaps;
    for (int64_t l = 0; l < kLanes && group * kLanes + l < g.o; ++l) {
      const int64_t o = group * kLanes + l;
      if (bias)
        dbp[o] = lanes[l];
      else
        dwp[o * ntaps + tap] = lanes[l];
    }
  }
}

void single_channel_conv_forward_avx2(const Tensor& x, const Tensor& w, const Tensor* bias,
                                      const ConvAttrs& a, bool relu, Tensor& y) {
  note_kernel("kiln:single_channel_conv_avx2");
  const Geometry g = geometry_of(x, w.shape(), a, y);
  const int64_t ntaps = g.kh * g.kw;
  // Each weight broadcast to 8 lanes, once per call: [channel][tap][lane].
  std::vector<float> taps(size_t(g.o * ntaps * kLanes));
  const float* wp = w.data<float>();
  for (int64_t i = 0; i < g.o * ntaps; ++i) {
    std::fill_n(taps.data() + i * kLanes, kLanes, wp[i]);
  }
  const float* b = bias ? bias->data<float>() : nullptr;
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  const int64_t row_stride = g.padded_w();
#pragma omp parallel if (y.numel() > 32768)
  {
    thread_local std::vector<float> padded;
    padded.assign(size_t(g.padded_h() * row_stride), 0.0f);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g.n; ++n) {
      copy_padded_image(xp, n, g, padded.data());
      for (int64_t r = 0; r < g.oh; ++r) {
        float* out = yp + (n * g.oh + r) * g.ow * g.o;
        for (int64_t o0 = 0; o0 < g.o; o0 += 8) {
          conv_row_of(std::min<int64_t>(8, g.o - o0), padded.data() + r * row_stride, row_stride, g,
                      taps.data() + o0 * ntaps * kLanes, b, relu, o0, out + o0);
        }
      }
    }
  }
}

#else

bool can_run_single_channel_conv_avx2(const Tensor&, const Shape&, const ConvAttrs&,
                                      const Tensor&) {
  return false;
}
void single_channel_conv_forward_avx2(const Tensor&, const Tensor&, const Tensor*, const ConvAttrs&,
                                      bool, Tensor&) {
  throw Error("single_channel_conv_forward_avx2: this build has no AVX2");
}
bool can_run_single_channel_conv_backward_weights_avx2(const Tensor&, const Tensor&, const Shape&,
                                                       const ConvAttrs&) {
  return false;
}
void single_channel_conv_backward_weights_avx2(const Tensor&, const Tensor&, const ConvAttrs&,
                                               Tensor&, Tensor*) {
  throw Error("single_channel_conv_backward_weights_avx2: this build has no AVX2");
}

#endif

}  // namespace kiln::ops
