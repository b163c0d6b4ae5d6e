#pragma once
// The profiler's raw files read back and summed up: what the report, the CSV tables and
// `kiln report --text` show.
#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <optional>

#include "kiln/ops/machine_peaks.h"
#include "kiln/train/step_trace.h"

namespace kiln::profile {

// Every launch of one op (or graph node) with the same tensors and kernel.
struct OpRow {
  std::string name, mode, kernel, shapes;
  std::string layout;  // each tensor's memory order ("nchw nchw -> nhwc"; collection.h)
  std::string dtype;   // what it computes in ("f32", "bf16")
  int threads = 1;
  int64_t calls = 0;
  double total_us = 0;
  double flops = 0, bytes = 0;  // summed over the calls
  double gflops_per_s() const { return total_us > 0 ? flops / total_us / 1e3 : 0; }
  double gbytes_per_s() const { return total_us > 0 ? bytes / total_us / 1e3 : 0; }
  double flops_per_byte() const { return bytes > 0 ? flops / bytes : 0; }
  // The achieved rate as a share of the roofline's ceiling at this row's arithmetic intensity
  // (compute or memory bound), 0 without counted FLOPs.
  double share_of_peak(const ops::MachinePeaks& peaks) const;
};

// One event of the allocator: bytes > 0 allocated, < 0 released, in the op named.
struct AllocationRow {
  double at_us;
  int thread;
  double bytes, in_use_bytes;
  std::string op;
};

struct StepRow {
  int64_t global_step = 0, batch_size = 0;
  double begin_us = 0, duration_us = 0;
  std::array<double, train::kNumStepPhases> phase_us{};
  double other_us() const;  // the step's time outside every phase
};

struct MemoryPoint {
  double at_us;
  double in_use_bytes, peak_bytes;
};

// One graph launch's node and time (graph mode), to draw a step's memory plan.
struct LaunchSpan {
  uint64_t graph;
  int32_t node;
  double begin_us, end_us;
};

struct ProfileData {
  std::string dir;
  nlohmann::json profile;  // profile.json as written
  std::vector<OpRow> ops;  // longest total first
  std::vector<StepRow> steps;
  std::vector<MemoryPoint> memory;
  std::vector<AllocationRow> allocations;  // in time order
  std::vector<LaunchSpan> graph_launches;  // in time order
  std::optional<ops::MachinePeaks> peaks;  // the machine's at the thread budget, if recorded
  std::vector<ops::MachinePeaks> peaks_by_threads;  // ... and at other thread counts
  std::set<std::string> op_names;                   // every op name among the trace's launches
  int64_t launches = 0;
  double op_total_us = 0;
  bool eager = false, graph = false;  // which kinds of launches the trace holds

  // The mean of the steady steps: all but the first (compilation, first touch of memory) when
  // there are several.
  StepRow steady_mean() const;
  double steady_images_per_s() const;
  int compiles() const;
  // The peaks a launch of `threads` threads is held against: those measured at that count, else
  // the budget's (an upper bound); null without peaks.
  const ops::MachinePeaks* peaks_for(int threads) const;
  // The row's share of its roofline ceiling with peaks_for(row.threads); 0 without peaks.
  double share_of_peak(const OpRow& row) const;
};

// Reads dir/trace.json and dir/profile.json; throws FileError naming the file and what is wrong.
ProfileData load_profile(const std::string& dir);

}  // namespace kiln::profile
