#pragma once
// conv2d backward-data for few input channels as a GEMM plus a hand-written col2im:
//
//   col[M, KH*KW*C] = dy[M, O] · Wt[O, KH*KW*C]   (M = N*OH*OW pixels; channels-last dy is
//                                                   exactly a row-major [M, O] matrix)
//   dx = col2im(col)                               (dx channels-last [N, C, H, W])
//
// Why: oneDNN 2.6's backward-data (jit:avx512_core, channels-last f32) vectorizes over the input
// channels, so with few of them most lanes idle: LeNet's conv2 (dy [64,16,10,10], w [16,6,5,5],
// no padding) ran at ~140 GFLOP/s, 0.21-0.23 ms at 2 threads, the largest kernel of a LeNet step,
// and every other oneDNN implementation and layout was slower. The GEMM above is a plain
// [M, O] x [O, KH*KW*C] product that oneDNN's matmul runs near peak when O is not tiny, and the
// col2im is a cheap gather. Measured (2 threads, best of 7 x 50 calls, dy -> dx shapes in
// conv_col2im.cpp): LeNet conv2 0.15-0.16 vs 0.21-0.23 ms; C=3 O=16 3x3 pad 1 28x28 batch 64
// 0.25 vs 0.62; C=6 O=16 3x3 14x14 0.10-0.13 vs 0.12-0.15; C=8 O=16 28x28 batch 128 1.14 vs
// 1.29. It loses at C=16 (1.78 vs 1.31), and wherever O is small against C (C=8 O=8 0.44 vs
// 0.31, C=4 O=4 0.21 vs 0.15, any C with O=1).
//
// Without AVX-512 the gather runs 8 lanes with AVX2; oneDNN's AVX2 backward-data is no better
// placed there (LeNet's conv2 0.77 ms on one AVX2 core, ~40 GFLOP/s): numbers in bench/README.md.
//
// Rule (can_run): f32, groups 1, stride 1, dilation 1, any padding, KH <= 32, dy channels-last
// dense, a per-image column buffer of at most 1 MiB, and (C <= 4 and O >= 6) or (C <= 8 and
// O >= 16). gemm_backward_data itself runs any C and O.
#include <cstdint>

#include "kiln/core/tensor.h"
#include "kiln/ops/op.h"

namespace kiln::ops {

// Whether gemm_backward_data applies (and is the faster choice) for dy [N, O, OH, OW] and a
// weight of w_shape [O, C, KH, KW] with input x_shape [N, C, H, W] under attrs `a`. Requires dy
// f32 and channels-last dense (strides of a channels-last tensor on every dim of extent > 1);
// always false on a CPU without AVX2.
bool can_run_gemm_backward_data(const Tensor& dy, const Shape& w_shape, const Shape& x_shape,
                                const ConvAttrs& a);

// dx = conv2d_backward_data(dy, w) for stride 1, dilation 1, groups 1; the padding is implied by
// the shapes (OH = H + 2*pad - KH + 1). dy f32 channels-last dense, w [O, C, KH, KW] contiguous
// f32, dx [N, C, H, W] f32 channels-last dense (throws otherwise); every element of dx is
// written. Images are split among threads (each owns whole images), so the result does not
// depend on the thread count's scheduling: deterministic for a fixed thread count.
void gemm_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx);

}  // namespace kiln::ops
