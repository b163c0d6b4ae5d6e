#pragma once
// The profiler's raw files read back and summed up: what the report, the CSV tables and
// `kiln report --text` show.
#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/train/step_trace.h"

namespace kiln::profile {

// Every launch of one op (or graph node) with the same tensors and kernel.
struct OpRow {
  std::string name, mode, kernel, shapes;
  int64_t calls = 0;
  double total_us = 0;
  double flops = 0, bytes = 0;  // summed over the calls
  double gflops_per_s() const { return total_us > 0 ? flops / total_us / 1e3 : 0; }
  double gbytes_per_s() const { return total_us > 0 ? bytes / total_us / 1e3 : 0; }
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

struct ProfileData {
  std::string dir;
  nlohmann::json profile;  // profile.json as written
  std::vector<OpRow> ops;  // longest total first
  std::vector<StepRow> steps;
  std::vector<MemoryPoint> memory;
  std::set<std::string> op_names;  // every op name among the trace's launches
  int64_t launches = 0;
  double op_total_us = 0;
  bool eager = false, graph = false;  // which kinds of launches the trace holds

  // The mean of the steady steps: all but the first (compilation, first touch of memory) when
  // there are several.
  StepRow steady_mean() const;
  double steady_images_per_s() const;
  int compiles() const;
};

// Reads dir/trace.json and dir/profile.json; throws FileError naming the file and what is wrong.
ProfileData load_profile(const std::string& dir);

}  // namespace kiln::profile
