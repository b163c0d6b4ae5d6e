#include "kiln/parallel/strategy_candidates.h"

#include <set>

#include "kiln/core/error.h"
#include "kiln/ops/dispatch.h"

namespace kiln::parallel {
namespace {

void split_rest(const std::vector<int64_t>& dims, size_t d, int64_t left, bool exact,
                std::vector<int64_t>& parts, std::vector<std::vector<int64_t>>& out) {
  if (d == dims.size()) {
    if (!exact || left == 1) out.push_back(parts);
    return;
  }
  for (int64_t p = 1; p <= left; ++p) {
    if (left % p != 0 || dims[d] % p != 0) continue;
    parts[d] = p;
    split_rest(dims, d + 1, left / p, exact, parts, out);
  }
  parts[d] = 1;
}

}  // namespace

std::vector<std::vector<int64_t>> splits_of(const std::vector<int64_t>& dims, int64_t devices,
                                            bool exact) {
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> parts(dims.size(), 1);
  split_rest(dims, 0, devices, exact, parts, out);
  return out;
}

std::vector<ops::Strategy> candidate_strategies(const graph::Graph& g, graph::NodeId id,
                                                int64_t devices, const CandidateOptions& options) {
  const graph::Node& n = g.node(id);
  std::vector<ops::TensorMeta> metas;
  for (graph::ValueId v : n.inputs) metas.push_back(g.value(v).meta);
  std::vector<ops::Strategy> out{ops::replicated_strategy(metas)};
  const ops::ShardRule* rule = ops::op_def(n.op).shard;
  if (!rule || devices <= 1) return out;
  std::set<ops::Strategy> seen{out[0]};
  auto consider = [&](const std::optional<ops::Strategy>& s) {
    if (!s || seen.count(*s)) return;
    seen.insert(*s);
    try {
      const ops::ShardedForm form = ops::shard_form(n.op, metas, n.attrs, *s, devices);
      int64_t used = 1;
      for (int64_t p : form.device_matrix) used *= p;
      if (options.fully_use_devices && used != devices) return;
      out.push_back(*s);
    } catch (const ShapeError&) {
    }
  };
  auto follow = [&](int index, const std::vector<int64_t>& parts) {
    try {
      consider(rule->follow(metas, n.attrs, index, parts));
    } catch (const ShapeError&) {
    }
  };
  for (size_t i = 0; i < metas.size(); ++i) {
    for (const auto& parts : splits_of(metas[i].shape.dims(), devices, options.fully_use_devices)) {
      follow(int(i), parts);
    }
  }
  const std::vector<int64_t> out_dims = g.value(n.outputs.at(0)).meta.shape.dims();
  for (const auto& parts : splits_of(out_dims, devices, options.fully_use_devices)) {
    follow(-1, parts);
  }
  return out;
}

}  // namespace kiln::parallel
