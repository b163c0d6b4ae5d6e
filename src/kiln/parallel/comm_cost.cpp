#include "kiln/parallel/comm_cost.h"

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

}  // namespace kiln::parallel
