// Dropout: y = x * mask, mask = 0 with probability p else 1/(1-p). The mask is a pure function of
// (seed, element index) — a counter-based hash — so it does not depend on the thread count and
// graph mode can replay it; the functional wrapper draws the seed from kiln::default_generator().
#include "kiln/core/random.h"
#include "kiln/ops/detail/nn_common.h"

namespace kiln::ops {
namespace {
using nn::throw_shape_error;

constexpr char kDropout[] = "dropout";

inline uint64_t mix64(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::vector<TensorMeta> dropout_infer(std::span<const TensorMeta> in, const Attrs& attrs) {
  const DropoutAttrs& a = attrs.as<DropoutAttrs>();
  nn::check_float(kDropout, in[0], "input", true, in);
  if (!(a.p >= 0.0 && a.p <= 1.0)) {
    throw_shape_error(kDropout, detail::concat("p must be in [0, 1], got ", a.p), in);
  }
  return {in[0], in[0]};
}

template <class T>
void dropout_loop(const T* x, T* y, T* mask, int64_t n, double p, uint64_t seed, bool training) {
  // Keep an element when its 24-bit uniform is >= p·2^24.
  uint64_t threshold = uint64_t(p * double(1 << 24));
  float keep_scale = p < 1.0 ? float(1.0 / (1.0 - p)) : 0.f;
  uint64_t key = mix64(seed + 0x9e3779b97f4a7c15ull);
#pragma omp parallel for if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    float m = 1.f;
    if (training) m = (mix64(key ^ uint64_t(i)) >> 40) >= threshold ? keep_scale : 0.f;
    if constexpr (std::is_same_v<T, float>) {
      mask[i] = m;
      y[i] = x[i] * m;
    } else {
      mask[i] = float_to_bf16(m);
      y[i] = float_to_bf16(bf16_to_float(x[i]) * m);
    }
  }
}

void dropout_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const DropoutAttrs& a = attrs.as<DropoutAttrs>();
  Tensor x = nn::plain(in[0]);
  if (x.strides() != out[0].strides()) x = x.contiguous();
  bool training = a.training && a.p > 0.0;
  if (x.dtype() == DType::f32) {
    dropout_loop(x.data<float>(), out[0].data<float>(), out[1].data<float>(), x.numel(), a.p,
                 uint64_t(a.seed), training);
  } else {
    dropout_loop(x.data<bf16_t>(), out[0].data<bf16_t>(), out[1].data<bf16_t>(), x.numel(), a.p,
                 uint64_t(a.seed), training);
  }
}

Cost dropout_cost(std::span<const TensorMeta> in, std::span<const TensorMeta> out, const Attrs&) {
  return {double(in[0].shape.numel()) * 2, nn::bytes_of(in) + nn::bytes_of(out)};
}

}  // namespace

const OpDef op_def_dropout = {
    .name = kDropout,
    .attrs = attrs_kind<DropoutAttrs>,
    .num_outputs = 2,  // {y, mask}
    .infer = dropout_infer,
    .kernel = dropout_kernel,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      return {mul(c.grad_outputs[0], c.outputs[1])};
    },
    .saves_outputs = true,
    .amp = AmpClass::follow,
    .f16_kernels = false,
    .cost = dropout_cost,
    .no_shard_reason = "its random mask would differ from the single-process run's if split",
};

std::vector<Tensor> dropout(const Tensor& x, double p, bool training) {
  Attrs a = DropoutAttrs{.p = p,
                         .seed = training ? int64_t(default_generator().next_u64() >> 1) : 0,
                         .training = training};
  return call(OpKind::dropout, {x}, a);
}

}  // namespace kiln::ops
