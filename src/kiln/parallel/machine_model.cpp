#include "kiln/parallel/machine_model.h"

#include <algorithm>
#include <cstdio>

#include "kiln/ops/machine_peaks.h"

namespace kiln::parallel {

double MachineModel::op_seconds(const ops::Cost& cost) const {
  return std::max(cost.flops / flops_per_s, cost.bytes / bytes_per_s) + launch_s;
}

MachineModel with_machine_peaks(MachineModel base, int threads) {
  const ops::MachinePeaks peaks = ops::machine_peaks(threads);
  if (peaks.f32_gflops > 0) base.flops_per_s = peaks.f32_gflops * 1e9;
  if (peaks.memory_gbps > 0) base.bytes_per_s = peaks.memory_gbps * 1e9;
  char text[200];
  std::snprintf(text, sizeof text,
                "this machine's peaks at %d thread(s): %.1f GFLOP/s (f32 matmul), %.1f GB/s (%s)",
                peaks.threads, peaks.f32_gflops, peaks.memory_gbps,
                peaks.source == "measured" ? "measured now" : "cached by kiln info --peaks");
  base.compute_source = text;
  return base;
}

}  // namespace kiln::parallel
