#pragma once
// AUTO_PARALLEL's compute times measured rather than estimated: each op's forward and backward
// at the local shapes a strategy gives it, timed once per process through the kernels an eager
// step runs (autograd/op_timing.h). The roofline estimate (machine_model.h) divides FLOPs by the
// large-matmul peak; a step's many small and memory-bound kernels (batch norm, the convolutions'
// backward, attention's softmax and masking) run well below it, which the measured times see.
//
// Each op is timed on the process's kernel threads, as its step will run it. A job's ranks must
// plan alike, so rank 0 times what no rank has cached and sends its figures to every rank:
// seconds() is collective in a job of several ranks.
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/autograd/op_timing.h"

namespace kiln::parallel {

class MeasuredOpTimes {
 public:
  // Each time is the fastest of `repeats` runs after an untimed one.
  explicit MeasuredOpTimes(int repeats = 2) : repeats_(repeats) {}

  // Seconds per query, forward and backward; NaN for an op that cannot be timed here (the
  // estimate stands for it). Every rank of a job calls it with the same queries.
  std::vector<double> seconds(const std::vector<autograd::OpTimingQuery>& queries);

  // Queries timed so far and the CPU seconds spent timing them, for the plan's description.
  int64_t timed() const;
  double timing_seconds() const;

 private:
  int repeats_;
  mutable std::mutex mutex_;
  std::map<std::string, double> cache_;
  int64_t timed_ = 0;
  double timing_seconds_ = 0;
};

// The process's one instance: a compile after the first finds the ops it already timed.
std::shared_ptr<MeasuredOpTimes> process_op_times();

}  // namespace kiln::parallel
