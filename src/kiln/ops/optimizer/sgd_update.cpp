// Plain SGD with L2 weight decay: param -= lr * (grad + weight_decay * param).
#include "kiln/ops/optimizer/common.h"

namespace kiln::ops {
namespace {
using namespace optimizer;
constexpr char kSgdUpdate[] = "sgd_update";
constexpr size_t kSgdCopy = 3;  // the optional input: the parameter's bf16 copy

std::vector<TensorMeta> sgd_infer(std::span<const TensorMeta> in, const Attrs&) {
  check_param(kSgdUpdate, in[0]);
  check_same(kSgdUpdate, "the gradient", in[0], in[1]);
  check_scalar(kSgdUpdate, "lr", in[2]);
  check_bf16_copy(kSgdUpdate, in, kSgdCopy);
  return {};
}

// The operands as values, not a lambda's references: a float store through `p` could change a
// captured `lr` as far as the compiler knows, and GCC then leaves the loop scalar (48,000
// parameters took 37 us instead of 5).
template <class Grad>
void sgd_block(float* p, const Grad* g, int64_t n, float lr, float wd) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) p[i] -= lr * (gradient_value(g, i) + wd * p[i]);
}

template <class Grad>
void sgd_pass(float* p, const Grad* g, bf16_t* copy, int64_t n, float lr, float wd) {
  update_blocks(n, p, copy,
                [=](int64_t begin, int64_t len) { sgd_block(p + begin, g + begin, len, lr, wd); });
}

void sgd_kernel(std::span<const Tensor> in, std::span<Tensor>, const Attrs& a) {
  const SgdAttrs& attrs = a.as<SgdAttrs>();
  const Tensor& param = in[0];
  check_param_layout(kSgdUpdate, param);
  float* p = static_cast<float*>(param.raw_data());
  const float lr = scalar_value(in[2]);
  const float wd = float(attrs.weight_decay);
  const int64_t n = param.numel();
  bf16_t* copy = bf16_copy(kSgdUpdate, in, kSgdCopy);
  if (reads_bf16_gradient(in[1], param)) {
    sgd_pass(p, static_cast<const bf16_t*>(in[1].raw_data()), copy, n, lr, wd);
    return;
  }
  const Tensor grad = aligned_gradient(in[1], param);
  sgd_pass(p, static_cast<const float*>(grad.raw_data()), copy, n, lr, wd);
}

Cost sgd_cost(std::span<const TensorMeta> in, std::span<const TensorMeta>, const Attrs&) {
  int64_t n = in[0].shape.numel();
  // read p, g; write p (and the bf16 copy)
  return {3.0 * double(n), f32_bytes(3 * n) + (in.size() > kSgdCopy ? 2.0 * double(n) : 0.0)};
}

}  // namespace

const OpDef op_def_sgd_update = {
    .name = kSgdUpdate,
    .attrs = attrs_kind<SgdAttrs>,
    .num_inputs = 4,  // param, grad, lr, [the parameter's bf16 copy]
    .optional_inputs = 1,
    .num_outputs = 0,
    .infer = sgd_infer,
    .kernel = sgd_kernel,
    .no_grad_reason = "an optimizer update runs after backward and is never differentiated",
    .mutated_inputs = 0b1001,
    .amp = AmpClass::fp32,
    .cost = sgd_cost,
    .no_shard_reason = "updates each rank's own shard of a parameter, after the partition",
};

void sgd_update(Tensor& param, const Tensor& grad, const Tensor& lr, double weight_decay) {
  call(OpKind::sgd_update, {param, grad, lr}, SgdAttrs{.weight_decay = weight_decay});
}

}  // namespace kiln::ops
