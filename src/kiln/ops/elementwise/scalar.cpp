// Elementwise ops with a scalar operand (ScalarAttrs), so a constant needs no tensor.
#include <cmath>

#include "kiln/ops/detail/elementwise_common.h"
#include "kiln/ops/detail/vmath.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::ops {
namespace {
using namespace elementwise;

constexpr char kAddScalar[] = "add_scalar", kMulScalar[] = "mul_scalar",
               kPowScalar[] = "pow_scalar";

void add_scalar_tile(float* o, const float* const* in, int64_t n, const Attrs& attrs) {
  const float* x = in[0];
  const float s = float(attrs.as<ScalarAttrs>().scalar);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = x[i] + s;
}

void mul_scalar_tile(float* o, const float* const* in, int64_t n, const Attrs& attrs) {
  const float* x = in[0];
  const float s = float(attrs.as<ScalarAttrs>().scalar);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = x[i] * s;
}

// The exponents models use get exact, vectorized forms; any other goes through std::pow.
void pow_scalar_tile(float* o, const float* const* in, int64_t n, const Attrs& attrs) {
  const float* x = in[0];
  const double e = attrs.as<ScalarAttrs>().scalar;
  if (e == 2.0) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = x[i] * x[i];
  } else if (e == 1.0) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = x[i];
  } else if (e == 0.0) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = 1.0f;
  } else if (e == 0.5) {
    vmath::sqrt_n<false>(o, x, n);
  } else if (e == -0.5) {
    vmath::sqrt_n<true>(o, x, n);
  } else if (e == -1.0) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = 1.0f / x[i];
  } else if (e == 3.0) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = x[i] * x[i] * x[i];
  } else if (e == -2.0) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = 1.0f / (x[i] * x[i]);
  } else {
    const float ef = float(e);
    for (int64_t i = 0; i < n; ++i) o[i] = std::pow(x[i], ef);
  }
}

}  // namespace

const OpDef op_def_add_scalar = {
    .name = kAddScalar,
    .attrs = attrs_kind<ScalarAttrs>,
    .infer = infer<kAddScalar>,
    .kernel = kernel<OpKind::add_scalar>,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> { return {c.grad_outputs[0]}; },
    .cost = cost<1>,
    .tile = add_scalar_tile,
    .shard = &kElementwiseShardRule,
};

const OpDef op_def_mul_scalar = {
    .name = kMulScalar,
    .attrs = attrs_kind<ScalarAttrs>,
    .infer = infer<kMulScalar>,
    .kernel = kernel<OpKind::mul_scalar>,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      return {mul_scalar(c.grad_outputs[0], c.attrs.as<ScalarAttrs>().scalar)};
    },
    .cost = cost<1>,
    .tile = mul_scalar_tile,
    .shard = &kElementwiseShardRule,
};

const OpDef op_def_pow_scalar = {
    .name = kPowScalar,
    .attrs = attrs_kind<ScalarAttrs>,
    .infer = infer_floating<kPowScalar>,
    .kernel = kernel<OpKind::pow_scalar>,
    // d x^e = e · x^(e-1)
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      const double e = c.attrs.as<ScalarAttrs>().scalar;
      if (e == 0.0) return {mul_scalar(c.grad_outputs[0], 0.0)};
      return {mul(c.grad_outputs[0], mul_scalar(pow_scalar(c.inputs[0], e - 1.0), e))};
    },
    .saved_inputs = 0b1,
    .cost = cost<8>,
    .tile = pow_scalar_tile,
    .shard = &kElementwiseShardRule,
};

Tensor add_scalar(const Tensor& x, double s) {
  return call_one_output(OpKind::add_scalar, {x}, ScalarAttrs{.scalar = s});
}

Tensor mul_scalar(const Tensor& x, double s) {
  return call_one_output(OpKind::mul_scalar, {x}, ScalarAttrs{.scalar = s});
}

Tensor pow_scalar(const Tensor& x, double exponent) {
  return call_one_output(OpKind::pow_scalar, {x}, ScalarAttrs{.scalar = exponent});
}

}  // namespace kiln::ops
