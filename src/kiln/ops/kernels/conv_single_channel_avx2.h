#pragma once
// The forward convolution of one input channel (grayscale images: LeNet's first conv) for CPUs
// without AVX-512, where kernels/conv_single_channel.h does not run: 8 output columns at a time
// with AVX2 FMA, each tap's input vector multiplied into every output channel's accumulator.
// oneDNN 2.6's AVX2 kernel runs C = 1 far below the FMA units' rate: LeNet's conv1 (x [64, 1, 28,
// 28], w [6, 1, 5, 5], pad 2) took 0.72 ms on one AVX2 core (21 GFLOP/s); this kernel 0.2 ms.
//
// Scope: f32, stride 1, dilation 1, groups 1, any padding, at most 16 output channels and 121
// taps; y dense channels-last. Used by the conv2d op.
#include "kiln/core/tensor.h"
#include "kiln/ops/op.h"

namespace kiln::ops {

// Whether the kernel applies to x [N, 1, H, W] (dense), a weight of `w_shape`, `a` and y; always
// false in a build without AVX2.
bool can_run_single_channel_conv_avx2(const Tensor& x, const Shape& w_shape, const ConvAttrs& a,
                                      const Tensor& y);

// y = conv(x, w) + bias, with w [O, 1, KH, KW] contiguous f32 and bias [O] f32 or null.
void single_channel_conv_forward_avx2(const Tensor& x, const Tensor& w, const Tensor* bias,
                                      const ConvAttrs& a, Tensor& y);

}  // namespace kiln::ops
