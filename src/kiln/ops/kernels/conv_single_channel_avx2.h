#pragma once
// The convolution of one input channel (grayscale images: LeNet's first conv), forward and
// backward-weights, for CPUs without AVX-512, where kernels/conv_single_channel.h does not run.
// oneDNN 2.6's AVX2 kernels run C = 1 far below the FMA units' rate: LeNet's conv1 (x [64, 1, 28,
// 28], w [6, 1, 5, 5], pad 2) took 0.72 ms forward on one AVX2 core (21 GFLOP/s) and 0.75 ms
// backward-weights with the bias gradient.
// - Forward: 8 output columns at a time, each tap's input vector multiplied into every output
//   channel's accumulator; 0.2 ms for LeNet's conv1.
// - Backward-weights: 8 output channels at a time (one channels-last load of dy per pixel), each
//   tap's input broadcast into that tap's accumulator; the bias gradient from the same pass.
//
// Scope: f32, stride 1, dilation 1, groups 1, any padding, at most 16 output channels and 121
// taps (backward-weights: at most 11 columns per kernel row); y and dy dense channels-last. Used
// by the conv2d ops and graph mode's fused conv + relu.
#include "kiln/core/tensor.h"
#include "kiln/ops/op.h"

namespace kiln::ops {

// Whether the kernel applies to x [N, 1, H, W] (dense), a weight of `w_shape`, `a` and y; always
// false in a build without AVX2.
bool can_run_single_channel_conv_avx2(const Tensor& x, const Shape& w_shape, const ConvAttrs& a,
                                      const Tensor& y);

// y = relu?(conv(x, w) + bias), with w [O, 1, KH, KW] contiguous f32 and bias [O] f32 or null.
void single_channel_conv_forward_avx2(const Tensor& x, const Tensor& w, const Tensor* bias,
                                      const ConvAttrs& a, bool relu, Tensor& y);

// Whether the backward-weights kernel applies to dy [N, O, OH, OW] (dense channels-last f32, the
// forward's output extent), x as for the forward and a weight of `w_shape` (KW <= 11); always
// false in a build without AVX2.
bool can_run_single_channel_conv_backward_weights_avx2(const Tensor& dy, const Tensor& x,
                                                       const Shape& w_shape, const ConvAttrs& a);

// dw = conv2d_backward_weights(dy, x), db = sum of dy over N, OH, OW (when db is given); dw
// [O, 1, KH, KW] and db [O] contiguous f32. Each thread sums a fixed share of the images, then
// the shares are added in thread order: deterministic for a fixed thread count.
void single_channel_conv_backward_weights_avx2(const Tensor& dy, const Tensor& x,
                                               const ConvAttrs& a, Tensor& dw, Tensor* db);

}  // namespace kiln::ops
