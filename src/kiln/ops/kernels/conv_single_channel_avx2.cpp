#include "kiln/ops/kernels/conv_single_channel_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kiln/ops/attrs.h"
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
  // A padded input row: the taps of every output column, rounded up to whole groups of 8, and 8
  // more, which the last group's loads may reach.
  int64_t padded_w() const { return conv_geometry::round_up(ow + kw - 1, kLanes) + kLanes; }
};

// One output row of kChannels channels from o0: `rows` the padded input rows it reads (kh of
// them, `row_stride` apart), `taps` each channel's weights broadcast to 8 lanes ([channel][tap]
// [lane]), `out` the row's first pixel at channel o0 (pixels O apart). The channel count is a
// template argument so that the accumulators stay in registers.
template <int kChannels>
void conv_row(const float* rows, int64_t row_stride, const Geometry& g, const float* taps,
              const float* bias, int64_t o0, float* out) {
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
    store_transposed(acc, kChannels, std::min(kLanes, g.ow - x0), out + x0 * g.o, g.o);
  }
}

void conv_row_of(int64_t channels, const float* rows, int64_t row_stride, const Geometry& g,
                 const float* taps, const float* bias, int64_t o0, float* out) {
  switch (channels) {
    case 1:
      return conv_row<1>(rows, row_stride, g, taps, bias, o0, out);
    case 2:
      return conv_row<2>(rows, row_stride, g, taps, bias, o0, out);
    case 3:
      return conv_row<3>(rows, row_stride, g, taps, bias, o0, out);
    case 4:
      return conv_row<4>(rows, row_stride, g, taps, bias, o0, out);
    case 5:
      return conv_row<5>(rows, row_stride, g, taps, bias, o0, out);
    case 6:
      return conv_row<6>(rows, row_stride, g, taps, bias, o0, out);
    case 7:
      return conv_row<7>(rows, row_stride, g, taps, bias, o0, out);
    default:
      return conv_row<8>(rows, row_stride, g, taps, bias, o0, out);
  }
}

}  // namespace

bool can_run_single_channel_conv_avx2(const Tensor& x, const Shape& w, const ConvAttrs& a,
                                      const Tensor& y) {
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

void single_channel_conv_forward_avx2(const Tensor& x, const Tensor& w, const Tensor* bias,
                                      const ConvAttrs& a, Tensor& y) {
  const Geometry g{x.dim(0), x.dim(2),     x.dim(3),     w.dim(0), w.dim(2),
                   w.dim(3), a.padding[0], a.padding[1], y.dim(2), y.dim(3)};
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
  // Padded input rows: zeros around each image row, and past the last output column's taps so
  // that a partial last group of 8 columns reads zeros.
  const int64_t padded_h = g.oh + g.kh - 1, row_stride = g.padded_w();
#pragma omp parallel if (y.numel() > 32768)
  {
    thread_local std::vector<float> padded;
    padded.assign(size_t(padded_h * row_stride), 0.0f);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g.n; ++n) {
      for (int64_t r = 0; r < padded_h; ++r) {
        const int64_t ih = r - g.ph;
        float* dst = padded.data() + r * row_stride;
        if (ih < 0 || ih >= g.h) continue;  // stays zero from the assign
        std::memcpy(dst + g.pw, xp + (n * g.h + ih) * g.w, size_t(g.w) * sizeof(float));
      }
      for (int64_t r = 0; r < g.oh; ++r) {
        float* out = yp + (n * g.oh + r) * g.ow * g.o;
        for (int64_t o0 = 0; o0 < g.o; o0 += 8) {
          conv_row_of(std::min<int64_t>(8, g.o - o0), padded.data() + r * row_stride, row_stride, g,
                      taps.data() + o0 * ntaps * kLanes, b, o0, out + o0);
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
                                      Tensor&) {
  throw Error("single_channel_conv_forward_avx2: this build has no AVX2");
}

#endif

}  // namespace kiln::ops
