#pragma once
// Winograd F(2x2, 3x3) convolution for AVX-512: the forward of a 3x3 stride-1 convolution with
// 16 or 32 input and output channels, which ResNet-20's first two stages run on every step
// (forward, and backward-data as the forward on flipped weights).
//
// Why by hand: oneDNN 2.6 offers Winograd only as F(4x4, 3x3) (jit_wino_4x3), whose transforms
// go through memory and whose small matrix products are inefficient at these channel counts:
// at 16 channels it is slower than the direct kernel (2.05 vs 1.43 ms, ops/nn/conv.cpp). The
// direct kernels run near the FMA units' peak, so only fewer multiplications can go faster.
// F(2x2, 3x3) needs 16 products per 2x2 output tile instead of 36, and with 16-channel vectors
// each tile's transforms stay in registers: the input transform is 32 adds, the output one 24.
// Its rounding differs from the direct kernel's by about one unit in the last place of the
// inputs' magnitude: the transforms only add and subtract, and G's halves are exact.
//
// Measured here at batch 128, 2 threads, alone (oneDNN through Kiln's conv2d, same session):
// see conv_winograd.cpp.
#include "kiln/core/tensor.h"
#include "kiln/ops/op.h"

namespace kiln::ops {

// The shape rule: x [N, C, H, W] and w [O, C, 3, 3] with C and O each 16 or 32, groups 1, stride
// 1, dilation 1, padding 0..2 in each dim, a non-empty output; false in a build without AVX-512.
bool winograd_f2_fits(const Shape& x_shape, const Shape& w_shape, const Attrs& a);

// The rule for tensors: winograd_f2_fits, f32, and x and y each dense channels-last or, where
// `x_blocked` / `y_blocked` says so, in oneDNN's nChw16c (graph mode's blocked layout; only
// data() is read, see batch_norm_rows.h for the element order).
bool can_run_winograd_f2(const Tensor& x, bool x_blocked, const Shape& w_shape, const Attrs& a,
                         const Tensor& y, bool y_blocked);

// y = conv(x, w) + bias, under can_run_winograd_f2. w is contiguous f32 OIHW; bias is f32 [O] or
// null. The padding comes from a.
void winograd_f2_forward(const Tensor& x, bool x_blocked, const Tensor& w, const Tensor* bias,
                         const Attrs& a, Tensor& y, bool y_blocked);

}  // namespace kiln::ops
