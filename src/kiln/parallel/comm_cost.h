#pragma once
// The α-β model of a collective's time on one rank: α per message round, β per byte on the wire,
// with ring algorithms' message and byte counts. The defaults are shared-memory figures of this
// machine's order (tests never depend on them); AUTO_PARALLEL's search will take measured ones.
#include <cstdint>

namespace kiln::parallel {

struct CommCostModel {
  double alpha_s = 10e-6;           // seconds per message round
  double beta_s_per_byte = 0.2e-9;  // seconds per byte (about 5 GB/s)

  // `bytes`: the whole buffer each rank ends with (all_reduce, all_gather) or starts from
  // (reduce_scatter); `ranks`: the group's size.
  double all_reduce(double bytes, int64_t ranks) const;
  double all_gather(double bytes, int64_t ranks) const;
  double reduce_scatter(double bytes, int64_t ranks) const;
};

}  // namespace kiln::parallel
