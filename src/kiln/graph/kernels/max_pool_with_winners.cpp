// A 2×2/2 max pool that also records each window's winner (NodeType::max_pool_with_winners, made by
// passes/fuse_pooled_conv_grad.cpp): the pooled_conv_grad backward then reads one byte per
// pooled element instead of the pool's input. Where a flattening reshape is the pooled output's
// only reader, the pass gives that output the row-major NCHW layout, and this kernel writes the
// maxima there directly: the reshape becomes a view instead of a transposing copy.
#include <omp.h>

#include <immintrin.h>

#include "kiln/core/error.h"
#include "kiln/core/isa_variant.h"
#include "kiln/graph/detail/fused_kernels.h"
#include "kiln/ops/kernels/conv_geometry.h"

KILN_ISA_TARGET_BEGIN
#include "kiln/ops/kernels/pool_window.h"
namespace kiln::graph::KILN_ISA {

#if KILN_ISA_AVX512
namespace {
using ops::conv_geometry::is_dense_channels_last;

constexpr int64_t kLanes = 16;

// inputs: x [N, C, H, W] channels-last f32; outputs: pooled [N, C, H / 2, W / 2] f32,
// channels-last or row-major, and winners, the same shape, channels-last u8.
bool operands_fit(const Node& node, std::span<const Tensor> in, std::span<const Tensor> out) {
  if (node.type != NodeType::max_pool_with_winners || in.size() != 1 || out.size() != 2)
    return false;
  const Tensor &x = in[0], &pooled = out[0], &winners = out[1];
  if (x.dtype() != DType::f32 || x.rank() != 4 || !is_dense_channels_last(x)) return false;
  const Shape expected{x.dim(0), x.dim(1), x.dim(2) / 2, x.dim(3) / 2};
  return expected[2] > 0 && expected[3] > 0 && pooled.shape() == expected &&
         pooled.dtype() == DType::f32 &&
         (is_dense_channels_last(pooled) || pooled.is_contiguous()) &&
         winners.shape() == expected && winners.dtype() == DType::u8 &&
         is_dense_channels_last(winners);
}

class PoolWinners : public SpecialKernel {
 public:
  PoolWinners(std::span<const Tensor> in, std::span<const Tensor> out)
      : x_(in[0]), pooled_(out[0]), winners_(out[1]) {}

  void run(std::span<const Tensor>, std::span<Tensor>) override {
    pool_2x2_with_winners(x_.data<float>(), x_.dim(0), x_.dim(1), x_.dim(2), x_.dim(3),
                          pooled_.data<float>(), !is_dense_channels_last(pooled_),
                          winners_.data<uint8_t>());
  }

 private:
  Tensor x_, pooled_, winners_;
};

}  // namespace

void pool_2x2_with_winners(const float* x, int64_t n, int64_t c, int64_t h, int64_t w,
                           float* pooled, bool pooled_row_major, uint8_t* winners) {
  const int64_t ph = h / 2, pw = w / 2;
  // Where channel c of pooled pixel (py, px) goes: c + pixel * C (channels-last) or
  // c * PH * PW + pixel (row-major).
  const int64_t channel_stride = pooled_row_major ? ph * pw : 1,
                pixel_stride = pooled_row_major ? 1 : c;
  const __m512i lane_offset =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(int32_t(channel_stride)));
#pragma omp parallel for schedule(static) if (n > 1)
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t py = 0; py < ph; ++py) {
      const float* top = x + ((i * h + 2 * py) * w) * c;
      const float* bottom = top + w * c;
      for (int64_t px = 0; px < pw; ++px) {
        const int64_t pixel = py * pw + px;
        for (int64_t c0 = 0; c0 < c; c0 += kLanes) {
          const __mmask16 m =
              c - c0 >= kLanes ? __mmask16(0xFFFF) : __mmask16((1u << (c - c0)) - 1u);
          const int64_t left = 2 * px * c + c0, right = left + c;
          const ops::KILN_ISA::WindowMax wm = ops::KILN_ISA::window_max_2x2(
              _mm512_maskz_loadu_ps(m, top + left), _mm512_maskz_loadu_ps(m, top + right),
              _mm512_maskz_loadu_ps(m, bottom + left), _mm512_maskz_loadu_ps(m, bottom + right));
          float* out = pooled + i * c * ph * pw + pixel * pixel_stride + c0 * channel_stride;
          if (pooled_row_major) {
            _mm512_mask_i32scatter_ps(out, m, lane_offset, wm.max, sizeof(float));
          } else {
            _mm512_mask_storeu_ps(out, m, wm.max);
          }
          _mm512_mask_cvtepi32_storeu_epi8(winners + (i * ph * pw + pixel) * c + c0, m,
                                           ops::KILN_ISA::window_code(wm));
        }
      }
    }
  }
}

std::shared_ptr<SpecialKernel> make_max_pool_with_winners_kernel(const Node& node,
                                                                 std::span<const Tensor> inputs,
                                                                 std::span<const Tensor> outputs) {
  if (!operands_fit(node, inputs, outputs)) {
    throw Error(node_label(node) + ": operands " + describe(inputs[0]) + " -> " +
                describe(outputs[0]) + " cannot run the recording max pool");
  }
  return std::make_shared<PoolWinners>(inputs, outputs);
}

#else  // the baseline variant: the pass never makes these nodes (pooled_conv_grad_fits() is false)

void pool_2x2_with_winners(const float*, int64_t, int64_t, int64_t, int64_t, float*, bool,
                           uint8_t*) {
  throw Error("max_pool2d+winners: runs only where the AVX-512 kernels do");
}

std::shared_ptr<SpecialKernel> make_max_pool_with_winners_kernel(const Node& node,
                                                                 std::span<const Tensor>,
                                                                 std::span<const Tensor>) {
  throw Error(node_label(node) + ": runs only where the AVX-512 kernels do");
}

#endif

}  // namespace kiln::graph::KILN_ISA
KILN_ISA_TARGET_END

#if KILN_ISA_DISPATCH
namespace kiln::graph {

KILN_ISA_DECLARE(void pool_2x2_with_winners(const float* x, int64_t n, int64_t c, int64_t h,
                                            int64_t w, float* pooled, bool pooled_row_major,
                                            uint8_t* winners))
KILN_ISA_DECLARE(std::shared_ptr<SpecialKernel> make_max_pool_with_winners_kernel(
    const Node& node, std::span<const Tensor> inputs, std::span<const Tensor> outputs))

void pool_2x2_with_winners(const float* x, int64_t n, int64_t c, int64_t h, int64_t w,
                           float* pooled, bool pooled_row_major, uint8_t* winners) {
  KILN_ISA_CALL(pool_2x2_with_winners, x, n, c, h, w, pooled, pooled_row_major, winners);
}
std::shared_ptr<SpecialKernel> make_max_pool_with_winners_kernel(const Node& node,
                                                                 std::span<const Tensor> inputs,
                                                                 std::span<const Tensor> outputs) {
  return KILN_ISA_CALL(make_max_pool_with_winners_kernel, node, inputs, outputs);
}

}  // namespace kiln::graph
#endif
