#pragma once
// This machine's compute and memory peaks, measured once and cached: the ceilings the profiler
// holds each op's achieved rate against (its roofline), and figures a cost model may read.
//
//   ops::MachinePeaks peaks = ops::machine_peaks();  // cached, or measured now (about a second)
//   double ceiling = peaks.ceiling_gflops(flops / bytes, DType::f32);
//
// The figures depend on the kernel threads, so each thread count is measured and cached apart,
// keyed by the CPU's model as well, in machine_peaks.json of $KILN_CACHE_DIR, else
// $XDG_CACHE_HOME/kiln, else ~/.cache/kiln. `kiln info --peaks` prints them (and measures them when the
// cache has none). Figures measured while other work shared the cores are low: each entry keeps
// the load average it was taken at, and `kiln info --peaks --remeasure` replaces it.
#include <optional>
#include <string>

#include "kiln/core/dtype.h"

namespace kiln::ops {

struct MachinePeaks {
  std::string cpu;            // the CPU's model name (cpuid's brand string)
  int threads = 0;            // kernel threads the figures were measured with
  double f32_gflops = 0;      // fp32 matmul through oneDNN (1024 x 1024 x 1024)
  double bf16_gflops = 0;     // bf16 matmul through oneDNN; 0 where the CPU has no bf16 arithmetic
  double memory_gbps = 0;     // copying a buffer far larger than the caches: bytes read + written
  std::string matmul_kernel;  // oneDNN's implementation of the fp32 matmul
  double load_average = 0;    // the machine's 1-minute load average when measured
  std::string measured_at;    // UTC, "2026-12-04T20:15:00Z"
  std::string source;         // where these figures came from: "measured" or the cache's path

  // The compute peak for arithmetic in `dtype`: bf16's for bf16 and f16 when measured, else f32's.
  double compute_gflops(DType dtype) const;
  // The roofline: what an op doing `flops_per_byte` FLOPs per byte moved can reach at most, the
  // lower of the compute peak and flops_per_byte x the memory bandwidth.
  double ceiling_gflops(double flops_per_byte, DType dtype) const;
  // Whether that ceiling is the memory bandwidth's (the op is memory-bound) rather than compute's.
  bool memory_bound(double flops_per_byte, DType dtype) const;
};

// The peaks at `threads` kernel threads (0: the current count, num_threads()): the cached entry
// for this CPU and thread count, else measured now and cached. Measured at most once per process
// and thread count; thread-safe. A cache that cannot be written is not an error: the figures
// are returned.
MachinePeaks machine_peaks(int threads = 0);
// The cached entry for this CPU and `threads`, if the cache holds one (never measures).
std::optional<MachinePeaks> cached_machine_peaks(int threads);
// Measures with `threads` kernel threads now and stores the figures in the cache, replacing its
// entry for this CPU and thread count.
MachinePeaks measure_machine_peaks(int threads);
// The cache file's path.
std::string machine_peaks_cache_path();

}  // namespace kiln::ops
