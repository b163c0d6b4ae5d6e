#pragma once
// The cost model autocast uses by default (amp/placement.h): each op is timed once per shape,
// attributes and dtype, on random data, forward and backward, through the same kernels an eager
// step calls, and the time is kept for the rest of the process. Compiled graphs run some fp32
// ops in fused kernels that are faster still (conv + relu + pool), so fp32 is measured at its
// slowest and a choice of fp32 is never a loss.
#include <map>
#include <mutex>
#include <string>

#include "kiln/amp/placement.h"

namespace kiln::amp {

class MeasuredCostModel : public CostModel {
 public:
  // Each measurement is the fastest of `repeats` timed runs after one untimed run.
  explicit MeasuredCostModel(int repeats = 3) : repeats_(repeats) {}
  std::optional<double> op_ms(const OpQuery& query) override;
  double cast_ms(int64_t numel, DType from, DType to) override;

 private:
  std::optional<double> measure(const OpQuery& query) const;

  int repeats_;
  std::mutex mutex_;  // the cache is shared by every thread's autocast scope
  std::map<std::string, std::optional<double>> op_cache_;
  std::map<std::string, double> cast_cache_;
};

}  // namespace kiln::amp
