#include "kiln/amp/placement.h"

#include <algorithm>
#include <cstdio>

namespace kiln::amp {
namespace {

// The op's cost with its first `cast_count` floating inputs in `dtype`, plus one cast forward and
// one backward (the cast's gradient) for each of them that is not in `dtype` yet.
std::optional<double> cost_in(CostModel& model, ops::OpKind kind,
                              std::span<const ops::TensorMeta> inputs, const ops::Attrs& attrs,
                              size_t cast_count, DType dtype) {
  std::vector<ops::TensorMeta> as_run(inputs.begin(), inputs.end());
  double casts_ms = 0;
  for (size_t i = 0; i < as_run.size() && i < cast_count; ++i) {
    ops::TensorMeta& m = as_run[i];
    if (!is_floating(m.dtype) || m.dtype == dtype) continue;
    casts_ms += 2 * model.cast_ms(m.shape.numel(), m.dtype, dtype);
    m.dtype = dtype;
  }
  std::optional<double> op_ms = model.op_ms({kind, as_run, attrs});
  if (!op_ms) return std::nullopt;
  return *op_ms + casts_ms;
}

}  // namespace

std::string PlacementDecision::str() const {
  char buf[96];
  std::snprintf(buf, sizeof buf, " (%.3f ms with casts vs %.3f ms in f32)", low_ms, f32_ms);
  return std::string(ops::op_name(kind)) + " " + inputs + ": " + std::string(dtype_name(chosen)) +
         buf;
}

std::vector<std::string> describe_decisions(std::span<const PlacementDecision> decisions) {
  std::vector<std::string> lines;
  std::vector<int> counts;
  for (const PlacementDecision& d : decisions) {
    const std::string line = d.str();
    auto it = std::find(lines.begin(), lines.end(), line);
    if (it == lines.end()) {
      lines.push_back(line);
      counts.push_back(1);
    } else {
      ++counts[size_t(it - lines.begin())];
    }
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    if (counts[i] > 1) lines[i] += " x" + std::to_string(counts[i]);
  }
  return lines;
}

std::optional<DType> choose_dtype(CostModel& model, ops::OpKind kind,
                                  std::span<const ops::TensorMeta> inputs, const ops::Attrs& attrs,
                                  size_t cast_count, DType low,
                                  std::vector<PlacementDecision>* log) {
  std::optional<double> low_ms = cost_in(model, kind, inputs, attrs, cast_count, low);
  if (!low_ms) return std::nullopt;
  std::optional<double> f32_ms = cost_in(model, kind, inputs, attrs, cast_count, DType::f32);
  if (!f32_ms) return std::nullopt;
  const bool pays =
      *low_ms < kLowPrecisionMargin * *f32_ms && *f32_ms - *low_ms >= kMinLowPrecisionSavingMs;
  const DType chosen = pays ? low : DType::f32;
  if (log) log->push_back({kind, ops::describe_metas(inputs), chosen, *low_ms, *f32_ms});
  return chosen;
}

}  // namespace kiln::amp
