#include "kiln/ops/kernels/max_pool_grad.h"

#include <cstring>

namespace kiln::ops {
namespace {

// One 2×2 window of channels-last data, all C channels: a..d are the window's four pixels
// (each C contiguous floats), g the pooled gradient. The first maximum in window order wins, as
// in oneDNN's max pooling; with `mask` (x is a relu's output) a winner <= 0 gets nothing.
void window_2x2(const float* __restrict a, const float* __restrict b, const float* __restrict c,
                const float* __restrict d, const float* __restrict g, float* __restrict da,
                float* __restrict db, float* __restrict dc, float* __restrict dd, int64_t C,
                bool mask) {
  for (int64_t ch = 0; ch < C; ++ch) {
    const float va = a[ch], vb = b[ch], vc = c[ch], vd = d[ch];
    const bool pb = vb > va;
    const float m1 = pb ? vb : va;
    const bool pc = vc > m1;
    const float m2 = pc ? vc : m1;
    const bool pd = vd > m2;
    const float m3 = pd ? vd : m2;
    const float gv = (mask && !(m3 > 0.0f)) ? 0.0f : g[ch];
    const bool sd = pd, sc = !pd && pc, sb = !pd && !pc && pb, sa = !pd && !pc && !pb;
    da[ch] = sa ? gv : 0.0f;
    db[ch] = sb ? gv : 0.0f;
    dc[ch] = sc ? gv : 0.0f;
    dd[ch] = sd ? gv : 0.0f;
  }
}

constexpr int64_t kMaxFastChannels = 1024;

}  // namespace

bool can_run_max_pool_grad_one_pass(const Tensor& dy, const Tensor& x, const Tensor& dx,
                                    std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                                    std::array<int64_t, 2> padding) {
  return kernel == stride && padding[0] == 0 && padding[1] == 0 && dy.dtype() == DType::f32 &&
         x.dtype() == DType::f32 && dx.dtype() == DType::f32 && dx.is_dense() && x.rank() == 4 &&
         dy.rank() == 4 && dx.shape() == x.shape();
}

void max_pool_grad_one_pass(const Tensor& dy_t, const Tensor& x_t, Tensor& dx_t,
                            std::array<int64_t, 2> kernel, bool relu_mask) {
  const Shape& s = x_t.shape();
  const int64_t N = s[0], C = s[1], H = s[2], W = s[3];
  const int64_t OH = dy_t.shape()[2], OW = dy_t.shape()[3], KH = kernel[0], KW = kernel[1];
  const float* x = x_t.data<float>();
  const float* dy = dy_t.data<float>();
  float* dx = dx_t.data<float>();
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
        const float* xw = x + n * x0 + h0 * x2 + w0 * x3;
        float* dw = dx + n * d0 + h0 * d2 + w0 * d3;
        const float* gw = dy + n * g0 + oh * g2 + ow * g3;
        if (fast) {
          // A gradient in another layout (row-major from a flatten's reshape) is gathered.
          float gathered[kMaxFastChannels];
          const float* g = gw;
          if (g1 != 1) {
            for (int64_t ch = 0; ch < C; ++ch) gathered[ch] = gw[ch * g1];
            g = gathered;
          }
          window_2x2(xw, xw + x3, xw + x2, xw + x2 + x3, g, dw, dw + d3, dw + d2, dw + d2 + d3, C,
                     mask);
          continue;
        }
        for (int64_t ch = 0; ch < C; ++ch) {
          const float* xc = xw + ch * x1;
          float* dc = dw + ch * d1;
          float best = xc[0];
          int64_t bi = 0, bj = 0;
          for (int64_t i = 0; i < KH; ++i) {
            for (int64_t j = 0; j < KW; ++j) {
              float v = xc[i * x2 + j * x3];
              if (v > best) {
                best = v;
                bi = i;
                bj = j;
              }
            }
          }
          const float g = (mask && !(best > 0.0f)) ? 0.0f : gw[ch * g1];
          for (int64_t i = 0; i < KH; ++i) {
            for (int64_t j = 0; j < KW; ++j) dc[i * d2 + j * d3] = (i == bi && j == bj) ? g : 0.0f;
          }
        }
      }
    }
  }
}

}  // namespace kiln::ops
