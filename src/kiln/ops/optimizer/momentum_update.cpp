// Momentum SGD (MindSpore's ApplyMomentum, identical to PyTorch's SGD with dampening 0):
//   g = grad + weight_decay * param
//   velocity = momentum * velocity + g
//   param -= lr * (nesterov ? g + momentum * velocity : velocity)
#include "kiln/ops/optimizer/common.h"

namespace kiln::ops {
namespace {
using namespace optimizer;
constexpr char kMomentumUpdate[] = "momentum_update";
constexpr size_t kMomentumCopy = 4;  // the optional input: the parameter's bf16 copy

std::vector<TensorMeta> momentum_infer(std::span<const TensorMeta> in, const Attrs&) {
  check_param(kMomentumUpdate, in[0]);
  check_same(kMomentumUpdate, "the gradient", in[0], in[1]);
  check_state(kMomentumUpdate, "the velocity", in[0], in[2]);
  check_scalar(kMomentumUpdate, "lr", in[3]);
  check_bf16_copy(kMomentumUpdate, in, kMomentumCopy);
  return {};
}

// One block, its operands as values (see sgd_update.cpp's sgd_block).
template <bool Nesterov, class Grad>
void momentum_block(float* p, const Grad* g, float* vel, int64_t n, float lr, float mu, float wd) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    float gi = gradient_value(g, i) + wd * p[i];
    float v = mu * vel[i] + gi;
    vel[i] = v;
    p[i] -= lr * (Nesterov ? gi + mu * v : v);
  }
}

template <bool Nesterov, class Grad>
void momentum_pass(float* p, const Grad* g, float* vel, bf16_t* copy, int64_t n, float lr, float mu,
                   float wd) {
  update_blocks(n, p, copy, [=](int64_t begin, int64_t len) {
    momentum_block<Nesterov>(p + begin, g + begin, vel + begin, len, lr, mu, wd);
  });
}

void momentum_kernel(std::span<const Tensor> in, std::span<Tensor>, const Attrs& a) {
  const MomentumAttrs& attrs = a.as<MomentumAttrs>();
  const Tensor& param = in[0];
  check_param_layout(kMomentumUpdate, param);
  check_state_layout(kMomentumUpdate, "the velocity", param, in[2]);
  float* p = static_cast<float*>(param.raw_data());
  float* vel = static_cast<float*>(in[2].raw_data());
  const float lr = scalar_value(in[3]);
  const float mu = float(attrs.momentum), wd = float(attrs.weight_decay);
  bf16_t* copy = bf16_copy(kMomentumUpdate, in, kMomentumCopy);
  auto update = [&](const auto* g) {
    if (attrs.nesterov) {
      momentum_pass<true>(p, g, vel, copy, param.numel(), lr, mu, wd);
    } else {
      momentum_pass<false>(p, g, vel, copy, param.numel(), lr, mu, wd);
    }
  };
  if (reads_bf16_gradient(in[1], param)) {
    update(static_cast<const bf16_t*>(in[1].raw_data()));
    return;
  }
  const Tensor grad = aligned_gradient(in[1], param);
  update(static_cast<const float*>(grad.raw_data()));
}

Cost momentum_cost(std::span<const TensorMeta> in, std::span<const TensorMeta>, const Attrs&) {
  int64_t n = in[0].shape.numel();
  // read p, g, v; write p, v (and the bf16 copy)
  return {6.0 * double(n), f32_bytes(5 * n) + (in.size() > kMomentumCopy ? 2.0 * double(n) : 0.0)};
}

}  // namespace

const OpDef op_def_momentum_update = {
    .name = kMomentumUpdate,
    .attrs = attrs_kind<MomentumAttrs>,
    .num_inputs = 5,  // param, grad, velocity, lr, [the parameter's bf16 copy]
    .optional_inputs = 1,
    .num_outputs = 0,
    .infer = momentum_infer,
    .kernel = momentum_kernel,
    .no_grad_reason = "an optimizer update runs after backward and is never differentiated",
    .mutated_inputs = 0b10101,
    .amp = AmpClass::fp32,
    .cost = momentum_cost,
    .no_shard_reason = "updates each rank's own shard of a parameter, after the partition",
};

void momentum_update(Tensor& param, const Tensor& grad, Tensor& velocity, const Tensor& lr,
                     double momentum, double weight_decay, bool nesterov) {
  call(OpKind::momentum_update, {param, grad, velocity, lr},
       MomentumAttrs{.momentum = momentum, .weight_decay = weight_decay, .nesterov = nesterov});
}

}  // namespace kiln::ops
