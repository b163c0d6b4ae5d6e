// max_pool2d_grad for non-overlapping windows (stride = kernel, no padding: LeNet's 2×2/2), as
// the graph executor runs it: one pass that finds each window's maximum in x and writes the
// gradient there and zeros around it. The op's own kernel replays oneDNN's pooling forward to
// rebuild its workspace and then runs the backward primitive, whose implementations are slow for
// the few-channel channels-last tensors small CNNs have.
#include <cstring>

#include "kiln/core/error.h"
#include "kiln/graph/fused_kernels.h"

namespace kiln::graph {
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

class MaxPoolGrad : public SpecialKernel {
 public:
  MaxPoolGrad(const Node& node, std::span<const Tensor> in, std::span<const Tensor> out)
      : dy_(in[0]), x_(in[1]), dx_(out[0]), k_{node.attrs.kernel[0], node.attrs.kernel[1]} {
    for (PostOp p : node.post_ops) {
      if (p != PostOp::relu_grad) throw Error("max_pool2d_grad: unsupported post-op");
      relu_mask_ = true;
    }
  }

  void run(std::span<const Tensor>, std::span<Tensor>) override {
    const Shape& s = x_.shape();
    const int64_t N = s[0], C = s[1], H = s[2], W = s[3];
    const int64_t OH = dy_.shape()[2], OW = dy_.shape()[3], KH = k_[0], KW = k_[1];
    const float* x = x_.data<float>();
    const float* dy = dy_.data<float>();
    float* dx = dx_.data<float>();
    const int64_t x0 = x_.strides()[0], x1 = x_.strides()[1], x2 = x_.strides()[2],
                  x3 = x_.strides()[3];
    const int64_t g0 = dy_.strides()[0], g1 = dy_.strides()[1], g2 = dy_.strides()[2],
                  g3 = dy_.strides()[3];
    const int64_t d0 = dx_.strides()[0], d1 = dx_.strides()[1], d2 = dx_.strides()[2],
                  d3 = dx_.strides()[3];
    // Rows and columns no window covers get zero gradient.
    if (OH * KH != H || OW * KW != W) std::memset(dx, 0, dx_.nbytes());
    const bool fast = KH == 2 && KW == 2 && x1 == 1 && d1 == 1 && C <= kMaxFastChannels;
    // With the relu_grad post-op (x is a relu's output): the winner gets nothing where x <= 0.
    const bool mask = relu_mask_;
#pragma omp parallel for collapse(2) schedule(static) if (dx_.numel() > 32768)
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
              for (int64_t j = 0; j < KW; ++j)
                dc[i * d2 + j * d3] = (i == bi && j == bj) ? g : 0.0f;
            }
          }
        }
      }
    }
  }

 private:
  Tensor dy_, x_, dx_;
  std::array<int64_t, 2> k_;
  bool relu_mask_ = false;
};

}  // namespace

bool can_run_max_pool_grad(const Node& node, std::span<const Tensor> in,
                           std::span<const Tensor> out) {
  const ops::Attrs& a = node.attrs;
  return (node.type == NodeType::op || node.type == NodeType::epilogue) &&
         node.op == ops::OpKind::max_pool2d_grad && a.kernel == a.stride && a.padding[0] == 0 &&
         a.padding[1] == 0 && in[0].dtype() == DType::f32 && in[1].dtype() == DType::f32 &&
         out[0].dtype() == DType::f32 && out[0].is_dense() && in[1].rank() == 4;
}

std::shared_ptr<SpecialKernel> make_max_pool_grad_kernel(const Node& node,
                                                         std::span<const Tensor> inputs,
                                                         std::span<const Tensor> outputs) {
  return std::make_shared<MaxPoolGrad>(node, inputs, outputs);
}

}  // namespace kiln::graph
