#include "kiln/ops/kernels/max_pool_grad.h"

#include <cstring>
#include <type_traits>

namespace kiln::ops {
namespace {

// Elements are compared and moved as floats; bf16 → float → bf16 is exact, so a bf16 pass
// picks the same winners and writes the same gradient bits as an f32 pass would.
inline float to_float(float v) {
  return v;
}
inline float to_float(bf16_t v) {
  return bf16_to_float(v);
}
template <class T>
inline T from_float(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return float_to_bf16(v);
  }
}

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

}  // namespace kiln::ops
