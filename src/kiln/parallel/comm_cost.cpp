#include "kiln/parallel/comm_cost.h"

#include <algorithm>
#include <set>

#include "kiln/core/error.h"

namespace kiln::parallel {

// Ring algorithms: an all_reduce is a reduce_scatter then an all_gather, each n - 1 rounds
// moving (n - 1) / n of the buffer.
double CommCostModel::all_reduce(double bytes, int64_t ranks) const {
  if (ranks <= 1) return 0;
  const double n = double(ranks);
  return 2 * (n - 1) * alpha_s + 2 * (n - 1) / n * bytes * beta_s_per_byte;
}

double CommCostModel::all_gather(double bytes, int64_t ranks) const {
  if (ranks <= 1) return 0;
  const double n = double(ranks);
  return (n - 1) * alpha_s + (n - 1) / n * bytes * beta_s_per_byte;
}

double CommCostModel::reduce_scatter(double bytes, int64_t ranks) const {
  return all_gather(bytes, ranks);
}

double CommCostModel::all_to_all(double bytes, int64_t ranks) const {
  if (ranks <= 1) return 0;
  const double n = double(ranks);
  return (n - 1) * alpha_s + (n - 1) / n * bytes * beta_s_per_byte;
}

CommCostModel fit_comm_cost_model(const std::vector<CollectiveTiming>& timings) {
  // Each timing is t = a * alpha + b * beta; divided by t, a least-squares fit in relative error
  // is the 2 x 2 system sum(u u^T) [alpha beta] = sum(u), with u = (a, b) / t.
  std::set<double> sizes;
  double s_aa = 0, s_ab = 0, s_bb = 0, s_a = 0, s_b = 0;
  for (const CollectiveTiming& t : timings) {
    if (t.ranks < 2 || !(t.seconds > 0)) continue;
    const double n = double(t.ranks);
    const bool reduce = t.kind == CollectiveTiming::Kind::all_reduce;
    const double a = (reduce ? 2 : 1) * (n - 1) / t.seconds;
    const double b = (reduce ? 2 : 1) * (n - 1) / n * t.bytes / t.seconds;
    s_aa += a * a;
    s_ab += a * b;
    s_bb += b * b;
    s_a += a;
    s_b += b;
    sizes.insert(t.bytes);
  }
  if (sizes.size() < 2) {
    throw Error("fit_comm_cost_model: needs timings of at least two sizes on two ranks or more");
  }
  CommCostModel m;
  const double det = s_aa * s_bb - s_ab * s_ab;
  m.alpha_s = (s_a * s_bb - s_b * s_ab) / det;
  m.beta_s_per_byte = (s_b * s_aa - s_a * s_ab) / det;
  // A negative figure means the other one explains the timings alone: fit it alone.
  if (m.alpha_s < 0) {
    m.alpha_s = 0;
    m.beta_s_per_byte = s_b / s_bb;
  } else if (m.beta_s_per_byte < 0) {
    m.beta_s_per_byte = 0;
    m.alpha_s = s_a / s_aa;
  }
  return m;
}

}  // namespace kiln::parallel
