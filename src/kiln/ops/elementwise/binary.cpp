// Binary elementwise ops with NumPy broadcasting.
#include "kiln/ops/detail/elementwise_common.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::ops {
namespace {
using namespace elementwise;

constexpr char kAdd[] = "add", kSub[] = "sub", kMul[] = "mul", kDiv[] = "div",
               kMaximum[] = "maximum", kMinimum[] = "minimum", kPow[] = "pow";

void add_tile(float* o, const float* const* in, int64_t n, const Attrs&) {
  const float *a = in[0], *b = in[1];
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = a[i] + b[i];
}
void sub_tile(float* o, const float* const* in, int64_t n, const Attrs&) {
  const float *a = in[0], *b = in[1];
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = a[i] - b[i];
}
void mul_tile(float* o, const float* const* in, int64_t n, const Attrs&) {
  const float *a = in[0], *b = in[1];
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = a[i] * b[i];
}
void div_tile(float* o, const float* const* in, int64_t n, const Attrs&) {
  const float *a = in[0], *b = in[1];
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = a[i] / b[i];
}
void maximum_tile(float* o, const float* const* in, int64_t n, const Attrs&) {
  const float *a = in[0], *b = in[1];
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = a[i] >= b[i] ? a[i] : b[i];
}
void minimum_tile(float* o, const float* const* in, int64_t n, const Attrs&) {
  const float *a = in[0], *b = in[1];
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = a[i] <= b[i] ? a[i] : b[i];
}
void pow_tile(float* o, const float* const* in, int64_t n, const Attrs&) {
  const float *a = in[0], *b = in[1];
  for (int64_t i = 0; i < n; ++i) o[i] = std::pow(a[i], b[i]);
}

}  // namespace

const OpDef op_def_add = {
    .name = kAdd,
    .num_inputs = 2,
    .infer = infer<kAdd>,
    .kernel = kernel<OpKind::add>,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      const Tensor& g = c.grad_outputs[0];
      return {unbroadcast(g, c.input_metas[0]), unbroadcast(g, c.input_metas[1])};
    },
    .cost = cost<1>,
    .tile = add_tile,
    .shard = &kElementwiseShardRule,
};

const OpDef op_def_sub = {
    .name = kSub,
    .num_inputs = 2,
    .infer = infer<kSub>,
    .kernel = kernel<OpKind::sub>,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      const Tensor& g = c.grad_outputs[0];
      return {unbroadcast(g, c.input_metas[0]), unbroadcast(neg(g), c.input_metas[1])};
    },
    .cost = cost<1>,
    .tile = sub_tile,
    .shard = &kElementwiseShardRule,
};

const OpDef op_def_mul = {
    .name = kMul,
    .num_inputs = 2,
    .infer = infer<kMul>,
    .kernel = kernel<OpKind::mul>,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      const Tensor& g = c.grad_outputs[0];
      std::vector<Tensor> grads(2);
      if (c.needs_grad[0]) grads[0] = unbroadcast(mul(g, c.inputs[1]), c.input_metas[0]);
      if (c.needs_grad[1]) grads[1] = unbroadcast(mul(g, c.inputs[0]), c.input_metas[1]);
      return grads;
    },
    .saved_inputs = 0b11,
    .cost = cost<1>,
    .tile = mul_tile,
    .shard = &kElementwiseShardRule,
};

const OpDef op_def_div = {
    .name = kDiv,
    .num_inputs = 2,
    .infer = infer<kDiv>,
    .kernel = kernel<OpKind::div>,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      const Tensor& g = c.grad_outputs[0];
      std::vector<Tensor> grads(2);
      Tensor ga = div(g, c.inputs[1]);
      if (c.needs_grad[0]) grads[0] = unbroadcast(ga, c.input_metas[0]);
      // d(a/b)/db = -a/b² = -(g/b) * (a/b) = -ga * out
      if (c.needs_grad[1]) grads[1] = unbroadcast(neg(mul(ga, c.outputs[0])), c.input_metas[1]);
      return grads;
    },
    .saved_inputs = 0b10,
    .saves_outputs = true,
    .cost = cost<1>,
    .tile = div_tile,
    .shard = &kElementwiseShardRule,
};

// maximum and minimum: the gradient goes to the input the output came from. Ties send it to the
// first input, as PyTorch's max/min of two tensors do to neither; we pick one so the subgradient
// sums correctly.
std::vector<Tensor> winner_gradient(const GradCtx& c) {
  const Tensor& g = c.grad_outputs[0];
  Tensor zero = mul_scalar(g, 0.0);
  Tensor a_wins = add_scalar(compare_equal(c.outputs[0], c.inputs[0]), -0.5);
  return {unbroadcast(where_positive(a_wins, g, zero), c.input_metas[0]),
          unbroadcast(where_positive(a_wins, zero, g), c.input_metas[1])};
}

const OpDef op_def_maximum = {
    .name = kMaximum,
    .num_inputs = 2,
    .infer = infer<kMaximum>,
    .kernel = kernel<OpKind::maximum>,
    .grad = winner_gradient,
    .saved_inputs = 0b01,
    .saves_outputs = true,
    .cost = cost<1>,
    .tile = maximum_tile,
    .shard = &kElementwiseShardRule,
};

const OpDef op_def_minimum = {
    .name = kMinimum,
    .num_inputs = 2,
    .infer = infer<kMinimum>,
    .kernel = kernel<OpKind::minimum>,
    .grad = winner_gradient,
    .saved_inputs = 0b01,
    .saves_outputs = true,
    .cost = cost<1>,
    .tile = minimum_tile,
    .shard = &kElementwiseShardRule,
};

const OpDef op_def_pow = {
    .name = kPow,
    .num_inputs = 2,
    .infer = infer<kPow>,
    .kernel = kernel<OpKind::pow>,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      const Tensor& g = c.grad_outputs[0];
      const Tensor &a = c.inputs[0], &b = c.inputs[1], &y = c.outputs[0];
      std::vector<Tensor> grads(2);
      // d/da a^b = b * a^(b-1) = b * y / a ; d/db a^b = y * log(a)
      if (c.needs_grad[0]) grads[0] = unbroadcast(mul(g, mul(b, div(y, a))), c.input_metas[0]);
      if (c.needs_grad[1]) grads[1] = unbroadcast(mul(g, mul(y, log(a))), c.input_metas[1]);
      return grads;
    },
    .saved_inputs = 0b11,
    .saves_outputs = true,
    .cost = cost<8>,
    .tile = pow_tile,
    .shard = &kElementwiseShardRule,
};

Tensor add(const Tensor& a, const Tensor& b) {
  return call_one_output(OpKind::add, {a, b});
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return call_one_output(OpKind::sub, {a, b});
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return call_one_output(OpKind::mul, {a, b});
}
Tensor div(const Tensor& a, const Tensor& b) {
  return call_one_output(OpKind::div, {a, b});
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  return call_one_output(OpKind::maximum, {a, b});
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return call_one_output(OpKind::minimum, {a, b});
}
Tensor pow(const Tensor& a, const Tensor& b) {
  return call_one_output(OpKind::pow, {a, b});
}

}  // namespace kiln::ops
