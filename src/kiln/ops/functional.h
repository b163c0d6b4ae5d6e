#pragma once
// The functional API: one function per op, each a thin call into the dispatcher. Layers, gradient
// rules, optimizers and user code all call these, so the same code runs eagerly, records on the
// autograd tape, or is traced into a graph.
#include <optional>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/ops/op.h"

namespace kiln::ops {

// Elementwise, with NumPy broadcasting.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x);  // exact (erf) form
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor square(const Tensor& x);
Tensor add_scalar(const Tensor& x, double s);
Tensor mul_scalar(const Tensor& x, double s);
Tensor pow_scalar(const Tensor& x, double exponent);
Tensor sign(const Tensor& x);
// Gradient helpers (also ops, so graph mode fuses them).
Tensor relu_grad(const Tensor& grad, const Tensor& y);  // grad * (y > 0)
Tensor gelu_grad(const Tensor& grad, const Tensor& x);
Tensor where_positive(const Tensor& cond, const Tensor& a, const Tensor& b);  // cond > 0 ? a : b
Tensor compare_equal(const Tensor& a, const Tensor& b);  // 1.0 where equal, else 0.0

// Reductions. Empty `axes` reduces over all dimensions.
Tensor sum(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdims = false);
Tensor mean(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdims = false);
Tensor max(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdims = false);
Tensor argmax(const Tensor& x, int64_t axis, bool keepdims = false);  // i64
// Sums a broadcast gradient back to `shape` (the inverse of broadcasting).
Tensor sum_to_shape(const Tensor& x, const Shape& shape);
Tensor broadcast_to(const Tensor& x, const Shape& shape);

// Shape. reshape/transpose/slice return views when the layout allows.
Tensor reshape(const Tensor& x, const Shape& shape);  // one -1 allowed
Tensor flatten(const Tensor& x);                      // [N, ...] -> [N, prod(...)]
Tensor transpose(const Tensor& x, std::vector<int64_t> perm);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor concat(const std::vector<Tensor>& xs, int64_t axis);
Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t end, int64_t step = 1);
// Gradient of slice: zeros of `shape` with `grad` placed where slice took its elements.
Tensor pad_slice_grad(const Tensor& grad, const Shape& shape, int64_t axis, int64_t start,
                      int64_t end, int64_t step);
Tensor cast(const Tensor& x, DType dtype);
Tensor one_hot(const Tensor& indices, int64_t num_classes, DType dtype = DType::f32);
Tensor contiguous(const Tensor& x);  // differentiable copy to row-major

// Neural-network ops.
Tensor softmax(const Tensor& x, int64_t axis = -1);
Tensor log_softmax(const Tensor& x, int64_t axis = -1);
Tensor softmax_grad(const Tensor& grad, const Tensor& y, int64_t axis);
Tensor log_softmax_grad(const Tensor& grad, const Tensor& y, int64_t axis);
// Attention's causal mask over the last two dims [..., T, S]: element (i, j) keeps x where
// j <= i + (S - T) (query i sees keys up to its own position) and is `fill` elsewhere (-inf makes
// a following softmax give those keys zero weight).
Tensor causal_mask(const Tensor& x, double fill);
// Matrix product of the last two dims, batched over (broadcast) leading dims.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);

struct Conv2dOptions {
  std::array<int64_t, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
};
// x: [N, C, H, W] (any layout; output is channels-last), w: [O, C/groups, KH, KW], bias [O] or
// undefined.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& opt = {});
Tensor conv2d_backward_data(const Tensor& grad, const Tensor& w, const Shape& x_shape,
                            const Conv2dOptions& opt);
// Returns {grad_w, grad_bias}; grad_bias undefined when has_bias is false.
std::vector<Tensor> conv2d_backward_weights(const Tensor& grad, const Tensor& x,
                                            const Shape& w_shape, bool has_bias,
                                            const Conv2dOptions& opt);

struct Pool2dOptions {
  std::array<int64_t, 2> kernel{2, 2}, stride{2, 2}, padding{0, 0};
};
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& opt);
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& opt);

// Batch norm over channel dim 1. In training, uses batch statistics and updates running_mean /
// running_var in place (momentum as in MindSpore: running = momentum*running + (1-momentum)*batch).
// Returns {y, saved_mean, saved_inv_std}. sync_ranks: x is this rank's shard of a data-parallel
// batch, and the statistics are the whole batch's, across the job's ranks (nn::SyncBatchNorm).
std::vector<Tensor> batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                               const Tensor& running_mean, const Tensor& running_var, bool training,
                               double momentum, double eps, bool sync_ranks = false);
// Layer norm over the last gamma.rank() dims; returns {y, mean, inv_std}.
std::vector<Tensor> layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                               double eps);
// Returns {y, mask}; mask holds 0 or 1/(1-p). Identity when not training.
std::vector<Tensor> dropout(const Tensor& x, double p, bool training);
// Softmax cross-entropy with integer labels [N] (i32/i64) over logits [N, C].
// reduction: 0 mean, 1 sum, 2 none.
Tensor softmax_cross_entropy(const Tensor& logits, const Tensor& labels, int64_t reduction = 0);
Tensor embedding(const Tensor& table, const Tensor& indices);

// Optimizer updates, in place, one pass each. lr is a scalar f32 tensor so a schedule does not
// change the compiled graph.
void sgd_update(Tensor& param, const Tensor& grad, const Tensor& lr, double weight_decay);
void momentum_update(Tensor& param, const Tensor& grad, Tensor& velocity, const Tensor& lr,
                     double momentum, double weight_decay, bool nesterov);
// step_size already includes Adam's bias corrections: lr * sqrt(1-b2^t) / (1-b1^t).
// decoupled_weight_decay (AdamW) multiplies the parameter by (1 - lr*wd) first.
void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const Tensor& step_size,
                 const Tensor& lr, double beta1, double beta2, double eps, double weight_decay,
                 bool decoupled_weight_decay);

}  // namespace kiln::ops

namespace kiln {
// Arithmetic operators on tensors, for readable model code.
inline Tensor operator+(const Tensor& a, const Tensor& b) {
  return ops::add(a, b);
}
inline Tensor operator-(const Tensor& a, const Tensor& b) {
  return ops::sub(a, b);
}
inline Tensor operator*(const Tensor& a, const Tensor& b) {
  return ops::mul(a, b);
}
inline Tensor operator/(const Tensor& a, const Tensor& b) {
  return ops::div(a, b);
}
inline Tensor operator-(const Tensor& a) {
  return ops::neg(a);
}
inline Tensor operator*(const Tensor& a, double s) {
  return ops::mul_scalar(a, s);
}
inline Tensor operator+(const Tensor& a, double s) {
  return ops::add_scalar(a, s);
}
}  // namespace kiln
