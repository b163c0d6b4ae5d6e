#include "kiln/amp/autocast.h"

#include "kiln/ops/dispatch.h"
#include "kiln/ops/functional.h"

namespace kiln::amp {
namespace {

thread_local std::optional<AmpConfig> t_config;

bool is_norm(ops::OpKind kind) {
  return kind == ops::OpKind::batch_norm || kind == ops::OpKind::batch_norm_grad ||
         kind == ops::OpKind::layer_norm || kind == ops::OpKind::layer_norm_grad;
}

bool is_batch_norm(ops::OpKind kind) {
  return kind == ops::OpKind::batch_norm || kind == ops::OpKind::batch_norm_grad;
}

bool autocast_hook(ops::OpKind kind, std::span<const Tensor> inputs,
                   std::vector<Tensor>& cast_inputs) {
  if (!t_config) return false;
  std::vector<DType> dtypes;
  dtypes.reserve(inputs.size());
  for (const Tensor& t : inputs) dtypes.push_back(t.dtype());
  std::optional<DType> target = compute_dtype(kind, dtypes, *t_config);
  if (!target) return false;
  bool changed = false;
  cast_inputs.assign(inputs.begin(), inputs.end());
  // Norms take their data in the compute dtype but keep scale, shift and running statistics in
  // fp32 (as oneDNN's bf16 normalization does); the statistics are updated in place, so a cast
  // copy of them would silently drop the update.
  size_t cast_count = is_norm(kind) ? 1 : cast_inputs.size();
  for (size_t i = 0; i < cast_count; ++i) {
    Tensor& t = cast_inputs[i];
    if (is_floating(t.dtype()) && t.dtype() != *target) {
      t = ops::cast(t, *target);
      changed = true;
    }
  }
  return changed;
}

}  // namespace

void install_autocast() {
  ops::dispatch_chain().set_autocast(autocast_hook);
}

std::optional<DType> compute_dtype(ops::OpKind kind, std::span<const DType> input_dtypes,
                                   const AmpConfig& config) {
  const ops::OpDef& def = ops::op_def(kind);
  // Casts themselves, and in-place updates of fp32 master weights, are never rewritten.
  if (kind == ops::OpKind::cast || (def.mutated_inputs != 0 && !is_norm(kind))) {
    return std::nullopt;
  }
  bool any_low = false, any_f32 = false;
  for (DType d : input_dtypes) {
    any_low = any_low || is_low_precision(d);
    any_f32 = any_f32 || d == DType::f32;
  }
  if (!any_low && !any_f32) return std::nullopt;  // integer-only inputs
  const DType low = config.low_dtype;
  switch (config.level) {
    case AmpLevel::O0:
      return std::nullopt;
    case AmpLevel::O1:
      if (def.amp == ops::AmpClass::low_precision) return low;
      if (def.amp == ops::AmpClass::fp32) {
        return any_low ? std::optional<DType>(DType::f32) : std::nullopt;
      }
      // Elementwise and shape ops follow their inputs, so conv → relu → pool → conv stays in
      // low precision with no casts in between; mixed inputs widen to fp32.
      return any_low && any_f32 ? std::optional<DType>(DType::f32) : std::nullopt;
    case AmpLevel::O2:
      if (def.amp == ops::AmpClass::fp32 && (!is_norm(kind) || config.keep_batchnorm_fp32)) {
        // keep_batchnorm_fp32 keeps BatchNorm's arithmetic in fp32, not its data: oneDNN's
        // batch normalization reads bf16 x, computes mean, variance and the normalization in
        // fp32 with our fp32 scale, shift and running statistics, and rounds only y to bf16.
        // Widening x to fp32 first would cost two casts per BN and an fp32 relu in between for
        // the same numbers. (f16 has no such kernel here and is still widened.)
        if (is_batch_norm(kind) && !input_dtypes.empty() && input_dtypes[0] == DType::bf16) {
          return std::nullopt;
        }
        return any_low ? std::optional<DType>(DType::f32) : std::nullopt;
      }
      return low;
    case AmpLevel::O3:
      return low;
  }
  return std::nullopt;
}

AutocastScope::AutocastScope(const AmpConfig& config) : previous_(t_config) {
  install_autocast();
  if (config.level == AmpLevel::O0) {
    t_config.reset();
  } else {
    t_config = config;
  }
}

AutocastScope::~AutocastScope() {
  t_config = previous_;
}

}  // namespace kiln::amp
