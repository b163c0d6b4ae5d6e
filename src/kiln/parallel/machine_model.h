#pragma once
// What AUTO_PARALLEL's cost model knows of the machine: one rank's sustained compute rate and
// memory bandwidth (an op's time is its cost's FLOPs and bytes at these rates, whichever takes
// longer, plus a launch), and the α-β model of its collectives. `kiln bench comm` measures the
// α-β figures and `kiln info`'s measurement of the rates is cached; where neither has run, the
// defaults are of this machine's order and the plan says so.
#include <string>

#include "kiln/ops/op.h"
#include "kiln/parallel/comm_cost.h"

namespace kiln::parallel {

struct MachineModel {
  double flops_per_s = 60e9;  // one rank, large matmuls and convolutions
  double bytes_per_s = 8e9;   // one rank, streaming
  double launch_s = 2e-6;     // per kernel
  CommCostModel comm;
  // Where the figures come from, for the plan ("defaults", "measured: ...").
  std::string compute_source = "defaults";
  std::string comm_source = "defaults";

  // One op's time on one rank, forward only.
  double op_seconds(const ops::Cost& cost) const;
};

// Measures flops_per_s (an fp32 matmul of 512 x 512 x 512 through the op table) and bytes_per_s
// (an elementwise add over 16 MiB) with the process's kernel threads: about 50 ms. Ranks of one
// job must plan alike: measure on one and broadcast.
MachineModel measure_compute(MachineModel base);

}  // namespace kiln::parallel
