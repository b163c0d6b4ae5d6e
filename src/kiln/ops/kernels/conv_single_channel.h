#pragma once
// Direct AVX-512 convolutions for one input channel (grayscale images: LeNet's and ResNet-20's
// first conv), forward and backward-weights. oneDNN 2.6 handles C = 1 poorly: at 2 threads,
// channels-last f32, LeNet's conv1 (x [64,1,28,28], w [6,1,5,5], pad 2) took 0.10–0.12 ms
// forward (15 MFLOP, ~130 GFLOP/s, a fraction of the ~60 FLOP/cycle/core the FMA units give)
// and 0.12–0.14 ms backward-weights (0.20 with the bias gradient); ResNet-20's conv1
// (x [128,1,28,28], w [16,1,3,3], pad 1) 0.14–0.17 ms forward and 0.13 ms backward-weights.
// Here (same session, 2 threads) LeNet's conv1 takes 0.08 ms forward and 0.085 ms
// backward-weights (0.09 with db) against oneDNN's 0.17 / 0.12 / 0.18; ResNet-20's conv1 0.15 ms
// forward against 0.14-0.25. ResNet-20's backward-weights (O = 16) was slower than oneDNN's
// (0.20 vs 0.14 ms), so backward-weights with O a multiple of 16 is left to oneDNN.
//
// Scope: stride 1, dilation 1, groups 1, any padding, any kernel size; the bias gradient comes
// from the same pass. Used by the conv2d ops (and graph mode's fused conv + relu).
#include <array>
#include <cstdint>

#include "kiln/core/tensor.h"
#include "kiln/ops/op.h"

namespace kiln::ops {

// Whether these kernels apply: x f32 [N, 1, H, W] dense (N, H, W strides of a contiguous
// tensor, which for C = 1 is also channels-last), a [O, 1, KH, KW] weight with 1 <= O <= 64 and
// KH*KW <= 121, groups 1, stride 1, dilation 1, padding >= 0, a non-empty output, and a build
// with AVX-512 (always false otherwise). With `backward_weights`, also O % 16 != 0 (where the
// backward-weights kernel beats oneDNN's); single_channel_conv_backward_weights itself runs any
// O the forward runs.
bool can_run_single_channel_conv(const Tensor& x, const Shape& w_shape, const ConvAttrs& a,
                                 bool backward_weights = false);
// The shape part of that rule (what a graph pass can check before any tensor exists); false in
// a build without AVX-512.
bool single_channel_conv_fits(const Shape& x_shape, const Shape& w_shape, const ConvAttrs& a,
                              bool backward_weights = false);

// y = relu?(conv(x, w) + bias). x as can_run requires; w [O, 1, KH, KW] contiguous f32; bias [O]
// f32 or null; y [N, O, OH, OW] channels-last dense. The padding is implied by the shapes
// (stride 1: OH = H + 2*pad - KH + 1).
void single_channel_conv_forward(const Tensor& x, const Tensor& w, const Tensor* bias, bool relu,
                                 Tensor& y);

// pooled = max_pool2d(relu(conv(x, w) + bias)) with 2×2 windows of stride 2 (floor: an odd last
// row or column is dropped), without writing the relu output: each thread pools the rows it has
// just computed. winners: per (n, o, py, px) one byte, bits 0-1 the window position of the first
// maximum (row-major, as ops/kernels/max_pool_grad.h picks it), bit 2 set when that maximum is
// <= 0 (the relu passes it no gradient). x, w, bias as for the forward above; pooled (f32) and
// winners (u8) are [N, O, OH / 2, OW / 2] channels-last dense.
//
// The kernel keeps per-thread buffers of its own, or uses `scratch` when one is lent for the
// thread count it runs at: single_channel_conv_relu_pool_scratch_floats() floats, 64-byte
// aligned, whose contents need not survive between calls (a compiled graph's workspace).
struct SingleChannelConvScratch {
  float* data = nullptr;
  int threads = 0;
};
int64_t single_channel_conv_relu_pool_scratch_floats(const Tensor& x, const Shape& w_shape,
                                                     std::array<int64_t, 2> padding, int threads);
void single_channel_conv_relu_pool_forward(const Tensor& x, const Tensor& w, const Tensor* bias,
                                           std::array<int64_t, 2> padding, Tensor& pooled,
                                           Tensor& winners,
                                           const SingleChannelConvScratch* scratch = nullptr);

// dw = conv2d_backward_weights(dy, x), db = sum of dy over N, H, W (when db is given). dy
// [N, O, OH, OW] must be channels-last dense (throws otherwise); dw [O, 1, KH, KW] and db [O]
// contiguous f32. Each thread sums a fixed share of the images, then the shares are added in
// thread order: the result is deterministic for a fixed thread count.
void single_channel_conv_backward_weights(const Tensor& dy, const Tensor& x, Tensor& dw,
                                          Tensor* db);

}  // namespace kiln::ops
