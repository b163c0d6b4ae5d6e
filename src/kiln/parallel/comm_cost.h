#pragma once
// The α-β model of a collective's time on one rank: α per message round, β per byte on the wire,
// with ring algorithms' message and byte counts. The defaults are shared-memory figures of this
// machine's order (tests never depend on them); `kiln bench comm` measures the real ones, which
// AUTO_PARALLEL's search then plans with.
#include <cstdint>
#include <vector>

namespace kiln::parallel {

struct CommCostModel {
  double alpha_s = 10e-6;           // seconds per message round
  double beta_s_per_byte = 0.2e-9;  // seconds per byte (about 5 GB/s)

  // `bytes`: the whole buffer each rank ends with (all_reduce, all_gather) or starts from
  // (reduce_scatter); `ranks`: the group's size.
  double all_reduce(double bytes, int64_t ranks) const;
  double all_gather(double bytes, int64_t ranks) const;
  double reduce_scatter(double bytes, int64_t ranks) const;
  // `bytes`: each rank's buffer (the same size before and after); each rank sends all but its
  // own block, one message per other rank.
  double all_to_all(double bytes, int64_t ranks) const;
};

// One measured collective: what kiln bench comm times.
struct CollectiveTiming {
  enum class Kind { all_reduce, all_gather } kind = Kind::all_reduce;
  double bytes = 0;  // as CommCostModel's functions take it
  int64_t ranks = 2;
  double seconds = 0;
};

// The α and β (both >= 0) that fit the timings best in relative error (each timing weighs
// alike, small and large). Throws kiln::Error for fewer than two timings of distinct sizes.
CommCostModel fit_comm_cost_model(const std::vector<CollectiveTiming>& timings);

}  // namespace kiln::parallel
