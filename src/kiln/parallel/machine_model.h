#pragma once
// What AUTO_PARALLEL's cost model knows of the machine: one rank's sustained compute rate and
// memory bandwidth (an op's time is its cost's FLOPs and bytes at these rates, whichever takes
// longer, plus a launch), and the α-β model of its collectives. The rates are the machine's
// measured peaks (ops/machine_peaks.h, the profiler's roofline too), the α-β figures what
// `kiln bench comm` measured; where it has not run, the defaults are of this machine's order and
// the plan says so. Where the model holds measured op times (measured_op_times.h), an op's
// forward and backward take their measured time instead of the estimate.
#include <memory>
#include <string>

#include "kiln/ops/op.h"
#include "kiln/parallel/comm_cost.h"
#include "kiln/parallel/measured_op_times.h"

namespace kiln::parallel {

struct MachineModel {
  double flops_per_s = 60e9;  // one rank, large matmuls and convolutions
  double bytes_per_s = 8e9;   // one rank, streaming
  double launch_s = 2e-6;     // per kernel
  CommCostModel comm;
  std::shared_ptr<MeasuredOpTimes> op_times;  // null: every op's time is the estimate
  // Where the figures come from, for the plan ("defaults", "measured: ...").
  std::string compute_source = "defaults";
  std::string comm_source = "defaults";

  // One op's time on one rank, forward only.
  double op_seconds(const ops::Cost& cost) const;
};

// `base` with this machine's peaks at `threads` kernel threads (0: the process's): cached by
// ops::machine_peaks, measured once (about a second) where the cache has none. Ranks of one job
// must plan alike: take them on one rank and broadcast.
MachineModel with_machine_peaks(MachineModel base, int threads = 0);

}  // namespace kiln::parallel
