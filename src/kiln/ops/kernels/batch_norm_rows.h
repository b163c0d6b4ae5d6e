#pragma once
// Batch normalization over data laid out as rows × C with the channel innermost: a channels-last
// [N, C, H, W] tensor, or a row-major [N, C]. Statistics are per channel over all rows.
//
// oneDNN 2.6's batch normalization is slow on exactly the tensors small CNNs have (few channels,
// channels-last, and above all bf16: 3–14× a memcpy of the tensor); these kernels make the fewest
// passes over memory a batch norm can: training forward reads x twice (statistics, then
// normalize) and writes y once; eval forward and each backward pass read once. Math is f32 (the
// statistics combine in double); storage is f32 or bf16, with f32 gamma, beta and statistics.
//
// The forward optionally fuses a residual add and a relu after the normalization, and the
// backward a relu mask (the gradient passes where the forward's relu output is > 0), so graph
// mode can run batch_norm + [add +] relu and relu_grad + batch_norm_grad as single kernels.
//
// In blocked mode the same kernels take oneDNN's nChw16c layout instead (see
// can_run_batch_norm_blocked), so graph mode need not reorder between blocked convolutions.
#include <initializer_list>

#include "kiln/core/tensor.h"
#include "kiln/ops/kernels/batch_norm_parts.h"

namespace kiln::ops {

// Whether t's memory is rows of C = dim(1) channels: rank >= 2, dense, and the channel dim has
// stride 1, so every other dim steps over whole rows. Batch norm does not care about the order of
// the rows, but all the tensors of one call must share it (see can_run_batch_norm_rows).
bool is_rows_by_channels(const Tensor& t);

// Whether the kernels below apply: x is f32 or bf16 and rows-by-channels, and every tensor in
// `like_x` has x's shape, dtype and strides.
bool can_run_batch_norm_rows(const Tensor& x, std::initializer_list<const Tensor*> like_x);

// Whether the kernels below apply in blocked mode: x is a rank-4 f32 or bf16 [N, C, H, W] with
// C % 16 == 0, dense, and every tensor in `like_x` has x's shape and dtype and is dense.
//
// Blocked mode is oneDNN's nChw16c, which graph mode keeps activations in between convolutions:
// element (n, c, h, w) lives at flat offset ((n·C/16 + c/16)·H·W + h·W + w)·16 + c % 16 from
// data(). The tensors still say [N, C, H, W] (with any dense strides, channels-last say: the
// size is the same), but only data() is used. gamma, beta and the statistics stay f32 [C].
bool can_run_batch_norm_blocked(const Tensor& x, std::initializer_list<const Tensor*> like_x);

// can_run_batch_norm_blocked or can_run_batch_norm_rows, as `blocked` says; null entries of
// `like_x` (an absent residual, say) are skipped.
bool can_run_batch_norm(const Tensor& x, std::initializer_list<const Tensor*> like_x, bool blocked);
// What can_run_batch_norm requires of the tensors, for error messages.
const char* batch_norm_layout_requirement(bool blocked);

struct BatchNormRowsOptions {
  bool training = true;
  double momentum = 0.9;  // running = momentum·running + (1 - momentum)·batch
  double eps = 1e-5;
  bool relu = false;
  bool blocked = false;  // x, residual and y are nChw16c (see can_run_batch_norm_blocked)
  // Write y with streaming (non-temporal) stores, past the caches, where y is f32 and 64-byte
  // aligned: for a y too large to stay cached until its readers, which read it slowly (graph
  // mode sets it where convolutions alone read y: graph/passes/stream_stores.cpp). A plain
  // store first fetches each line of y from memory; this one does not.
  bool stream_output = false;
  // x is one part of a batch whose other parts are normalized elsewhere (batch_norm_parts.h):
  // in training the statistics are the whole batch's. Null: x is the whole batch.
  const BatchParts* parts = nullptr;
};

// y = relu?((x - mean)·gamma·inv_std + beta + residual?), rounded once to y's dtype.
// Training: mean and inv_std = 1/sqrt(var + eps) come from the batch (var biased) and are written
// to `mean` and `inv_std`; running_mean/running_var are updated in place, the variance unbiased
// (as PyTorch and MindSpore do). Eval: mean = running_mean, inv_std from running_var, neither
// updated. gamma, beta, the running statistics, mean and inv_std are contiguous f32 [C];
// residual (may be null) and y are laid out like x.
void batch_norm_rows_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                             const Tensor& running_mean, const Tensor& running_var,
                             const Tensor* residual, const BatchNormRowsOptions& options,
                             const Tensor& y, const Tensor& mean, const Tensor& inv_std);

// The statistics part of batch_norm_rows_forward alone: mean, inv_std and (training) the
// running statistics' update, y not written. For graph mode's bn_relu_conv, whose convolution
// reads relu(batch_norm(x)) on the fly.
void batch_norm_rows_statistics(const Tensor& x, const Tensor& running_mean,
                                const Tensor& running_var, const BatchNormRowsOptions& options,
                                const Tensor& mean, const Tensor& inv_std);

// gamma·inv_std rounded to float: the scale every normalizing kernel multiplies by (see
// batch_norm_vec.h's vnormalize).
inline float batch_norm_scale(float gamma, float inv_std) {
  return float(double(gamma) * double(inv_std));
}

// The gradients of batch_norm_rows_forward without residual, given dy = dL/dy (before the relu
// when relu_out is non-null: then dy passes only where relu_out > 0, as relu_grad does).
// dgamma = Σ dy·(x - mean)·inv_std and dbeta = Σ dy per channel; dx = gamma·inv_std·(dy -
// Σdy/M - (x - mean)·inv_std²·Σdy·(x - mean)/M) in training, gamma·inv_std·dy in eval (the
// statistics were constants). relu_out and dx are laid out like x; `blocked`: dy, relu_out, x
// and dx are nChw16c (see can_run_batch_norm_blocked).
// relu_beta (with relu_out, f32 storage): the forward's beta, to recompute the relu's mask from
// x as the forward computed its pre-relu value instead of reading relu_out — one tensor fewer
// to read in both passes. Only for a forward without residual, whose gamma, mean and inv_std
// these are. dx may be dy itself: each pass reads dy only at the elements it writes.
// parts (training): as BatchNormRowsOptions::parts; the sums in dx's formula are then the whole
// batch's and M its rows, while dgamma and dbeta stay this part's (the parts' parameter
// gradients are added up after the backward, as for every other parameter).
void batch_norm_rows_backward(const Tensor& dy, const Tensor* relu_out, const Tensor& x,
                              const Tensor& gamma, const Tensor& mean, const Tensor& inv_std,
                              bool training, const Tensor& dx, const Tensor& dgamma,
                              const Tensor& dbeta, bool blocked = false,
                              const Tensor* relu_beta = nullptr, const BatchParts* parts = nullptr);

// batch_norm_rows_backward for dy = relu_grad(a + b, relu_out), the gradient arriving at a
// ResNet block's output (the shortcut's gradient plus the next block's, masked by that
// output's relu): dy is computed in the first pass and also written to `dy` (the shortcut's
// gradient needs it), saving the separate add + relu_grad pass and a read of dy. All of a, b,
// relu_out, dy and dx are laid out like x. dy may be b itself and dx a itself: the first pass
// reads a and b only at the elements of dy it writes, the second reads neither.
void batch_norm_rows_backward_add_relu(const Tensor& a, const Tensor& b, const Tensor& relu_out,
                                       const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                       const Tensor& inv_std, bool training, const Tensor& dy,
                                       const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                                       bool blocked = false, const BatchParts* parts = nullptr);

}  // namespace kiln::ops
