#include "kiln/parallel/redistribution.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "kiln/core/error.h"
#include "kiln/ops/comm/collectives.h"
#include "kiln/ops/functional.h"

namespace kiln::parallel {
namespace {

using Kind = RedistributionStep::Kind;

std::string ranks_str(const std::vector<int64_t>& v) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
  s << "]";
  return s.str();
}

// What every rank holds at some point of the sequence.
struct Placement {
  Shape shape;
  std::vector<int64_t> parts;                // per dimension
  std::vector<std::vector<int64_t>> blocks;  // [rank][dimension]
  std::vector<std::vector<int64_t>> sums;    // [rank]: the ranks its partial sum adds with

  static Placement of(const TensorLayout& l) {
    Placement p{l.shape, l.parts(), {}, {}};
    for (int64_t r = 0; r < l.ranks(); ++r) {
      p.blocks.push_back(l.block_of(r));
      p.sums.push_back(l.partial_group(r));
    }
    return p;
  }
  int64_t ranks() const { return int64_t(blocks.size()); }
  double local_bytes(DType dtype) const {
    double n = double(dtype_size(dtype));
    for (int d = 0; d < shape.rank(); ++d) n *= double(shape[d] / parts[size_t(d)]);
    return n;
  }
  bool partial() const { return sums[0].size() > 1; }
};

struct Plan {
  std::vector<RedistributionStep> steps;
  double seconds = 0;
};

// The ranks rank r gathers dimension d with: those holding the same blocks of every other
// dimension, one per block of d, in block order (which must be ascending rank order).
std::vector<int64_t> gather_group(const Placement& p, int64_t r, size_t d) {
  auto others_match = [&](int64_t s) {
    for (size_t k = 0; k < p.parts.size(); ++k) {
      if (k != d && p.blocks[size_t(s)][k] != p.blocks[size_t(r)][k]) return false;
    }
    return true;
  };
  // The ranks holding each block of d, and r's place among the holders of its own block.
  std::vector<std::vector<int64_t>> holders(size_t(p.parts[d]));
  for (int64_t s = 0; s < p.ranks(); ++s) {
    if (others_match(s)) holders[size_t(p.blocks[size_t(s)][d])].push_back(s);
  }
  const auto& mine = holders[size_t(p.blocks[size_t(r)][d])];
  const size_t replica = size_t(std::find(mine.begin(), mine.end(), r) - mine.begin());
  std::vector<int64_t> group;
  for (const auto& h : holders) {
    if (h.size() != mine.size()) throw Error("uneven replicas");
    group.push_back(h[replica]);
  }
  if (!std::is_sorted(group.begin(), group.end())) throw Error("blocks not in rank order");
  return group;
}

// Gathers dimension d whole in its group.
RedistributionStep gather(Placement& p, size_t d, int64_t rank, DType dtype,
                          const CommCostModel& model) {
  RedistributionStep s{.kind = Kind::all_gather, .dim = int64_t(d)};
  s.group = gather_group(p, rank, d);
  p.parts[d] = 1;
  for (auto& b : p.blocks) b[d] = 0;
  s.seconds = model.all_gather(p.local_bytes(dtype), int64_t(s.group.size()));
  return s;
}

// Gathers and slices from a placement without partial sums.
Plan gather_then_slice(Placement p, const TensorLayout& to, int64_t rank, DType dtype,
                       const CommCostModel& model) {
  Plan plan;
  const std::vector<int64_t> to_parts = to.parts();
  for (size_t d = 0; d < p.parts.size(); ++d) {
    if (p.parts[d] == 1) continue;
    bool same = p.parts[d] == to_parts[d];
    for (int64_t r = 0; same && r < p.ranks(); ++r) {
      same = p.blocks[size_t(r)][d] == to.block_of(r)[d];
    }
    if (same) continue;
    plan.steps.push_back(gather(p, d, rank, dtype, model));
    plan.seconds += plan.steps.back().seconds;
  }
  for (size_t d = 0; d < p.parts.size(); ++d) {
    if (to_parts[d] == 1 || p.parts[d] != 1) continue;
    plan.steps.push_back({.kind = Kind::split,
                          .dim = int64_t(d),
                          .parts = to_parts[d],
                          .block = to.block_of(rank)[d]});
    p.parts[d] = to_parts[d];
  }
  return plan;
}

// The cheapest of gathering and slicing, and of moving a split from dimension a to dimension b
// by an all_to_all (b gathered whole first where it is split otherwise) before the rest.
// placement_key.cpp's whole_seconds prices the same options.
Plan plan_whole(const Placement& p, const TensorLayout& to, int64_t rank, DType dtype,
                const CommCostModel& model) {
  Plan best = gather_then_slice(p, to, rank, dtype, model);
  const std::vector<int64_t> to_parts = to.parts();
  for (size_t a = 0; a < p.parts.size(); ++a) {
    const int64_t n = p.parts[a];
    if (n == 1) continue;
    for (size_t b = 0; b < p.parts.size(); ++b) {
      if (b == a || to_parts[b] != n || p.shape[int(b)] % n != 0) continue;
      bool moves = true;  // each rank's block of a is the block of b the target wants there
      for (int64_t r = 0; moves && r < p.ranks(); ++r) {
        moves = to.block_of(r)[b] == p.blocks[size_t(r)][a];
      }
      if (!moves) continue;
      try {
        Plan plan;
        Placement q = p;
        if (q.parts[b] != 1) {
          plan.steps.push_back(gather(q, b, rank, dtype, model));
          plan.seconds += plan.steps.back().seconds;
        }
        RedistributionStep s{.kind = Kind::all_to_all, .dim = int64_t(b), .from_dim = int64_t(a)};
        s.group = gather_group(q, rank, a);
        s.seconds = model.all_to_all(q.local_bytes(dtype), n);
        q.parts[b] = n;
        q.parts[a] = 1;
        for (auto& blocks : q.blocks) {
          blocks[b] = blocks[a];
          blocks[a] = 0;
        }
        plan.steps.push_back(s);
        plan.seconds += s.seconds;
        const Plan rest = plan_whole(q, to, rank, dtype, model);
        plan.steps.insert(plan.steps.end(), rest.steps.begin(), rest.steps.end());
        plan.seconds += rest.seconds;
        if (plan.seconds < best.seconds - 1e-15) best = std::move(plan);
      } catch (const Error&) {
        // The ranks of a block do not line up for an all_to_all; gathering still works.
      }
    }
  }
  return best;
}

}  // namespace

