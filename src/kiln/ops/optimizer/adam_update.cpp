// Adam / AdamW in one pass:
//   g = grad + weight_decay * param                  (Adam's L2 term; 0 for AdamW)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g²
//   param *= 1 - lr * decoupled_weight_decay         (AdamW; 0 for Adam)
//   param -= step_size * m / (sqrt(v) + eps)
// step_size = lr * sqrt(1 - beta2^t) / (1 - beta1^t) is computed on the host once per step, so
// the bias correction never changes a compiled graph. This is MindSpore's (and TensorFlow's)
// form; PyTorch adds eps to sqrt(v / (1 - beta2^t)) instead, i.e. its eps is ours divided by
// sqrt(1 - beta2^t) — the two agree to within eps.
//
// AdamAttrs: beta1, beta2, eps, weight_decay (L2), decoupled_weight_decay (AdamW).
#include "kiln/ops/detail/vmath.h"
#include "kiln/ops/optimizer/common.h"

namespace kiln::ops {
namespace {
using namespace optimizer;
constexpr char kAdamUpdate[] = "adam_update";
constexpr size_t kAdamCopy = 6;  // the optional input: the parameter's bf16 copy

std::vector<TensorMeta> adam_infer(std::span<const TensorMeta> in, const Attrs& a) {
  const AdamAttrs& attrs = a.as<AdamAttrs>();
  check_param(kAdamUpdate, in[0]);
  check_same(kAdamUpdate, "the gradient", in[0], in[1]);
  check_state(kAdamUpdate, "m (first moment)", in[0], in[2]);
  check_state(kAdamUpdate, "v (second moment)", in[0], in[3]);
  check_scalar(kAdamUpdate, "step_size", in[4]);
  check_scalar(kAdamUpdate, "lr", in[5]);
  check_bf16_copy(kAdamUpdate, in, kAdamCopy);
  if (!(attrs.beta1 >= 0 && attrs.beta1 < 1 && attrs.beta2 >= 0 && attrs.beta2 < 1)) {
    throw Error(std::string(kAdamUpdate) + ": betas must lie in [0, 1), got (" +
                std::to_string(attrs.beta1) + ", " + std::to_string(attrs.beta2) + ")");
  }
  return {};
}

struct AdamScalars {
  float b1, b2, eps, wd, decay, step;
};

// One block, with the square roots between two loops: a sqrtf inside the loop may set errno (on
// a negative input, which v never is), and that side effect kept GCC from vectorizing it. The
// arithmetic per element is unchanged.
void adam_block(float* p, const float* g, float* m, float* v, int64_t len, AdamScalars s) {
#pragma omp simd
  for (int64_t i = 0; i < len; ++i) {
    const float gi = g[i] + s.wd * p[i];
    m[i] = s.b1 * m[i] + (1.f - s.b1) * gi;
    v[i] = s.b2 * v[i] + (1.f - s.b2) * gi * gi;
  }
  float root[kUpdateBlock];
  vmath::sqrt_n<false>(root, v, len);
#pragma omp simd
  for (int64_t i = 0; i < len; ++i) p[i] = p[i] * s.decay - s.step * m[i] / (root[i] + s.eps);
}

void adam_pass(float* p, const float* g, float* m, float* v, bf16_t* copy, int64_t n,
               AdamScalars s) {
  update_blocks(n, p, copy, [=](int64_t begin, int64_t len) {
    adam_block(p + begin, g + begin, m + begin, v + begin, len, s);
  });
}

void adam_kernel(std::span<const Tensor> in, std::span<Tensor>, const Attrs& a) {
  const AdamAttrs& attrs = a.as<AdamAttrs>();
  const Tensor& param = in[0];
  check_param_layout(kAdamUpdate, param);
  check_state_layout(kAdamUpdate, "m", param, in[2]);
  check_state_layout(kAdamUpdate, "v", param, in[3]);
  Tensor grad = aligned_gradient(in[1], param);
  float* p = static_cast<float*>(param.raw_data());
  const float* g = static_cast<const float*>(grad.raw_data());
  float* m = static_cast<float*>(in[2].raw_data());
  float* v = static_cast<float*>(in[3].raw_data());
  const float lr = scalar_value(in[5]);
  const AdamScalars scalars{.b1 = float(attrs.beta1),
                            .b2 = float(attrs.beta2),
                            .eps = float(attrs.eps),
                            .wd = float(attrs.weight_decay),
                            .decay = 1.f - lr * float(attrs.decoupled_weight_decay),
                            .step = scalar_value(in[4])};
  adam_pass(p, g, m, v, bf16_copy(kAdamUpdate, in, kAdamCopy), param.numel(), scalars);
}

Cost adam_cost(std::span<const TensorMeta> in, std::span<const TensorMeta>, const Attrs&) {
  int64_t n = in[0].shape.numel();
  // read p, g, m, v; write p, m, v (and the bf16 copy)
  return {14.0 * double(n), f32_bytes(7 * n) + (in.size() > kAdamCopy ? 2.0 * double(n) : 0.0)};
}

}  // namespace

const OpDef op_def_adam_update = {
    .name = kAdamUpdate,
    .attrs = attrs_kind<AdamAttrs>,
    .num_inputs = 7,  // param, grad, m, v, step_size, lr, [the parameter's bf16 copy]
    .optional_inputs = 1,
    .num_outputs = 0,
    .infer = adam_infer,
    .kernel = adam_kernel,
    .no_grad_reason = "an optimizer update runs after backward and is never differentiated",
    .mutated_inputs = 0b1001101,
    .amp = AmpClass::fp32,
    .cost = adam_cost,
    .no_shard_reason = "updates each rank's own shard of a parameter, after the partition",
};

void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const Tensor& step_size,
                 const Tensor& lr, double beta1, double beta2, double eps, double weight_decay,
                 bool decoupled_weight_decay) {
  AdamAttrs attrs{.beta1 = beta1, .beta2 = beta2, .eps = eps};
  if (decoupled_weight_decay) {
    attrs.decoupled_weight_decay = weight_decay;
  } else {
    attrs.weight_decay = weight_decay;
  }
  call(OpKind::adam_update, {param, grad, m, v, step_size, lr}, attrs);
}

}  // namespace kiln::ops
