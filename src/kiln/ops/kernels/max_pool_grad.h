#pragma once
// max_pool2d_grad for non-overlapping windows (stride = kernel, no padding: LeNet's 2×2/2) in
// one pass: find each window's maximum in x and write the gradient there and zeros around it.
// oneDNN's pooling backward needs the forward's workspace (so it must replay the forward) and its
// implementations are slow for the few-channel channels-last tensors small CNNs have; this pass
// is 6–10× faster and bit-identical (the first maximum in window order wins, as in oneDNN).
// Without AVX-512, few channels (not a multiple of 8) and row-major tensors take 8 lanes along
// the row (AVX2): LeNet's [64, 6, 28, 28] channels-last in 0.15 ms against the per-window loop's
// 0.41, one thread.
// Used by the max_pool2d_grad op and by graph mode (which fuses a following relu_grad into it).
#include <array>
#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln::ops {

// Whether the one-pass kernel applies: f32 or bf16 (all three alike) rank-4 tensors, dense dx,
// kernel == stride, no padding.
bool can_run_max_pool_grad_one_pass(const Tensor& dy, const Tensor& x, const Tensor& dx,
                                    std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                                    std::array<int64_t, 2> padding);

// dx = max_pool2d_grad(dy, x) for kernel = stride = `kernel`, no padding. Any strides for dy and
// x; dx dense. With `relu_mask` (x is a relu's output) a window whose maximum is <= 0 passes no
// gradient, which fuses the relu_grad that precedes the pool in the backward pass.
void max_pool_grad_one_pass(const Tensor& dy, const Tensor& x, Tensor& dx,
                            std::array<int64_t, 2> kernel, bool relu_mask);

}  // namespace kiln::ops
