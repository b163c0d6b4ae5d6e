#include "kiln/ops/kernels/max_pool_rows.h"

#include <vector>

namespace kiln::ops {
namespace {

// One row of windows. `row` is the window's first input row and `row_stride` the distance to the
// next; a row holds pixels of `pixel` elements each (C channels-last, 1 row-major), OW windows of
// KW pixels. `partial` holds KW·OW·pixel floats.
template <class T>
void pool_row(const T* row, int64_t row_stride, int64_t KH, int64_t KW, int64_t OW, int64_t pixel,
              T* __restrict out, float* __restrict partial) {
  const int64_t length = KW * OW * pixel;
  for (int64_t i = 0; i < length; ++i) partial[i] = to_float(row[i]);
  for (int64_t kh = 1; kh < KH; ++kh) {
    const T* __restrict r = row + kh * row_stride;
    for (int64_t i = 0; i < length; ++i) {
      const float v = to_float(r[i]);
      partial[i] = v > partial[i] ? v : partial[i];
    }
  }
  if (KW == 2 && pixel == 1) {
    for (int64_t ow = 0; ow < OW; ++ow) {
      const float a = partial[2 * ow], b = partial[2 * ow + 1];
      out[ow] = from_float<T>(b > a ? b : a);
    }
    return;
  }
  for (int64_t ow = 0; ow < OW; ++ow) {
    const float* w = partial + ow * KW * pixel;
    T* o = out + ow * pixel;
    for (int64_t p = 0; p < pixel; ++p) {
      float m = w[p];
      for (int64_t kw = 1; kw < KW; ++kw) {
        const float v = w[kw * pixel + p];
        m = v > m ? v : m;
      }
      o[p] = from_float<T>(m);
    }
  }
}

template <class T>
void pool(const Tensor& x_t, Tensor& y_t, int64_t KH, int64_t KW, bool channels_last) {
  const int64_t N = x_t.dim(0), C = x_t.dim(1), OH = y_t.dim(2), OW = y_t.dim(3);
  const auto& xs = x_t.strides();
  const auto& ys = y_t.strides();
  const T* x = x_t.data<T>();
  T* y = y_t.data<T>();
  // Channels-last rows hold every channel; row-major rows one channel each.
  const int64_t pixel = channels_last ? C : 1, planes = channels_last ? 1 : C;
  const int64_t rows = N * planes * OH;
#pragma omp parallel if (y_t.numel() > 32768)
  {
    thread_local std::vector<float> partial;
    partial.resize(size_t(KW * OW * pixel));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t n = r / (planes * OH), q = r / OH % planes, oh = r % OH;
      pool_row(x + n * xs[0] + q * xs[1] + oh * KH * xs[2], xs[2], KH, KW, OW, pixel,
               y + n * ys[0] + q * ys[1] + oh * ys[2], partial.data());
    }
  }
}

}  // namespace

bool max_pool_rows(const Tensor& x, Tensor& y, std::array<int64_t, 2> kernel) {
  const DType t = x.dtype();
  if ((t != DType::f32 && t != DType::bf16) || y.dtype() != t || x.rank() != 4 || y.rank() != 4)
    return false;
  const int64_t C = x.dim(1);
  const int64_t KH = kernel[0], KW = kernel[1];
  if (KH < 1 || KW < 1 || y.dim(0) != x.dim(0) || y.dim(1) != C || y.dim(2) != x.dim(2) / KH ||
      y.dim(3) != x.dim(3) / KW) {
    return false;
  }
  const auto& xs = x.strides();
  const auto& ys = y.strides();
  const bool channels_last = xs[1] == 1 && xs[3] == C && ys[1] == 1 && ys[3] == C;
  const bool row_major = xs[3] == 1 && ys[3] == 1;
  if (!channels_last && !row_major) return false;
  if (y.numel() == 0) return true;
  if (t == DType::bf16) {
    pool<bf16_t>(x, y, KH, KW, channels_last);
  } else {
    pool<float>(x, y, KH, KW, channels_last);
  }
  return true;
}

}  // namespace kiln::ops