std::string RedistributionStep::str() const {
  switch (kind) {
    case Kind::all_reduce:
      return "all_reduce over ranks " + ranks_str(group);
    case Kind::reduce_scatter:
      return "reduce_scatter dim " + std::to_string(dim) + " over ranks " + ranks_str(group);
    case Kind::all_gather:
      return "all_gather dim " + std::to_string(dim) + " over ranks " + ranks_str(group);
    case Kind::all_to_all:
      return "all_to_all from dim " + std::to_string(from_dim) + " to dim " + std::to_string(dim) +
             " over ranks " + ranks_str(group);
    case Kind::split:
      return "split dim " + std::to_string(dim) + " in " + std::to_string(parts) + " (keep block " +
             std::to_string(block) + ")";
  }
  return "?";
}

std::string RedistributionStep::brief() const {
  if (kind == Kind::split) return str();
  const std::string over = " over " + std::to_string(group.size()) + " ranks";
  switch (kind) {
    case Kind::all_reduce:
      return "all_reduce" + over;
    case Kind::reduce_scatter:
      return "reduce_scatter dim " + std::to_string(dim) + over;
    case Kind::all_gather:
      return "all_gather dim " + std::to_string(dim) + over;
    case Kind::all_to_all:
      return "all_to_all from dim " + std::to_string(from_dim) + " to dim " + std::to_string(dim) +
             over;
    case Kind::split:
      break;
  }
  return "?";
}

std::string Redistribution::str() const {
  if (steps.empty()) return "nothing";
  std::string s;
  for (size_t i = 0; i < steps.size(); ++i) s += (i ? ", then " : "") + steps[i].str();
  return s;
}

