#pragma once
// Winograd F(4x4, 3x3) convolution for AVX-512: the forward and the weight gradient of a 3x3
// stride-1 convolution with 16 or 32 input and output channels, which ResNet-20's first two
// stages run on every step (the backward-data as the forward on flipped weights).
//
// Why by hand: oneDNN 2.6 has the same algorithm (jit_wino_4x3), but only on its blocked layout
// and with transforms that go through memory; at 16 channels its forward is slower than oneDNN's
// direct kernel (2.05 vs 1.43 ms, ops/nn/conv.cpp), at 32 only even with it, and its
// backward-weights takes 1.2 ms at both against 1.0 here. The direct kernels run
// near the FMA units' peak, so only fewer multiplications can go faster: F(4x4, 3x3) needs 36
// products per 4x4 output tile instead of 144. Here a 16-channel pixel is one vector, so each
// tile's transforms run in registers, on channels-last or nChw16c tensors alike.
//
// Its rounding differs from the direct kernel's: the transforms multiply by up to 8 and the
// transformed weights are fractions, so results carry a few units in the last place of the
// inputs' magnitude more error (ResNet-20-like data: ~4e-6 against outputs of ~1.5; oneDNN's
// F(4x4, 3x3), which Kiln already runs at 64 channels, is alike). Eager and graph mode run the
// same kernel.
#include "kiln/core/tensor.h"
#include "kiln/ops/op.h"

namespace kiln::ops {

// The shape rule: x [N, C, H, W] and w [O, C, 3, 3] with C and O each 16 or 32, groups 1, stride
// 1, dilation 1, padding 0..2 in each dim, a non-empty output; false in a build without AVX-512.
bool winograd_3x3_fits(const Shape& x_shape, const Shape& w_shape, const ConvAttrs& a);

// Whether the ops (and graph mode's fusion) use the kernel for a convolution the kernel fits:
// from 2,048 output pixels (N·OH·OW) on. Below that its fixed costs (the weights' transform, a
// parallel region, partly filled tile products) make it slower than oneDNN's direct kernel:
// batch 1 at 28x28 with 16 channels 0.017 against 0.012 ms, at 14x14 with 32 channels 0.051
// against 0.011; batch 3 at 28x28 0.028 against 0.038, 12 at 14x14 0.095 against 0.111.
bool winograd_3x3_pays(const Shape& x_shape, const ConvAttrs& a);

// Whether the ops (and graph mode's passes and kernels) run a convolution the kernel fits with it,
// as Context::conv_algorithm says: "auto" where winograd_3x3_pays, "winograd" always, "direct"
// never.
bool winograd_3x3_chosen(const Shape& x_shape, const ConvAttrs& a);

// The rule for tensors: winograd_3x3_fits, f32, and x and y each dense channels-last or, where
// `x_blocked` / `y_blocked` says so, in oneDNN's nChw16c (graph mode's blocked layout; only
// data() is read, see batch_norm_rows.h for the element order).
bool can_run_winograd_3x3(const Tensor& x, bool x_blocked, const Shape& w_shape, const ConvAttrs& a,
                          const Tensor& y, bool y_blocked);

// A batch norm + relu applied to a convolution's input as it is read: the convolution sees
// relu((x - mean)·scale + beta) per input channel (graph mode's bn_relu_conv: batch norm and
// relu fused into the convolutions that read their output, which is then never written). Each
// pointer: C floats, scale = batch_norm_scale(gamma, inv_std); the values are those
// batch_norm_rows_forward would have written, bit for bit (batch_norm_vec.h's vnormalize).
// Padding stays zero.
struct BnReluInput {
  const float* mean = nullptr;
  const float* scale = nullptr;
  const float* beta = nullptr;
};

// y = conv(x, w) + bias, under can_run_winograd_3x3. w is contiguous f32 OIHW; bias is f32 [O] or
// null. The padding comes from a.
// With `bn`, x is read through it.
void winograd_3x3_forward(const Tensor& x, bool x_blocked, const Tensor& w, const Tensor* bias,
                          const ConvAttrs& a, Tensor& y, bool y_blocked,
                          const BnReluInput* bn = nullptr);

// dw = the weight gradient of y = conv(x, w) given dy = dL/dy, under
// can_run_winograd_3x3(x, x_blocked, dw.shape(), a, dy, dy_blocked); dw is contiguous f32 OIHW.
// Each thread sums a fixed share of the tiles, so the result depends on the thread count only.
// With `bn`, x is read through it.
void winograd_3x3_backward_weights(const Tensor& dy, bool dy_blocked, const Tensor& x,
                                   bool x_blocked, const ConvAttrs& a, Tensor& dw,
                                   const BnReluInput* bn = nullptr);

}  // namespace kiln::ops
