// Elementwise ops that gradient rules are written with. They are ops (not code inside the rules)
// so graph mode can fuse them with their neighbours.
#include "kiln/ops/detail/elementwise_common.h"
#include "kiln/ops/detail/vmath.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::ops {
namespace {
using namespace elementwise;

constexpr char kReluGrad[] = "relu_grad", kGeluGrad[] = "gelu_grad",
               kWherePositive[] = "where_positive", kCompareEqual[] = "compare_equal";

void relu_grad_tile(float* o, const float* const* in, int64_t n, const Attrs&) {
  const float *g = in[0], *y = in[1];
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = y[i] > 0.0f ? g[i] : 0.0f;
}

// d gelu(x)/dx = Φ(x) + x·φ(x)
void gelu_grad_tile(float* o, const float* const* in, int64_t n, const Attrs&) {
  const float *g = in[0], *x = in[1];
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float a = x[i];
    o[i] = g[i] * (vmath::normal_cdf(a) + a * vmath::normal_pdf(a));
  }
}

void where_positive_tile(float* o, const float* const* in, int64_t n, const Attrs&) {
  const float *c = in[0], *a = in[1], *b = in[2];
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = c[i] > 0.0f ? a[i] : b[i];
}

void compare_equal_tile(float* o, const float* const* in, int64_t n, const Attrs&) {
  const float *a = in[0], *b = in[1];
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = a[i] == b[i] ? 1.0f : 0.0f;
}

}  // namespace

const OpDef op_def_relu_grad = {
    .name = kReluGrad,
    .num_inputs = 2,
    .infer = infer_floating<kReluGrad>,
    .kernel = kernel<OpKind::relu_grad>,
    // Linear in grad; piecewise constant in y (no gradient flows to y).
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      std::vector<Tensor> grads(2);
      if (c.needs_grad[0]) {
        grads[0] = unbroadcast(relu_grad(c.grad_outputs[0], c.inputs[1]), c.input_metas[0]);
      }
      return grads;
    },
    .saved_inputs = 0b10,
    .cost = cost<1>,
    .tile = relu_grad_tile,
    .shard = &kElementwiseShardRule,
};

const OpDef op_def_gelu_grad = {
    .name = kGeluGrad,
    .num_inputs = 2,
    .infer = infer_floating<kGeluGrad>,
    .kernel = kernel<OpKind::gelu_grad>,
    // gelu''(x) = φ(x)·(2 - x²)
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      const Tensor &gg = c.grad_outputs[0], &g = c.inputs[0], &x = c.inputs[1];
      std::vector<Tensor> grads(2);
      if (c.needs_grad[0]) grads[0] = unbroadcast(gelu_grad(gg, x), c.input_metas[0]);
      if (c.needs_grad[1]) {
        Tensor x2 = square(x);
        Tensor pdf = mul_scalar(exp(mul_scalar(x2, -0.5)), 0.39894228040143268);
        Tensor second = mul(pdf, add_scalar(neg(x2), 2.0));
        grads[1] = unbroadcast(mul(mul(gg, g), second), c.input_metas[1]);
      }
      return grads;
    },
    .saved_inputs = 0b11,
    .cost = cost<30>,
    .tile = gelu_grad_tile,
    .shard = &kElementwiseShardRule,
};

const OpDef op_def_where_positive = {
    .name = kWherePositive,
    .num_inputs = 3,
    .infer = infer<kWherePositive>,
    .kernel = kernel<OpKind::where_positive>,
    // The condition only selects: no gradient flows to it.
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      const Tensor& g = c.grad_outputs[0];
      const Tensor& cond = c.inputs[0];
      Tensor zero = mul_scalar(g, 0.0);
      std::vector<Tensor> grads(3);
      if (c.needs_grad[1]) grads[1] = unbroadcast(where_positive(cond, g, zero), c.input_metas[1]);
      if (c.needs_grad[2]) grads[2] = unbroadcast(where_positive(cond, zero, g), c.input_metas[2]);
      return grads;
    },
    .saved_inputs = 0b1,
    .cost = cost<1>,
    .tile = where_positive_tile,
    .shard = &kElementwiseShardRule,
};

const OpDef op_def_compare_equal = {
    .name = kCompareEqual,
    .num_inputs = 2,
    .infer = infer<kCompareEqual>,
    .kernel = kernel<OpKind::compare_equal>,
    .no_grad_reason = "compare_equal is piecewise constant: its derivative is zero where defined",
    .cost = cost<1>,
    .tile = compare_equal_tile,
    .shard = &kElementwiseShardRule,
};

Tensor relu_grad(const Tensor& grad, const Tensor& y) {
  return call_one_output(OpKind::relu_grad, {grad, y});
}
Tensor gelu_grad(const Tensor& grad, const Tensor& x) {
  return call_one_output(OpKind::gelu_grad, {grad, x});
}
Tensor where_positive(const Tensor& cond, const Tensor& a, const Tensor& b) {
  return call_one_output(OpKind::where_positive, {cond, a, b});
}
Tensor compare_equal(const Tensor& a, const Tensor& b) {
  return call_one_output(OpKind::compare_equal, {a, b});
}

}  // namespace kiln::ops