std::string Redistribution::brief() const {
  if (steps.empty()) return "nothing";
  std::string s;
  for (size_t i = 0; i < steps.size(); ++i) s += (i ? ", then " : "") + steps[i].brief();
  return s;
}

Redistribution plan_redistribution(const TensorLayout& from, const TensorLayout& to, int64_t rank,
                                   DType dtype, const CommCostModel& model) {
  if (from.shape != to.shape || from.ranks() != to.ranks() || to.is_partial()) {
    throw Error("redistribution from " + from.str() + " of " + from.shape.str() + " to " +
                to.str() + " of " + to.shape.str() + ": shapes or rank counts differ");
  }
  try {
    const Placement start = Placement::of(from);
    std::vector<Plan> options;
    if (!start.partial()) {
      options.push_back(plan_whole(start, to, rank, dtype, model));
    } else {
      // Reduce everywhere, then gather/slice.
      {
        Placement p = start;
        RedistributionStep s{.kind = Kind::all_reduce, .group = p.sums[size_t(rank)]};
        s.seconds = model.all_reduce(p.local_bytes(dtype), int64_t(s.group.size()));
        for (int64_t r = 0; r < p.ranks(); ++r) p.sums[size_t(r)] = {r};
        Plan rest = plan_whole(p, to, rank, dtype, model);
        rest.steps.insert(rest.steps.begin(), s);
        rest.seconds += s.seconds;
        options.push_back(rest);
      }
      // Or reduce-scatter along a whole dimension: each rank of a partial group keeps the block
      // of its place in the group.
      for (size_t d = 0; d < start.parts.size(); ++d) {
        const int64_t n = int64_t(start.sums[size_t(rank)].size());
        if (start.parts[d] != 1 || start.shape[int(d)] % n != 0) continue;
        Placement p = start;
        p.parts[d] = n;
        for (int64_t r = 0; r < p.ranks(); ++r) {
          const auto& g = start.sums[size_t(r)];
          p.blocks[size_t(r)][d] = int64_t(std::find(g.begin(), g.end(), r) - g.begin());
          p.sums[size_t(r)] = {r};
        }
        RedistributionStep s{
            .kind = Kind::reduce_scatter, .dim = int64_t(d), .group = start.sums[size_t(rank)]};
        s.seconds = model.reduce_scatter(start.local_bytes(dtype), n);
        Plan rest = plan_whole(p, to, rank, dtype, model);
        rest.steps.insert(rest.steps.begin(), s);
        rest.seconds += s.seconds;
        options.push_back(rest);
      }
    }
    const Plan* best = &options[0];
    for (const Plan& o : options) {
      if (o.seconds < best->seconds - 1e-15) best = &o;
    }
    return {best->steps, best->seconds};
  } catch (const Error& e) {
    throw Error("redistribution from " + from.str() + " to " + to.str() + " of " +
                from.shape.str() + " is not supported (" + e.what() + ")");
  }
}

Tensor apply_redistribution(const Tensor& x, const Redistribution& redistribution) {
  Tensor y = x;
  for (const RedistributionStep& s : redistribution.steps) {
    const bool alone = s.group.size() <= 1;
    switch (s.kind) {
      case Kind::all_reduce:
        if (!alone) y = ops::all_reduce(y, ops::CollectiveReduction::sum, s.group);
        break;
      case Kind::reduce_scatter:
        if (!alone) y = ops::reduce_scatter(y, s.dim, s.group);
        break;
      case Kind::all_gather:
        if (!alone) y = ops::all_gather(y, s.dim, s.group);
        break;
      case Kind::all_to_all:
        if (!alone) y = ops::all_to_all(y, s.dim, s.from_dim, s.group);
        break;
      case Kind::split: {
        const int64_t len = y.dim(int(s.dim)) / s.parts;
        y = ops::slice(y, s.dim, s.block * len, (s.block + 1) * len);
        if (s.dim != 0) y = ops::contiguous(y);
        break;
      }
    }
  }
  return y;
}

}  // namespace kiln::parallel
