#include "kiln/amp/autocast.h"

#include <utility>

#include "kiln/amp/placement.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/functional.h"

namespace kiln::amp {
namespace {

thread_local std::optional<AmpConfig> t_config;
thread_local std::vector<PlacementDecision>* t_decisions = nullptr;  // the innermost scope's
// Set when the hook returns true: the dispatcher's next call is the op rerun on the cast inputs,
// already placed.
thread_local bool t_rerun = false;

bool is_norm(ops::OpKind kind) {
  return kind == ops::OpKind::batch_norm || kind == ops::OpKind::batch_norm_grad ||
         kind == ops::OpKind::layer_norm || kind == ops::OpKind::layer_norm_grad;
}

bool is_batch_norm(ops::OpKind kind) {
  return kind == ops::OpKind::batch_norm || kind == ops::OpKind::batch_norm_grad;
}

// Whether the placement weighs costs at this config (amp/placement.h): bf16 at O1 and O2 unless
// strict. fp16 has no arithmetic on a CPU (its ops run widened to fp32), so choosing it is a
// choice of fp16's numerics and loss scaling, which the placement leaves alone.
bool weighs_costs(const AmpConfig& config) {
  return !config.strict && config.low_dtype == DType::bf16 &&
         (config.level == AmpLevel::O1 || config.level == AmpLevel::O2);
}

// `low` or f32 for an op autocast would run in `low`, by what each costs on this CPU.
DType placed_dtype(ops::OpKind kind, std::span<const Tensor> inputs, const ops::Attrs& attrs,
                   size_t cast_count, DType low) {
  std::vector<ops::TensorMeta> metas;
  metas.reserve(inputs.size());
  for (const Tensor& t : inputs) metas.push_back(ops::meta_of(t));
  // The measured model runs the op eagerly, which must not be autocast again.
  const std::optional<AmpConfig> config = std::exchange(t_config, std::nullopt);
  struct Restore {
    const std::optional<AmpConfig>& config;
    ~Restore() { t_config = config; }
  } restore{config};
  const std::shared_ptr<CostModel> model =
      config->cost_model ? config->cost_model : measured_cost_model();
  return choose_dtype(*model, kind, metas, attrs, cast_count, low, t_decisions).value_or(low);
}

// An elementwise, pooling or shape op costs about the same in either dtype, so its placement is
// decided by the casts alone: it takes the dtype of its largest floating input (a bias follows
// the activations it is added to), keeping a chain of fp32 ops in fp32 and a bf16 chain in bf16.
DType followed_dtype(std::span<const Tensor> inputs, size_t cast_count, DType low) {
  int64_t largest = -1;
  DType dtype = DType::f32;
  for (size_t i = 0; i < cast_count && i < inputs.size(); ++i) {
    if (is_floating(inputs[i].dtype()) && inputs[i].numel() > largest) {
      largest = inputs[i].numel();
      dtype = inputs[i].dtype();
    }
  }
  return is_low_precision(dtype) ? low : DType::f32;
}

bool autocast_hook(ops::OpKind kind, std::span<const Tensor> inputs, const ops::Attrs& attrs,
                   std::vector<Tensor>& cast_inputs) {
  if (!t_config || std::exchange(t_rerun, false)) return false;
  std::vector<DType> dtypes;
  dtypes.reserve(inputs.size());
  for (const Tensor& t : inputs) dtypes.push_back(t.dtype());
  std::optional<DType> target = compute_dtype(kind, dtypes, *t_config);
  if (!target) return false;
  // Norms take their data in the compute dtype but keep scale, shift and running statistics in
  // fp32 (as oneDNN's bf16 normalization does); the statistics are updated in place, so a cast
  // copy of them would silently drop the update.
  const size_t cast_count = is_norm(kind) ? 1 : inputs.size();
  // An op whose inputs are all in low precision already (a bf16 chain, or the rerun on the cast
  // inputs) stays there: fp32 would cost it casts both ways.
  bool any_to_cast = false;
  for (size_t i = 0; i < cast_count; ++i) {
    any_to_cast = any_to_cast || (is_floating(dtypes[i]) && dtypes[i] != *target);
  }
  if (!any_to_cast) return false;
  if (is_low_precision(*target) && weighs_costs(*t_config)) {
    target = ops::op_def(kind).amp == ops::AmpClass::low_precision
                 ? placed_dtype(kind, inputs, attrs, cast_count, *target)
                 : followed_dtype(inputs, cast_count, *target);
  }
  bool changed = false;
  cast_inputs.assign(inputs.begin(), inputs.end());
  for (size_t i = 0; i < cast_count; ++i) {
    Tensor& t = cast_inputs[i];
    if (is_floating(t.dtype()) && t.dtype() != *target) {
      t = ops::cast(t, *target);
      changed = true;
    }
  }
  t_rerun = changed;
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

AutocastScope::AutocastScope(const AmpConfig& config)
    : previous_(t_config), previous_decisions_(t_decisions) {
  install_autocast();
  t_decisions = &decisions_;
  if (config.level == AmpLevel::O0) {
    t_config.reset();
  } else {
    t_config = config;
  }
}

AutocastScope::~AutocastScope() {
  t_config = previous_;
  t_decisions = previous_decisions_;
}

}  // namespace kiln::amp
