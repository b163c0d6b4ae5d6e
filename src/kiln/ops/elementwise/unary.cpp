// Unary elementwise ops. Tiles are plain loops over the vectorizable math of kernels/vmath.h, so
// each compiles to AVX-512; gradients are written with other ops (functional.h).
#include <cmath>

#include "kiln/ops/detail/elementwise_common.h"
#include "kiln/ops/detail/vmath.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::ops {
namespace {
using namespace elementwise;

constexpr char kNeg[] = "neg", kExp[] = "exp", kLog[] = "log", kSqrt[] = "sqrt", kRsqrt[] = "rsqrt",
               kAbs[] = "abs", kRelu[] = "relu", kGelu[] = "gelu", kSigmoid[] = "sigmoid",
               kTanh[] = "tanh", kSquare[] = "square", kSign[] = "sign";

// Defines `name_tile`, applying `expr` (of float `a`) to every element.
#define KILN_UNARY_TILE(name, expr)                                             \
  void name##_tile(float* o, const float* const* in, int64_t n, const Attrs&) { \
    const float* x = in[0];                                                     \
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) {                       \
      const float a = x[i];                                                     \
      o[i] = (expr);                                                            \
    }                                                                           \
  }

KILN_UNARY_TILE(neg, -a)
KILN_UNARY_TILE(exp, vmath::exp(a))
KILN_UNARY_TILE(log, vmath::log(a))
KILN_UNARY_TILE(abs, __builtin_fabsf(a))
// `a < 0 ? 0 : a` keeps NaN (as PyTorch's relu does), where max(a, 0) would drop it.
KILN_UNARY_TILE(relu, a < 0.0f ? 0.0f : a)
KILN_UNARY_TILE(gelu, a* vmath::normal_cdf(a))
KILN_UNARY_TILE(sigmoid, vmath::sigmoid(a))
KILN_UNARY_TILE(tanh, vmath::tanh(a))
KILN_UNARY_TILE(square, a* a)
KILN_UNARY_TILE(sign, a > 0.0f ? 1.0f : (a < 0.0f ? -1.0f : a * 0.0f))
#undef KILN_UNARY_TILE

void sqrt_tile(float* o, const float* const* in, int64_t n, const Attrs&) {
  vmath::sqrt_n<false>(o, in[0], n);
}
void rsqrt_tile(float* o, const float* const* in, int64_t n, const Attrs&) {
  vmath::sqrt_n<true>(o, in[0], n);
}

}  // namespace

const OpDef op_def_neg = {
    .name = kNeg,
    .infer = infer<kNeg>,
    .kernel = kernel<OpKind::neg>,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> { return {neg(c.grad_outputs[0])}; },
    .cost = cost<1>,
    .tile = neg_tile,
    .shard = &kElementwiseShardRule,
};

const OpDef op_def_exp = {
    .name = kExp,
    .infer = infer_floating<kExp>,
    .kernel = kernel<OpKind::exp>,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      return {mul(c.grad_outputs[0], c.outputs[0])};
    },
    .saves_outputs = true,
    .cost = cost<12>,
    .tile = exp_tile,
    .shard = &kElementwiseShardRule,
};

const OpDef op_def_log = {
    .name = kLog,
    .infer = infer_floating<kLog>,
    .kernel = kernel<OpKind::log>,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      return {div(c.grad_outputs[0], c.inputs[0])};
    },
    .saved_inputs = 0b1,
    .cost = cost<16>,
    .tile = log_tile,
    .shard = &kElementwiseShardRule,
};

const OpDef op_def_sqrt = {
    .name = kSqrt,
    .infer = infer_floating<kSqrt>,
    .kernel = kernel<OpKind::sqrt>,
    // d√x = 1 / (2√x): reuses the output instead of recomputing the root.
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      return {div(mul_scalar(c.grad_outputs[0], 0.5), c.outputs[0])};
    },
    .saves_outputs = true,
    .cost = cost<4>,
    .tile = sqrt_tile,
    .shard = &kElementwiseShardRule,
};

const OpDef op_def_rsqrt = {
    .name = kRsqrt,
    .infer = infer_floating<kRsqrt>,
    .kernel = kernel<OpKind::rsqrt>,
    // d x^(-1/2) = -½ x^(-3/2) = -½ y³
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      const Tensor& y = c.outputs[0];
      return {mul(c.grad_outputs[0], mul_scalar(mul(square(y), y), -0.5))};
    },
    .saves_outputs = true,
    .cost = cost<5>,
    .tile = rsqrt_tile,
    .shard = &kElementwiseShardRule,
};

