#pragma once
// Max pooling over non-overlapping windows (stride = kernel, no padding: LeNet's 2×2/2), a row
// of windows at a time: the window's rows are reduced element by element first (contiguous
// memory, vectorized), then each window's columns. oneDNN's pooling runs plain NCHW through its
// reference implementation and few-channel NHWC (LeNet's 6) well below the memory's speed. On an
// AVX2 core, one thread, 2×2/2: LeNet's [64, 6, 28, 28] channels-last 0.59 ms with oneDNN, 0.10
// here; row-major 3.3 and 0.11 ms; [32, 64, 32, 32] channels-last 1.9 and 0.6 ms, row-major 24.6
// and 0.5 ms.
//
// Each window's value is that of ops/kernels/max_pool_grad.h's winner, the first maximum in
// window order under a strict >: a NaN in the window's first element is the result, a later NaN
// is passed over, as every order of these comparisons gives.
#include <array>
#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln::ops {

// y = max_pool2d(x) with kernel = stride = `kernel` and no padding, for f32 or bf16 x and y of
// the same layout, both row-major or both dense channels-last along their rows. Returns false
// (writing nothing) where that does not hold.
bool max_pool_rows(const Tensor& x, Tensor& y, std::array<int64_t, 2> kernel);

}  // namespace kiln::ops
