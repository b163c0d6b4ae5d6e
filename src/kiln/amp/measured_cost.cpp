#include "kiln/amp/measured_cost.h"

#include "kiln/autograd/op_timing.h"
#include "kiln/ops/attrs.h"

namespace kiln::amp {
namespace {

autograd::OpTimingQuery timing_query(const OpQuery& q) {
  return {.kind = q.kind, .inputs = {q.inputs.begin(), q.inputs.end()}, .attrs = q.attrs};
}

}  // namespace

std::optional<double> MeasuredCostModel::op_ms(const OpQuery& query) {
  const std::string key = autograd::timing_key(timing_query(query));
  {
    std::lock_guard lock(mutex_);
    if (auto it = op_cache_.find(key); it != op_cache_.end()) return it->second;
  }
  std::optional<double> ms = measure(query);
  std::lock_guard lock(mutex_);
  op_cache_.emplace(key, ms);
  return ms;
}

std::optional<double> MeasuredCostModel::measure(const OpQuery& query) const {
  const ops::OpDef& def = ops::op_def(query.kind);
  // Ops that write their inputs, and ops on integer data (labels, indices), are not timed on
  // random values: their placement stays MindSpore's.
  if (def.mutated_inputs != 0) return std::nullopt;
  for (const ops::TensorMeta& m : query.inputs) {
    if (!is_floating(m.dtype)) return std::nullopt;
  }
  return autograd::time_op_ms(timing_query(query), repeats_);
}

double MeasuredCostModel::cast_ms(int64_t numel, DType from, DType to) {
  const std::string key =
      std::to_string(numel) + std::string(dtype_name(from)) + ">" + std::string(dtype_name(to));
  {
    std::lock_guard lock(mutex_);
    if (auto it = cast_cache_.find(key); it != cast_cache_.end()) return it->second;
  }
  // Forward only: a cast's gradient is the cast back, which the placement counts as a cast too.
  const autograd::OpTimingQuery q{.kind = ops::OpKind::cast,
                                  .inputs = {{Shape{numel}, from}},
                                  .attrs = ops::CastAttrs{.dtype = to},
                                  .differentiable = 0};
  const double ms = autograd::time_op_ms(q, repeats_).value_or(0.0);
  std::lock_guard lock(mutex_);
  cast_cache_.emplace(key, ms);
  return ms;
}

std::shared_ptr<CostModel> measured_cost_model() {
  static const std::shared_ptr<CostModel> model = std::make_shared<MeasuredCostModel>();
  return model;
}

}  // namespace kiln::amp