const OpDef op_def_abs = {
    .name = kAbs,
    .infer = infer<kAbs>,
    .kernel = kernel<OpKind::abs>,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      return {mul(c.grad_outputs[0], sign(c.inputs[0]))};
    },
    .saved_inputs = 0b1,
    .cost = cost<1>,
    .tile = abs_tile,
    .shard = &kElementwiseShardRule,
};

const OpDef op_def_relu = {
    .name = kRelu,
    .infer = infer<kRelu>,
    .kernel = kernel<OpKind::relu>,
    // Reads the output, not the input, so the input can be freed (or overwritten) after forward.
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      return {relu_grad(c.grad_outputs[0], c.outputs[0])};
    },
    .saves_outputs = true,
    .cost = cost<1>,
    .tile = relu_tile,
    .shard = &kElementwiseShardRule,
};

const OpDef op_def_gelu = {
    .name = kGelu,
    .infer = infer_floating<kGelu>,
    .kernel = kernel<OpKind::gelu>,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      return {gelu_grad(c.grad_outputs[0], c.inputs[0])};
    },
    .saved_inputs = 0b1,
    .cost = cost<24>,
    .tile = gelu_tile,
    .shard = &kElementwiseShardRule,
};

const OpDef op_def_sigmoid = {
    .name = kSigmoid,
    .infer = infer_floating<kSigmoid>,
    .kernel = kernel<OpKind::sigmoid>,
    // σ' = σ(1 - σ) = y - y²
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      const Tensor& y = c.outputs[0];
      return {mul(c.grad_outputs[0], sub(y, square(y)))};
    },
    .saves_outputs = true,
    .cost = cost<14>,
    .tile = sigmoid_tile,
    .shard = &kElementwiseShardRule,
};

const OpDef op_def_tanh = {
    .name = kTanh,
    .infer = infer_floating<kTanh>,
    .kernel = kernel<OpKind::tanh>,
    // tanh' = 1 - y², so g·tanh' = g - g·y²
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      const Tensor& g = c.grad_outputs[0];
      return {sub(g, mul(g, square(c.outputs[0])))};
    },
    .saves_outputs = true,
    .cost = cost<16>,
    .tile = tanh_tile,
    .shard = &kElementwiseShardRule,
};

const OpDef op_def_square = {
    .name = kSquare,
    .infer = infer<kSquare>,
    .kernel = kernel<OpKind::square>,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      return {mul(c.grad_outputs[0], mul_scalar(c.inputs[0], 2.0))};
    },
    .saved_inputs = 0b1,
    .cost = cost<1>,
    .tile = square_tile,
    .shard = &kElementwiseShardRule,
};

const OpDef op_def_sign = {
    .name = kSign,
    .infer = infer<kSign>,
    .kernel = kernel<OpKind::sign>,
    .no_grad_reason = "sign is piecewise constant: its derivative is zero wherever it exists",
    .cost = cost<2>,
    .tile = sign_tile,
    .shard = &kElementwiseShardRule,
};

Tensor neg(const Tensor& x) {
  return call_one_output(OpKind::neg, {x});
}
Tensor exp(const Tensor& x) {
  return call_one_output(OpKind::exp, {x});
}
Tensor log(const Tensor& x) {
  return call_one_output(OpKind::log, {x});
}
Tensor sqrt(const Tensor& x) {
  return call_one_output(OpKind::sqrt, {x});
}
Tensor rsqrt(const Tensor& x) {
  return call_one_output(OpKind::rsqrt, {x});
}
Tensor abs(const Tensor& x) {
  return call_one_output(OpKind::abs, {x});
}
Tensor relu(const Tensor& x) {
  return call_one_output(OpKind::relu, {x});
}
Tensor gelu(const Tensor& x) {
  return call_one_output(OpKind::gelu, {x});
}
Tensor sigmoid(const Tensor& x) {
  return call_one_output(OpKind::sigmoid, {x});
}
Tensor tanh(const Tensor& x) {
  return call_one_output(OpKind::tanh, {x});
}
Tensor square(const Tensor& x) {
  return call_one_output(OpKind::square, {x});
}
Tensor sign(const Tensor& x) {
  return call_one_output(OpKind::sign, {x});
}

}  // namespace kiln::ops
